"""Krum over updates: the one update with the lowest Krum score."""

from __future__ import annotations

from logging import INFO
from typing import Unpack

from flwr.supercore import log

from fedcal.strategies.options import StrategyOptions
from fedcal.strategies.multikrum import MultiKrum


class Krum(MultiKrum):
    """Krum (Blanchard et al., NeurIPS 2017): :class:`MultiKrum` selecting one update.

    Takes the arguments of ``flwr.serverapp.strategy.Krum`` with its names, meanings and
    defaults; everything else (fewer replies, buffers, bad replies) is :class:`MultiKrum`'s.

    Parameters
    ----------
    num_malicious_nodes : int (default 0)
        f, the number of Byzantine replies assumed per round; the update whose n − f − 2
        nearest other updates are closest (sum of squared distances) is applied.
    **options : StrategyOptions
        The shared arguments (Flower's FedAvg ones, seeded sampling, buffers), see the base.
    """

    def __init__(self, *,
                 num_malicious_nodes: int = 0,
                 **options: Unpack[StrategyOptions]) -> None:
        super().__init__(num_malicious_nodes=num_malicious_nodes, num_nodes_to_select=1, **options)

    def summary(self) -> None:
        """Log Krum's settings, then the shared ones (MultiKrum's with one node selected)."""
        log(INFO, "\t├──> Krum: MultiKrum selecting 1 update")
        super().summary()
