"""The distill task's LoRA methods, one object each: what a method does on a client and on the
server, as hooks the task calls without naming a method (peft models and plain ``{key: tensor}``
states in, no Flower; the Flower strategies that combine the baselines' replies are
:mod:`fedcal.strategies.lora_baselines`).

=============  ========================================================================================
method         its hooks' behaviour
=============  ========================================================================================
``rfd``        RFD-LoRA: clients upload clipped anchor logits (``uploads_logits``), the server distils
               them into its own student; no adapter travels
``fedit``      one rank for all, every client starts from one shared adapter; the global adapter is
               loaded by every client and into the server's global model
``ffa``        FedIT's, with every A frozen at the shared initialisation (``freeze_a``) and never
               uploaded (:meth:`LoraMethod.upload`)
``flora``      the stacked update is merged into the client's (and the global model's) base weights
               and a fresh adapter started (:func:`fedcal.distill.adapters.merge_flora`); those base
               weights are part of a client's and the server's state
``flexlora``   a node loads the global adapter at its own rank; the server's global model is rebuilt
               at the full rank of the averaged update
``lorafair``   FedIT's (the server's residual refinement is the strategy's)
=============  ========================================================================================

Each is declared once, as a ``lora-method`` component of :mod:`fedcal.catalogue`
(``fedcal/catalogue/lora.py``: its name, its own keys, this class as its target);
:func:`lora_method` builds the one a run names. Every hook that builds a model takes the run's :class:`~fedcal.distill.run_data.DistillRunSpec`
(``dst_alpha``, ``lora_targets``, ``seed``).
"""

from __future__ import annotations

import importlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ._checks import check_int
from .adapters import flora_update, merge_flora
from .clients import adapter_state, is_lora_a_key, load_adapter_state, lora_model
from .run_data import DistillRunSpec, adapted_layers

__all__ = ["FFALoRAMethod", "FLoRAMethod", "FedITMethod", "FlexLoRAMethod", "LoRAFairMethod", "LoraMethod", "RFDLoRA",
           "base_weights", "load_base_weights", "lora_method", "upload_bytes"]

State = Mapping[str, torch.Tensor]


def base_weights(model) -> "OrderedDict[str, torch.Tensor]":
    """``{layer: its frozen base weight}`` (CPU copies) of every adapted layer of ``model``."""
    return OrderedDict((layer, model.get_submodule(layer).get_base_layer().weight.detach().cpu().clone())
                       for layer in adapted_layers(model))


def load_base_weights(model, weights: State) -> None:
    """:func:`base_weights` put back into ``model``, in place."""
    with torch.no_grad():
        for layer, w in weights.items():
            model.get_submodule(layer).get_base_layer().weight.copy_(w)


def _lora_rank(model) -> int:
    """The rank of ``model``'s adapter (its first A's rows)."""
    return int(next(p for n, p in model.named_parameters() if is_lora_a_key(n)).shape[0])


def _global_model(base, rank: int, spec: DistillRunSpec, **kwargs: Any):
    """The server's global adapter model of rank ``rank`` (any rank allowed), seeded with the run's seed."""
    return lora_model(base, rank, alpha=spec.dst_alpha, target_modules=spec.lora_targets, seed=spec.seed,
                      allowed_ranks=None, client="global", **kwargs)


_LB = "fedcal.strategies.lora_baselines"


class LoraMethod:
    """A ``dst-method``: its facts and its hooks. This base class is the behaviour of an
    adapter-federating baseline whose nodes load the global adapter they are sent (FedIT's);
    each method overrides what it does otherwise."""

    name: str = ""
    label: str = ""  # the method's name in its paper
    #: clients upload anchor logits and the server distils them into a student (no adapter travels)
    uploads_logits: bool = False
    #: every client and the global model hold one rank (A and B are averaged entry-wise), and every
    #: client starts from one shared adapter (the run's seed)
    one_rank: bool = False
    #: every A stays frozen at its (shared) initialisation
    freeze_a: bool = False
    #: its Flower strategy on the server, a lazy ``"package.module:attribute"`` reference (the shell's
    #: :mod:`fedcal.strategies.lora_baselines`, not imported here); "" for a method with a server of its own
    strategy: str = ""

    def strategy_class(self) -> type:
        """The class :attr:`strategy` names (imported now)."""
        if not self.strategy:
            raise ValueError(f"LoRA method {self.name!r} federates no adapter: it has no adapter strategy")
        module, _, attr = self.strategy.partition(":")
        return getattr(importlib.import_module(module), attr)

    def __repr__(self) -> str:
        return f"<LoRA method {self.name!r}>"

    # ------------------------------------------------------------------------------ client side
    def init_seed(self, seed: int, cid: int) -> int:
        """The seed of client ``cid``'s first adapter: the run's seed for all under one shared
        adapter, else one of the client's own."""
        return seed if self.one_rank else seed * 1000 + cid + 1

    def receive(self, model, sent: State, *, seed: int, cid: int, server_round: int) -> None:
        """Apply what the server sent this round (an adapter state, maybe empty) to a client's model."""
        if len(sent):
            load_adapter_state(model, sent)

    def kept_weights(self, model) -> "OrderedDict[str, torch.Tensor] | None":
        """What a client keeps between rounds besides its adapter (None: nothing)."""
        return None

    def upload(self, state: State) -> "OrderedDict[str, torch.Tensor]":
        """The tensors of a client's adapter state it uploads."""
        return OrderedDict(state)

    # ------------------------------------------------------------------------------ server side
    def global_start(self, base, ranks: Sequence[int], spec: DistillRunSpec) -> tuple[Any, "OrderedDict[str, torch.Tensor]"]:
        """(the server's global adapter model, the first state every node is sent)."""
        model = _global_model(base, ranks[0], spec, freeze_a=self.freeze_a)
        return model, adapter_state(model)

    def strategy_options(self, ranks: Sequence[int]) -> dict[str, Any]:
        """Keyword arguments of this method's strategy beside the ones every LoRA strategy takes."""
        return {}

    def apply_global(self, model, state: State, base, spec: DistillRunSpec):
        """The server's global model after the strategy's new global state; returns it (maybe rebuilt)."""
        load_adapter_state(model, state)
        return model

    def server_state(self, model) -> dict[str, torch.Tensor]:
        """The tensors of the server's student / global model that rounds change (a checkpoint's)."""
        return dict(adapter_state(model))

    def load_server_state(self, model, state: State) -> None:
        """:meth:`server_state` put back into ``model``."""
        load_adapter_state(model, state)

    def restored_model(self, model, base, rank: int, spec: DistillRunSpec):
        """The model a checkpoint's server state of adapter rank ``rank`` is loaded into."""
        return model


class RFDLoRA(LoraMethod):
    name, label, uploads_logits = "rfd", "RFD-LoRA", True

    def receive(self, model, sent: State, *, seed: int, cid: int, server_round: int) -> None:
        """Nothing: an RFD-LoRA client's adapter is its own."""


class FedITMethod(LoraMethod):
    name, label, one_rank = "fedit", "FedIT", True
    strategy = f"{_LB}:FedIT"


class FFALoRAMethod(LoraMethod):
    name, label, one_rank, freeze_a = "ffa", "FFA-LoRA", True, True
    strategy = f"{_LB}:FFALoRA"

    def upload(self, state: State) -> "OrderedDict[str, torch.Tensor]":
        """B and the head only: A stays frozen at the shared initialisation and is never sent."""
        return OrderedDict((k, v) for k, v in state.items() if not is_lora_a_key(k))


class FLoRAMethod(LoraMethod):
    name, label = "flora", "FLoRA"
    strategy = f"{_LB}:FLoRA"

    def receive(self, model, sent: State, *, seed: int, cid: int, server_round: int) -> None:
        """Merge Σ p_k ΔW_k into the base and start a fresh adapter (none on round 1's empty state)."""
        update = flora_update(sent)
        if update is not None:
            merge_flora(model, update, seed=(seed * 1000 + cid) * 10007 + server_round)

    def kept_weights(self, model) -> "OrderedDict[str, torch.Tensor]":
        """The adapted layers' base weights, with the global updates merged so far."""
        return base_weights(model)

    def global_start(self, base, ranks: Sequence[int], spec: DistillRunSpec):
        """Base + merged updates, its own adapter B = 0 (rank 1); nothing to send on round 1."""
        return _global_model(base, 1, spec), OrderedDict()

    def apply_global(self, model, state: State, base, spec: DistillRunSpec):
        merge_flora(model, flora_update(state), seed=spec.seed)
        return model

    def server_state(self, model) -> dict[str, torch.Tensor]:
        """The adapter and head, and the base weights of the adapted layers (the updates merged in)."""
        state = super().server_state(model)
        state.update((f"{layer}.base_layer.weight", w) for layer, w in base_weights(model).items())
        return state

    def load_server_state(self, model, state: State) -> None:
        load_base_weights(model, {layer: state[f"{layer}.base_layer.weight"] for layer in adapted_layers(model)})
        super().load_server_state(model, {k: v for k, v in state.items() if not k.endswith(".base_layer.weight")})


class FlexLoRAMethod(LoraMethod):
    name, label = "flexlora", "FlexLoRA"
    strategy = f"{_LB}:FlexLoRA"

    def global_start(self, base, ranks: Sequence[int], spec: DistillRunSpec):
        """Rank 1 until the first aggregation (then rebuilt at full rank); nothing to send on round 1."""
        return _global_model(base, 1, spec), OrderedDict()

    def strategy_options(self, ranks: Sequence[int]) -> dict[str, Any]:
        return {"ranks": ranks}

    def apply_global(self, model, state: State, base, spec: DistillRunSpec):
        """The full-rank state, into a global model rebuilt at its rank if it has another."""
        full = next(v for k, v in state.items() if is_lora_a_key(k)).shape[0]
        if _lora_rank(model) != full:
            model = _global_model(base, full, spec)
        load_adapter_state(model, state)
        return model

    def restored_model(self, model, base, rank: int, spec: DistillRunSpec):
        return _global_model(base, rank, spec) if rank != 1 else model


class LoRAFairMethod(LoraMethod):
    name, label, one_rank = "lorafair", "LoRA-FAIR", True
    strategy = f"{_LB}:LoRAFair"


def lora_method(name: str) -> LoraMethod:
    """The method ``name``: its ``lora-method`` component's class, built (ValueError naming the known ones)."""
    from fedcal import catalogue

    known = catalogue.components("lora-method")
    if not isinstance(name, str) or name not in known:
        raise ValueError(f"unknown method {name!r}; allowed: {', '.join(known)}")
    return known[name].load()()


def upload_bytes(
    method: str,
    *,
    state: State | None = None,
    num_anchors: int | None = None,
    num_classes: int | None = None,
    logit_dtype: torch.dtype = torch.float32,
) -> int:
    """Bytes one client uploads per round under ``method`` (a ``lora-method`` of the catalogue).

    * a method that uploads logits (``"rfd"``): ``num_anchors`` × ``num_classes`` ×
      itemsize(``logit_dtype``) — independent of the rank and of the model's size;
    * an adapter-federating one: the tensors of the client's ``state`` that it uploads
      (:meth:`LoraMethod.upload`: A and B of every adapted layer and the head if trainable, at
      their own dtypes — FlexLoRA's clients upload the factors, the server forms B·A; FFA-LoRA's
      without the A matrices, which stay frozen at their shared initialisation and are never sent).
    """
    m = lora_method(method)
    if m.uploads_logits:
        a = check_int("num_anchors", num_anchors, 1)
        c = check_int("num_classes", num_classes, 1)
        return a * c * torch.empty((), dtype=logit_dtype).element_size()
    if state is None or len(state) == 0:
        raise ValueError(f"method {method!r} uploads adapter tensors: pass the client's adapter_state")
    sent = m.upload(state)
    return sum(torch.as_tensor(v).numel() * torch.as_tensor(v).element_size() for v in sent.values())
