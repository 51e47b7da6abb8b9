"""Norm clipping pre-aggregators: static clipping (a fixed bound) and adaptive robust clipping
(ARC, a bound read off the round's own norms). Both map (n, d) → (n, d), so any rule composes
after them (:func:`fedcal.aggregate.compose`)."""

from __future__ import annotations

import math

import torch

from ._checks import _check_int, _check_updates
from .numerics import row_norms64


def _clip_rows(updates: torch.Tensor, bound: torch.Tensor | float) -> torch.Tensor:
    """x_i · min(1, bound / ‖x_i‖) for every row (a zero row stays zero). The factor is
    computed in float64 from overflow-free norms, so a huge finite row is scaled to the bound
    instead of to zero; it is at most 1, so the product cannot overflow."""
    norms = row_norms64(updates)
    bound = torch.as_tensor(bound, dtype=torch.float64, device=updates.device)
    factor = torch.where(norms > bound, bound / norms, torch.ones_like(norms))
    return updates * factor.to(updates.dtype)[:, None]


def static_clip(updates: torch.Tensor, c: float) -> torch.Tensor:
    """Static clipping: every update scaled into the ball of radius c,

        clip_c(x_i) = x_i · min(1, c / ‖x_i‖₂).

    Bounds any one client's influence on a mean to c / n, whatever it sends; the bound is fixed
    in advance, so it either clips honest updates too (c small) or lets a Byzantine one through
    at full norm c (c large) — the dilemma ARC (:func:`arc`) removes by reading c off the round.

    Source: the standard clipping operator of robust / private distributed SGD (e.g.
    Karimireddy, He & Jaggi, "Learning from History for Byzantine Robust Optimization", ICML
    2021); ByzFL's ``Clipping`` pre-aggregator.

    >>> static_clip(torch.tensor([[3.0, 4.0], [0.3, 0.4]]), c=1.0)
    tensor([[0.6000, 0.8000],
            [0.3000, 0.4000]])
    """
    updates = _check_updates(updates)
    c = float(c)
    if not (math.isfinite(c) and c > 0):
        raise ValueError(f"clip bound c must be a finite number > 0, got {c}")
    return _clip_rows(updates, c)


def arc_count(n: int, f: int) -> int:
    """How many updates ARC clips: k = ⌊2 (f / n) (n − f)⌋, computed in integers (= ⌊2f(n − f) / n⌋,
    no float rounding); at most n / 2, so at least one update is left to set the bound.

    >>> arc_count(10, 3), arc_count(10, 0), arc_count(9, 3)
    (4, 0, 4)
    """
    n = _check_int("n", n, 1)
    f = _check_int("f", f, 0)
    if f > n:
        raise ValueError(f"ARC needs f ≤ n, got n = {n} and f = {f}")
    return 2 * f * (n - f) // n


def arc(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Adaptive robust clipping (ARC): clip the k = ⌊2 (f/n)(n − f)⌋ largest updates (by
    Euclidean norm) to the norm of the (k + 1)-th largest,

        c = ‖x_(k+1)‖ (norms in decreasing order),   ARC(x_i) = x_i · min(1, c / ‖x_i‖).

    The n − k smallest updates are untouched (their norms are ≤ c). With f Byzantine clients
    among n, k ≥ f exactly when f ≤ n/2 (2(n − f) ≥ n), so the bound c is at most the largest
    honest norm and no Byzantine update keeps more than an honest norm; unlike
    :func:`static_clip`, no bound needs tuning. Ties in norm do not matter (a row of norm
    exactly c is scaled by 1).

    Source: Allouah, Guerraoui, Gupta, Jellouli, Rizk & Stephan, "Boosting Robustness by
    Clipping Gradients in Distributed Learning" (2024, ARC); ByzFL's ``ARC``.

    >>> arc(torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0], [-8.0, 6.0]]), f=1)
    tensor([[ 1.0000,  0.0000],
            [ 0.0000,  2.0000],
            [ 0.0000,  0.0000],
            [-1.6000,  1.2000]])
    """
    updates = _check_updates(updates)
    n = updates.shape[0]
    k = arc_count(n, f)
    if k == 0:
        return updates.clone()
    norms = row_norms64(updates)
    c = torch.sort(norms, descending=True).values[k]
    return _clip_rows(updates, c)
