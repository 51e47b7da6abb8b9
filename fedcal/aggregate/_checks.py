"""Input validation shared by every rule of :mod:`fedcal.aggregate`."""

from __future__ import annotations

import torch


def _check_finite(x: torch.Tensor, what: str) -> None:
    # A single NaN/Inf would silently poison every rule (or every norm), so refuse it early.
    # Any NaN/Inf makes the sum non-finite, so one reduction (no n×d mask) clears the common
    # case; only a non-finite sum (NaN/Inf, or a float overflow) needs the element-wise check.
    if not bool(torch.isfinite(x.sum())) and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{what} contain NaN or Inf values")


def _check_updates(updates, finite: bool = True) -> torch.Tensor:
    """(n, d) floating tensor with n ≥ 1 and only finite values, else ValueError
    (``finite=False``: the shape and dtype only — for a rule that checks its result instead,
    which every NaN/Inf input poisons; it must then call :func:`_check_finite` itself)."""
    updates = torch.as_tensor(updates)
    if updates.ndim != 2:
        raise ValueError(f"updates must be a 2-D (n, d) tensor, got shape {tuple(updates.shape)}")
    if updates.shape[0] == 0:
        raise ValueError("updates is empty: need at least one client update (n ≥ 1)")
    if not updates.is_floating_point():
        updates = updates.to(torch.get_default_dtype())
    if finite:
        _check_finite(updates, "updates")
    return updates


def _check_points(points) -> torch.Tensor:
    """(..., n, d) floating tensor with n ≥ 1 and only finite values, else ValueError: the
    batched form of :func:`_check_updates` (a 2-D input is exactly an update matrix)."""
    points = torch.as_tensor(points)
    if points.ndim < 2:
        raise ValueError(f"points must be a (..., n, d) tensor (at least 2-D), got shape {tuple(points.shape)}")
    if points.shape[-2] == 0:
        raise ValueError("points is empty: need at least one point (n ≥ 1)")
    if not points.is_floating_point():
        points = points.to(torch.get_default_dtype())
    _check_finite(points, "points")
    return points


def _check_weights(weights, updates: torch.Tensor) -> torch.Tensor | None:
    """None, or an (n,) finite non-negative tensor with positive sum (on updates' device/dtype)."""
    if weights is None:
        return None
    n = updates.shape[0]
    weights = torch.as_tensor(weights, device=updates.device).to(updates.dtype)
    if weights.shape != (n,):
        raise ValueError(f"weights must have shape ({n},) to match updates, got {tuple(weights.shape)}")
    return _check_weight_values(weights)


def _check_weight_values(weights: torch.Tensor) -> torch.Tensor:
    """Finite, non-negative, positive sum along the last axis (every batch entry), else ValueError."""
    if not bool(torch.isfinite(weights).all()):
        raise ValueError("weights contain NaN or Inf values")
    if bool((weights < 0).any()):
        raise ValueError("weights must be non-negative (they are data sizes)")
    if not bool((weights.sum(-1) > 0).all()):
        raise ValueError("weights are all zero: at least one client must have positive weight")
    return weights


def _check_int(name: str, value, low: int) -> int:
    """``value`` as an int ≥ ``low`` (bools and non-integral values refused), else ValueError."""
    if isinstance(value, bool) or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < low:
        raise ValueError(f"{name} must be ≥ {low}, got {value}")
    return value
