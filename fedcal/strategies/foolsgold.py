"""FoolsGold: down-weights nodes whose historical updates look alike (sybils)."""

from __future__ import annotations

from logging import INFO
from typing import Unpack

import torch
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import StrategyOptions, UpdateAggregationStrategy


class FoolsGold(UpdateAggregationStrategy):
    """FoolsGold (Fung et al., RAID 2020): down-weights clients whose *historical* updates
    are too similar (sybils). History is kept per node id across rounds
    (:class:`fedcal.aggregate.FoolsGoldHistory`).

    Parameters
    ----------
    kappa : float (default 1.0)
        Confidence parameter of the logit step (> 0).
    **options : StrategyOptions
        The shared arguments (Flower's FedAvg ones, seeded sampling, buffers), see the base.
    """

    def __init__(self, *,
                 kappa: float = 1.0,
                 **options: Unpack[StrategyOptions]) -> None:
        super().__init__(**options)
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
