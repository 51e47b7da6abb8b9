"""MultiKrum over updates: average the m updates with the lowest Krum scores."""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO
from typing import Any

import torch
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import MetricsAggrFn, UpdateAggregationStrategy


class MultiKrum(UpdateAggregationStrategy):
    """MultiKrum (Blanchard et al., NeurIPS 2017), over updates.

    When fewer replies arrive than planned, :func:`fedcal.aggregate.multikrum_params` shrinks
    f (to n − 3 at most) and clamps m to [1, n] for that round.

    Parameters
    ----------
    f : int (default 0)
        The number of Byzantine replies assumed per round; needs n ≥ f + 3 replies.
    m : int, optional
        How many lowest-scored updates are averaged (data-size weighted).
        ``None`` → n − f (the usual MultiKrum); 1 is Krum.
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
        f: int = 0,
        m: int | None = None,
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
            raise ValueError(f"MultiKrum needs f >= 0, got {f}")
        if m is not None and m < 1:
            raise ValueError(f"MultiKrum needs m >= 1 (or None for n - f), got {m}")
        self.f, self.m = f, m

    def summary(self) -> None:
        """Log MultiKrum's settings, then the shared ones."""
        log(INFO, "\t├──> MultiKrum settings:")
        log(INFO, "\t│\t├── f (Byzantine replies assumed): %d", self.f)
        log(INFO, "\t│\t└── m (updates averaged): %s", "n - f" if self.m is None else self.m)
        super().summary()

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        n = updates.shape[0]
        f, m = agg.multikrum_params(n, self.f, self.m)
        selected = agg.multikrum_select(updates, f, m)
        mask = torch.zeros(n)
        mask[selected] = 1.0
        w = weights * mask
        log(INFO, "MultiKrum round %d selected nodes %s", server_round, [node_ids[i] for i in selected.tolist()])
        return agg.fedavg(updates[selected], weights[selected]), w
