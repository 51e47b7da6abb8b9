"""The LoRA-adapter baselines of RFD-LoRA as Flower strategies: the shared :class:`LoraStrategy`
(reply validation, round accounting, what each node receives); the rules that subclass it are
:mod:`fedcal.strategies.lora_baselines`.

They federate LoRA adapters of a frozen transformer. Every ``ArrayRecord`` they send or receive
holds an adapter state keyed by peft's parameter names, as
:func:`fedcal.distill.clients.adapter_state` returns it (``….lora_A.default.weight`` (r, d_in),
``….lora_B.default.weight`` (d_out, r), and the trainable head's ``….modules_to_save.…`` tensors),
so any Flower project whose ClientApp uploads ``adapter_state(model)`` can use them. The rules
themselves are :mod:`fedcal.distill.adapters` (flwr-free); this module validates replies, keeps
the round accounting and decides what each node receives.


Replies are validated before any arithmetic: an error reply, no ArrayRecord, NaN/Inf, keys or
shapes that do not fit the round (another rank under FedIT, an A uploaded under FFA-LoRA, an
unpaired A/B, another layer set), layers of different ranks, a rank outside ``allowed_ranks``,
layers or head shapes unlike the model's (``template``), an update (α/r)·B·A that can leave
float32's range, a head tensor (the trainable ``modules_to_save`` classifier, or any other array
that is not a LoRA factor) whose products can leave it, a missing or invalid ``num-examples``, a second reply of one node — each is
dropped with a warning naming the node (``node_label`` gives its partition id) and recorded in
:attr:`LoraStrategy.replies` (:class:`fedcal.strategies.replies.RoundReplies`). Claimed sizes of any
finite magnitude weigh as in the image strategies (:func:`fedcal.aggregate.fit_weights`). With
fewer than ``min_replies`` valid replies the global adapter is kept; so it is when the rule fails
numerically (a ValueError, an ArithmeticError, LAPACK's ``LinAlgError``) or its result is not a
usable adapter (its update beyond float32), with the reason logged: no reply is to blame then.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterable
from logging import INFO, WARNING
from typing import Any

import numpy as np
import torch
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg as _FlowerFedAvg
from flwr.supercore import log

from fedcal.aggregate import fit_weights
from fedcal.distill.adapters import STACKED_A, STACKED_B, lora_layers
from fedcal.distill.clients import is_lora_b_key
from fedcal.strategies.naming import NodeNaming
from fedcal.strategies.replies import RoundReplies, counted_replies, reply_weight

__all__ = ["STACKED_A", "STACKED_B", "LoraStrategy", "compare_shapes", "head_range_problem", "tensor_of", "to_record",
           "to_state", "update_range_problem"]

_F32_MAX = float(torch.finfo(torch.float32).max)
_F32_SQRT_MAX = math.sqrt(_F32_MAX)  # 1.84e19: half of float32's exponent range


def tensor_of(array: Any) -> torch.Tensor:
    return torch.from_numpy(np.array(array.numpy(), copy=True))


def to_state(record: ArrayRecord) -> OrderedDict[str, torch.Tensor]:
    """An ArrayRecord as an ordered ``{key: tensor}`` (copies)."""
    return OrderedDict((k, tensor_of(record[k])) for k in record)


def to_record(state) -> ArrayRecord:
    """An adapter state (``{key: tensor}``) as an ArrayRecord, in its key order."""
    return ArrayRecord(OrderedDict((k, v.detach().cpu().contiguous()) for k, v in state.items()))


class LoraStrategy(NodeNaming, _FlowerFedAvg):
    """Base of the LoRA rules: per-node messages, reply validation, accounting.

    Keyword arguments: Flower's FedAvg ones (``fraction_train``, ``min_train_nodes``,
    ``min_available_nodes``, ``weighted_by_key``, ``arrayrecord_key``, ``configrecord_key``, …;
    every connected node is trained unless ``fraction_train`` < 1) plus

    * ``alpha``: the clients' LoRA α (FLoRA and FlexLoRA fold α/r into their products);
    * ``allowed_ranks``: the ranks a client's adapter may have (the distill task's ``dst-ranks``);
      a reply of another rank is dropped (default: any rank). A node's rank is never taken on
      trust: every layer of its adapter must have the same one;
    * ``template``: an adapter state of the model the clients adapt, at any rank (e.g.
      ``adapter_state`` of the global model): a reply must have exactly its LoRA layers, each
      layer's d_in (A's columns) and d_out (B's rows), and its head tensors' shapes (default:
      replies are only compared with each other, the first valid one setting the round's shapes);
    * ``min_replies``: fewer valid replies than this keep the global adapter (default 1);
    * ``node_label``: node id → partition id (or any name) for warnings and rejections;
    * ``node_sort_key``: node id → sortable key; valid replies are aggregated in this order so
      the floating-point sums do not depend on arrival order;
    * ``message_type``: of the train messages (default Flower's ``"train"``; an app serving several
      tasks gives its own, e.g. ``"train.distill"``).

    A subclass implements :meth:`aggregate_states` and may override :meth:`arrays_for` (what one
    node receives) and :meth:`check_keys` (which keys and shapes a reply must have).
    """

    name = "lora"

    def __init__(self, *, alpha: float = 8.0, min_replies: int = 1, node_label: Callable[[int], Any] | None = None,
                 node_sort_key: Callable[[int], Any] | None = None, message_type: str = MessageType.TRAIN,
                 allowed_ranks: Iterable[int] | None = None, template: Any = None, **fedavg: Any) -> None:
        fedavg.setdefault("fraction_evaluate", 0.0)  # the global model is evaluated centrally
        fedavg.setdefault("min_evaluate_nodes", 0)
        super().__init__(**fedavg)
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        if min_replies < 1:
            raise ValueError(f"min_replies must be >= 1, got {min_replies}")
        self.alpha = float(alpha)
        self.allowed_ranks = None if allowed_ranks is None else tuple(sorted({int(r) for r in allowed_ranks}))
        if self.allowed_ranks is not None and (not self.allowed_ranks or self.allowed_ranks[0] < 1):
            raise ValueError(f"allowed_ranks must be ranks >= 1, got {allowed_ranks}")
        #: per LoRA layer (d_in, d_out), and the head's shapes, of the model (from ``template``)
        self.layer_dims: dict[str, tuple[int, int]] | None = None
        self.head_shapes: dict[str, tuple[int, ...]] | None = None
        if template is not None:
            state = OrderedDict((k, template[k]) for k in template)
            self.layer_dims = {layer: (int(state[a].shape[1]), int(state[b].shape[0]))
                               for layer, (a, b) in lora_layers(state).items()}
            self.head_shapes = {k: tuple(v.shape) for k, v in state.items() if ".lora_" not in k}
        self.message_type = message_type
        self.min_replies = int(min_replies)
        self.node_label = node_label
        self.node_sort_key = node_sort_key or (lambda n: n)
        #: per round: received / accepted / rejected replies
        self.replies: dict[int, RoundReplies] = {}
        #: the arrays sent to each node in the current round
        self.sent: dict[int, ArrayRecord] = {}
        #: the LoRA rank of each node, from its last valid reply
        self.node_ranks: dict[int, int] = {}
        #: payload bytes of each valid reply's ArrayRecord in the last round (node → bytes)
        self.last_bytes: dict[int, int] = {}

    def summary(self) -> None:
        """Log the rule and its settings, then Flower's FedAvg's."""
        log(INFO, "\t├──> %s over LoRA adapters (alpha %s, at least %d valid replies per round)", self.name,
            self.alpha, self.min_replies)
        super().summary()

    @property
    def rounds_aggregated(self) -> int:
        """How many rounds produced a new global adapter."""
        return sum(r.aggregated for r in self.replies.values())

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """What the rule carries between rounds, for a run's checkpoint: the rank each node's last
        valid reply showed, keyed by partition id (``node_label``; node ids are new in every run).
        FLoRA and FlexLoRA add their own."""
        ranks = {}
        for node, rank in self.node_ranks.items():
            label = self.node_label(node) if self.node_label is not None else None
            if label is None:
                raise ValueError(f"{self.who(node)} has no label: its rank cannot be checkpointed (give node_label)")
            ranks[label] = int(rank)
        return {"node_ranks": ranks}

    def load_state_dict(self, state: dict[str, Any], node_of: dict[Any, int]) -> None:
        """Put back :meth:`state_dict`; ``node_of`` maps a partition id to this run's node id
        (a partition without a node in this run is left out)."""
        self.node_ranks = {node_of[k]: int(r) for k, r in state["node_ranks"].items() if k in node_of}

    def final_state(self, global_state: dict[str, torch.Tensor], arrays: ArrayRecord) -> dict[str, torch.Tensor]:
        """What a run of this rule saves as its model (``model.pt``) from the global adapter model's
        state and the last global record (default: the global model's state; FLoRA: its merged
        updates)."""
        return global_state

    # ------------------------------------------------------------------ configure
    def arrays_for(self, node: int, arrays: ArrayRecord) -> ArrayRecord:
        """What ``node`` receives this round (default: the global record itself)."""
        return arrays

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Every sampled node gets :meth:`arrays_for` its node and the config (with the round)."""
        nodes = sorted(grid.get_node_ids(), key=self.node_sort_key)
        k = max(int(len(nodes) * self.fraction_train), self.min_train_nodes) if self.fraction_train < 1 else len(nodes)
        nodes = nodes[:k]
        config["server-round"] = server_round
        self.sent = {n: self.arrays_for(n, arrays) for n in nodes}
        return [Message(content=RecordDict({self.arrayrecord_key: self.sent[n], self.configrecord_key: config}),
                        dst_node_id=n, message_type=self.message_type) for n in nodes]

    # ------------------------------------------------------------------ validate
    def check_keys(self, node: int, state: OrderedDict) -> str | None:
        """Why ``state``'s keys/shapes do not fit this round (None: they do). Default: every LoRA
        layer has both A (r, d_in) and B (d_out, r) of one rank r, the same r in every layer and one
        of ``allowed_ranks``; the layers, their d_in / d_out and the head's shapes are the model's
        (``template``); every layer's update (α/r)·B·A stays within float32's range, and so do the
        products of every head tensor (:func:`head_range_problem`)."""
        try:
            layers = lora_layers(state)
        except ValueError as exc:
            return str(exc)
        ranks = set()
        for layer, (a, b) in layers.items():
            A, B = state[a], state[b]
            if A.ndim != 2 or B.ndim != 2 or B.shape[1] != A.shape[0]:
                return f"layer {layer}: A {tuple(A.shape)} and B {tuple(B.shape)} are not a rank-r pair"
            ranks.add(int(A.shape[0]))
        if len(ranks) > 1:
            return f"its layers have different ranks {sorted(ranks)} (a client's adapter has one rank)"
        rank = ranks.pop()
        if self.allowed_ranks is not None and rank not in self.allowed_ranks:
            return f"LoRA rank {rank} is not in the allowed set {list(self.allowed_ranks)}"
        if self.layer_dims is not None:
            if set(layers) != set(self.layer_dims):
                odd = sorted(set(layers) ^ set(self.layer_dims))
                return f"its LoRA layers are not the model's (differing: {odd[:3]})"
            for layer, (a, b) in layers.items():
                d_in, d_out = self.layer_dims[layer]
                if state[a].shape[1] != d_in or state[b].shape[0] != d_out:
                    return (f"layer {layer}: A {tuple(state[a].shape)} and B {tuple(state[b].shape)} do not fit the "
                            f"model's layer (d_in = {d_in}, d_out = {d_out})")
            head = {k: tuple(v.shape) for k, v in state.items() if ".lora_" not in k}
            if head != self.head_shapes:
                want = self.head_shapes
                odd = sorted(set(head) ^ set(want)) or sorted(k for k in head if head[k] != want[k])
                return f"its head tensors are not the model's (differing: {odd[:3]})"
        return update_range_problem(state, layers, self.alpha) or head_range_problem(state)

    def _reply_state(self, msg: Message) -> tuple[str | None, OrderedDict | None, float, int]:
        """(reason or None, state (None: undecodable), weight, payload bytes) of one reply."""
        content = msg.content
        rec = content.get(self.arrayrecord_key) if self.arrayrecord_key in content else None
        if not isinstance(rec, ArrayRecord):
            return f"no ArrayRecord under key '{self.arrayrecord_key}'", None, 0.0, 0
        try:
            state = to_state(rec)
        except Exception as exc:  # noqa: BLE001 — undecodable bytes are a bad reply
            return f"arrays cannot be decoded ({exc})", None, 0.0, 0
        # a rejected reply's decoded state goes back too: its shapes may tell the node's rank (_learn_rank)
        for k, v in state.items():
            if not v.is_floating_point():
                return f"array '{k}' is not floating point ({v.dtype})", state, 0.0, 0
            if not bool(torch.isfinite(v).all()):
                return f"array '{k}' contains NaN or Inf", state, 0.0, 0
        problem, weight = reply_weight(content, self.weighted_by_key)
        if problem:
            return problem, state, 0.0, 0
        reason = self.check_keys(msg.metadata.src_node_id, state)
        size = sum(len(rec[k].data) for k in rec)  # the bytes the client actually uploaded
        return reason, state, float(weight), size

    @staticmethod
    def _signature(state) -> tuple:
        """Layers, (d_in, d_out) per layer and head shapes: what every reply of a round shares."""
        layers = lora_layers(state)
        return (tuple((layer, state[a].shape[1], state[b].shape[0]) for layer, (a, b) in layers.items()),
                tuple((k, tuple(v.shape)) for k, v in state.items() if ".lora_" not in k))

    def _learn_rank(self, node: int, state: OrderedDict | None) -> None:
        """A rejected reply's rank, kept for ``node`` when no valid reply has taught one yet: the one
        rank of all its B's (d_out, r), if it is allowed. It only decides what the node is served
        (FlexLoRA's truncation at its rank), never what is aggregated: a node whose first reply was
        dropped for its head or its claimed size would otherwise get the full-rank state, which its
        adapter cannot load, and answer with an error every round after."""
        if state is None or node in self.node_ranks:
            return
        ranks = {int(v.shape[1]) for k, v in state.items() if is_lora_b_key(k) and v.ndim == 2}
        if len(ranks) == 1 and (self.allowed_ranks is None or next(iter(ranks)) in self.allowed_ranks):
            self.node_ranks[node] = ranks.pop()

    # ------------------------------------------------------------------ aggregate
    def aggregate_states(self, server_round: int, nodes: list[int], states: list[OrderedDict],
                         weights: torch.Tensor) -> ArrayRecord:
        """The new global record from the valid replies' states (in ``node_sort_key`` order)."""
        raise NotImplementedError

    def record_problem(self, record: ArrayRecord) -> str | None:
        """Why the new global record is no usable adapter (None: it is). Default: its arrays are
        finite, every layer's update (α/r)·B·A stays within float32's range — replies that are
        each fine can still average into one that is not (a huge A from one, a huge B from another) —
        and so do its head's products (:func:`head_range_problem`)."""
        state = to_state(record)
        for k, v in state.items():
            if not bool(torch.isfinite(v).all()):
                return f"the new global adapter's array '{k}' is not finite"
        return (update_range_problem(state, lora_layers(state), self.alpha, "the new global adapter's")
                or head_range_problem(state, "the new global adapter's"))

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Validate the replies, then :meth:`aggregate_states` when at least ``min_replies`` are valid."""
        replies = list(replies)
        account = RoundReplies(received=len(replies))
        self.replies[server_round] = account
        self.last_bytes = {}

        def reject(node: int, reason: str) -> None:
            account.rejections.append((node, reason))
            log(WARNING, "round %d: dropped reply of %s: %s", server_round, self.who(node), reason)

        good: list[tuple[int, OrderedDict, float]] = []
        signature = None
        for msg in counted_replies(replies, reject):
            node = msg.metadata.src_node_id
            reason, state, weight, size = self._reply_state(msg)
            if reason is None:
                sig = self._signature(state)
                if signature is None:
                    signature = sig
                elif sig != signature:
                    reason = "its adapter's layers, dimensions or head differ from the round's other replies"
            if reason:
                reject(node, reason)
                self._learn_rank(node, state)
                continue
            good.append((node, state, weight))
            self.last_bytes[node] = size
            # the one rank of all its layers (check_keys): B (d_out, r) is uploaded under every rule
            b = next((v for k, v in state.items() if is_lora_b_key(k)), None)
            if b is not None:
                self.node_ranks[node] = int(b.shape[1])
        good.sort(key=lambda g: (self.node_sort_key(g[0]), g[0]))
        account.accepted = [g[0] for g in good]
        if len(good) < self.min_replies:
            log(WARNING, "round %d: %d valid replies (< %d); the global adapter is kept", server_round, len(good),
                self.min_replies)
            return None, None
        # Data sizes as float64, brought into float32's range by a power of two when a reply claims
        # an absurd size (1e39): the image strategies' weighting (fedcal.strategies.base).
        weights = fit_weights(torch.tensor([g[2] for g in good], dtype=torch.float64), torch.float64)
        try:
            record = self.aggregate_states(server_round, [g[0] for g in good], [g[1] for g in good], weights)
            problem = self.record_problem(record)
        # a rule refusing its input, or failing numerically (LAPACK's SVD not converging), must not end the run
        except (ValueError, ArithmeticError, torch.linalg.LinAlgError) as exc:
            problem = f"aggregation failed ({exc})"
        if problem:
            log(WARNING, "round %d: %s; the global adapter is kept", server_round, problem)
            return None, None
        account.aggregated = True
        total = sum(g[2] for g in good)
        return record, MetricRecord({"num-examples": total, "replies-accepted": len(good)})


def update_range_problem(state, layers, alpha: float, whose: str = "its adapter's") -> str | None:
    """Why an adapter's update ΔW = (α/r)·B·A may leave float32's range at some layer (None: it
    cannot). Checked with the bound |(B A)_ij| ≤ r·max|B|·max|A| in float64 — on its own and scaled
    by α/r — so nothing of size d_out × d_in is computed; it trips only for entries of order 1e18
    or more, far from anything training produces, where the product (and the model it is merged
    into) could be Inf."""
    for layer, (a, b) in layers.items():
        A, B = state[a], state[b]
        if not A.numel() or not B.numel():
            continue
        bound = float(A.detach().abs().max()) * float(B.detach().abs().max()) * max(int(A.shape[0]), alpha)
        if not bound < _F32_MAX:
            return (f"{whose} update (α/r)·B·A at layer {layer} can leave float32's range "
                    f"(max|A|·max|B|·max(r, α) = {bound:.3g})")
    return None


def head_range_problem(state, whose: str = "its") -> str | None:
    """Why a head tensor of an adapter state — every array that is not a LoRA factor: the trainable
    classifier (peft's ``modules_to_save``) or anything else a client trains besides A and B — may
    carry the model's outputs beyond float32's range (None: it cannot).

    The head multiplies features the server does not see: a weight W (…, fan_in) gives outputs
    |(W h)_i| ≤ fan_in · max|W| · max|h|. Like the adapters' check, which bounds the product of two
    factors, float32's exponent range is split evenly between the factors: max|W| · fan_in must stay
    below √(float32 max) ≈ 1.84e19 (a 1-D tensor, a bias or a norm's scale, has fan_in 1), so every
    feature below 1.84e19 in magnitude gives finite outputs. It trips only for entries of order
    1e16 or more, far from anything training produces; a finite 3e38 head, averaged in with weight
    1/7, made every client's next round NaN."""
    for k, v in state.items():
        if ".lora_" in k or not v.numel() or not v.is_floating_point():
            continue
        fan_in = int(v.shape[-1]) if v.ndim >= 2 else 1
        bound = float(v.detach().abs().max()) * fan_in
        if not bound < _F32_SQRT_MAX:
            return (f"{whose} head tensor '{k}' can carry the outputs beyond float32's range "
                    f"(max|W|·fan-in = {bound:.3g} ≥ √(float32 max) = {_F32_SQRT_MAX:.3g})")
    return None


def compare_shapes(want: dict[str, tuple], state, what: str) -> str | None:
    """Why ``state``'s keys/shapes differ from ``want`` (None: they do not)."""
    have = {k: tuple(v.shape) for k, v in state.items()}
    if set(have) != set(want):
        missing, extra = sorted(set(want) - set(have)), sorted(set(have) - set(want))
        return f"keys do not fit {what}: missing {missing[:3]}, unexpected {extra[:3]}"
    for k, shape in want.items():
        if have[k] != shape:
            return f"array '{k}' has shape {have[k]}, expected {shape} (another rank?)"
    return None
