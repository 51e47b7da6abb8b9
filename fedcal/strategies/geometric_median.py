"""Geometric median of the updates (smoothed Weiszfeld, weighted by median-capped data sizes)."""

from __future__ import annotations

from logging import INFO
from typing import Unpack

from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import UpdateAggregationStrategy
from fedcal.strategies.options import StrategyOptions


class GeometricMedian(UpdateAggregationStrategy):
    """Geometric median of the updates (RFA, Pillutla et al.): smoothed Weiszfeld,
    data-size weighted, each claimed size capped at the round's median claim.

    RFA weighs client k by its data size α_k; its breakdown point (a weighted minority cannot move
    the median far) holds for the *weights*, so one client claiming 1e30 examples would own the
    median. Capping the claims at their median (:func:`fedcal.aggregate.cap_at_median`) keeps RFA's
    weighting for every client at or below the median and gives a liar a median client's weight.

    Parameters
    ----------
    max_iter : int (default 100)
        Most Weiszfeld iterations.
    tol : float (default 1e-6)
        Stop when an iteration moves no coordinate of the estimate by tol or more.
    **options : StrategyOptions
        The shared arguments (Flower's FedAvg ones, seeded sampling, buffers), see the base.
    """

    size_weighting = "capped"

    def __init__(self, *,
                 max_iter: int = 100,
                 tol: float = 1e-6,
                 **options: Unpack[StrategyOptions]) -> None:
        super().__init__(**options)
        self.max_iter, self.tol = max_iter, tol

    def summary(self) -> None:
        """Log the geometric median's settings, then the shared ones."""
        log(INFO, "\t├──> GeometricMedian settings:")
        log(INFO, "\t│\t├── max_iter: %d", self.max_iter)
        log(INFO, "\t│\t└── tol: %g", self.tol)
        super().summary()

    @classmethod
    def unweighted(cls, server_round, **params):
        return agg.geometric_median

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        return agg.geometric_median(updates, weights, max_iter=self.max_iter, tol=self.tol), weights

    def aggregate_buffers(self, server_round, node_ids, values, weights):
        """The coordinate-wise median of the accepted replies' buffers (robust to a minority)."""
        return agg.buffer_median(values)
