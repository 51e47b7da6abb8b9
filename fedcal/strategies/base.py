"""Shared machinery of fedcal's strategies: seeded sampling, reply validation, updates.

:class:`UpdateAggregationStrategy` subclasses Flower's ``FedAvg`` and overrides only
``configure_train`` (to remember the arrays each round was sent, and for optional seeded
sampling) and ``aggregate_train`` (to validate replies and aggregate *updates*
Δ_k = reply − sent with a rule from :mod:`fedcal.aggregate`). A subclass implements one
method, :meth:`aggregate_updates`, on an (n, d) tensor.

Bad replies — NaN/Inf values, a missing, extra, wrongly shaped or wrongly typed array, a
missing or invalid weight — are dropped with a warning naming the node and the reason; the
round continues with the rest, and when nothing valid remains the global model is kept.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from logging import INFO, WARNING
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg as _FlowerFedAvg
from flwr.serverapp.strategy.strategy_utils import sample_nodes
from flwr.supercore import log

_BUFFER_MARKERS = ("running_mean", "running_var", "num_batches_tracked")


def is_buffer_key(name: str) -> bool:
    """Default test for non-trained state (BatchNorm statistics and counters)."""
    return any(m in name for m in _BUFFER_MARKERS)


class UpdateAggregationStrategy(_FlowerFedAvg):
    """Base of fedcal's strategies (accepts every :class:`flwr.serverapp.strategy.FedAvg` argument).

    Parameters
    ----------
    sampling_seed : int, optional
        When set, the nodes trained in round r are ``random.Random(f"{seed}/{r}")``'s sample
        of the connected nodes sorted by ``node_sort_key`` (Flower's own sampling uses the
        global ``random`` over per-run random node ids, so it cannot be reproduced).
    node_sort_key : callable, optional
        Maps a node id to a sortable key (default: the node id).
    buffer_key : callable, optional
        ``buffer_key(name) -> bool`` marks arrays that are not trained (averaged with the
        data-size weights, kept out of similarity computations). Default: BatchNorm
        statistics and counters; non-floating arrays are always buffers.
    """

    def __init__(self, *args: Any, sampling_seed: int | None = None,
                 node_sort_key: Callable[[int], Any] | None = None,
                 buffer_key: Callable[[str], bool] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sampling_seed = sampling_seed
        self.node_sort_key = node_sort_key or (lambda node_id: node_id)
        self.buffer_key = buffer_key or is_buffer_key
        self._sent: dict[int, ArrayRecord] = {}
        #: effective aggregation weight of each node in the last round (for logging/analysis)
        self.last_weights: dict[int, float] = {}
        #: nodes whose replies were dropped in the last round, with the reason
        self.last_rejected: dict[int, str] = {}

    # ------------------------------------------------------------------ configure
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._sent = {server_round: arrays}  # updates are replies minus exactly these arrays
        if self.sampling_seed is None or self.fraction_train == 0.0:
            return super().configure_train(server_round, arrays, config, grid)
        num_nodes = int(len(list(grid.get_node_ids())) * self.fraction_train)
        sample_size = max(num_nodes, self.min_train_nodes)
        _, all_nodes = sample_nodes(grid, self.min_available_nodes, sample_size)  # waits for nodes
        ordered = sorted(all_nodes, key=self.node_sort_key)
        node_ids = random.Random(f"{self.sampling_seed}/{server_round}").sample(ordered, sample_size)
        log(INFO, "configure_train: sampled %s nodes (out of %s), seeded", len(node_ids), len(all_nodes))
        config["server-round"] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._construct_messages(record, node_ids, MessageType.TRAIN)

    # ------------------------------------------------------------------ aggregate
    def aggregate_updates(self, server_round: int, node_ids: list[int], updates: torch.Tensor,
                          weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Aggregate an (n, d) float32 update matrix; return (Δ (d,), per-node weights (n,)).

        ``weights`` are the replies' ``weighted_by_key`` values (data sizes). The returned
        per-node weights (any non-negative scale; the base normalises them) only describe the
        aggregation in :attr:`last_weights`, they are not reused.
        """
        raise NotImplementedError

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        valid, _ = self._check_and_log_replies(replies, is_train=True, validate=False)
        sent = self._sent.get(server_round)
        if sent is None:
            raise RuntimeError(f"aggregate_train for round {server_round} without configure_train")
        self.last_rejected = {}
        good: list[tuple[int, RecordDict, float]] = []
        for msg in valid:
            node = msg.metadata.src_node_id
            reason, weight = self._check_reply(msg.content, sent)
            if reason:
                self.last_rejected[node] = reason
                log(WARNING, "round %d: dropped reply of node %s: %s", server_round, node, reason)
            else:
                good.append((node, msg.content, weight))
        # Replies arrive in completion order, which differs between engines and runs; a fixed
        # order makes the floating-point sums (and so whole runs) reproducible.
        good.sort(key=lambda g: (self.node_sort_key(g[0]), g[0]))
        if not good:
            log(WARNING, "round %d: no valid reply; the global model is kept", server_round)
            self.last_weights = {}
            return None, None

        nodes = [g[0] for g in good]
        weights = torch.tensor([g[2] for g in good], dtype=torch.float64)
        keys = list(sent.keys())
        train_keys = self.trainable_keys(sent)
        base = {k: _tensor(sent[k]) for k in keys}
        if train_keys:
            updates = torch.stack([self._flat_update(g[1][self.arrayrecord_key], base, train_keys) for g in good])
            delta, node_w = self.aggregate_updates(server_round, nodes, updates, weights.float())
            if not torch.isfinite(delta).all():  # a rule must never produce a NaN model
                log(WARNING, "round %d: aggregate is not finite; the global model is kept", server_round)
                return None, None
            total = node_w.sum()
            node_w = node_w / total if total > 0 else node_w
            self.last_weights = {n: float(w) for n, w in zip(nodes, node_w)}
        new: dict[str, torch.Tensor] = {}
        offset = 0
        p = weights / weights.sum()
        for k in keys:
            if k in train_keys:
                size = base[k].numel()
                new[k] = (base[k].double() + delta[offset:offset + size].double().reshape(base[k].shape)
                          ).to(base[k].dtype)
                offset += size
            else:  # buffers: plain data-size weighted mean of the reported values
                stacked = torch.stack([_tensor(g[1][self.arrayrecord_key][k]).double() for g in good])
                mean = torch.tensordot(p, stacked, dims=1)
                new[k] = (mean.round() if not base[k].is_floating_point() else mean).to(base[k].dtype)
        metrics = None
        try:
            metrics = self.train_metrics_aggr_fn([g[1] for g in good], self.weighted_by_key)
        except Exception as exc:  # noqa: BLE001 — metrics must not cost the round its model
            log(WARNING, "round %d: train metrics not aggregated: %s", server_round, exc)
        return ArrayRecord(new), metrics

    # ------------------------------------------------------------------ helpers
    def trainable_keys(self, sent: ArrayRecord) -> list[str]:
        """Names of the trained (floating, non-buffer) arrays, in record order."""
        return [k for k in sent.keys() if self._trainable(k, sent)]

    @staticmethod
    def _flat_update(arrays: ArrayRecord, base: dict[str, torch.Tensor], keys: list[str]) -> torch.Tensor:
        """Δ = arrays − base over ``keys`` (base: the sent arrays as tensors), one float32 vector."""
        return torch.cat([(_tensor(arrays[k]) - base[k]).reshape(-1).float() for k in keys])

    def _trainable(self, key: str, sent: ArrayRecord) -> bool:
        return np.issubdtype(np.dtype(sent[key].dtype), np.floating) and not self.buffer_key(key)

    def _check_reply(self, content: RecordDict, sent: ArrayRecord) -> tuple[str | None, float]:
        """(reason it is invalid or None, its weight)."""
        rec = content.get(self.arrayrecord_key) if self.arrayrecord_key in content else None
        if not isinstance(rec, ArrayRecord):
            return f"no ArrayRecord under key '{self.arrayrecord_key}'", 0.0
        missing = [k for k in sent.keys() if k not in rec]
        if missing:
            return f"missing array(s) {missing[:3]}", 0.0
        extra = [k for k in rec.keys() if k not in sent]
        if extra:
            return f"unexpected array(s) {extra[:3]}", 0.0
        for k in sent.keys():
            a, s = rec[k], sent[k]
            if tuple(a.shape) != tuple(s.shape):
                return f"array '{k}' has shape {tuple(a.shape)}, expected {tuple(s.shape)}", 0.0
            if a.dtype != s.dtype:
                return f"array '{k}' has dtype {a.dtype}, expected {s.dtype}", 0.0
            try:
                arr = a.numpy()
            except Exception as exc:  # noqa: BLE001 — undecodable bytes are a bad reply
                return f"array '{k}' cannot be decoded ({exc})", 0.0
            if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
                return f"array '{k}' contains NaN or Inf", 0.0
        weight = None
        for mrec in content.metric_records.values():
            if self.weighted_by_key in mrec:
                weight = mrec[self.weighted_by_key]
                break
        if weight is None:
            return f"no '{self.weighted_by_key}' in its MetricRecord", 0.0
        if isinstance(weight, list) or not np.isfinite(weight) or weight <= 0:
            return f"invalid '{self.weighted_by_key}' = {weight!r}", 0.0
        return None, float(weight)


def _tensor(array: Any) -> torch.Tensor:
    return torch.from_numpy(np.array(array.numpy(), copy=True))
