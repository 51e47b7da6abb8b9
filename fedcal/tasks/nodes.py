"""How the server and the nodes find each other: the identity handshake, the run config a
message carries, the node's client id, and a model built once per node process.

Every task uses these; none of them knows a task.
"""

from __future__ import annotations

import functools
import time
from logging import WARNING
from typing import Any

import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from fedcal.config import RunConfig, key_of
from fedcal.models import build_model

IDENTITY = "query.identity"  # message type of the handshake
_CONFIG_KEYS = {key_of(f) for f in RunConfig.__dataclass_fields__}


# ---------------------------------------------------------------------------------- server side
def discover_clients(grid: Grid, expected: int, timeout: float = 600.0) -> dict[int, int]:
    """Ask every connected node for its partition id; returns {node id: partition id}.

    Waits until ``expected`` nodes are connected. Nodes that do not answer are logged
    and left out (they are then never sampled).
    """
    t0, warned = time.monotonic(), False
    while len(nodes := list(grid.get_node_ids())) < expected:
        waited = time.monotonic() - t0
        if waited > timeout:
            raise TimeoutError(f"only {len(nodes)} of {expected} nodes connected after {timeout:.0f}s; "
                               f"run-config 'num-clients' must equal the number of SuperNodes")
        if waited > 10 and not warned:
            warned = True
            log(WARNING, "waiting for %d nodes (%d connected). With `flwr run` on a local simulation, start "
                "as many virtual nodes as 'num-clients': --federation-config \"num-supernodes=%d\"; in a "
                "deployment, start %d SuperNodes with --node-config \"partition-id=k num-partitions=%d\"",
                expected, len(nodes), expected, expected, expected)
        time.sleep(0.5)
    messages = [Message(content=RecordDict(), message_type=IDENTITY, dst_node_id=n) for n in nodes]
    mapping: dict[int, int] = {}
    for reply in grid.send_and_receive(messages, timeout=timeout):
        node = reply.metadata.src_node_id
        if reply.has_error():
            log(WARNING, "node %s did not report its identity: %s", node, reply.error.reason)
            continue
        try:
            mapping[node] = int(reply.content["identity"]["partition-id"])
        except (KeyError, TypeError, ValueError) as exc:  # a malformed handshake: leave the node out
            log(WARNING, "node %s sent a malformed identity reply (%r); it is left out", node, exc)
    dupes = len(mapping) - len(set(mapping.values()))
    if dupes:
        raise ValueError(f"{dupes} nodes share a partition id; give each node its own 'partition-id'")
    return mapping


def config_record(cfg: RunConfig) -> ConfigRecord:
    """The run config as the ``config`` record a message carries to the nodes."""
    return ConfigRecord(cfg.to_flower())


REPLY_POLL_S = 0.01  # how often send_counted looks for replies


def send_counted(grid: Grid, messages: list[Message], name: str, unit: str,
                 timeout: float | None = None) -> list[Message]:
    """Flower's ``grid.send_and_receive`` (push, then pull until every reply is in or ``timeout`` has
    passed) with each reply counted as a step of the phase ``name`` (:func:`fedcal.progress.phase`),
    so a long wait for the nodes — every client training its own model — shows how many are done.
    The messages are pushed one at a time and the replies pulled in between: an in-process grid
    runs a node inside ``push_messages``, a SuperLink answers whenever the node is done."""
    from fedcal.progress import phase

    replies: list[Message] = []
    pending: set[str] = set()
    with phase(name, len(messages), unit) as bar:
        def pull() -> None:
            got = list(grid.pull_messages(pending))
            replies.extend(got)
            pending.difference_update(m.metadata.reply_to_message_id for m in got)
            bar.update(len(got))

        for msg in messages:
            pending.update(grid.push_messages([msg]))
            pull()
        end = None if timeout is None else time.monotonic() + timeout
        while pending and (end is None or time.monotonic() < end):
            time.sleep(REPLY_POLL_S)
            pull()
    return replies


# ---------------------------------------------------------------------------------- node side
def message_config(msg: Message, context: Context) -> tuple[RunConfig, int]:
    """(run config, server round) of a message: the server's config travels in the message's
    ``config`` record (the single authority); the node's own run config is the fallback."""
    rec = msg.content.get("config") if "config" in msg.content else None
    raw: dict[str, Any] = dict(rec) if isinstance(rec, ConfigRecord) else {}
    server_round = int(raw.pop("server-round", 0))
    ours = {k: v for k, v in raw.items() if k in _CONFIG_KEYS}
    if not ours:
        ours = {k: v for k, v in context.run_config.items() if k in _CONFIG_KEYS}
    return _parse(tuple(sorted(ours.items()))), server_round


@functools.lru_cache(maxsize=16)
def _parse(items: tuple) -> RunConfig:
    return RunConfig.from_flower(dict(items))


def client_id(context: Context) -> int:
    """The node's client id: its ``partition-id`` node config."""
    if "partition-id" not in context.node_config:
        raise KeyError("node config lacks 'partition-id': start the SuperNode with "
                       "--node-config \"partition-id=<k> num-partitions=<K>\"")
    return int(context.node_config["partition-id"])


def check_partitions(cfg: RunConfig, context: Context) -> None:
    """A node told a different federation size than the run's would train on the wrong shard."""
    k = context.node_config.get("num-partitions")
    if k is not None and int(k) != cfg.num_clients:
        raise ValueError(f"node config num-partitions={k} but run-config 'num-clients'={cfg.num_clients}: "
                         "they must be equal")


@functools.lru_cache(maxsize=4)
def shared_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
    """A model built once per node process; callers overwrite all its weights and buffers
    before use (building one per message would dominate small-model rounds)."""
    return build_model(name, input_shape, num_classes)


def identity(msg: Message, context: Context) -> Message:
    """Tell the server which client (partition) this node is."""
    record = MetricRecord({"partition-id": client_id(context)})
    return Message(content=RecordDict({"identity": record}), reply_to=msg)
