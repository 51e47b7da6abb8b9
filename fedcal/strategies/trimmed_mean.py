"""Coordinate-wise trimmed mean of the updates."""

from __future__ import annotations

from logging import INFO, WARNING
from typing import Unpack

import torch
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import UpdateAggregationStrategy
from fedcal.strategies.options import StrategyOptions


class TrimmedMean(UpdateAggregationStrategy):
    """Coordinate-wise trimmed mean (Yin et al., ICML 2018): per coordinate drop the k
    largest and k smallest values and average the rest (unweighted).

    k is set one of two ways:

    - ``beta`` (Flower's ``FedTrimmedAvg`` argument, its meaning and default): the fraction cut
      from each tail, k = ⌊beta · n⌋ of the n replies of the round. ``TrimmedMean(beta=0.1)``
      (or :data:`FedTrimmedAvg`) aggregates what ``flwr.serverapp.strategy.FedTrimmedAvg(beta=0.1)``
      does on clean replies — Flower trims full models, fedcal the updates (reply − sent), which
      is the same up to float rounding (``tests/test_flower_dropin.py``).
    - ``f`` (fedcal's, no Flower equivalent): a fixed count, the assumed Byzantine replies per
      round (run-config ``trim-f``). When fewer replies arrive than planned,
      :func:`fedcal.aggregate.trim_for` shrinks it to (n − 1) // 2 at most for that round.

    Parameters
    ----------
    beta : float, optional
        Fraction cut from each tail, in [0, 0.5). Default 0.2 (Flower's) when ``f`` is not given.
    f : int, optional
        Values dropped per side and coordinate (instead of ``beta``; give one of the two).
    **options : StrategyOptions
        The shared arguments (Flower's FedAvg ones, seeded sampling, buffers), see the base.
    """

    size_weighting = "ignored"  # Yin et al.'s rule, and Flower's FedTrimmedAvg, are unweighted

    def __init__(self, *,
                 beta: float | None = None,
                 f: int | None = None,
                 **options: Unpack[StrategyOptions]) -> None:
        super().__init__(**options)
        if beta is not None and f is not None:
            raise ValueError(f"TrimmedMean takes beta (a fraction) or f (a count), not both; got beta={beta}, f={f}")
        if f is not None and f < 0:
            raise ValueError(f"TrimmedMean needs f >= 0, got {f}")
        if f is None and beta is None:
            beta = 0.2
        if beta is not None and not 0.0 <= beta < 0.5:
            raise ValueError(f"TrimmedMean needs beta in [0, 0.5), got {beta}")
        self.beta, self.f = beta, f

    def summary(self) -> None:
        """Log the trimmed mean's settings, then the shared ones."""
        log(INFO, "\t├──> TrimmedMean settings:")
        if self.f is None:
            log(INFO, "\t│\t└── beta (fraction cut per side): %s", self.beta)
        else:
            log(INFO, "\t│\t└── f (values dropped per side): %d", self.f)
        super().summary()

    def trim_count(self, n: int) -> int:
        """Values dropped per side this round when n replies are aggregated: ⌊beta · n⌋ (as
        Flower computes it), or ``f`` shrunk by :func:`fedcal.aggregate.trim_for`."""
        if self.f is None:
            return int(self.beta * n)
        return agg.trim_for(n, self.f)

    @classmethod
    def unweighted(cls, server_round, *, f: int = 1, **params):
        return lambda x: agg.trimmed_mean(x, agg.trim_for(x.shape[0], f))

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        k = self.trim_count(updates.shape[0])
        if self.f is not None and k < self.f:
            log(WARNING, "round %d: TrimmedMean: %d replies cannot lose %d per side; f = %d this round",
                server_round, updates.shape[0], self.f, k)
        return agg.trimmed_mean(updates, k), torch.ones(updates.shape[0])

    def aggregate_buffers(self, server_round, node_ids, values, weights):
        """The same coordinate-wise trimmed mean (same count) of the accepted replies' buffers."""
        return agg.trimmed_mean(values, self.trim_count(values.shape[0]))


#: Flower's name for the rule (``flwr.serverapp.strategy.FedTrimmedAvg``): the same class.
FedTrimmedAvg = TrimmedMean
