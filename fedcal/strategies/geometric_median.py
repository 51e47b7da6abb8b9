"""Geometric median of the updates (smoothed Weiszfeld, data-size weighted)."""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO
from typing import Any

from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import MetricsAggrFn, UpdateAggregationStrategy


class GeometricMedian(UpdateAggregationStrategy):
    """Geometric median of the updates (RFA, Pillutla et al.): smoothed Weiszfeld,
    data-size weighted.

    Parameters
    ----------
    max_iter : int (default 100)
        Most Weiszfeld iterations.
    tol : float (default 1e-6)
        Stop when an iteration moves the estimate by at most tol · its norm.
    fraction_train, fraction_evaluate, min_train_nodes, min_evaluate_nodes, min_available_nodes
        As for :class:`~fedcal.strategies.base.UpdateAggregationStrategy` (Flower's FedAvg
        sampling arguments, same defaults).
    weighted_by_key, arrayrecord_key, configrecord_key, train_metrics_aggr_fn, evaluate_metrics_aggr_fn
        As for :class:`~fedcal.strategies.base.UpdateAggregationStrategy` (Flower's FedAvg
        record keys and metric aggregation, same defaults).
    sampling_seed, node_sort_key, buffer_key
        As for :class:`~fedcal.strategies.base.UpdateAggregationStrategy` (seeded sampling,
        reply order, untrained arrays).
    """

    def __init__(
        self,
        *,
        max_iter: int = 100,
        tol: float = 1e-6,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 1.0,
        min_train_nodes: int = 2,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int = 2,
        weighted_by_key: str = "num-examples",
        arrayrecord_key: str = "arrays",
        configrecord_key: str = "config",
        train_metrics_aggr_fn: MetricsAggrFn | None = None,
        evaluate_metrics_aggr_fn: MetricsAggrFn | None = None,
        sampling_seed: int | None = None,
        node_sort_key: Callable[[int], Any] | None = None,
        buffer_key: Callable[[str], bool] | None = None,
    ) -> None:
        super().__init__(
            fraction_train=fraction_train,
            fraction_evaluate=fraction_evaluate,
            min_train_nodes=min_train_nodes,
            min_evaluate_nodes=min_evaluate_nodes,
            min_available_nodes=min_available_nodes,
            weighted_by_key=weighted_by_key,
            arrayrecord_key=arrayrecord_key,
            configrecord_key=configrecord_key,
            train_metrics_aggr_fn=train_metrics_aggr_fn,
            evaluate_metrics_aggr_fn=evaluate_metrics_aggr_fn,
            sampling_seed=sampling_seed,
            node_sort_key=node_sort_key,
            buffer_key=buffer_key,
        )
        self.max_iter, self.tol = max_iter, tol

    def summary(self) -> None:
        """Log the geometric median's settings, then the shared ones."""
        log(INFO, "\t├──> GeometricMedian settings:")
        log(INFO, "\t│\t├── max_iter: %d", self.max_iter)
        log(INFO, "\t│\t└── tol: %g", self.tol)
        super().summary()

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        return agg.geometric_median(updates, weights, max_iter=self.max_iter, tol=self.tol), weights
