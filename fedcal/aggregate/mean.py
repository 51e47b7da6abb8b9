"""FedAvg: the (data-size) weighted mean of the client updates."""

from __future__ import annotations

import torch

from ._checks import _check_updates, _check_weights


def fedavg(updates: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Weighted average: Σ_k p_k Δ_k with p_k = w_k / Σ_j w_j (equal p_k when weights is None).

    Source: McMahan et al., "Communication-Efficient Learning of Deep Networks from
    Decentralized Data" (AISTATS 2017); SPEC §3 FedAvg.
    """
    updates = _check_updates(updates)
    weights = _check_weights(weights, updates)
    if weights is None:
        return updates.mean(dim=0)
    return (weights / weights.sum()) @ updates
