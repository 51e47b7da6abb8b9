"""Median of means of the updates: random groups (seeded per round), coordinate median of group means."""

from __future__ import annotations

from logging import INFO, WARNING
from typing import Unpack

import torch
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import UpdateAggregationStrategy
from fedcal.strategies.options import StrategyOptions


class MedianOfMeans(UpdateAggregationStrategy):
    """Median of means: the round's updates are split at random into groups, each group is
    averaged, and the coordinate-wise median of the group means is applied (unweighted).

    Parameters
    ----------
    num_groups : int (default 3)
        Number of groups (at most the number of replies; fewer replies → fewer groups).
    seed : int (default 0)
        Round r's grouping is drawn from ``torch.Generator().manual_seed(seed * 100003 + r)``.
    **options : StrategyOptions
        The shared arguments (Flower's FedAvg ones, seeded sampling, buffers), see the base.
    """

    size_weighting = "ignored"  # equal-size groups of unweighted means, as the estimator is defined

    def __init__(self, *,
                 num_groups: int = 3,
                 seed: int = 0,
                 **options: Unpack[StrategyOptions]) -> None:
        super().__init__(**options)
        if num_groups < 1:
            raise ValueError(f"MedianOfMeans needs num_groups >= 1, got {num_groups}")
        self.num_groups, self.seed = num_groups, seed

    def summary(self) -> None:
        """Log median-of-means' settings, then the shared ones."""
        log(INFO, "\t├──> MedianOfMeans settings:")
        log(INFO, "\t│\t├── num_groups: %d", self.num_groups)
        log(INFO, "\t│\t└── seed: %d", self.seed)
        super().summary()

    @classmethod
    def unweighted(cls, server_round, *, num_groups: int = 3, seed: int = 0, **params):
        def rule(x: torch.Tensor) -> torch.Tensor:  # the groups as the strategy seeds them this round
            return agg.median_of_means(x, max(1, min(num_groups, x.shape[0])),
                                       generator=torch.Generator().manual_seed(seed * 100003 + server_round))
        return rule

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        g = torch.Generator().manual_seed(self.seed * 100003 + server_round)
        groups = max(1, min(self.num_groups, updates.shape[0]))
        if groups < self.num_groups:
            log(WARNING, "round %d: MedianOfMeans: %d replies for %d groups; %d groups this round",
                server_round, updates.shape[0], self.num_groups, groups)
        return agg.median_of_means(updates, groups, generator=g), torch.ones(updates.shape[0])

    def aggregate_buffers(self, server_round, node_ids, values, weights):
        """The coordinate-wise median of the accepted replies' buffers (robust to a minority)."""
        return agg.buffer_median(values)
