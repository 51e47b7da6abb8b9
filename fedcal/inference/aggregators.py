"""Robust aggregators of client probit vectors (SPEC §7, robust federated inference).

Every aggregator maps ``probits`` of shape (B, n, C) -- B queries, n clients, C classes,
each row a probability vector -- to (B, C) probabilities (rows on the simplex).
Mean and TrimmedMean are differentiable w.r.t. the input; CoordinateMedian uses torch
sort (subgradients flow to the selected entries); GeometricMedian runs Weiszfeld
iterations in torch, so gradients flow through the unrolled iterations.

The math is :mod:`fedcal.aggregate`'s (the same functions the update aggregation uses):
:func:`~fedcal.aggregate.true_median`, :func:`~fedcal.aggregate.trimmed_mean_along` and the
batched :func:`~fedcal.aggregate.geometric_median`; this module adds the (B, n, C) checks and
the renormalisation onto the simplex.
"""
from __future__ import annotations

import torch
from torch import nn

from fedcal.aggregate import geometric_median, trimmed_mean_along, true_median

__all__ = [
    "straight_through",
    "Mean",
    "CoordinateMedian",
    "GeometricMedian",
    "TrimmedMean",
    "AGGREGATORS",
    "averaging_aggregator",
    "check_probits",
    "renormalise",
]


def check_probits(probits: torch.Tensor) -> torch.Tensor:
    """Validate a (B, n, C) probit tensor; raise ValueError on wrong rank, NaN or ±Inf (a probit is
    a probability: no aggregator gives an infinite one a meaning, and each would handle it its own
    way — a mean turns the row NaN, a median or a trimmed mean drops it depending on its place)."""
    if not isinstance(probits, torch.Tensor):
        probits = torch.as_tensor(probits)
    if probits.dim() != 3:
        raise ValueError(f"probits must be 3-D (B, n, C); got shape {tuple(probits.shape)}")
    if probits.shape[1] < 1 or probits.shape[2] < 1:
        raise ValueError(f"probits needs n >= 1 clients and C >= 1 classes; got {tuple(probits.shape)}")
    if not bool(torch.isfinite(probits).all()):
        raise ValueError("probits contain NaN or Inf")
    if not probits.is_floating_point():
        probits = probits.float()
    return probits


def renormalise(z: torch.Tensor) -> torch.Tensor:
    """Clamp at 0 and divide each row by its sum; rows with zero sum become uniform."""
    z = z.clamp_min(0.0)
    s = z.sum(dim=-1, keepdim=True)
    uniform = torch.full_like(z, 1.0 / z.shape[-1])
    safe = torch.where(s > 0, s, torch.ones_like(s))
    return torch.where(s > 0, z / safe, uniform)


def straight_through(forward: torch.Tensor, backward: torch.Tensor) -> torch.Tensor:
    """``forward``'s value with ``backward``'s gradient (only): forward.detach() + (backward −
    backward.detach()), whose second term is exactly 0 in value.

    BPDA (backward-pass differentiable approximation; Athalye, Carlini & Wagner, ICML 2018): the
    robust-inference authors' code attacks its trimmed means and medians through an identity
    backward (``BPDATrimmedMean`` / ``BPDAMedian`` in Models/static_aggs.py), i.e. with the mean's
    gradient, which every row receives; the exact subgradient of a sort gives a trimmed row none.
    """
    return forward.detach() + (backward - backward.detach())


class Mean(nn.Module):
    """Plain average of the client probits."""

    def forward(self, probits: torch.Tensor) -> torch.Tensor:
        probits = check_probits(probits)
        return renormalise(probits.mean(dim=1))


class CoordinateMedian(nn.Module):
    """Coordinate-wise median (mean of the two middle values for even n), renormalised.

    ``bpda=True`` (:meth:`as_bpda`): the same value, with the mean's gradient (:func:`straight_through`)."""

    def __init__(self, bpda: bool = False):
        super().__init__()
        self.bpda = bool(bpda)

    def forward(self, probits: torch.Tensor) -> torch.Tensor:
        probits = check_probits(probits)
        med = true_median(probits, dim=1)
        return renormalise(straight_through(med, probits.mean(dim=1)) if self.bpda else med)

    def as_bpda(self) -> "CoordinateMedian":
        return CoordinateMedian(bpda=True)


class GeometricMedian(nn.Module):
    """Smoothed Weiszfeld geometric median per query, batched over B
    (:func:`fedcal.aggregate.geometric_median` on the (B, n, C) probits).

    Minimises sum_i sqrt(||z - p_i||^2 + eps) approximately (eps smoothing avoids
    division by zero at data points). Starts from the coordinate-wise mean; stops when
    the largest update over the batch is below ``tol`` or after ``max_iter`` steps.
    The result lies in the convex hull of the inputs (hence on the simplex); it is
    renormalised to remove float drift.
    """

    def __init__(self, eps: float = 1e-8, max_iter: int = 100, tol: float = 1e-6):
        super().__init__()
        if eps <= 0 or max_iter < 1 or tol < 0:
            raise ValueError("GeometricMedian needs eps > 0, max_iter >= 1, tol >= 0")
        self.eps, self.max_iter, self.tol = eps, max_iter, tol

    def forward(self, probits: torch.Tensor) -> torch.Tensor:
        probits = check_probits(probits)
        z = geometric_median(probits, eps=self.eps, max_iter=self.max_iter, tol=self.tol)  # (B, C)
        return renormalise(z)


class TrimmedMean(nn.Module):
    """Coordinate-wise trimmed mean (CWTM): per class drop f largest and f smallest of the
    n client values, average the rest, then divide by the row sum (zero sum -> uniform).
    ``bpda=True`` (:meth:`as_bpda`): the same value, with the mean's gradient."""

    #: its constructor takes the number of adversaries per query (:func:`averaging_aggregator`)
    takes_f = True

    def __init__(self, f: int, bpda: bool = False):
        super().__init__()
        if int(f) != f or f < 0:
            raise ValueError(f"f must be a non-negative integer; got {f}")
        self.f, self.bpda = int(f), bool(bpda)

    def forward(self, probits: torch.Tensor) -> torch.Tensor:
        probits = check_probits(probits)
        tm = trimmed_mean_along(probits, self.f, dim=1)
        return renormalise(straight_through(tm, probits.mean(dim=1)) if self.bpda else tm)

    def as_bpda(self) -> "TrimmedMean":
        """The same aggregator with the mean's gradient (:func:`straight_through`): what a white-box
        attack differentiates in the authors' code."""
        return TrimmedMean(self.f, bpda=True)


AGGREGATORS = {
    "mean": Mean,
    "median": CoordinateMedian,
    "geometric_median": GeometricMedian,
    "trimmed_mean": TrimmedMean,
}


def averaging_aggregator(name: str, f: int) -> nn.Module:
    """:data:`AGGREGATORS`' ``name`` built for ``f`` adversaries per query: ``f`` goes to an aggregator
    whose constructor takes it (``takes_f``: the trimmed mean), the others take none."""
    cls = AGGREGATORS[name]
    return cls(f) if getattr(cls, "takes_f", False) else cls()
