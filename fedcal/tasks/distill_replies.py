"""What RFD-LoRA's server accepts from a round's replies: anchor logits that fit the round, an
allowed claimed rank, one reply per node; and what the uploads weigh on the wire."""

from __future__ import annotations

import math
from logging import WARNING

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from flwr.supercore import log



def payload_bytes(record: ArrayRecord) -> int:
    """The bytes of an ArrayRecord's arrays as they travel (each Array's serialised data)."""
    return sum(len(record[k].data) for k in record)


def check_logit_reply(content: RecordDict, anchor_id: str, shape: tuple[int, int]) -> tuple[str | None, torch.Tensor | None]:
    """(why an rfd reply is invalid or None, its (A, C) logits): it must echo the anchor-set id the
    server sent and carry floating logits of shape (anchors, classes), finite in float32 (the dtype
    the server computes in; any finite float32 value is then clipped by the consensus)."""
    rec = content.get("anchor") if "anchor" in content else None
    got = rec.get("anchor-set") if isinstance(rec, ConfigRecord) else None
    if got != anchor_id:
        return f"logits for another anchor set (id {got!r}, expected {anchor_id!r})", None
    logits = content.get("logits") if "logits" in content else None
    if not isinstance(logits, ArrayRecord) or "z" not in logits:
        return "no logits (ArrayRecord 'logits' with array 'z')", None
    try:
        z = torch.from_numpy(np.array(logits["z"].numpy(), copy=True))
    except Exception as exc:  # noqa: BLE001 — undecodable bytes are a bad reply
        return f"logits cannot be decoded ({exc})", None
    if tuple(z.shape) != tuple(shape):
        return f"logits have shape {tuple(z.shape)}, expected {tuple(shape)} (anchors, classes)", None
    if not z.is_floating_point():
        return f"logits are not floating point ({z.dtype})", None
    if not bool(torch.isfinite(z).all()):
        return "logits contain NaN or Inf", None
    if not bool(torch.isfinite(z.float()).all()):  # the server computes in float32: 1e300 would be Inf there
        return f"logits leave float32's range (max |z| = {float(z.abs().max()):.3g}; sent as {z.dtype})", None
    return None, z.float()


def claimed_rank(content: RecordDict, allowed) -> tuple[str | None, int | None]:
    """(why an rfd reply's ``rank`` metric is unusable or None, the rank): it must be an integer
    (an integral number) of the ``allowed`` ranks (``dst-ranks``). It only labels the reply's
    upload bytes (``upload_bytes_r<rank>``), so a reply that lies about it is dropped rather than
    trusted with a metric name of its own."""
    rec = content.get("metrics") if "metrics" in content else None
    value = rec.get("rank") if isinstance(rec, (MetricRecord, ConfigRecord)) else None
    if value is None:
        return "no 'rank' in its record 'metrics'", None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value != int(value) or int(value) not in allowed:
        return f"invalid 'rank' = {value!r} (must be one of dst-ranks {sorted(set(allowed))})", None
    return None, int(value)


def valid_uploads(replies, rnd: int, node_to_client: dict[int, int], anchor_id: str, shape: tuple[int, int],
                   ranks, rank_of: dict[int, int]) -> tuple[list, list[int], list[tuple[int, str]], dict[int, int]]:
    """RFD-LoRA's round: (uploads, their clients, rejected (node, reason), upload bytes by node) of
    the replies in client order. A node's first reply counts unless it is an error, its anchor
    logits do not fit the round or its claimed rank is not allowed; ``rank_of`` learns each valid
    claim. Every rejection is logged naming the node."""
    uploads, senders, seen, rejected, bytes_by_node = [], [], set(), [], {}
    for msg in sorted(replies, key=lambda m: node_to_client.get(m.metadata.src_node_id, 1 << 62)):
        node = msg.metadata.src_node_id
        if node in seen:
            reason = "a second reply of this node in the same round (only the first counts)"
        elif msg.has_error():
            reason = f"error reply ({msg.error.reason})"
        else:
            reason, z = check_logit_reply(msg.content, anchor_id, shape)
            if reason is None:
                reason, rank = claimed_rank(msg.content, ranks)
                rank_of[node] = rank if reason is None else rank_of.get(node)
        seen.add(node)
        if reason:
            rejected.append((node, reason))
            log(WARNING, "round %d: dropped reply of node %s (partition %s): %s", rnd, node,
                node_to_client.get(node, "unknown"), reason)
            continue
        uploads.append(z)
        senders.append(node_to_client.get(node, -1))
        bytes_by_node[node] = payload_bytes(msg.content["logits"])
    return uploads, senders, rejected, bytes_by_node


def upload_bytes(bytes_by_node: dict[int, int], rank_of: dict[int, int]) -> dict[str, float]:
    """The round's mean upload bytes, overall and per rank (none without uploads)."""
    if not bytes_by_node:
        return {}
    out = {"upload_bytes": float(np.mean(list(bytes_by_node.values())))}
    for r in sorted({rank_of.get(n) for n in bytes_by_node} - {None}):
        out[f"upload_bytes_r{r}"] = float(np.mean([b for n, b in bytes_by_node.items() if rank_of.get(n) == r]))
    return out
