"""The LoRA-adapter baselines of RFD-LoRA, one :class:`~fedcal.strategies.lora.LoraStrategy` each:
FedIT, FFA-LoRA, FLoRA, FlexLoRA, LoRA-FAIR (the rules themselves: :mod:`fedcal.distill.adapters`).

=================  =========================================================================
class              what a node receives / how replies are combined
=================  =========================================================================
:class:`FedIT`     the global adapter (one rank for all); A and B averaged separately
:class:`FFALoRA`   the global adapter, A frozen at the shared initialisation; clients upload
                   B and the head only (A is never sent back), B averaged
:class:`FLoRA`     the round's *stacked* adapter (keys ``<layer>.stacked_A`` / ``.stacked_B``,
                   product = Σ p_k ΔW_k, scale 1) + the averaged head; each client merges it
                   into its frozen base weight and re-initialises its own adapter
                   (:func:`fedcal.distill.adapters.merge_flora`); any mix of ranks
:class:`FlexLoRA`  its own rank's truncated SVD of the averaged full update (a node's rank is
                   learned from its replies); the global record is the full-rank state
:class:`LoRAFair`  the global adapter (one rank for all): Ā, and B̄ refined by LoRA-FAIR's
                   server-side residual ΔB so that (B̄ + ΔB) Ā points along Σ p_k B_k A_k
=================  =========================================================================
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from logging import INFO
from typing import Any

import torch
from flwr.app import ArrayRecord
from flwr.supercore import log

from fedcal.distill.adapters import (fedit_aggregate, ffa_aggregate, flexlora_aggregate, flora_aggregate,
                                     lora_fair_aggregate, lora_layers)
from fedcal.distill.clients import is_lora_a_key
from fedcal.strategies.lora import (STACKED_A, STACKED_B, LoraStrategy, compare_shapes, head_range_problem, tensor_of,
                                    to_record, to_state, update_range_problem)

__all__ = ["FFALoRA", "FLoRA", "FedIT", "FlexLoRA", "LoRAFair"]


class FedIT(LoraStrategy):
    """FedIT (Zhang et al., ICASSP 2024): Ā = Σ p_k A_k and B̄ = Σ p_k B_k separately, the head
    averaged (p_k ∝ ``num-examples``); every client and the global model share one rank. A reply
    whose keys or shapes differ from the global adapter sent to it is dropped."""

    name = "FedIT"

    def check_keys(self, node, state):
        reason = super().check_keys(node, state)  # first: a rank outside the allowed set names itself
        sent = self.sent.get(node)
        if reason is None and sent is not None and len(sent.keys()):
            reason = compare_shapes({k: tuple(sent[k].shape) for k in sent}, state, "the global adapter")
        return reason

    def aggregate_states(self, server_round, nodes, states, weights):
        return to_record(fedit_aggregate(states, weights))


class FFALoRA(LoraStrategy):
    """FFA-LoRA (Sun et al., ICLR 2024): A frozen at the shared initialisation (the global record's
    A, sent every round), clients upload B and the head only; B̄ = Σ p_k B_k, the head averaged.
    A reply carrying an A is dropped (it was meant to stay frozen and unsent)."""

    name = "FFA-LoRA"

    def check_keys(self, node, state):
        sent = self.sent.get(node)
        if sent is None or not len(sent.keys()):
            return "FFA-LoRA needs the global adapter (with its frozen A) sent first"
        reason = compare_shapes({k: tuple(sent[k].shape) for k in sent if not is_lora_a_key(k)}, state,
                          "FFA-LoRA's upload (B and the head; A stays frozen)")
        return reason or super().check_keys(node, self._with_a(node, state))

    def _with_a(self, node, state) -> OrderedDict:
        """The reply completed with the frozen A the node was sent, in the sent key order."""
        sent = self.sent[node]
        return OrderedDict((k, state[k] if k in state else tensor_of(sent[k])) for k in sent)

    @staticmethod
    def _signature(state):
        return tuple((k, tuple(v.shape)) for k, v in state.items())

    def aggregate_states(self, server_round, nodes, states, weights):
        return to_record(ffa_aggregate([self._with_a(n, s) for n, s in zip(nodes, states)], weights))


class FLoRA(LoraStrategy):
    """FLoRA (Wang et al., NeurIPS 2024): stack the clients' adapters (any ranks) into one of rank
    Σ r_k whose product is exactly Σ p_k (α/r_k) B_k A_k; the record sent next round holds
    ``<layer>.stacked_A`` / ``<layer>.stacked_B`` and the averaged head. Clients merge it into
    their base weights and re-initialise their own adapter. :attr:`merged` holds the sum of all
    rounds' global updates per layer (what a global model evaluated from the base must add)."""

    name = "FLoRA"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: Σ over aggregated rounds of B_s A_s, per layer (d_out, d_in), float32
        self.merged: dict[str, torch.Tensor] = {}

    def state_dict(self):
        return {**super().state_dict(), "merged": {k: v.clone() for k, v in self.merged.items()}}

    def load_state_dict(self, state, node_of):
        super().load_state_dict(state, node_of)
        self.merged = dict(state["merged"])

    def final_state(self, global_state, arrays):
        """The merged updates (``<layer>.merged``, what a model built from the base must add) and
        the averaged head (what every client's model holds)."""
        final = {f"{layer}.merged": d for layer, d in self.merged.items()}
        final.update((k, v) for k, v in to_state(arrays).items() if not k.endswith((STACKED_A, STACKED_B)))
        return final

    def aggregate_states(self, server_round, nodes, states, weights):
        update = flora_aggregate(states, weights, alpha=self.alpha)
        out, merged = OrderedDict(), {}
        for layer, (A_s, B_s) in update.stacked.items():
            out[layer + STACKED_A], out[layer + STACKED_B] = A_s.float(), B_s.float()
            delta = update.delta(layer).float()
            merged[layer] = self.merged.get(layer, torch.zeros_like(delta)) + delta
            if not bool(torch.isfinite(merged[layer]).all()):  # checked before anything is kept
                raise ArithmeticError(f"the merged update of layer {layer} leaves float32's range")
        self.merged.update(merged)
        out.update(update.head)
        return to_record(out)

    def record_problem(self, record):
        """The stacked record's update is checked (finite, in float32) while it is merged; its
        averaged head as every rule's (:func:`~fedcal.strategies.lora.head_range_problem`)."""
        state = to_state(record)
        bad = next((k for k, v in state.items() if not bool(torch.isfinite(v).all())), None)
        if bad is not None:
            return f"the new stacked adapter's array '{bad}' is not finite"
        head = OrderedDict((k, v) for k, v in state.items() if not k.endswith((STACKED_A, STACKED_B)))
        return head_range_problem(head, "the new global adapter's")


class FlexLoRA(LoraStrategy):
    """FlexLoRA (Bai et al., NeurIPS 2024): average the clients' full updates Σ p_k (α/r_k) B_k A_k,
    then give every node the truncated SVD at its own rank (learned from its replies; ``ranks``
    are precomputed too). The global record is the full-rank state (rank min(d_out, d_in)), whose
    update is the average itself."""

    name = "FlexLoRA"

    def __init__(self, *, ranks: Iterable[int] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ranks = tuple(int(r) for r in ranks)
        #: the last aggregation's state per rank
        self.per_rank: dict[int, ArrayRecord] = {}

    def state_dict(self):
        return {**super().state_dict(), "per_rank": {r: to_state(rec) for r, rec in self.per_rank.items()}}

    def load_state_dict(self, state, node_of):
        super().load_state_dict(state, node_of)
        self.per_rank = {int(r): to_record(s) for r, s in state["per_rank"].items()}

    def arrays_for(self, node, arrays):
        r = self.node_ranks.get(node)
        return self.per_rank.get(r, arrays) if r is not None else arrays

    def aggregate_states(self, server_round, nodes, states, weights):
        layers = lora_layers(states[0])
        a0 = states[0][next(iter(layers.values()))[0]]
        b0 = states[0][next(iter(layers.values()))[1]]
        full = min(a0.shape[1], b0.shape[0])
        # every rank a node may have, even above the layer size (flexlora_redistribute pads it with zeros)
        wanted = sorted({*self.ranks, *(self.node_ranks[n] for n in nodes), full})
        per_rank = flexlora_aggregate(states, weights, alpha=self.alpha, ranks=wanted)
        for r, state in per_rank.items():  # checked before any node is served from them
            problem = (update_range_problem(state, lora_layers(state), self.alpha, f"the new rank-{r} adapter's")
                       or head_range_problem(state, f"the new rank-{r} adapter's"))
            if problem:
                raise ArithmeticError(problem)
        self.per_rank = {r: to_record(s) for r, s in per_rank.items()}
        return self.per_rank[full]


class LoRAFair(FedIT):
    """LoRA-FAIR (Bian et al., ICCV 2025): FedIT's averages Ā, B̄ with B̄ refined on the server by
    the residual ΔB that brings (B̄ + ΔB) Ā towards the ideal Σ p_k B_k A_k
    (:func:`fedcal.distill.lora.lora_fair_refine`: one minus the cosine similarity plus
    ``fair_lambda`` ‖ΔB‖², ``fair_steps`` gradient steps of ``fair_lr`` from ΔB = 0); every node
    receives (Ā, B̄ + ΔB) and continues from it. One rank for all, replies checked as FedIT's."""

    name = "LoRA-FAIR"

    def __init__(self, *, fair_lambda: float = 1e-2, fair_steps: int = 1000, fair_lr: float = 1e-2,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not (fair_lambda >= 0 and fair_steps >= 0 and fair_lr > 0):
            raise ValueError(f"LoRA-FAIR needs fair_lambda >= 0, fair_steps >= 0 and fair_lr > 0, got "
                             f"{fair_lambda}, {fair_steps}, {fair_lr}")
        self.fair_lambda, self.fair_steps, self.fair_lr = float(fair_lambda), int(fair_steps), float(fair_lr)

    def summary(self) -> None:
        log(INFO, "\t├──> LoRA-FAIR residual: lambda %s, %d steps of %s", self.fair_lambda, self.fair_steps,
            self.fair_lr)
        super().summary()

    def aggregate_states(self, server_round, nodes, states, weights):
        return to_record(lora_fair_aggregate(states, weights, lam=self.fair_lambda, steps=self.fair_steps,
                                             lr=self.fair_lr))
