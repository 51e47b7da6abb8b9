"""FLTrust: trust scores against the server's own update on a clean root set."""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO
from typing import Unpack

from flwr.app import ArrayRecord
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import UpdateAggregationStrategy
from fedcal.strategies.options import StrategyOptions
from fedcal.strategies.replies import tensor_of


class FLTrust(UpdateAggregationStrategy):
    """FLTrust (Cao et al., NDSS 2021): trust = ReLU(cos(Δ_k, g_0)) against the server's own
    update g_0 on a small clean root set; updates rescaled to ‖g_0‖. Claimed data sizes are
    ignored: the trust scores are the only weights.

    Parameters
    ----------
    root_train_fn : callable (required)
        ``root_train_fn(arrays: ArrayRecord, server_round: int) -> ArrayRecord`` trains the
        current global model on the server's root data and returns the trained arrays.
    **options : StrategyOptions
        The shared arguments (Flower's FedAvg ones, seeded sampling, buffers), see the base.
    """

    size_weighting = "ignored"  # trust scores only, as Cao et al. define it (no data sizes)

    def __init__(self, *,
                 root_train_fn: Callable[[ArrayRecord, int], ArrayRecord],
                 **options: Unpack[StrategyOptions]) -> None:
        super().__init__(**options)
        if not callable(root_train_fn):
            raise TypeError("FLTrust needs root_train_fn(arrays, server_round) -> ArrayRecord")
        self.root_train_fn = root_train_fn
        #: trust score of each node in the last round
        self.last_trust: dict[int, float] = {}

    def summary(self) -> None:
        """Log FLTrust's settings, then the shared ones."""
        log(INFO, "\t├──> FLTrust settings:")
        log(INFO, "\t│\t└── Root training: %s", getattr(self.root_train_fn, "__qualname__", repr(self.root_train_fn)))
        super().summary()

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        sent = self._sent[server_round]
        trained = self.root_train_fn(sent, server_round)
        keys = self.trainable_keys(sent)
        g0 = self._flat_update(trained, {k: tensor_of(sent[k]) for k in keys}, keys)
        delta, trust = agg.fltrust(updates, g0)
        self.last_trust = {n: float(t) for n, t in zip(node_ids, trust)}
        log(INFO, "FLTrust round %d trust scores (node/partition): %s", server_round, self.by_node(self.last_trust))
        return delta, trust

    def aggregate_buffers(self, server_round, node_ids, values, weights):
        """The coordinate-wise median of the accepted replies' buffers (robust to a minority)."""
        return agg.buffer_median(values)
