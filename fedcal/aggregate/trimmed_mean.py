"""Coordinate-wise trimmed mean (updates here; client probits and DeepSet-TM's pooling reuse
:func:`trimmed_mean_along`)."""

from __future__ import annotations

import torch

from ._checks import _check_int, _check_updates
from .numerics import overflow_free_mean
from .select import order_statistic_mean


def trimmed_mean_along(x: torch.Tensor, f: int, dim: int = 0, *, nan_free: bool = False) -> torch.Tensor:
    """Mean along ``dim`` after dropping the f largest and f smallest values (needs n > 2f;
    a sum that would overflow is taken rescaled, :func:`~fedcal.aggregate.numerics.overflow_free_mean`).
    Shared with the inference aggregators (CWTM, DeepSet-TM pooling).

    Large CPU inputs without autograd take a selection network (:mod:`fedcal.aggregate.select`):
    the same kept values, summed in float64; ``nan_free=True`` says NaN was already refused."""
    n = x.shape[dim]
    if f < 0:
        raise ValueError(f"f must be >= 0; got {f}")
    if n <= 2 * f:
        raise ValueError(f"trimmed mean needs n > 2f, got n = {n} and f = {f} (at most f = {(n - 1) // 2})")
    if f == 0:
        return overflow_free_mean(x, dim=dim)
    fast = order_statistic_mean(x, dim, f, n - f, nan_free)
    if fast is not None:
        return fast
    return overflow_free_mean(torch.sort(x, dim=dim).values.narrow(dim, f, n - 2 * f), dim=dim)


def trimmed_mean(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Coordinate-wise trimmed mean: per coordinate, drop the f largest and f smallest values
    and average the remaining n − 2f. Requires n > 2f. Unweighted.

    Source: Yin et al., "Byzantine-Robust Distributed Learning: Towards Optimal Statistical
    Rates" (ICML 2018); SPEC §3 coordinate-wise trimmed mean.
    """
    return trimmed_mean_along(_check_updates(updates), _check_int("f", f, 0), dim=0, nan_free=True)


def trim_for(n: int, f: int) -> int:
    """The f the trimmed mean actually uses when only n replies arrived: min(f, (n − 1) // 2),
    the most that still leaves n > 2f (fewer replies than planned shrink f; never below 0).

    >>> trim_for(10, 2), trim_for(4, 2), trim_for(1, 3)
    (2, 1, 0)
    """
    n = _check_int("n", n, 1)
    f = _check_int("f", f, 0)
    return min(f, (n - 1) // 2)
