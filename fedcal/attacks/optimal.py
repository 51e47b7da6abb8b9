"""ByzFL's line-search "optimal" ALIE and IPM (flwr-free): the attack's scalar chosen, each round,
to push the rule's aggregate furthest from the honest mean.

For a scalar τ the f colluders all send

    ALIE:  m(τ) = μ + τ·σ        IPM:  m(τ) = −τ·μ

(μ, σ the honest updates' mean and sample standard deviation; ByzFL's sign conventions, so
fedcal's ``alie`` z is −τ and ``ipm`` ε is τ). The attackers know the rule ``aggregate`` (an
``(n, d) → (d,)`` function: the server's rule after its pre-aggregation) and maximise

    D(τ) = ‖aggregate(honest ∪ {m(τ)} × f) − μ‖₂

by ByzFL's line search (:func:`line_search`): from τ = ``start``, an expansion phase steps by
``delta`` and doubles the step after every improvement, stopping at the first step that does not
improve (the step then × ``ratio``); a contraction phase tries best + step, keeping it when it
improves, the step × ``ratio`` after every try; ``evals`` evaluations of D in all. With the
defaults (start 0, delta 10, ratio 0.8, 20 evaluations) only τ ≥ 0 is searched, as in ByzFL.

Threat model: omniscient of the round's honest updates *and* of the rule, its parameters and its
pre-aggregation — stronger than ALIE / IPM; the literature's worst case per rule
(Allouah et al., AISTATS 2023, who use them).

Source: ByzFL (``byzfl.attacks``: ``Optimal_ALittleIsEnough``, ``Optimal_InnerProductManipulation``,
their ``_expansion_phase`` / ``_contraction_phase``); Allouah, Farhadkhani, Guerraoui, Gupta,
Pinot & Stephan, "Fixing by Mixing: A Recipe for Optimal Byzantine ML under Heterogeneity"
(AISTATS 2023).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from fedcal.aggregate._checks import _check_int
from fedcal.attacks._honest import check_honest, repeat_row

Rule = Callable[[torch.Tensor], torch.Tensor]


def line_search(objective: Callable[[float], float], start: float = 0.0, delta: float = 10.0, evals: int = 20,
                ratio: float = 0.8) -> float:
    """The τ ByzFL's expansion–contraction line search returns for maximising ``objective``
    (module docstring), ``evals`` evaluations of it in all.

    Every step is positive with a positive ``delta``: the search never returns below a point it
    improved on (here 10 → 30 improve, 70 and every later 30 + step do not):

    >>> line_search(lambda t: -(t - 25.0) ** 2)
    30.0
    """
    evals = _check_int("evals", evals, 1)
    start, delta, ratio = float(start), float(delta), float(ratio)
    if not math.isfinite(start):
        raise ValueError(f"the line search's start must be finite, got {start}")
    if not (math.isfinite(delta) and delta != 0):
        raise ValueError(f"the line search's delta must be finite and non-zero, got {delta}")
    if not 0.5 < ratio < 1:
        raise ValueError(f"the line search's ratio must lie in (0.5, 1), got {ratio}")
    best_x, best_y = start, objective(start)
    left = evals - 1
    while left > 0:  # expansion
        x = best_x + delta
        y = objective(x)
        left -= 1
        if y > best_y:
            best_x, best_y = x, y
            delta *= 2
        else:
            delta *= ratio
            break
    while left > 0:  # contraction
        x = best_x + delta
        y = objective(x)
        left -= 1
        if y > best_y:
            best_x, best_y = x, y
        delta *= ratio
    return best_x


def _distance(honest: torch.Tensor, f: int, aggregate: Rule, row: torch.Tensor, mean: torch.Tensor) -> float:
    out = aggregate(torch.cat([honest, repeat_row(row, f)]))
    d = float(torch.linalg.vector_norm((out - mean).double()))
    return d if math.isfinite(d) else -math.inf  # an attack the rule cannot aggregate is no gain


def _optimal(honest: torch.Tensor, f: int, aggregate: Rule, row_at: Callable[[float], torch.Tensor],
             **search) -> tuple[float, torch.Tensor]:
    mean = honest.mean(dim=0)
    tau = line_search(lambda t: _distance(honest, f, aggregate, row_at(t), mean), **search) if f else 0.0
    return tau, repeat_row(row_at(tau), f)


def optimal_alie_tau(honest: torch.Tensor, f: int, aggregate: Rule, start: float = 0.0, delta: float = 10.0,
                     evals: int = 20, ratio: float = 0.8) -> tuple[float, torch.Tensor]:
    """(τ, the (f, d) updates μ + τ·σ) of the line-search ALIE against ``aggregate``."""
    honest, f = check_honest(honest, f, min_honest=2, attack="optimal ALIE (a standard deviation)")
    std, mean = torch.std_mean(honest, dim=0, correction=1)
    return _optimal(honest, f, aggregate, lambda t: mean + t * std, start=start, delta=delta, evals=evals,
                    ratio=ratio)


def optimal_ipm_tau(honest: torch.Tensor, f: int, aggregate: Rule, start: float = 0.0, delta: float = 10.0,
                    evals: int = 20, ratio: float = 0.8) -> tuple[float, torch.Tensor]:
    """(τ, the (f, d) updates −τ·μ) of the line-search IPM against ``aggregate``."""
    honest, f = check_honest(honest, f, attack="optimal IPM")
    mean = honest.mean(dim=0)
    return _optimal(honest, f, aggregate, lambda t: -t * mean, start=start, delta=delta, evals=evals, ratio=ratio)


def optimal_alie(honest: torch.Tensor, f: int, aggregate: Rule, **search) -> torch.Tensor:
    """The (f, d) updates of the line-search ALIE (:func:`optimal_alie_tau`).

    μ = 2, σ = 2: the median of {0, 2, 4, 2 + 2τ} is 2 at τ = 0 and 3 for every τ ≥ 1, so the
    search keeps its first improvement, τ = 10:

    >>> from fedcal.aggregate import coordinate_median
    >>> optimal_alie(torch.tensor([[0.0], [2.0], [4.0]]), 1, coordinate_median)
    tensor([[22.]])
    """
    return optimal_alie_tau(honest, f, aggregate, **search)[1]


def optimal_ipm(honest: torch.Tensor, f: int, aggregate: Rule, **search) -> torch.Tensor:
    """The (f, d) updates of the line-search IPM (:func:`optimal_ipm_tau`)."""
    return optimal_ipm_tau(honest, f, aggregate, **search)[1]
