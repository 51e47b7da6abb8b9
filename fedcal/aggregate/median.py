"""Coordinate-wise (true) median; :func:`true_median` is shared with the probit aggregators."""

from __future__ import annotations

import torch

from ._checks import _check_updates
from .select import network_applies, order_statistic_mean


def true_median(x: torch.Tensor, dim: int = 0, *, nan_free: bool = False) -> torch.Tensor:
    """Median along ``dim`` with the mean of the two middle values for even sizes (not
    ``torch.median``, which returns the lower one). Shared with the inference aggregators.

    Large CPU inputs take a selection network (:mod:`fedcal.aggregate.select`, same values as
    the sort); ``nan_free=True`` says the caller has already refused NaN (saves a pass)."""
    n = x.shape[dim]
    fast = order_statistic_mean(x, dim, (n - 1) // 2, n // 2 + 1, nan_free)
    if fast is not None:
        return fast
    s = torch.sort(x, dim=dim).values
    # For odd n both indices are the middle one; for even n they are the two middle ones.
    lo, hi = s.select(dim, (n - 1) // 2), s.select(dim, n // 2)
    out = 0.5 * (lo + hi)
    if out.is_floating_point() and bool(torch.isinf(out).any()):
        # lo + hi overflowed (two finite values near the dtype's maximum): halve first there.
        out = torch.where(torch.isinf(out) & torch.isfinite(lo) & torch.isfinite(hi), 0.5 * lo + 0.5 * hi, out)
    return out


def coordinate_median(updates: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median: med_k Δ_k[i] for every coordinate i. Unweighted.

    For even n this is the true median, ½(Δ_(n/2)[i] + Δ_(n/2+1)[i]) of the two middle order
    statistics — not ``torch.median``, which returns the lower of the two.

    Source: Yin et al., "Byzantine-Robust Distributed Learning: Towards Optimal Statistical
    Rates" (ICML 2018); SPEC §3 coordinate-wise median.
    """
    return true_median(_check_updates(updates), dim=0, nan_free=True)
