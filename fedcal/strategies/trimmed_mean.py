"""Coordinate-wise trimmed mean of the updates."""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO
from typing import Any

import torch
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import MetricsAggrFn, UpdateAggregationStrategy


class TrimmedMean(UpdateAggregationStrategy):
    """Coordinate-wise trimmed mean (Yin et al., ICML 2018): per coordinate drop the f
    largest and f smallest values and average the rest (unweighted).

    When fewer replies arrive than planned, :func:`fedcal.aggregate.trim_for` shrinks f to
    (n − 1) // 2 at most for that round.

    Parameters
    ----------
    f : int (default 1)
        Values dropped per side and coordinate.
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
        f: int = 1,
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
        if f < 0:
            raise ValueError(f"TrimmedMean needs f >= 0, got {f}")
        self.f = f

    def summary(self) -> None:
        """Log the trimmed mean's settings, then the shared ones."""
        log(INFO, "\t├──> TrimmedMean settings:")
        log(INFO, "\t│\t└── f (values dropped per side): %d", self.f)
        super().summary()

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        f = agg.trim_for(updates.shape[0], self.f)
        return agg.trimmed_mean(updates, f), torch.ones(updates.shape[0])
