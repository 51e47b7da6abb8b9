"""RFD-LoRA clients: peft LoRA adapters of heterogeneous ranks on a frozen sequence classifier.

A client is a Hugging Face sequence classifier (e.g. ``RobertaForSequenceClassification``) whose
weights are frozen, wrapped by peft with a LoRA adapter of the client's own rank r on the
``target_modules`` (RoBERTa's attention ``query`` and ``value`` projections by default, as in Hu
et al. 2022; ``word_embeddings`` adds a LoRA on the token-embedding table, see below) and, by
default, a trainable copy of the classification head. Each round the client

1. trains its trainable part on its private data (:func:`local_train`: AdamW, linear warm-up),
2. computes clipped logits on the shared public anchors (:func:`anchor_logits`) — RFD-LoRA's only
   upload — or, for the adapter-federating baselines, uploads its :func:`adapter_state`.

**Scaling.** peft applies an adapter as W x + (α/r)·B A x (``use_rslora=False``), the convention
of :mod:`fedcal.distill.lora`, so the α given here is the α to pass to its rules.

**The classification head is trainable per client** (``train_head=True``, peft's
``modules_to_save``): a pretrained backbone ships without a head for the downstream task, so the
head of ``RobertaForSequenceClassification`` is randomly initialised; frozen, it would map the
adapted features through a random projection, and every logit a client uploads (and the
student's, see :mod:`fedcal.distill.student`) is that head's output. Training it is the standard
peft recipe for sequence classification. In RFD-LoRA the head never leaves the client; the
adapter-federating baselines average it like any rank-independent tensor
(:mod:`fedcal.distill.adapters`). ``train_head=False`` keeps it frozen (e.g. a head that was
already fine-tuned).

**LoRA on the word embeddings** (``"word_embeddings"`` in ``target_modules``): peft's embedding LoRA
adds (α/r)·(B A)ᵀ to the (vocabulary × hidden) table, with A (r, vocabulary) and B (hidden, r), so
the factors have the same (r, d_in) / (d_out, r) shapes as a linear layer's (d_in = vocabulary
size, d_out = hidden size) and every rule of :mod:`fedcal.distill.lora` applies unchanged. peft
initialises an embedding adapter the other way round from a linear one (A = 0, B Gaussian): A is a
trainable per-token code, which is what makes it learn fast (measured: docs/distill.md). FFA-LoRA
freezes A, which would freeze that code at 0, so under ``freeze_a`` an embedding adapter is
re-initialised to the linear convention (A ~ N(0, 1) from the seed, B = 0,
:func:`init_lora_factors`): FFA's frozen random A, as the method defines it.
Why the option exists: a small frozen encoder's token embeddings may not carry the task (see
docs/distill.md), and a per-token low-rank code is the cheapest trainable part that can.

**Client state** is :func:`adapter_state`: the LoRA A/B matrices of every adapted layer and the
head's tensors, as CPU copies under peft's parameter names. Loading it into a fresh wrapper of the
same base, rank and options (:func:`load_adapter_state`) reproduces the client exactly.

Sources: LoRA — Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models" (ICLR 2022);
peft — https://github.com/huggingface/peft; AdamW — Loshchilov & Hutter (ICLR 2019).
"""

from __future__ import annotations

import contextlib
import copy as _copy
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from numbers import Integral
from typing import Iterable, Mapping, Sequence

import torch
import torch.nn.functional as F

from fedcal.extras import require

from ._checks import check_int, check_real
from .consensus import clip_logits

__all__ = [
    "DEFAULT_RANKS",
    "TrainStats",
    "assign_ranks",
    "check_rank",
    "lora_model",
    "freeze_lora_A",
    "is_lora_key",
    "is_lora_a_key",
    "is_lora_b_key",
    "is_head_key",
    "lora_factors",
    "is_lora_layer",
    "is_embedding_lora",
    "init_lora_factors",
    "adapter_state",
    "load_adapter_state",
    "local_train",
    "forward_logits",
    "anchor_logits",
]

DEFAULT_RANKS = (2, 4, 8, 16)
ADAPTER = "default"  # peft's name of the (single) adapter every wrapper here carries
# peft's parameter-name tags of the A and B factors: linear layers, then embedding layers
LORA_A_TAGS = (".lora_A.", ".lora_embedding_A.")
LORA_B_TAGS = (".lora_B.", ".lora_embedding_B.")


def assign_ranks(num_clients: int, ranks: Sequence[int] = DEFAULT_RANKS) -> list[int]:
    """Client k's rank is ``ranks[k mod len(ranks)]``: the rank set cycled over the clients, so
    every rank is held by ⌊n/|ranks|⌋ or ⌈n/|ranks|⌉ clients."""
    num_clients = check_int("num_clients", num_clients, 1)
    ranks = [check_int("each rank", r, 1) for r in ranks]
    if not ranks:
        raise ValueError("ranks is empty: give at least one LoRA rank")
    return [ranks[k % len(ranks)] for k in range(num_clients)]


def check_rank(rank, allowed: Iterable[int] | None = DEFAULT_RANKS, client=None) -> int:
    """``rank`` as an int >= 1 that lies in ``allowed`` (``None``: any rank >= 1); otherwise a
    ValueError that names the client and the allowed set."""
    who = f"client {client}: " if client is not None else ""
    if isinstance(rank, bool) or not isinstance(rank, Integral) or rank < 1:
        raise ValueError(f"{who}LoRA rank must be an integer >= 1, got {rank!r}")
    if allowed is not None:
        allowed = sorted(set(allowed))
        if rank not in allowed:
            raise ValueError(f"{who}LoRA rank {rank} is not in the allowed set {allowed}")
    return int(rank)


@contextlib.contextmanager
def _seeded(seed: int, device: torch.device | None):
    """Run the block with torch's global RNG seeded by ``seed`` and restore it afterwards: peft's
    initialisation and the models' dropout draw from the global RNG, which a caller's own
    randomness must neither disturb nor depend on."""
    devices = [device] if device is not None and device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def lora_model(
    base_model: torch.nn.Module,
    rank: int,
    *,
    alpha: float = 8.0,
    target_modules: Sequence[str] = ("query", "value"),
    seed: int = 0,
    allowed_ranks: Iterable[int] | None = DEFAULT_RANKS,
    client=None,
    train_head: bool = True,
    head_modules: Sequence[str] = ("classifier",),
    dropout: float = 0.0,
    freeze_a: bool = False,
    copy: bool = True,
):
    """A client: ``base_model`` frozen, with a LoRA adapter of rank ``rank`` (ΔW = (α/r)·B A) on
    every module whose name ends in one of ``target_modules``.

    ``rank`` must lie in ``allowed_ranks`` (``None``: any rank >= 1); a ValueError naming
    ``client`` (any label, e.g. its index) and the allowed set is raised before anything is built.
    ``seed`` fixes the adapter's initialisation (A Kaiming-uniform, B = 0, peft's default, so the
    wrapper starts as the base model): clients given the same seed share their initial A, as
    FFA-LoRA needs. ``train_head``: the modules named in ``head_modules`` (RoBERTa/BERT's
    ``classifier``; ``score`` for decoder classifiers) get a trainable copy (peft's
    ``modules_to_save``), see the module docstring. ``dropout``: LoRA dropout. ``freeze_a``:
    freeze every A at its initialisation (FFA-LoRA, :func:`freeze_lora_A`).

    ``copy=True`` wraps a deep copy: peft injects its layers into the model it is given, so
    clients built from one shared base must each get their own. ``copy=False`` wraps (and alters)
    ``base_model`` itself, which saves memory when the caller already holds a private copy.
    Returns the ``peft.PeftModel``.
    """
    rank = check_rank(rank, allowed_ranks, client)
    alpha = check_real("alpha", alpha, low=0.0, strict_low=True)
    dropout = check_real("dropout", dropout, low=0.0, high=1.0)
    seed = check_int("seed", seed, 0)
    target_modules = [str(m) for m in ([target_modules] if isinstance(target_modules, str) else target_modules)]
    if not target_modules:
        raise ValueError("target_modules is empty: name at least one module to adapt")
    head_modules = [str(m) for m in ([head_modules] if isinstance(head_modules, str) else head_modules)]
    if train_head and not head_modules:
        raise ValueError("train_head=True needs head_modules (the classification head's module names)")
    # Imported here: peft pulls in transformers (seconds), which the rest of fedcal.distill does not need.
    require("peft", "text", "RFD-LoRA (task=distill)")
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        target_modules=target_modules,
        lora_dropout=dropout,
        bias="none",
        # No task_type: peft's SEQ_CLS task would add the head to modules_to_save on its own,
        # which would override train_head=False.
        modules_to_save=head_modules if train_head else None,
    )
    model = _copy.deepcopy(base_model) if copy else base_model
    with _seeded(seed, _device(model)):
        model = get_peft_model(model, config)
        if freeze_a:  # FFA: embedding adapters to the linear convention, so the frozen A is random
            for module in model.modules():
                if is_embedding_lora(module):
                    init_lora_factors(module)
    if freeze_a:
        freeze_lora_A(model)
    return model


def freeze_lora_A(model) -> None:
    """FFA-LoRA: set ``requires_grad=False`` on every LoRA A (embedding adapters' included), so only
    B (and the head, if trainable) is trained; :func:`local_train` optimises only parameters that
    require grad."""
    for name, p in model.named_parameters():
        if is_lora_a_key(name):
            p.requires_grad_(False)


def is_lora_a_key(key: str) -> bool:
    """Whether a peft parameter name is a LoRA A factor (of a linear or an embedding layer)."""
    return any(tag in key for tag in LORA_A_TAGS)


def is_lora_b_key(key: str) -> bool:
    """Whether a peft parameter name is a LoRA B factor (of a linear or an embedding layer)."""
    return any(tag in key for tag in LORA_B_TAGS)


def is_lora_key(key: str) -> bool:
    """Whether an :func:`adapter_state` key is a LoRA A or B matrix."""
    return is_lora_a_key(key) or is_lora_b_key(key)


def is_embedding_lora(module) -> bool:
    """Whether ``module`` is a peft embedding LoRA layer carrying the adapter."""
    return ADAPTER in getattr(module, "lora_embedding_A", {})


def is_lora_layer(module) -> bool:
    """Whether ``module`` is a peft LoRA layer (linear or embedding) carrying the adapter."""
    return is_embedding_lora(module) or ADAPTER in getattr(module, "lora_A", {})


def lora_factors(module) -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
    """(A, B) parameters of a peft LoRA layer's adapter, A (r, d_in) and B (d_out, r), for a linear
    layer (``lora_A``/``lora_B`` modules) or an embedding (``lora_embedding_A``/``_B`` parameters,
    d_in = vocabulary size, d_out = embedding size). ValueError if it carries no adapter."""
    if is_embedding_lora(module):
        return module.lora_embedding_A[ADAPTER], module.lora_embedding_B[ADAPTER]
    if is_lora_layer(module):
        return module.lora_A[ADAPTER].weight, module.lora_B[ADAPTER].weight
    raise ValueError(f"{type(module).__name__} carries no LoRA adapter {ADAPTER!r}")


def init_lora_factors(module) -> None:
    """An adapter in the linear convention (A random, B = 0), from torch's global RNG (seed it
    around the call): a linear layer through peft's ``reset_lora_parameters`` (A Kaiming-uniform);
    an embedding with A ~ N(0, 1) (the scale peft gives the embedding's random factor). FFA-LoRA's
    initialisation; ΔW = 0 either way."""
    if not is_embedding_lora(module):
        module.reset_lora_parameters(ADAPTER, True)
        return
    A, B = lora_factors(module)
    with torch.no_grad():
        A.normal_()
        B.zero_()


def is_head_key(key: str) -> bool:
    """Whether an :func:`adapter_state` key belongs to the trainable copy of the head."""
    return ".modules_to_save." in key


def adapter_state(model) -> "OrderedDict[str, torch.Tensor]":
    """The client's own tensors: every LoRA A and B (frozen A of FFA-LoRA included — it is part
    of the adapter) and the trainable head's tensors, in the model's parameter order, as detached
    CPU copies under peft's parameter names. What a baseline client uploads and what a client keeps
    between rounds."""
    state = OrderedDict(
        (name, p.detach().to("cpu", copy=True))
        for name, p in model.named_parameters()
        if is_lora_key(name) or is_head_key(name)
    )
    if not any(is_lora_key(k) for k in state):
        raise ValueError("the model has no LoRA parameters: build it with lora_model")
    return state


def load_adapter_state(model, state: Mapping[str, torch.Tensor]) -> None:
    """Copy ``state`` (from :func:`adapter_state`, or an aggregation rule of
    :mod:`fedcal.distill.adapters`) into ``model``'s LoRA and head parameters, in place.

    Strict: the keys must be exactly the model's (ValueError listing missing and unexpected ones)
    and every shape must match (a state of another rank is refused, naming the tensor). Values are
    cast to each parameter's dtype and device; ``requires_grad`` is left as it is.
    """
    params = dict(model.named_parameters())
    expected = [n for n in params if is_lora_key(n) or is_head_key(n)]
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in params or not (is_lora_key(k) or is_head_key(k))]
    if missing or unexpected:
        raise ValueError(f"state does not fit the model: missing {missing[:4]}{' …' if len(missing) > 4 else ''}, "
                         f"unexpected {unexpected[:4]}{' …' if len(unexpected) > 4 else ''}")
    for k in expected:
        value = torch.as_tensor(state[k])
        if tuple(value.shape) != tuple(params[k].shape):
            raise ValueError(f"{k}: state has shape {tuple(value.shape)}, the model {tuple(params[k].shape)} "
                             "(a different LoRA rank or model?)")
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{k}: state contains NaN or Inf values")
    with torch.no_grad():
        for k in expected:
            params[k].copy_(torch.as_tensor(state[k]).to(dtype=params[k].dtype, device=params[k].device))


@dataclass
class TrainStats:
    """What :func:`local_train` did.

    Attributes:
        mean_loss: mean of the per-batch cross-entropies over all steps.
        last_epoch_loss: mean of the per-batch cross-entropies of the last epoch.
        steps: optimiser steps taken (epochs × ⌈N / batch_size⌉).
        lrs: the learning rate each step used, in order (the warm-up schedule's trace).
    """

    mean_loss: float
    last_epoch_loss: float
    steps: int
    lrs: list[float] = field(default_factory=list)


def _check_batch(input_ids, attention_mask, labels=None):
    """``input_ids`` is a batch of token ids (N, L) or of the cached hidden states (N, L, H) of a
    model's frozen lower layers (:mod:`fedcal.text.frozen`, for a top-layers model);
    ``attention_mask`` (N, L) either way."""
    ids = torch.as_tensor(input_ids)
    mask = torch.as_tensor(attention_mask)
    features = ids.is_floating_point()
    if ids.ndim != (3 if features else 2) or ids.shape[0] < 1:
        raise ValueError(f"input_ids must be token ids (N, L) or cached hidden states (N, L, H) with N >= 1, got "
                         f"{'float' if features else 'integer'} shape {tuple(ids.shape)}")
    if mask.is_floating_point():
        raise ValueError("attention_mask must be an integer tensor")
    if mask.shape != ids.shape[:2]:
        raise ValueError(f"attention_mask must have shape {tuple(ids.shape[:2])} (N, L), got {tuple(mask.shape)}")
    if labels is None:
        return ids, mask
    y = torch.as_tensor(labels)
    if y.shape != (ids.shape[0],) or y.is_floating_point():
        raise ValueError(f"labels must be an integer (N,) = ({ids.shape[0]},) tensor, got shape {tuple(y.shape)}")
    return ids, mask, y.long()


def forward_logits(model, ids: torch.Tensor, mask: torch.Tensor, device=None) -> torch.Tensor:
    """``model``'s logits on one batch — token ids (``input_ids``) or cached hidden states
    (``inputs_embeds`` of a top-layers model) — cut to the batch's last attended position: the
    positions after it are padding in every row, masked out of every attention and pooling, so
    dropping them changes eval-mode logits only by float rounding and saves their time (texts are
    padded to the longest of a whole set, a batch's longest is usually shorter). In train mode the
    dropout masks are drawn for the shorter tensor: other draws of the same noise. Inside that width
    the encoder layers' linear modules compute the attended positions only
    (:func:`fedcal.text.unpad.skip_padding`: exact, the same dropout draws); this is the one forward
    of every client step, anchor logit and student step, whole classifier or top-layers model."""
    from fedcal.text.unpad import skip_padding

    device = _device(model) if device is None else device
    attended = mask.bool().any(0).nonzero()
    width = int(attended.max()) + 1 if attended.numel() else 1
    key = "inputs_embeds" if ids.is_floating_point() else "input_ids"
    m = mask[:, :width].to(device)
    with skip_padding(model, m):
        return model(**{key: ids[:, :width].to(device)}, attention_mask=m).logits


def local_train(
    model,
    input_ids,
    attention_mask,
    labels,
    *,
    epochs: int = 1,
    batch_size: int = 16,
    lr: float = 5e-4,
    weight_decay: float = 0.01,
    warmup_frac: float = 0.1,
    generator: torch.Generator | None = None,
) -> TrainStats:
    """Local epochs of cross-entropy training of the parameters that require grad (the adapter and
    the trainable head).

    AdamW (``weight_decay`` 0.01 by default) with transformers' ``get_linear_schedule_with_warmup``:
    the LR rises linearly from 0 over the first round(``warmup_frac`` × total steps) steps to
    ``lr``, then decays linearly to 0 at the last step. A fresh optimiser each call: the
    aggregation rules replace the adapter between rounds, so moments from an older adapter would
    be stale. Deterministic from ``generator`` (a CPU generator; ``None``: torch's global one): it
    shuffles each epoch and seeds the dropout, whose global RNG is restored afterwards. Data may
    live on the CPU; batches are moved to the model's device. Leaves the model in train mode.
    """
    ids, mask, y = _check_batch(input_ids, attention_mask, labels)
    epochs = check_int("epochs", epochs, 1)
    batch_size = check_int("batch_size", batch_size, 1)
    lr = check_real("lr", lr, low=0.0, strict_low=True)
    weight_decay = check_real("weight_decay", weight_decay, low=0.0)
    warmup_frac = check_real("warmup_frac", warmup_frac, low=0.0, high=1.0)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    require("transformers", "text", "RFD-LoRA (task=distill)")
    from transformers import get_linear_schedule_with_warmup

    n = ids.shape[0]
    per_epoch = math.ceil(n / batch_size)
    total = epochs * per_epoch
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    schedule = get_linear_schedule_with_warmup(optimizer, round(warmup_frac * total), total)
    device = _device(model)
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    losses, lrs = [], []
    model.train()
    with _seeded(seed, device):
        for _ in range(epochs):
            perm = torch.randperm(n, generator=generator)
            for b in range(per_epoch):
                idx = perm[b * batch_size:(b + 1) * batch_size]
                lrs.append(optimizer.param_groups[0]["lr"])
                logits = forward_logits(model, ids[idx], mask[idx], device)
                loss = F.cross_entropy(logits.float(), y[idx].to(device))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                schedule.step()
                losses.append(float(loss.detach()))
    optimizer.zero_grad(set_to_none=True)
    return TrainStats(mean_loss=sum(losses) / len(losses),
                      last_epoch_loss=sum(losses[-per_epoch:]) / per_epoch, steps=total, lrs=lrs)


@torch.no_grad()
def _logits(model, ids: torch.Tensor, mask: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Eval-mode logits (N, C), float32 on the CPU, batch by batch; the model's mode is restored."""
    device = _device(model)
    was_training = model.training
    model.eval()
    try:
        out = [forward_logits(model, ids[i:i + batch_size], mask[i:i + batch_size], device).float().cpu()
               for i in range(0, ids.shape[0], batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(out)


def anchor_logits(model, input_ids, attention_mask, *, clip: float = 10.0, batch_size: int = 256) -> torch.Tensor:
    """The client's RFD-LoRA upload: eval-mode (no dropout) logits on the A public anchors,
    clipped to [−clip, clip] with :func:`fedcal.distill.clip_logits` — clipping before the upload
    bounds what the client sends even if the server forgot to; the server clips again anyway.
    Returns a float32 CPU tensor (A, C)."""
    ids, mask = _check_batch(input_ids, attention_mask)
    batch_size = check_int("batch_size", batch_size, 1)
    return clip_logits(_logits(model, ids, mask, batch_size), clip)
