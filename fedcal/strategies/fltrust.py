"""FLTrust: trust scores against the server's own update on a clean root set."""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO, WARNING
from typing import Unpack

import torch
from flwr.app import ArrayRecord
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import UpdateAggregationStrategy
from fedcal.strategies.options import StrategyOptions
from fedcal.strategies.replies import tensor_of

#: FLTrust warns when ‖g_0‖ is below this share of the clients' median update norm
ROOT_NORM_RATIO = 0.1
#: ... or when no trust score exceeds this
TRUST_FLOOR = 1e-6


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
        self._warned_root = False

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
        self._warn_if_root_cannot_lead(server_round, updates, g0, trust)
        return delta, trust

    def _warn_if_root_cannot_lead(self, server_round: int, updates, g0, trust) -> None:
        """Warn (once per strategy) when the round's aggregate cannot move the model: every trust
        score is ~0 (no update within 90° of the root update g_0, or g_0 = 0), or ‖g_0‖ is below
        :data:`ROOT_NORM_RATIO` × the clients' median update norm — every trusted update is rescaled
        to ‖g_0‖, so a root step much shorter than the clients' (fewer steps, a smaller lr) keeps
        the model near where it started, at chance, without any client being distrusted."""
        if self._warned_root:
            return
        g0_norm = float(torch.linalg.vector_norm(g0.double()))
        median = float(torch.linalg.vector_norm(updates.double(), dim=1).median())
        if float(trust.max()) <= TRUST_FLOOR:
            why = (f"every trust score is ~0 (max {float(trust.max()):.2g}): no client update points within 90° of "
                   f"the root update (norm {g0_norm:.3g})")
        elif median > 0 and g0_norm < ROOT_NORM_RATIO * median:
            why = (f"the root update's norm {g0_norm:.3g} is {g0_norm / median:.2g} x the clients' median update norm "
                   f"{median:.3g}, and every trusted update is rescaled to it")
        else:
            return
        self._warned_root = True
        log(WARNING, "FLTrust round %d: %s, so the global model barely moves: give root_train_fn about the clients' "
            "local steps and learning rate (said once per run)", server_round, why)

    def aggregate_buffers(self, server_round, node_ids, values, weights):
        """The coordinate-wise median of the accepted replies' buffers (robust to a minority)."""
        return agg.buffer_median(values)
