"""LoRA on the top k layers only: the frozen layers below are computed once per text and cached.

When an adapter sits on the top k transformer layers only (``dst-lora-layers=k``), everything
below them — the embeddings and the lower n − k layers — is frozen and the same in every round,
for every client and for the server's student. Its output for a text is therefore a constant:
:func:`split_classifier` cuts a classifier into

* a **prefix** (the encoder with its lower n − k layers, no pooler, always in eval mode: no
  dropout, no gradient), whose last hidden states :func:`prefix_features` computes once per text,
  and
* a **top model**: the same classifier with the top k layers only and its embeddings replaced by
  :class:`PassThroughEmbeddings`, called with ``inputs_embeds`` = those cached hidden states.

The top model runs transformers' own encoder forward (attention-mask preparation, the layers, the
pooling and the head), so it computes what the whole classifier computes when the lower layers run
without dropout — the setting this shortcut defines: frozen lower layers are a fixed feature
extractor. ``tests/test_backbone_pretrained.py`` checks that the logits and the LoRA gradients of a
top model on cached features equal those of the whole model (LoRA on the same layers, lower layers
in eval mode) to float tolerance. What changes is time: a training step runs k of n layers
forward and backward instead of n, and the lower layers run once per text instead of once per
epoch, round and client — once per machine, with :func:`cached_prefix_features`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tempfile
from pathlib import Path

import torch

from .cache import cache_root
from .pretrained import encoder_of


class PassThroughEmbeddings(torch.nn.Module):
    """Stands in for a top model's embeddings: returns the ``inputs_embeds`` it is given (the
    cached hidden states of the frozen lower layers) unchanged."""

    def forward(self, input_ids=None, inputs_embeds=None, **_):
        if inputs_embeds is None:
            raise ValueError("a top-layers model takes the frozen layers' cached hidden states (inputs_embeds), "
                             "not token ids: compute them with fedcal.text.frozen.prefix_features")
        return inputs_embeds


def num_layers(model) -> int:
    """Transformer layers of a classifier's encoder."""
    return len(encoder_of(model).encoder.layer)


def split_classifier(model, top: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(prefix, top model) of a classifier of :func:`fedcal.text.classifier_from_backbone` (see the
    module docstring), both deep copies: ``model`` is not changed. ``top`` must lie in [1, n]
    (n = the encoder's layers; ``top = n`` leaves the embeddings alone in the prefix). The prefix
    is in eval mode with ``requires_grad=False`` everywhere; the top model keeps ``model``'s
    ``requires_grad`` flags and mode."""
    n = num_layers(model)
    if not 1 <= top <= n:
        raise ValueError(f"top layers must lie in [1, {n}] (the encoder has {n} layers), got {top}")
    prefix = copy.deepcopy(encoder_of(model))
    prefix.encoder.layer = torch.nn.ModuleList(list(prefix.encoder.layer)[:n - top])
    if getattr(prefix, "pooler", None) is not None:
        prefix.pooler = None
    prefix.config.num_hidden_layers = n - top
    prefix.eval()
    for p in prefix.parameters():
        p.requires_grad_(False)
    head = copy.deepcopy(model)
    enc = encoder_of(head)
    enc.embeddings = PassThroughEmbeddings()
    enc.encoder.layer = torch.nn.ModuleList(list(enc.encoder.layer)[n - top:])
    enc.config.num_hidden_layers = top
    return prefix, head


@torch.no_grad()
def prefix_features(prefix, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    batch_size: int = 128) -> torch.Tensor:
    """The prefix's last hidden states of every text, (N, L, hidden) float32 on the CPU, computed
    batch by batch in eval mode. Each batch runs at its own longest text and is zero-padded back
    to L: the positions beyond a text's length are masked out of every attention and pooling above,
    so their values never matter."""
    ids, mask = torch.as_tensor(input_ids), torch.as_tensor(attention_mask)
    device = next(prefix.parameters()).device
    out = torch.zeros((*ids.shape, prefix.config.hidden_size), dtype=torch.float32)
    was_training = prefix.training
    prefix.eval()
    try:
        for i in range(0, ids.shape[0], batch_size):
            m = mask[i:i + batch_size]
            width = max(1, int(m.sum(1).max()))
            h = prefix(input_ids=ids[i:i + batch_size, :width].to(device),
                       attention_mask=m[:, :width].to(device)).last_hidden_state
            out[i:i + batch_size, :width] = h.float().cpu()
    finally:
        prefix.train(was_training)
    return out


def features_key(backbone: str | os.PathLike[str], top: int, input_ids: torch.Tensor,
                 attention_mask: torch.Tensor) -> str:
    """24 hex digits naming the cached features of these exact inputs under ``backbone``'s prefix
    for ``top`` layers: the SHA-256 of the backbone (its resolved folder with its weight files'
    sizes and modification times, or its Hub name), ``top``, and the token ids and mask themselves
    — so another text, tokeniser, length limit, backbone or split is another file."""
    h = hashlib.sha256()
    local = Path(backbone).expanduser()
    ident: list = [str(local.resolve()) if local.is_dir() else str(backbone), int(top)]
    if local.is_dir():
        ident += [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(local.iterdir())
                  if f.suffix in (".safetensors", ".bin")]
    h.update(json.dumps(ident).encode())
    for t in (input_ids, attention_mask):
        t = torch.as_tensor(t).to(torch.int64).contiguous()
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:24]


def cached_prefix_features(prefix, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                           backbone: str | os.PathLike[str], top: int, batch_size: int = 128) -> torch.Tensor:
    """:func:`prefix_features`, kept on disk under ``<cache>/features/<features_key>.pt``: the
    frozen layers give the same features to every run, seed and method that encodes the same texts
    (the anchors and the test set above all), so they are computed once per machine. Only the
    attended positions are stored (padding is zero-filled back on load); a file that cannot be read
    is computed again. Written through a temporary file and a rename."""
    ids, mask = torch.as_tensor(input_ids), torch.as_tensor(attention_mask)
    path = cache_root() / "features" / f"{features_key(backbone, top, ids, mask)}.pt"
    keep = mask.bool()
    if path.is_file():
        try:
            packed = torch.load(path, weights_only=True)
            out = torch.zeros((*ids.shape, packed.shape[-1]), dtype=packed.dtype)
            out[keep] = packed
            return out
        except Exception:  # noqa: BLE001 — unreadable (torch raises UnpicklingError too) or of another shape
            pass  # compute it again
    out = prefix_features(prefix, ids, mask, batch_size=batch_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".pt", dir=path.parent)
    os.close(fd)
    try:
        torch.save(out[keep].clone(), tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


__all__ = ["PassThroughEmbeddings", "cached_prefix_features", "features_key", "num_layers", "prefix_features",
           "split_classifier"]
