"""FedAvg: the (data-size) weighted mean of the client updates."""

from __future__ import annotations

import torch

from ._checks import _check_updates, _check_weights
from .numerics import overflow_free_mean, unit_scaled64


def fedavg(updates: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Weighted average: Σ_k p_k Δ_k with p_k = w_k / Σ_j w_j (equal p_k when weights is None).
    Where the sum would overflow the dtype (updates near its maximum), it is taken rescaled.

    Source: McMahan et al., "Communication-Efficient Learning of Deep Networks from
    Decentralized Data" (AISTATS 2017); SPEC §3 FedAvg.
    """
    updates = _check_updates(updates)
    weights = _check_weights(weights, updates)
    if weights is None:
        return overflow_free_mean(updates, dim=0)
    out = (weights / weights.sum()) @ updates
    if not bool(torch.isfinite(out).all()):  # rounding pushed a convex combination past the range
        scaled, e = unit_scaled64(updates)
        p = weights.double() / weights.double().sum()
        out = torch.ldexp(p @ scaled, torch.tensor(e, dtype=torch.float64)).to(updates.dtype)
    return out
