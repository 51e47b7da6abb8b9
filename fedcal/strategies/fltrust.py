"""FLTrust: trust scores against the server's own update on a clean root set."""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO
from typing import Any

from flwr.app import ArrayRecord
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import MetricsAggrFn, UpdateAggregationStrategy, _tensor


class FLTrust(UpdateAggregationStrategy):
    """FLTrust (Cao et al., NDSS 2021): trust = ReLU(cos(Δ_k, g_0)) against the server's own
    update g_0 on a small clean root set; updates rescaled to ‖g_0‖.

    Parameters
    ----------
    root_train_fn : callable (required)
        ``root_train_fn(arrays: ArrayRecord, server_round: int) -> ArrayRecord`` trains the
        current global model on the server's root data and returns the trained arrays.
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
        root_train_fn: Callable[[ArrayRecord, int], ArrayRecord],
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
        if not callable(root_train_fn):
            raise TypeError("FLTrust needs root_train_fn(arrays, server_round) -> ArrayRecord")
        self.root_train_fn = root_train_fn
        #: trust score of each node in the last round
        self.last_trust: dict[int, float] = {}

    def summary(self) -> None:
        """Log FLTrust's settings, then the shared ones."""
        log(INFO, "\t├──> FLTrust settings:")
        log(INFO, "\t│\t└── Root training: %s", getattr(self.root_train_fn, "__qualname__", repr(self.root_train_fn)))
        super().summary()

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        sent = self._sent[server_round]
        trained = self.root_train_fn(sent, server_round)
        keys = self.trainable_keys(sent)
        g0 = self._flat_update(trained, {k: _tensor(sent[k]) for k in keys}, keys)
        delta, trust = agg.fltrust(updates, g0)
        self.last_trust = {n: float(t) for n, t in zip(node_ids, trust)}
        log(INFO, "FLTrust round %d trust scores: %s", server_round,
            {n: round(t, 3) for n, t in self.last_trust.items()})
        return delta, trust
