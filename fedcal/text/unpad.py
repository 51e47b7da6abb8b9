"""The encoder layers' linear modules computed on attended positions only: exact, and cheaper on padded batches.

Why fedcal writes this: transformers' BERT / RoBERTa have no unpadded ("varlen") execution on the
CPU — the sdpa and eager attention paths, and every ``nn.Linear`` around them, compute every
position of an (N, L, H) batch, padding included. A batch of 64 Rotten-Tomatoes texts is ~55
tokens wide while its texts average ~27, so about half of each linear layer's arithmetic (the
bulk of a training step) goes to positions whose outputs nothing reads: attention adds the
dtype's minimum to a padded key's score (softmax weight exactly 0), mean pooling masks them, a
``[CLS]`` / ``<s>`` head reads position 0 only, and LayerNorm, GELU and dropout act per position.

:func:`skip_padding` is a context manager around **one forward** of a BERT / RoBERTa classifier
(or bare encoder). While it is open, each of the six linear modules of every encoder layer
(:data:`LINEARS`: ``attention.self.query`` / ``key`` / ``value``, ``attention.output.dense``,
``intermediate.dense``, ``output.dense``) computes only the T attended rows: a forward pre-hook
replaces its (N, L, H) input by those rows (T, H), a forward hook scatters its (T, H') output back
into zeros (N, L, H') — ``index_select`` / ``index_copy``, so gradients flow to the attended rows
exactly as before. The feed-forward pair stays cut in between: ``intermediate.dense``'s (T, 4H)
output goes through the activation (GELU, per position, no randomness) into ``output.dense`` as it
is, and only ``output.dense``'s output is scattered back. The hooks sit on whatever module is at
those paths, a peft ``lora.Linear`` included (its base layer and its LoRA branch both run on the T
rows), so module names, ``state_dict`` keys and peft's adapter handling do not change. Everything
else — attention scores, softmax, dropout, the residual LayerNorms — still runs on the padded
(N, L, …) tensors: every dropout draws a mask of the same shape in the same order, so a
train-mode forward equals the padded one up to float rounding under the same seed
(``tests/test_unpad.py``). A padded position's hidden states differ (its linear outputs are
zeros), which nothing reads.

It runs padded — hooks not registered — when there is nothing to gain or exactness is not
assured: no attention mask, no padded position, a row whose first position is padding (a
``[CLS]`` head reads position 0), a module at those paths that holds an active dropout (a LoRA
dropout would draw a (T, H) mask: other draws), or an encoder that is not a BERT / RoBERTa with
exactly that layer structure (checked by name; logged once per encoder class).
:func:`keep_padding` turns it off for a block (benchmarks and tests compare both paths). Like the
frozen-layer cache, it is an execution detail with no run-config key: a run's name, hash and
results (to float tolerance) do not change.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch

log = logging.getLogger(__name__)

#: the per-layer linear modules computed on attended rows only (paths inside a BertLayer / RobertaLayer)
LINEARS = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
           "intermediate.dense", "output.dense")
# the feed-forward pair: intermediate.dense's output stays cut through the activation into output.dense
_FFN_IN, _FFN_OUT = "intermediate.dense", "output.dense"
#: encoder types whose layer dataflow (linear modules between per-position or masked operations) this assumes
ENCODER_TYPES = ("bert", "roberta")

_OFF = [0]  # depth of open keep_padding() blocks
_WARNED: set[str] = set()


@contextlib.contextmanager
def keep_padding() -> Iterator[None]:
    """Inside this block :func:`skip_padding` never registers its hooks: the padded execution."""
    _OFF[0] += 1
    try:
        yield
    finally:
        _OFF[0] -= 1


def _encoder(model) -> torch.nn.Module | None:
    """The ``BertModel`` / ``RobertaModel`` of a classifier (a peft wrapper, the mean-pooling classifier,
    transformers' sequence classifier) or the encoder itself; None when there is none."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    for cand in (inner, getattr(inner, "encoder", None), getattr(inner, "base_model", None)):
        if isinstance(getattr(getattr(cand, "encoder", None), "layer", None), torch.nn.ModuleList):
            return cand
    return None


def linear_modules(model) -> list[torch.nn.Module] | None:
    """The modules at :data:`LINEARS` of every layer of ``model``'s encoder, in order; None (with one
    logged line per encoder class) when the encoder is not a BERT / RoBERTa whose layers hold an
    ``nn.Linear`` (or a peft wrapper of one) at each path."""
    enc = _encoder(model)
    if enc is None:
        return None
    found: list[torch.nn.Module] | None = []
    if getattr(getattr(enc, "config", None), "model_type", None) not in ENCODER_TYPES:
        found = None
    for layer in enc.encoder.layer if found is not None else ():
        for path in LINEARS:
            try:
                module = layer.get_submodule(path)
            except AttributeError:
                module = None
            base = module.get_base_layer() if hasattr(module, "get_base_layer") else module  # peft's lora.Linear
            if not isinstance(base, torch.nn.Linear):
                found = None
                break
            found.append(module)
        if found is None:
            break
    if found is None:
        name = type(enc).__name__
        if name not in _WARNED:
            _WARNED.add(name)
            log.info("fedcal: %s is not a BERT / RoBERTa encoder with linear modules at %s: its padded positions "
                     "are computed", name, ", ".join(LINEARS))
    return found


def _active_dropout(module: torch.nn.Module) -> bool:
    return any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 and m.training
               for m in module.modules())


@contextlib.contextmanager
def skip_padding(model, attention_mask: torch.Tensor | None) -> Iterator[bool]:
    """For one forward of ``model`` on a batch with ``attention_mask`` (N, L): its encoder layers'
    linear modules compute the attended rows only (module docstring). Yields whether the hooks are
    on; they are removed when the block ends, also when it raises."""
    modules = None
    if attention_mask is not None and not _OFF[0] and attention_mask.dim() == 2:
        attended = attention_mask.bool()
        if not bool(attended.all()) and bool(attended[:, 0].all()):
            modules = linear_modules(model)
    if modules is None or any(_active_dropout(m) for m in modules):
        yield False
        return
    n, width = attended.shape
    rows = attended.reshape(-1).nonzero().squeeze(1)
    on: dict[torch.device, torch.Tensor] = {}
    stack: list[bool] = []  # per hooked call, innermost last: whether it runs on the attended rows

    def pre_hook(takes_cut: bool):
        def pre(module, args):
            x = args[0] if args else None
            if takes_cut and isinstance(x, torch.Tensor) and x.dim() == 2 and x.shape[0] == rows.numel():
                stack.append(True)  # the intermediate activations, still cut to the attended rows
                return None
            if not isinstance(x, torch.Tensor) or x.dim() != 3 or tuple(x.shape[:2]) != (n, width):
                stack.append(False)
                return None
            stack.append(True)
            idx = on.setdefault(x.device, rows.to(x.device))
            return (x.reshape(n * width, x.shape[-1]).index_select(0, idx), *args[1:])
        return pre

    def post_hook(scatter: bool):
        def post(module, args, out):
            if not stack.pop() or not scatter:
                return None
            idx = on.setdefault(out.device, rows.to(out.device))
            return out.new_zeros(n * width, out.shape[-1]).index_copy(0, idx, out).view(n, width, out.shape[-1])
        return post

    handles = []
    try:
        for i, m in enumerate(modules):
            path = LINEARS[i % len(LINEARS)]
            handles.append(m.register_forward_pre_hook(pre_hook(takes_cut=path == _FFN_OUT)))
            handles.append(m.register_forward_hook(post_hook(scatter=path != _FFN_IN)))
        yield True
    finally:
        for h in handles:
            h.remove()


__all__ = ["ENCODER_TYPES", "LINEARS", "keep_padding", "linear_modules", "skip_padding"]
