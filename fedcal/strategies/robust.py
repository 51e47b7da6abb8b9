"""Byzantine-robust strategies: FLTrust, FoolsGold, MultiKrum, trimmed mean, median,
geometric median, median-of-means. Each is Flower's FedAvg with one method overridden
(through :class:`UpdateAggregationStrategy`); the math lives in :mod:`fedcal.aggregate`."""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO
from typing import Any

import torch
from flwr.app import ArrayRecord
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import UpdateAggregationStrategy, _tensor


def _equal(n: int) -> torch.Tensor:
    return torch.ones(n)


class FLTrust(UpdateAggregationStrategy):
    """FLTrust (Cao et al., NDSS 2021): trust = ReLU(cos(Δ_k, g_0)) against the server's own
    update g_0 on a small clean root set; updates rescaled to ‖g_0‖.

    Parameters
    ----------
    root_train_fn : callable
        ``root_train_fn(arrays: ArrayRecord, server_round: int) -> ArrayRecord`` trains the
        current global model on the server's root data and returns the trained arrays.
    **kwargs
        Every :class:`flwr.serverapp.strategy.FedAvg` argument (and ``sampling_seed``, …).
    """

    def __init__(self, root_train_fn: Callable[[ArrayRecord, int], ArrayRecord], *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if not callable(root_train_fn):
            raise TypeError("FLTrust needs root_train_fn(arrays, server_round) -> ArrayRecord")
        self.root_train_fn = root_train_fn
        self.last_trust: dict[int, float] = {}

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        sent = self._sent[server_round]
        trained = self.root_train_fn(sent, server_round)
        keys = self.trainable_keys(sent)
        g0 = self._flat_update(trained, {k: _tensor(sent[k]) for k in keys}, keys)
        delta, trust = agg.fltrust(updates, g0)
        self.last_trust = {n: float(t) for n, t in zip(node_ids, trust)}
        log(INFO, "FLTrust round %d trust scores: %s", server_round,
            {n: round(t, 3) for n, t in self.last_trust.items()})
        return delta, trust


class FoolsGold(UpdateAggregationStrategy):
    """FoolsGold (Fung et al., RAID 2020): down-weights clients whose *historical* updates
    are too similar (sybils). History is kept per node id across rounds.

    Parameters
    ----------
    kappa : float (default 1.0)
        Confidence parameter of the logit step.
    **kwargs
        Every :class:`flwr.serverapp.strategy.FedAvg` argument (and ``sampling_seed``, …).
    """

    def __init__(self, *args: Any, kappa: float = 1.0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rule = agg.FoolsGold(kappa=kappa)

    @property
    def history(self) -> dict:
        """Per-node summed updates H_k (node id → tensor)."""
        return self.rule.history

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        delta, w = self.rule(node_ids, updates)
        log(INFO, "FoolsGold round %d weights: %s", server_round,
            {n: round(float(x), 3) for n, x in zip(node_ids, w)})
        return delta, w


class MultiKrum(UpdateAggregationStrategy):
    """MultiKrum (Blanchard et al., NeurIPS 2017), over updates.

    Parameters
    ----------
    num_malicious_nodes : int (default 0)
        f, the number of Byzantine replies assumed; needs n ≥ f + 3 replies.
    num_nodes_to_select : int, optional
        m, how many lowest-scored updates are averaged (data-size weighted).
        ``None`` → n − f (the usual MultiKrum); 1 is Krum.
    **kwargs
        Every :class:`flwr.serverapp.strategy.FedAvg` argument (and ``sampling_seed``, …).
    """

    def __init__(self, *args: Any, num_malicious_nodes: int = 0, num_nodes_to_select: int | None = None,
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        if num_malicious_nodes < 0:
            raise ValueError("num_malicious_nodes must be >= 0")
        self.num_malicious_nodes = num_malicious_nodes
        self.num_nodes_to_select = num_nodes_to_select

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        n = updates.shape[0]
        f = min(self.num_malicious_nodes, max(0, n - 3))  # fewer replies than planned: shrink f
        m = self.num_nodes_to_select if self.num_nodes_to_select is not None else n - f
        m = max(1, min(m, n))
        selected = agg.multikrum_select(updates, f, m)
        mask = torch.zeros(n)
        mask[selected] = 1.0
        w = weights * mask
        log(INFO, "MultiKrum round %d selected nodes %s", server_round, [node_ids[i] for i in selected.tolist()])
        return agg.fedavg(updates[selected], weights[selected]), w


class TrimmedMean(UpdateAggregationStrategy):
    """Coordinate-wise trimmed mean: per coordinate drop the ``trim`` largest and smallest."""

    def __init__(self, *args: Any, trim: int = 1, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.trim = trim

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        f = min(self.trim, (updates.shape[0] - 1) // 2)  # fewer replies than planned: shrink f
        return agg.trimmed_mean(updates, f), _equal(updates.shape[0])


class Median(UpdateAggregationStrategy):
    """Coordinate-wise median of the updates."""

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        return agg.coordinate_median(updates), _equal(updates.shape[0])


class GeometricMedian(UpdateAggregationStrategy):
    """Geometric median of the updates (smoothed Weiszfeld, data-size weighted)."""

    def __init__(self, *args: Any, max_iter: int = 100, tol: float = 1e-6, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.max_iter, self.tol = max_iter, tol

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        return agg.geometric_median(updates, weights, max_iter=self.max_iter, tol=self.tol), weights


class MedianOfMeans(UpdateAggregationStrategy):
    """Median of means: random groups (seeded per round), group means, coordinate median."""

    def __init__(self, *args: Any, num_groups: int = 3, seed: int = 0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.num_groups, self.seed = num_groups, seed

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        g = torch.Generator().manual_seed(self.seed * 100003 + server_round)
        groups = max(1, min(self.num_groups, updates.shape[0]))
        return agg.median_of_means(updates, groups, generator=g), _equal(updates.shape[0])
