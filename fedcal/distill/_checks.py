"""Input validation shared by :mod:`fedcal.distill` (scalars, logit tensors, client weights).

Every check raises ``ValueError`` with a message that names the argument and the problem.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import torch

from fedcal.aggregate.numerics import fit_weights


def check_int(name: str, value, low: int, high: int | None = None) -> int:
    """``value`` as an int in [low, high] (``high`` None: no upper bound); bools are refused."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be in {bound}, got {value}")
    return value


def check_real(name: str, value, *, low: float | None = None, high: float | None = None,
               strict_low: bool = False) -> float:
    """``value`` as a finite float with ``low <= value <= high`` (``low < value`` when
    ``strict_low``); bools are refused."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if low is not None and (value <= low if strict_low else value < low):
        raise ValueError(f"{name} must be {'>' if strict_low else '>='} {low}, got {value}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value}")
    return value


def as_float_tensor(x, name: str) -> torch.Tensor:
    """``x`` as a floating tensor (integers become the default float dtype)."""
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x)
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    return x


def check_finite(x: torch.Tensor, name: str) -> None:
    """Refuse NaN/Inf entries: one of them would silently poison every mean and median."""
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or Inf values")


def check_uploads(Z) -> torch.Tensor:
    """A round's uploads: a finite floating (n, A, C) tensor with n, A, C >= 1."""
    Z = as_float_tensor(Z, "Z")
    if Z.ndim != 3:
        raise ValueError(f"Z must be a 3-D (n clients, A anchors, C classes) tensor, got shape {tuple(Z.shape)}")
    if min(Z.shape) < 1:
        raise ValueError(f"Z needs n >= 1 clients, A >= 1 anchors and C >= 1 classes, got shape {tuple(Z.shape)}")
    check_finite(Z, "Z")
    return Z


def normalized_weights(weights, n: int, *, dtype: torch.dtype, device) -> torch.Tensor:
    """p_k = w_k / Σ_j w_j for ``n`` clients; ``None`` means equal weights p_k = 1/n.

    The weights (typically sample counts) must be finite, >= 0 and have a positive sum; any finite
    size is accepted, even above ``dtype``'s range (:func:`fedcal.aggregate.numerics.fit_weights`).
    """
    if weights is None:
        return torch.full((n,), 1.0 / n, dtype=dtype, device=device)
    w = torch.as_tensor(weights, device=device)
    if w.is_complex():
        raise ValueError("weights must be real")
    w = w.double()  # checked before any cast: a size above float32's range is a size, not an Inf
    if w.shape != (n,):
        raise ValueError(f"weights must have shape ({n},), one per client, got {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()):
        raise ValueError("weights contain NaN or Inf values")
    if bool((w < 0).any()):
        k = int(torch.nonzero(w < 0)[0, 0])
        raise ValueError(f"weights must be >= 0; client {k} has weight {float(w[k])}")
    # The image strategies' overflow-free weighting: sizes outside [2^-60, 2^60] (a client claiming
    # 1e39 examples) are rescaled by a power of two, exactly, before the cast to ``dtype``; ordinary
    # sizes are cast unchanged, so their arithmetic is what it was.
    w = fit_weights(w, dtype)
    total = w.sum()
    if not float(total) > 0:
        raise ValueError("weights must have a positive sum (all weights are zero)")
    return w / total
