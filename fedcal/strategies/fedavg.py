"""FedAvg over validated updates, with optional seeded sampling."""

from __future__ import annotations


from fedcal import aggregate as agg
from fedcal.strategies.base import UpdateAggregationStrategy


class FedAvg(UpdateAggregationStrategy):
    """Data-size weighted FedAvg: θ ← θ + Σ p_k Δ_k, p_k ∝ ``weighted_by_key``.

    Same arguments as :class:`flwr.serverapp.strategy.FedAvg`, plus ``sampling_seed``,
    ``node_sort_key`` and ``buffer_key`` (see :class:`UpdateAggregationStrategy`). Unlike
    Flower's FedAvg, a malformed or NaN reply is dropped instead of failing the round.
    """

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        return agg.fedavg(updates, weights), weights
