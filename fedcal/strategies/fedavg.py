"""FedAvg over validated updates, with optional seeded sampling."""

from __future__ import annotations

from logging import INFO

from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import UpdateAggregationStrategy


class FedAvg(UpdateAggregationStrategy):
    """Data-size weighted FedAvg: θ ← θ + Σ p_k Δ_k, p_k ∝ ``weighted_by_key``.

    Takes exactly the keyword arguments of :class:`UpdateAggregationStrategy` (Flower's
    FedAvg arguments plus ``sampling_seed``, ``node_sort_key`` and ``buffer_key``). Unlike
    Flower's FedAvg, a malformed or NaN reply is dropped instead of failing the round.

    Claimed sizes weigh as claimed (McMahan et al.'s and Flower's p_k): FedAvg is not robust, and
    one client can claim a large data set. Any finite claim > 0 is used without overflow (1e39:
    :func:`fedcal.aggregate.fit_weights`). With ``pre_aggregation`` steps the claims are capped at
    the round's median (:attr:`~UpdateAggregationStrategy.trusts_claims`).
    """

    size_weighting = "claimed"

    def summary(self) -> None:
        """Log the rule, then the shared settings."""
        log(INFO, "\t├──> FedAvg: data-size weighted mean of the updates")
        super().summary()

    @classmethod
    def unweighted(cls, server_round, **params):
        return agg.fedavg

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        return agg.fedavg(updates, weights), weights
