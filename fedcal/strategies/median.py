"""Coordinate-wise median of the updates."""

from __future__ import annotations

from logging import INFO

import torch
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import UpdateAggregationStrategy


class Median(UpdateAggregationStrategy):
    """Coordinate-wise median of the updates (the mean of the two middle values for even n;
    unweighted: data sizes do not enter).

    Takes exactly the keyword arguments of :class:`UpdateAggregationStrategy` (Flower's
    FedAvg arguments plus ``sampling_seed``, ``node_sort_key`` and ``buffer_key``).
    Claimed sizes are ignored (Yin et al.'s rule, and Flower's FedMedian, are unweighted).
    """

    size_weighting = "ignored"

    def summary(self) -> None:
        """Log the rule, then the shared settings."""
        log(INFO, "\t├──> Median: coordinate-wise median of the updates (unweighted)")
        super().summary()

    @classmethod
    def unweighted(cls, server_round, **params):
        return agg.coordinate_median

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        return agg.coordinate_median(updates), torch.ones(updates.shape[0])

    def aggregate_buffers(self, server_round, node_ids, values, weights):
        """The coordinate-wise median of the accepted replies' buffers (robust to a minority)."""
        return agg.buffer_median(values)


#: Flower's name for the rule (``flwr.serverapp.strategy.FedMedian``, no arguments of its own): the
#: same class. Flower takes the median of full models, fedcal of the updates (reply − sent): the
#: same up to float rounding (``tests/test_flower_dropin.py``).
FedMedian = Median
