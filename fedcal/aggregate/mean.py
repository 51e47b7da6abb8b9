"""FedAvg: the (data-size) weighted mean of the client updates."""

from __future__ import annotations

import torch

from ._checks import _check_finite, _check_updates, _check_weights
from .numerics import overflow_free_mean, unit_scaled64


def fedavg(updates: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Weighted average: Σ_k p_k Δ_k with p_k = w_k / Σ_j w_j (equal p_k when weights is None).
    Where the sum would overflow the dtype (updates near its maximum), it is taken rescaled.

    Source: McMahan et al., "Communication-Efficient Learning of Deep Networks from
    Decentralized Data" (AISTATS 2017); SPEC §3 FedAvg.
    """
    # The NaN/Inf check is folded into the result (one pass over the updates instead of two): a
    # NaN or Inf update makes its coordinates of the mean non-finite — unless its weight is 0
    # (a BLAS matvec may skip zero weights), so zero weights take the up-front check.
    updates = _check_updates(updates, finite=False)
    weights = _check_weights(weights, updates)
    if weights is not None and not bool((weights > 0).all()):
        _check_finite(updates, "updates")
    out = updates.mean(dim=0) if weights is None else (weights / weights.sum()) @ updates
    if bool(torch.isfinite(out.sum())) or bool(torch.isfinite(out).all()):  # a non-finite sum: check each
        return out
    _check_finite(updates, "updates")  # a NaN/Inf update: ValueError; else the sum overflowed
    if weights is None:
        return overflow_free_mean(updates, dim=0)
    # rounding pushed a convex combination past the range: take it rescaled
    scaled, e = unit_scaled64(updates)
    p = weights.double() / weights.double().sum()
    return torch.ldexp(p @ scaled, torch.tensor(e, dtype=torch.float64)).to(updates.dtype)
