"""Shared input validation (flwr-free), in the style of torchmetrics' ``_check_*`` helpers.

Metrics, calibrators and analyses take torch tensors, numpy arrays or nested lists. Every
entry point validates its inputs through these helpers, so one kind of mistake gives one
kind of message wherever it is made, and every message names the offending argument.

Conventions:

- each helper returns a detached CPU **torch** tensor: ``torch.float64`` for values,
  ``torch.int64`` for labels; a caller that computes in numpy calls ``.numpy()`` on it;
- non-tensors go through ``np.asarray`` first, so a Python list of floats stays float64
  (``torch.as_tensor`` alone would round it to float32);
- ``bool`` and complex inputs are rejected as values (they are never what was meant);
- a check failure raises ``ValueError`` whose message starts with the argument's name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = [
    "_check_finite",
    "_check_float64",
    "_check_gammas",
    "_check_labels",
    "_check_logits",
    "_check_logits_labels",
    "_check_matrix",
    "_check_probs",
]


def _as_tensor(x: Any, name: str) -> torch.Tensor:
    """``x`` as a detached CPU tensor of its own dtype (lists and arrays via numpy)."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    try:
        return torch.as_tensor(np.asarray(x))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be numeric, got {type(x).__name__} ({e})") from None


def _real_float64(t: torch.Tensor, name: str) -> torch.Tensor:
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name} must be real-valued, got dtype {t.dtype}")
    return t.double()


def _check_finite(t: torch.Tensor, name: str) -> None:
    """``{name} contains NaN or Inf`` unless every entry of the tensor ``t`` is finite."""
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} contains NaN or Inf")


def _check_float64(x: Any, name: str = "x", ndim: int | None = None) -> torch.Tensor:
    """Real, finite values as a CPU float64 tensor, optionally of exactly ``ndim`` dimensions.

    Errors: ``{name} must be {ndim}-D``, ``{name} must be real-valued``,
    ``{name} contains NaN or Inf``.
    """
    t = _as_tensor(x, name)
    if ndim is not None and t.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    t = _real_float64(t, name)
    _check_finite(t, name)
    return t


def _check_matrix(x: Any, name: str = "x") -> torch.Tensor:
    """A 2-D (rows = samples) real, finite float64 matrix; see :func:`_check_float64`."""
    return _check_float64(x, name, ndim=2)


def _check_logits(x: Any, name: str = "logits", min_classes: int = 1) -> torch.Tensor:
    """Scores of shape (n, C) with n ≥ 1 and C ≥ ``min_classes``: real, finite, CPU float64.

    Errors name the argument and what is wrong: ``{name} must be 2-D (n, C)``,
    ``{name} is empty``, ``{name} needs at least {min_classes} classes``,
    ``{name} must be real-valued``, ``{name} contains NaN or Inf``.
    """
    t = _as_tensor(x, name)
    if t.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n, C), got shape {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError(f"{name} is empty (n = 0)")
    if t.shape[1] < min_classes:
        raise ValueError(f"{name} needs at least {min_classes} classes, got C = {t.shape[1]}")
    t = _real_float64(t, name)
    _check_finite(t, name)
    return t


def _check_probs(x: Any, name: str = "probs", min_classes: int = 1, range_tol: float = 1e-9,
                 sum_atol: float = 1e-6, hint: str = "") -> torch.Tensor:
    """Probability rows (n, C): :func:`_check_logits`, plus every entry in
    [−range_tol, 1 + range_tol] and every row sum within ``sum_atol`` of 1.

    ``hint`` is appended to the range and sum messages (e.g. "pass from_logits=True").
    """
    p = _check_logits(x, name, min_classes)
    if (p < -range_tol).any() or (p > 1 + range_tol).any():
        raise ValueError(f"{name} must lie in [0, 1]{hint}")
    if ((p.sum(dim=1) - 1).abs() > sum_atol).any():
        raise ValueError(f"{name} rows must sum to 1 (tolerance {sum_atol:g}){hint}")
    return p


def _check_labels(labels: Any, n: int, num_classes: int, name: str = "labels") -> torch.Tensor:
    """Class labels of shape (n,), integers in [0, num_classes), as a CPU int64 tensor.

    Floating-point labels are accepted when every value is a finite integer (e.g. ``y.double()``).
    Errors: ``{name} must have shape (n,)``, ``{name} contains NaN or Inf``,
    ``{name} must be integers``, ``{name} must lie in [0, num_classes)``.
    """
    t = _as_tensor(labels, name)
    if t.ndim != 1 or t.shape[0] != n:
        raise ValueError(f"{name} must have shape ({n},) (one per sample), got shape {tuple(t.shape)}")
    if t.is_floating_point():
        _check_finite(t, name)
        if (t != t.round()).any():
            raise ValueError(f"{name} must be integers, got non-integral values")
    elif t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name} must be integers, got dtype {t.dtype}")
    t = t.long()
    if t.numel() and (t.min() < 0 or t.max() >= num_classes):
        raise ValueError(f"{name} must lie in [0, {num_classes}), got range [{int(t.min())}, {int(t.max())}]")
    return t


def _check_logits_labels(logits: Any, labels: Any, min_classes: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """A classification set: (n, C) logits (:func:`_check_logits`) and their (n,) labels
    in [0, C) (:func:`_check_labels`), as float64 and int64 CPU tensors."""
    z = _check_logits(logits, min_classes=min_classes)
    return z, _check_labels(labels, z.shape[0], z.shape[1])


def _check_gammas(gammas: Any = None) -> torch.Tensor:
    """Decision thresholds γ: a non-empty 1-D float64 tensor in [0, 1] (a scalar becomes one γ).

    ``None`` gives the default grid ``np.linspace(0, 1, 101)`` (numpy's, bit for bit).
    """
    if gammas is None:
        return torch.from_numpy(np.linspace(0.0, 1.0, 101))
    g = _check_float64(gammas, "gammas")
    g = g.reshape(1) if g.ndim == 0 else g
    if g.ndim != 1 or g.numel() == 0:
        raise ValueError(f"gammas must be a non-empty 1-D sequence, got shape {tuple(g.shape)}")
    if g.min() < 0.0 or g.max() > 1.0:
        raise ValueError("gammas must lie in [0, 1]")
    return g
