"""Nearest-neighbour mixing (NNM): each update replaced by the mean of its n − f nearest
neighbours, before any robust rule."""

from __future__ import annotations

import torch

from ._checks import _check_int, _check_updates
from .multikrum import pairwise_sq_distances
from .numerics import unit_scaled64


def nnm(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Nearest-neighbour mixing: for every i,

        y_i = (1 / (n − f)) Σ_{j ∈ N_i} x_j,

    where N_i are the n − f updates closest to x_i in Euclidean distance, x_i itself included.
    Returns the (n, d) mixed updates. Requires 0 ≤ f < n; f = 0 gives every row the plain mean.

    Mixing shrinks the honest updates' spread (each honest y_i averages ≥ n − 2f honest
    vectors) while a Byzantine vector can enter a mixture only as one of n − f terms, which is
    what lets rules such as the trimmed mean or Krum reach the optimal error under
    heterogeneity after it ("NNM + rule").

    Distances are the float64 ones of :func:`~fedcal.aggregate.pairwise_sq_distances` (shared
    with Krum); neighbours at equal distance are taken in index order, and x_i always counts as
    its own nearest neighbour, even when another row equals it. The means are one (n, n) × (n, d)
    product with a 0/1 neighbour matrix, divided by n − f (no (n, n − f, d) gather).

    Source: Allouah, Farhadkhani, Guerraoui, Gupta, Pinot & Stephan, "Fixing by Mixing: A
    Recipe for Optimal Byzantine ML under Heterogeneity" (AISTATS 2023); ByzFL's
    ``NNM``.

    >>> nnm(torch.tensor([[0.0], [1.0], [2.0], [10.0]]), f=1)
    tensor([[1.0000],
            [1.0000],
            [1.0000],
            [4.3333]])
    """
    updates = _check_updates(updates)
    n = updates.shape[0]
    f = _check_int("f", f, 0)
    if f >= n:
        raise ValueError(f"NNM needs f < n (at least one neighbour), got n = {n} and f = {f}")
    k = n - f
    dist = pairwise_sq_distances(updates)
    dist.fill_diagonal_(-1.0)  # itself first, whatever else lies at distance 0
    neighbours = torch.sort(dist, dim=1, stable=True).indices[:, :k]
    mix = torch.zeros(n, n, dtype=updates.dtype, device=updates.device)
    mix.scatter_(1, neighbours, 1.0)
    out = (mix @ updates) / k  # sums, then one division: the mean's own rounding
    if not bool(torch.isfinite(out.sum())) and not bool(torch.isfinite(out).all()):
        # a sum of finite rows overflowed: the same means of the rows / 2^e, times 2^e
        scaled, e = unit_scaled64(updates)
        out = torch.ldexp((mix.double() @ scaled) / k, torch.tensor(e, dtype=torch.float64)).to(updates.dtype)
    return out
