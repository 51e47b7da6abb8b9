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
epoch, round and client.
"""

from __future__ import annotations

import copy

import torch

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


__all__ = ["PassThroughEmbeddings", "num_layers", "prefix_features", "split_classifier"]
