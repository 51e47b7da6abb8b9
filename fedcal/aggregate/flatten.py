"""Flattening a model's tensors into one (d,) vector and back: the rules work on (n, d)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def flatten_state(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Concatenate tensors (e.g. a model's parameters/state) into one flat (d,) vector.

    vec = concat(t_1.reshape(-1), …, t_L.reshape(-1)); dtypes are promoted as by ``torch.cat``.
    """
    tensors = list(tensors)
    if not tensors:
        raise ValueError("flatten_state needs at least one tensor")
    return torch.cat([torch.as_tensor(t).reshape(-1) for t in tensors])


def unflatten(vec: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Inverse of :func:`flatten_state`: split ``vec`` into tensors shaped like ``like``.

    Each piece takes the shape, dtype and device of its template; pieces for integer templates
    (e.g. BatchNorm's ``num_batches_tracked``) are rounded, not truncated, before the cast.
    """
    like = list(like)
    vec = torch.as_tensor(vec)
    if vec.ndim != 1:
        raise ValueError(f"vec must be 1-D, got shape {tuple(vec.shape)}")
    sizes = [t.numel() for t in like]
    if sum(sizes) != vec.numel():
        raise ValueError(f"vec has {vec.numel()} elements but the templates hold {sum(sizes)}")
    out = []
    for piece, t in zip(torch.split(vec, sizes), like):
        if not t.is_floating_point() and not t.is_complex() and piece.is_floating_point():
            piece = piece.round()
        out.append(piece.reshape(t.shape).to(dtype=t.dtype, device=t.device))
    return out


def add_flat_update(base: Mapping[str, torch.Tensor], keys: Sequence[str], update: torch.Tensor
                    ) -> dict[str, torch.Tensor]:
    """``base`` with the flat ``update`` added to the arrays ``keys`` (in that order, split by
    :func:`unflatten`), each sum taken in float64 and cast back to the array's dtype; the other
    arrays (buffers) as in ``base``. A strategy's new model, and CalGuard's candidate models."""
    pieces = unflatten(torch.as_tensor(update).double(), [base[k].double() for k in keys])
    out = dict(base)
    for k, piece in zip(keys, pieces):
        out[k] = (base[k].double() + piece).to(base[k].dtype)
    return out
