"""FoolsGold: down-weights nodes whose historical updates look alike (sybils)."""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO
from typing import Any

import torch
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import MetricsAggrFn, UpdateAggregationStrategy


class FoolsGold(UpdateAggregationStrategy):
    """FoolsGold (Fung et al., RAID 2020): down-weights clients whose *historical* updates
    are too similar (sybils). History is kept per node id across rounds
    (:class:`fedcal.aggregate.FoolsGoldHistory`).

    Parameters
    ----------
    kappa : float (default 1.0)
        Confidence parameter of the logit step (> 0).
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
        kappa: float = 1.0,
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
        self.rule = agg.FoolsGoldHistory(kappa=kappa)

    @property
    def kappa(self) -> float:
        """The confidence parameter of the logit step."""
        return self.rule.kappa

    @property
    def history(self) -> dict[int, torch.Tensor]:
        """Per-node summed updates H_k (node id → tensor)."""
        return self.rule.history

    def summary(self) -> None:
        """Log FoolsGold's settings, then the shared ones."""
        log(INFO, "\t├──> FoolsGold settings:")
        log(INFO, "\t│\t└── kappa: %s", self.kappa)
        super().summary()

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        delta, w = self.rule(node_ids, updates)
        log(INFO, "FoolsGold round %d weights: %s", server_round,
            {n: round(float(x), 3) for n, x in zip(node_ids, w)})
        return delta, w
