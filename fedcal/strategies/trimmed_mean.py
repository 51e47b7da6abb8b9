"""Coordinate-wise trimmed mean of the updates."""

from __future__ import annotations

from logging import INFO, WARNING
from typing import Unpack

import torch
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import StrategyOptions, UpdateAggregationStrategy


class TrimmedMean(UpdateAggregationStrategy):
    """Coordinate-wise trimmed mean (Yin et al., ICML 2018): per coordinate drop the f
    largest and f smallest values and average the rest (unweighted).

    When fewer replies arrive than planned, :func:`fedcal.aggregate.trim_for` shrinks f to
    (n − 1) // 2 at most for that round.

    Parameters
    ----------
    f : int (default 1)
        Values dropped per side and coordinate.
    **options : StrategyOptions
        The shared arguments (Flower's FedAvg ones, seeded sampling, buffers), see the base.
    """

    def __init__(self, *,
                 f: int = 1,
                 **options: Unpack[StrategyOptions]) -> None:
        super().__init__(**options)
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
        if f < self.f:
            log(WARNING, "round %d: TrimmedMean: %d replies cannot lose %d per side; f = %d this round",
                server_round, updates.shape[0], self.f, f)
        return agg.trimmed_mean(updates, f), torch.ones(updates.shape[0])

    def aggregate_buffers(self, server_round, node_ids, values, weights):
        """The same coordinate-wise trimmed mean (same f) of the accepted replies' buffers."""
        return agg.trimmed_mean(values, agg.trim_for(values.shape[0], self.f))
