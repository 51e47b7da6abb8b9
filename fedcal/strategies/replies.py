"""What every fedcal strategy does with one round's replies before its rule: count them (the first
reply of each node, no error replies), read their weight, tell model buffers from trained weights,
and account for what was accepted and why the rest was dropped (:class:`RoundReplies`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from logging import INFO
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from fedcal.aggregate import buffer_problem


_BUFFER_MARKERS = ("running_mean", "running_var", "num_batches_tracked")


def is_buffer_key(name: str) -> bool:
    """Default test for non-trained state (BatchNorm statistics and counters)."""
    return any(m in name for m in _BUFFER_MARKERS)


@dataclass
class RoundReplies:
    """One round's reply accounting (:attr:`UpdateAggregationStrategy.replies`).

    ``received`` counts every reply, error replies and duplicates included; ``accepted`` lists
    the nodes whose reply passed validation (in aggregation order); ``rejections`` lists
    ``(node id, reason)`` for every dropped reply, so ``received == len(accepted) +
    len(rejections)``; ``aggregated`` is whether the round produced a new global model.
    """

    received: int = 0
    accepted: list[int] = field(default_factory=list)
    rejections: list[tuple[int, str]] = field(default_factory=list)
    aggregated: bool = False


def reply_weight(content: RecordDict, key: str) -> tuple[str | None, float]:
    """(None, weight) of a reply — the number under ``key`` in its MetricRecord, finite and > 0 —
    or (the reason it is unusable, 0.0)."""
    weight = None
    for mrec in content.metric_records.values():
        if key in mrec:
            weight = mrec[key]
            break
    if weight is None:
        return f"no '{key}' in its MetricRecord", 0.0
    if isinstance(weight, (list, bool)) or not np.isfinite(weight) or weight <= 0:
        return f"invalid '{key}' = {weight!r} (must be finite and > 0)", 0.0
    return None, float(weight)


def counted_replies(replies: Iterable[Message], reject: Callable[[int, str], None]) -> Iterable[Message]:
    """The replies a round counts, in arrival order: the first reply of each node, unless it is an
    error. Every other reply goes to ``reject(node, reason)`` (a second reply of one node; an
    error reply with its reason). Shared by every fedcal strategy's reply validation."""
    seen: set[int] = set()
    for msg in replies:
        node = msg.metadata.src_node_id
        if node in seen:
            reject(node, "a second reply of this node in the same round (only the first counts)")
            continue
        seen.add(node)
        if msg.has_error():
            reject(node, f"error reply ({msg.error.reason})")
            continue
        yield msg


def wait_for_nodes(grid: Grid, minimum: int) -> list[int]:
    """The connected node ids, once at least ``minimum`` are connected (polls once a second)."""
    while len(all_nodes := list(grid.get_node_ids())) < minimum:
        log(INFO, "Waiting for nodes to connect: %d connected (minimum required: %d).", len(all_nodes), minimum)
        time.sleep(1)
    return all_nodes


def tensor_of(array: Any) -> torch.Tensor:
    """A Flower Array as a torch tensor that owns its memory (a copy)."""
    return torch.from_numpy(np.array(array.numpy(), copy=True))


def check_reply(content: RecordDict, sent: ArrayRecord, arrayrecord_key: str, weighted_by_key: str,
                trainable: Callable[[str], bool]) -> tuple[str | None, float]:
    """(reason the reply ``content`` is invalid or None, its weight): its arrays under
    ``arrayrecord_key`` exactly those ``sent`` (names, shapes, dtypes), decodable, the trained ones
    (``trainable(name)``) finite and the buffers valid (:func:`fedcal.aggregate.buffer_problem`);
    its weight read under ``weighted_by_key`` (:func:`reply_weight`)."""
    rec = content.get(arrayrecord_key) if arrayrecord_key in content else None
    if not isinstance(rec, ArrayRecord):
        return f"no ArrayRecord under key '{arrayrecord_key}'", 0.0
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
        if not trainable(k):
            problem = buffer_problem(k, arr)
            if problem:
                return problem, 0.0
        elif np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
            return f"array '{k}' contains NaN or Inf", 0.0
    return reply_weight(content, weighted_by_key)
