"""Median of means of the updates: random groups (seeded per round), coordinate median of group means."""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO
from typing import Any

import torch
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import MetricsAggrFn, UpdateAggregationStrategy


class MedianOfMeans(UpdateAggregationStrategy):
    """Median of means: the round's updates are split at random into groups, each group is
    averaged, and the coordinate-wise median of the group means is applied (unweighted).

    Parameters
    ----------
    num_groups : int (default 3)
        Number of groups (at most the number of replies; fewer replies → fewer groups).
    seed : int (default 0)
        Round r's grouping is drawn from ``torch.Generator().manual_seed(seed * 100003 + r)``.
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
        num_groups: int = 3,
        seed: int = 0,
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
        if num_groups < 1:
            raise ValueError(f"MedianOfMeans needs num_groups >= 1, got {num_groups}")
        self.num_groups, self.seed = num_groups, seed

    def summary(self) -> None:
        """Log median-of-means' settings, then the shared ones."""
        log(INFO, "\t├──> MedianOfMeans settings:")
        log(INFO, "\t│\t├── num_groups: %d", self.num_groups)
        log(INFO, "\t│\t└── seed: %d", self.seed)
        super().summary()

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        g = torch.Generator().manual_seed(self.seed * 100003 + server_round)
        groups = max(1, min(self.num_groups, updates.shape[0]))
        return agg.median_of_means(updates, groups, generator=g), torch.ones(updates.shape[0])
