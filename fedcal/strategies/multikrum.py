"""MultiKrum over updates: average the m updates with the lowest Krum scores."""

from __future__ import annotations

from logging import INFO
from typing import Unpack

import torch
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import StrategyOptions, UpdateAggregationStrategy


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
    **options : StrategyOptions
        The shared arguments (Flower's FedAvg ones, seeded sampling, buffers), see the base.
    """

    def __init__(self, *,
                 f: int = 0,
                 m: int | None = None,
                 **options: Unpack[StrategyOptions]) -> None:
        super().__init__(**options)
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
