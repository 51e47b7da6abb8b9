"""Bulyan: a MultiKrum selection, then per coordinate the mean of the values closest to the median."""

from __future__ import annotations

import torch

from ._checks import _check_int, _check_updates
from .median import true_median
from .multikrum import multikrum_select
from .numerics import overflow_free_mean


def bulyan(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Bulyan over MultiKrum. Requires n ≥ 4f + 3. Unweighted.

    1. Selection: the θ = n − 2f updates with the lowest Krum scores
       (:func:`~fedcal.aggregate.multikrum.multikrum_select` with m = θ; scores over the
       n − f − 2 nearest neighbours among all n updates).
    2. Per coordinate i: the median m_i of the θ selected values, then the mean of the
       β = θ − 2f selected values closest to m_i (ties: the lower index in the selection order).

    This is the rule of Flower's ``flwr.serverapp.strategy.Bulyan`` (with its default
    ``select_multikrum``), so a fedcal and a Flower server agree on clean replies
    (``tests/test_flower_dropin.py``). El Mhamdi et al. pick the θ updates by applying Krum
    recursively (each pick removed before the next scores are computed); one MultiKrum pass
    ranks with all n updates present, which can select a different set when scores are close.

    Source: El Mhamdi, Guerraoui & Rouault, "The Hidden Vulnerability of Distributed Learning
    in Byzantium" (ICML 2018), Algorithm "Bulyan".
    """
    updates = _check_updates(updates)
    n = updates.shape[0]
    f = _check_int("f", f, 0)
    if n < 4 * f + 3:
        raise ValueError(f"Bulyan needs n ≥ 4f + 3, got n = {n} and f = {f} (at most f = {(n - 3) // 4})")
    theta = n - 2 * f
    return mean_around_median(updates[multikrum_select(updates, f, theta)], theta - 2 * f)


def mean_around_median(chosen: torch.Tensor, k: int) -> torch.Tensor:
    """Per coordinate i, the mean of the k values of ``chosen`` (n, d) closest to their median
    m_i = med_j chosen[j, i] (the mean of the two middle values for even n); ties in |x − m_i| go
    to the lower row. Bulyan's second step (k = β), also after a custom selection. Unweighted.
    """
    chosen = _check_updates(chosen)
    k = _check_int("k", k, 1)
    if k > chosen.shape[0]:
        raise ValueError(f"mean_around_median needs k ≤ n, got k = {k} and n = {chosen.shape[0]}")
    centre = true_median(chosen, dim=0, nan_free=True)
    # A stable sort of |x − m| keeps the k closest values of every coordinate (one column at a
    # time would be a Python loop over d); their mean is taken rescaled where a sum would overflow.
    order = torch.sort((chosen - centre).abs(), dim=0, stable=True).indices[:k]
    return overflow_free_mean(torch.gather(chosen, 0, order), dim=0)
