"""Min-Max and Min-Sum, the aggregation-agnostic model-poisoning attacks of Shejwalkar &
Houmansadr (flwr-free).

The f colluding attackers all send m = μ − γ·p, where μ is the mean of the honest updates
x_1 … x_n (n = n_h here), p a perturbation direction and γ ≥ 0 the largest value for which m
still looks like an honest update:

* **Min-Max**: m's largest squared distance to an honest update stays within the largest
  squared distance between two honest updates,

      max_i ‖m − x_i‖² ≤ max_{i,j} ‖x_i − x_j‖²;

* **Min-Sum**: m's sum of squared distances to the honest updates stays within an honest
  update's,

      Σ_i ‖m − x_i‖² ≤ max_i Σ_j ‖x_i − x_j‖²   (the paper; ``bound="max"``),

  the authors' code bounds it by the *smallest* such sum instead (``bound="min"``, stricter).

Directions p (:data:`DIRECTIONS`): ``unit`` = μ / ‖μ‖ (the "inverse unit vector": m moves
against the honest mean), ``std`` = the honest coordinate-wise standard deviation (ddof = 1),
``sign`` = sign(μ).

γ is found, as in the authors' code, by a search on γ alone, every candidate checked against
the constraint: the feasible γ ≥ 0 form an interval [0, γ*] (each constraint is a convex
quadratic in γ and γ = 0 satisfies it, since the mean is no farther from any x_i than the
farthest x_j is), so the code's halving search converges to γ*. The code starts at γ = 10
and can only reach γ < 20; here the start is doubled until it fails first, then halved down
to the tolerance, so γ* is found whatever its size. The squared distances are expanded once
(‖a_i − γp‖² = ‖a_i‖² − 2γ⟨a_i, p⟩ + γ²‖p‖², a_i = μ − x_i, in float64), so each candidate
costs O(n), not O(n·d).

Threat model: omniscient (all the round's honest updates, the paper's "full knowledge"
setting); on a real federation the colluders run the same search on their own benign updates
("partial knowledge" / "unknown benign gradients" in the paper).

Source: Shejwalkar & Houmansadr, "Manipulating the Byzantine: Optimizing Model Poisoning
Attacks and Defenses for Federated Learning" (NDSS 2021): the AGR-agnostic attacks.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from fedcal.aggregate.multikrum import pairwise_sq_distances
from fedcal.attacks._honest import check_honest, expanded_sq_distances, repeat_row

DIRECTIONS = ("unit", "std", "sign")
_MAX_STEPS = 4096  # a guard only: doubling reaches float64's range in ~1030 steps


def perturbation(honest: torch.Tensor, direction: str = "unit") -> torch.Tensor:
    """The (d,) direction p of m = μ − γ·p (see the module docstring; a zero μ gives p = 0 for
    ``unit``)."""
    if direction == "unit":
        mean = honest.mean(dim=0)
        norm = torch.linalg.vector_norm(mean.double())
        return mean if norm == 0 else (mean.double() / norm).to(honest.dtype)
    if direction == "std":
        if honest.shape[0] < 2:
            raise ValueError("direction 'std' needs at least 2 honest updates (a standard deviation)")
        return torch.std(honest, dim=0, correction=1)
    if direction == "sign":
        return torch.sign(honest.mean(dim=0))
    raise ValueError(f"unknown direction {direction!r}; choose one of {', '.join(DIRECTIONS)}")


def largest_gamma(feasible: Callable[[float], bool], gamma_init: float = 10.0, tol: float = 1e-5) -> float:
    """The largest γ ≥ 0 with ``feasible(γ)``, to within ``tol``, for a feasible set [0, γ*]:
    double γ from ``gamma_init`` until it fails, then halve the bracket [last success, first
    failure] until it is at most ``tol`` wide; returns its feasible end (γ ≤ γ* < γ + tol).
    Returns 0 when ``gamma_init`` already fails and γ* < tol."""
    if not (gamma_init > 0 and tol > 0):
        raise ValueError(f"gamma_init and tol must be > 0, got {gamma_init} and {tol}")
    lo, hi = 0.0, float(gamma_init)
    for _ in range(_MAX_STEPS):
        if not feasible(hi):
            break
        lo, hi = hi, 2.0 * hi
    else:
        raise ValueError("the perturbation search found no bound (is the direction zero?)")
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if feasible(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _check_direction_and_tol(direction: str, tol: float) -> float:
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; choose one of {', '.join(DIRECTIONS)}")
    tol = float(tol)
    if not (math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a finite number > 0, got {tol}")
    return tol


def min_max_gamma(honest: torch.Tensor, direction: str = "unit", tol: float = 1e-5) -> float:
    """Min-Max's γ: the largest γ with max_i ‖μ − γp − x_i‖² ≤ max_{i,j} ‖x_i − x_j‖² (to ``tol``;
    0 when p = 0)."""
    honest, _ = check_honest(honest, 0, attack="Min-Max")
    tol = _check_direction_and_tol(direction, tol)
    mean, p = honest.mean(dim=0), perturbation(honest, direction)
    sq, dot, pp = expanded_sq_distances(honest, mean, p)
    if pp == 0:
        return 0.0
    bound = float(pairwise_sq_distances(honest).max())
    return largest_gamma(lambda g: float((sq - 2 * g * dot + g * g * pp).max()) <= bound, tol=tol)


def min_sum_gamma(honest: torch.Tensor, direction: str = "unit", bound: str = "max", tol: float = 1e-5) -> float:
    """Min-Sum's γ: the largest γ with Σ_i ‖μ − γp − x_i‖² ≤ max_i Σ_j ‖x_i − x_j‖² (``bound="max"``,
    the paper) or ≤ min_i Σ_j ‖x_i − x_j‖² (``bound="min"``, the authors' code), to ``tol``;
    0 when p = 0."""
    honest, _ = check_honest(honest, 0, attack="Min-Sum")
    tol = _check_direction_and_tol(direction, tol)
    if bound not in ("max", "min"):
        raise ValueError(f"Min-Sum's bound must be 'max' (the paper) or 'min' (the authors' code), got {bound!r}")
    mean, p = honest.mean(dim=0), perturbation(honest, direction)
    sq, dot, pp = expanded_sq_distances(honest, mean, p)
    if pp == 0:
        return 0.0
    sums = pairwise_sq_distances(honest).sum(dim=1)
    limit = float(sums.max() if bound == "max" else sums.min())
    n = honest.shape[0]
    # Σ_i ‖a_i − γp‖² = Σ‖a_i‖² − 2γ Σ⟨a_i, p⟩ + n γ² ‖p‖²
    s_sq, s_dot = float(sq.sum()), float(dot.sum())
    return largest_gamma(lambda g: s_sq - 2 * g * s_dot + n * g * g * pp <= limit, tol=tol)


def min_max(honest: torch.Tensor, f: int, direction: str = "unit", tol: float = 1e-5) -> torch.Tensor:
    """The (f, d) Min-Max updates: f copies of μ − γ·p with γ = :func:`min_max_gamma`.

    >>> min_max(torch.tensor([[0.0], [0.0], [3.0]]), f=2).round(decimals=4)
    tensor([[0.],
            [0.]])
    """
    honest, f = check_honest(honest, f, attack="Min-Max")
    gamma = min_max_gamma(honest, direction, tol)
    return repeat_row(honest.mean(dim=0) - gamma * perturbation(honest, direction), f)


def min_sum(honest: torch.Tensor, f: int, direction: str = "unit", bound: str = "max",
            tol: float = 1e-5) -> torch.Tensor:
    """The (f, d) Min-Sum updates: f copies of μ − γ·p with γ = :func:`min_sum_gamma`.

    >>> min_sum(torch.tensor([[0.0], [0.0], [3.0]]), f=1).round(decimals=4)
    tensor([[-1.]])
    >>> min_sum(torch.tensor([[0.0], [0.0], [3.0]]), f=1, bound="min").round(decimals=4)
    tensor([[0.]])
    """
    honest, f = check_honest(honest, f, attack="Min-Sum")
    gamma = min_sum_gamma(honest, direction, bound, tol)
    return repeat_row(honest.mean(dim=0) - gamma * perturbation(honest, direction), f)
