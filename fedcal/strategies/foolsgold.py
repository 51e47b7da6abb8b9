"""FoolsGold: down-weights nodes whose historical updates look alike (sybils)."""

from __future__ import annotations

from logging import INFO, WARNING
from typing import Unpack

import torch
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import UpdateAggregationStrategy
from fedcal.strategies.options import StrategyOptions


class FoolsGold(UpdateAggregationStrategy):
    """FoolsGold (Fung et al., RAID 2020): down-weights clients whose *historical* updates
    are too similar (sybils). History is kept per node id across rounds
    (:class:`fedcal.aggregate.FoolsGoldHistory`). Claimed data sizes are ignored: the
    similarity weights are the only ones.

    Parameters
    ----------
    kappa : float (default 1.0)
        Confidence parameter of the logit step (> 0).
    norm_bound : float or None (default 100.0)
        Bounded influence: an update whose norm exceeds ``norm_bound`` × the round's median
        update norm enters the aggregate scaled down to that norm (FoolsGold alone weighs by
        similarity only, so a lone huge update would keep weight ≈ 1). None disables it.
        Ordinary updates are far inside the bound and are aggregated unchanged.
    **options : StrategyOptions
        The shared arguments (Flower's FedAvg ones, seeded sampling, buffers), see the base.
    """

    size_weighting = "ignored"  # similarity weights only, as Fung et al. define them (no data sizes)

    def __init__(self, *,
                 kappa: float = 1.0,
                 norm_bound: float | None = 100.0,
                 **options: Unpack[StrategyOptions]) -> None:
        super().__init__(**options)
        self.rule = agg.FoolsGoldHistory(kappa=kappa, norm_bound=norm_bound)

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
        log(INFO, "\t│\t├── kappa: %s", self.kappa)
        log(INFO, "\t│\t└── norm bound: %s", "none" if self.rule.norm_bound is None
            else f"{self.rule.norm_bound:g} × the median update norm")
        super().summary()

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        delta, w = self.rule(node_ids, updates)
        clip = self.rule.last_clip  # the factors the rule applied: computed once, logged here
        if clip is not None:
            for i in torch.nonzero(clip < 1).flatten().tolist():
                log(WARNING, "round %d: FoolsGold scales the update of %s down by %.3g (norm above %g × the "
                    "median)", server_round, self.who(node_ids[i]), float(clip[i]), self.rule.norm_bound)
        log(INFO, "FoolsGold round %d weights (node/partition): %s", server_round,
            self.by_node(dict(zip(node_ids, w.tolist()))))
        return delta, w

    def state_dict(self):
        """The per-client histories H_k (keyed by partition id: a resumed run's nodes have new ids)."""
        return {"history": self.keyed_by_label(self.rule.history)}

    def load_state_dict(self, state, node_of):
        self.rule.history = self.keyed_by_node(dict(state["history"]), node_of)

    def aggregate_buffers(self, server_round, node_ids, values, weights):
        """The coordinate-wise median of the accepted replies' buffers (robust to a minority)."""
        return agg.buffer_median(values)
