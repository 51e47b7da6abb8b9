"""The adapter-federating baselines on peft models: clients' :func:`~fedcal.distill.clients.adapter_state`
dicts in, per-layer (A, B) lists through the rules of :mod:`fedcal.distill.lora`, and the result
written back into a client's (or the global) peft model.

==============  ===================================================================================
rule            what every client receives and how it continues
==============  ===================================================================================
FedIT           :func:`fedit_aggregate`: Ā, B̄ averaged separately (one common rank); load it with
                :func:`~fedcal.distill.clients.load_adapter_state` and keep training it.
FFA-LoRA        :func:`ffa_aggregate`: A stays at its shared initialisation (all clients built with
                one seed and ``freeze_a=True``, so A never trains), B̄ averaged; load and continue.
FLoRA           :func:`flora_aggregate` stacks the heterogeneous-rank adapters into one of rank
                R = Σ_k r_k whose product is exactly Σ_k p_k ΔW_k (scale 1); :func:`merge_flora`
                adds that ΔW into every adapted layer's frozen base weight and re-initialises the
                client's own adapter (A fresh, B = 0) — as the FLoRA paper does: a rank-r_k client
                cannot hold a rank-R adapter, so it keeps the global update in its base model and
                trains a fresh rank-r_k adapter on top each round. Each client's base thus carries
                the sum of all rounds' global updates (identical on all clients, since all merge
                the same ΔW into the same base).
FlexLoRA        :func:`flexlora_aggregate`: the weighted average of the full ΔW_k, redistributed per
                target rank r as the truncated SVD (α/r)·B A = best rank-r approximation; each
                client loads the state of its own rank and continues.
LoRA-FAIR       :func:`lora_fair_aggregate`: FedIT's Ā and B̄ with B̄ refined by the residual ΔB of
                :func:`~fedcal.distill.lora.lora_fair_refine` (one common rank); every client loads
                (Ā, B̄ + ΔB) and keeps training it.
==============  ===================================================================================

The trainable head's tensors (present when the clients were built with ``train_head=True``) have
no rank, so every rule averages them with the same weights p_k = w_k / Σ w (FedAvg); their keys
are those of :func:`~fedcal.distill.clients.is_head_key`.

States are keyed by peft's parameter names; a LoRA layer is the key's prefix before
``.lora_A.``/``.lora_B.`` (e.g. ``base_model.model.roberta.encoder.layer.0.attention.self.query``),
or ``.lora_embedding_A.``/``.lora_embedding_B.`` for an embedding table (whose update (B A)ᵀ is
added to the (vocabulary × hidden) table: :func:`merge_flora` transposes it),
which is also the name of the peft LoRA module in the model (``model.get_submodule(layer)``). All
clients must have the same layers and head tensors (ValueError naming the first client that does
not). ``alpha`` must be the α the clients were built with (:func:`~fedcal.distill.clients.lora_model`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import torch

from ._checks import normalized_weights
from .clients import (ADAPTER, LORA_A_TAGS, LORA_B_TAGS, _seeded, is_embedding_lora, is_head_key, is_lora_layer,
                      lora_factors)
from .lora import fedit_average, ffa_average, flexlora_redistribute, flora_stack, lora_fair_refine

__all__ = [
    "STACKED_A",
    "STACKED_B",
    "FloraUpdate",
    "flora_update",
    "lora_layers",
    "lora_pairs",
    "head_state",
    "layer_delta",
    "effective_weight",
    "fedit_aggregate",
    "ffa_aggregate",
    "flora_aggregate",
    "merge_flora",
    "flexlora_aggregate",
    "lora_fair_aggregate",
]



def _tag_split(key: str, tags) -> str | None:
    """The layer prefix of ``key`` before the first of ``tags`` it contains, else None."""
    for tag in tags:
        if tag in key:
            return key.split(tag)[0]
    return None


def lora_layers(state: Mapping[str, torch.Tensor]) -> "OrderedDict[str, tuple[str, str]]":
    """The LoRA layers of an adapter state, in order: ``{layer: (A key, B key)}``. ValueError if a
    layer has an A without a B or the other way round, or if there is no LoRA layer at all."""
    a_keys, b_keys = OrderedDict(), {}
    for k in state:
        if (layer := _tag_split(k, LORA_A_TAGS)) is not None:
            a_keys[layer] = k
        elif (layer := _tag_split(k, LORA_B_TAGS)) is not None:
            b_keys[layer] = k
    if set(a_keys) != set(b_keys):
        odd = sorted(set(a_keys) ^ set(b_keys))
        raise ValueError(f"every LoRA layer needs both A and B; unpaired: {odd[:4]}")
    if not a_keys:
        raise ValueError("the state has no LoRA layers (keys with .lora_A./.lora_B. or .lora_embedding_A./_B.)")
    return OrderedDict((layer, (a, b_keys[layer])) for layer, a in a_keys.items())


def lora_pairs(state: Mapping[str, torch.Tensor]) -> "OrderedDict[str, tuple[torch.Tensor, torch.Tensor]]":
    """``{layer: (A, B)}`` of an adapter state: A (r, d_in), B (d_out, r)."""
    return OrderedDict((layer, (state[a], state[b])) for layer, (a, b) in lora_layers(state).items())


def head_state(state: Mapping[str, torch.Tensor]) -> "OrderedDict[str, torch.Tensor]":
    """The trainable head's tensors of an adapter state (empty if the head is frozen)."""
    return OrderedDict((k, v) for k, v in state.items() if is_head_key(k))


def _check_states(states) -> list:
    """A non-empty list of states sharing client 0's LoRA layers and head keys/shapes."""
    if isinstance(states, Mapping) or not isinstance(states, Sequence) or len(states) == 0:
        raise ValueError("states must be a non-empty list of adapter states, one per client")
    states = list(states)
    layers0 = list(lora_layers(states[0]))
    head0 = {k: tuple(v.shape) for k, v in head_state(states[0]).items()}
    for k, s in enumerate(states[1:], start=1):
        if list(lora_layers(s)) != layers0:
            raise ValueError(f"client {k}: its LoRA layers differ from client 0's")
        head = {key: tuple(v.shape) for key, v in head_state(s).items()}
        if head != head0:
            raise ValueError(f"client {k}: its head tensors differ from client 0's (keys or shapes)")
    return states


def _average_head(states: list, weights) -> "OrderedDict[str, torch.Tensor]":
    """FedAvg of the head tensors: Σ_k p_k h_k per tensor, in float32 or wider."""
    head0 = head_state(states[0])
    if not head0:
        return OrderedDict()
    dtype = torch.promote_types(next(iter(head0.values())).dtype, torch.float32)
    p = normalized_weights(weights, len(states), dtype=dtype, device="cpu")
    return OrderedDict((key, sum(pk * s[key].to("cpu", dtype) for pk, s in zip(p, states))) for key in head0)


def _per_layer(states: list, layer_keys) -> tuple[list, list]:
    a_key, b_key = layer_keys
    return [s[a_key] for s in states], [s[b_key] for s in states]


def fedit_aggregate(states, weights=None) -> "OrderedDict[str, torch.Tensor]":
    """FedIT: per layer (Ā, B̄) = :func:`~fedcal.distill.lora.fedit_average`, the head averaged.

    All clients must share one rank (the rule's ValueError names the first that does not). Returns
    a state with client 0's keys, to :func:`~fedcal.distill.clients.load_adapter_state` into every
    client and the global model (all of that rank).
    """
    states = _check_states(states)
    out = OrderedDict()
    for layer, keys in lora_layers(states[0]).items():
        A, B = fedit_average(*_per_layer(states, keys), weights)
        out[keys[0]], out[keys[1]] = A, B
    out.update(_average_head(states, weights))
    return _ordered_like(states[0], out)


def lora_fair_aggregate(states, weights=None, *, lam: float = 1e-2, steps: int = 1000,
                        lr: float = 1e-2) -> "OrderedDict[str, torch.Tensor]":
    """LoRA-FAIR: per layer (Ā, B̄ + ΔB) = :func:`~fedcal.distill.lora.lora_fair_refine` (``lam``,
    ``steps``, ``lr`` its penalty and gradient descent), the head averaged. All clients must share
    one rank. Returns a state with client 0's keys, loaded into every client and the global model
    like FedIT's."""
    states = _check_states(states)
    out = OrderedDict()
    for layer, keys in lora_layers(states[0]).items():
        A, B = lora_fair_refine(*_per_layer(states, keys), weights, lam=lam, steps=steps, lr=lr)
        out[keys[0]], out[keys[1]] = A, B
    out.update(_average_head(states, weights))
    return _ordered_like(states[0], out)


def ffa_aggregate(states, weights=None) -> "OrderedDict[str, torch.Tensor]":
    """FFA-LoRA: A kept (it must be identical on every client: the shared frozen initialisation,
    ValueError naming the first client whose A differs), B̄ = :func:`~fedcal.distill.lora.ffa_average`,
    the head averaged. Returns a state with client 0's keys."""
    states = _check_states(states)
    out = OrderedDict()
    for layer, (a_key, b_key) in lora_layers(states[0]).items():
        for k, s in enumerate(states[1:], start=1):
            if not torch.equal(s[a_key], states[0][a_key]):
                raise ValueError(f"client {k}: A of {layer} differs from client 0's; FFA-LoRA needs one shared "
                                 "frozen A (build every client with the same seed and freeze_a=True)")
        out[a_key] = states[0][a_key].clone()
        out[b_key] = ffa_average([s[b_key] for s in states], weights)
    out.update(_average_head(states, weights))
    return _ordered_like(states[0], out)


#: FLoRA's global state keys: ``<layer>.stacked_A`` / ``<layer>.stacked_B`` (the stacked pair of a layer)
STACKED_A, STACKED_B = ".stacked_A", ".stacked_B"


@dataclass(frozen=True, eq=False)  # eq=False: tensors have no single truth value
class FloraUpdate:
    """FLoRA's round result.

    Attributes:
        stacked: ``{layer: (A_s, B_s)}``, A_s (R, d_in) and B_s (d_out, R) with R = Σ_k r_k and
            B_s A_s = Σ_k p_k (α/r_k) B_k A_k (applied with scale 1).
        head: the averaged head tensors (empty if the head is frozen).
    """

    stacked: "OrderedDict[str, tuple[torch.Tensor, torch.Tensor]]"
    head: "OrderedDict[str, torch.Tensor]"

    def delta(self, layer: str) -> torch.Tensor:
        """The global update ΔW = B_s A_s of one layer (d_out, d_in)."""
        A_s, B_s = self.stacked[layer]
        return B_s @ A_s


def flora_update(state: Mapping[str, torch.Tensor]) -> "FloraUpdate | None":
    """The :class:`FloraUpdate` a FLoRA global state carries (keys ``<layer>.stacked_A`` /
    ``<layer>.stacked_B`` and the averaged head); None for a state without stacked layers (e.g.
    round 1's empty one, with nothing to merge)."""
    layers = [k[: -len(STACKED_A)] for k in state if k.endswith(STACKED_A)]
    if not layers:
        return None
    stacked = OrderedDict((layer, (state[layer + STACKED_A], state[layer + STACKED_B])) for layer in layers)
    head = OrderedDict((k, v) for k, v in state.items() if not k.endswith((STACKED_A, STACKED_B)))
    return FloraUpdate(stacked=stacked, head=head)


def flora_aggregate(states, weights=None, *, alpha: float = 8.0) -> FloraUpdate:
    """FLoRA: per layer the stacked pair of :func:`~fedcal.distill.lora.flora_stack` (any mix of
    ranks), the head averaged. Apply it with :func:`merge_flora`."""
    states = _check_states(states)
    stacked = OrderedDict()
    for layer, keys in lora_layers(states[0]).items():
        stacked[layer] = flora_stack(*_per_layer(states, keys), weights, alpha)
    return FloraUpdate(stacked=stacked, head=_average_head(states, weights))


def _lora_module(model, layer: str):
    """The peft LoRA module named ``layer`` (a state's layer prefix), checked to carry the adapter."""
    try:
        module = model.get_submodule(layer)
    except AttributeError as e:
        raise ValueError(f"the model has no module {layer!r}") from e
    if not is_lora_layer(module):
        raise ValueError(f"{layer!r} is not a peft LoRA layer with adapter {ADAPTER!r}")
    if getattr(module, "fan_in_fan_out", False):
        # Conv1D-style layers store Wᵀ; the (d_out, d_in) updates here would need a transpose.
        raise ValueError(f"{layer!r} stores its weight transposed (fan_in_fan_out); not supported")
    return module


def merge_flora(model, update: FloraUpdate, *, seed: int = 0) -> None:
    """Write FLoRA's round into a client's (or the global) peft model, in place.

    For every layer, W_base ← W_base + B_s A_s (the exact Σ_k p_k ΔW_k, merged into the frozen base
    weight; an embedding table gets (B_s A_s)ᵀ), then the model's own adapter is re-initialised
    by peft (a linear layer: A Kaiming-uniform from ``seed``, B = 0; an embedding: A = 0, B
    Gaussian from ``seed``; ΔW = 0 either way), so the model now computes base + global update and the client trains
    a fresh adapter of its own rank on top; the averaged head is loaded. ``seed`` is the fresh A's
    initialisation — vary it by round (and client, if wanted); torch's global RNG is left as it was.
    """
    for layer in update.stacked:
        _lora_module(model, layer)  # validate every layer before changing any
    device = next(model.parameters()).device
    with torch.no_grad(), _seeded(int(seed), device):
        for layer in update.stacked:
            module = _lora_module(model, layer)
            weight = module.get_base_layer().weight
            delta = update.delta(layer)
            weight.add_((delta.T if is_embedding_lora(module) else delta).to(dtype=weight.dtype, device=weight.device))
            module.reset_lora_parameters(ADAPTER, True)
    if update.head:
        _load_head(model, update.head)


def _load_head(model, head: Mapping[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    missing = [k for k in head if k not in params]
    if missing:
        raise ValueError(f"the model has no head parameters {missing[:4]} (built with train_head=False?)")
    with torch.no_grad():
        for k, v in head.items():
            if tuple(v.shape) != tuple(params[k].shape):
                raise ValueError(f"{k}: head tensor has shape {tuple(v.shape)}, the model {tuple(params[k].shape)}")
            params[k].copy_(v.to(dtype=params[k].dtype, device=params[k].device))


def flexlora_aggregate(states, weights=None, *, alpha: float = 8.0,
                       ranks: int | Iterable[int] = (2, 4, 8, 16)) -> "dict[int, OrderedDict[str, torch.Tensor]]":
    """FlexLoRA: per layer :func:`~fedcal.distill.lora.flexlora_redistribute` (the SVD of the
    averaged full update, computed once) at every target rank in ``ranks``, the head averaged.
    Returns ``{r: state}``, each with client 0's keys and A (r, d_in), B (d_out, r): load the
    state of a client's rank into it with :func:`~fedcal.distill.clients.load_adapter_state`."""
    states = _check_states(states)
    ranks = [ranks] if isinstance(ranks, int) else list(ranks)
    head = _average_head(states, weights)
    out = {r: OrderedDict() for r in ranks}
    for layer, keys in lora_layers(states[0]).items():
        per_rank = flexlora_redistribute(*_per_layer(states, keys), weights, ranks, alpha)
        for r, (A, B) in per_rank.items():
            out[r][keys[0]], out[r][keys[1]] = A, B
    for r in out:
        out[r].update((k, v.clone()) for k, v in head.items())
        out[r] = _ordered_like(states[0], out[r])
    return out


def _ordered_like(reference: Mapping, state: Mapping) -> "OrderedDict[str, torch.Tensor]":
    """``state`` in ``reference``'s key order, as contiguous CPU tensors (what adapter_state gives)."""
    return OrderedDict((k, state[k].detach().to("cpu").contiguous()) for k in reference if k in state)


def layer_delta(model, layer: str) -> torch.Tensor:
    """The update the model's own adapter adds to ``layer``: (α/r)·B A, read from the peft module
    (its scaling and factors), float32 on the CPU (d_out, d_in); for an embedding table (hidden,
    vocabulary), the transpose of the table's update."""
    module = _lora_module(model, layer)
    A, B = (f.detach().float().cpu() for f in lora_factors(module))
    return module.scaling[ADAPTER] * (B @ A)


def effective_weight(model, layer: str) -> torch.Tensor:
    """The weight ``layer`` applies: its (possibly FLoRA-merged) base weight plus
    :func:`layer_delta`, float32 on the CPU (d_out, d_in); for an embedding, the transposed table."""
    module = _lora_module(model, layer)
    base = module.get_base_layer().weight.detach().float().cpu()
    return (base.T if is_embedding_lora(module) else base) + layer_delta(model, layer)

