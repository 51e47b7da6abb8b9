"""How the server and the nodes find each other: the identity handshake, the run config a
message carries, the node's client id, and a model built once per node process.

Every task uses these; none of them knows a task.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import time
from logging import WARNING
from typing import Any

import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from fedcal.config import RunConfig, field_names, key_of
from fedcal.models import build_model
from fedcal.tasks.grids import pulled_ids

IDENTITY = "query.identity"  # message type of the handshake
#: key of the whole config's digest in a message's ``config`` record (:func:`config_record`)
CONFIG_DIGEST = "config-digest"
#: key of the ConfigRecord in a train reply that says which client answered (partition id, whether
#: it was an attacker, …): kept out of the MetricRecord, whose numbers Flower averages as metrics
CLIENT_RECORD = "client"


# ---------------------------------------------------------------------------------- server side
#: how long the server waits for its ``num-clients`` nodes to connect before it gives up, in seconds
NODE_WAIT_S = 120.0


def discover_clients(grid: Grid, expected: int, timeout: float | None = None) -> dict[int, int]:
    """Ask every connected node for its partition id; returns {node id: partition id}.

    Waits until ``expected`` nodes are connected, at most ``timeout`` seconds (default
    :data:`NODE_WAIT_S`), then fails the run (:class:`fedcal.results.RunFailed`, one line naming
    both numbers and both fixes: a federation of another size than ``num-clients`` never fills). A node's claim is input like any reply: a node
    that answers with an error, no ``identity`` record, or a partition id that is not an integer
    in [0, ``expected``) (inf, NaN, 4.9, -1, a string, …) is left out with a warning naming it and
    the reason; nodes that claim one id are all left out (none of them can be trusted with that
    partition's data). A run goes on with the nodes left (hand the strategies
    :func:`identified_grid`, so the others are never sampled); :class:`fedcal.results.RunFailed`
    when no node is left.
    """
    timeout = NODE_WAIT_S if timeout is None else timeout
    t0, warned = time.monotonic(), False
    while len(nodes := list(grid.get_node_ids())) < expected:
        waited = time.monotonic() - t0
        if waited > timeout:
            from fedcal.results import RunFailed  # the run store (pandas) loads only when needed

            other = f"or set num-clients={len(nodes)}" if nodes else "(are they pointed at this SuperLink?)"
            raise RunFailed(f"waited {timeout:.0f} s for {expected} SuperNodes (run-config 'num-clients'), {len(nodes)} "
                            f"connected: start {expected} (`flwr run`: --federation-config \"num-supernodes={expected}\") "
                            f"{other}")
        if waited > 10 and not warned:
            warned = True
            log(WARNING, "waiting for %d nodes (%d connected). With `flwr run` on a local simulation, start "
                "as many virtual nodes as 'num-clients': --federation-config \"num-supernodes=%d\"; in a "
                "deployment, start %d SuperNodes with --node-config \"partition-id=k num-partitions=%d\"",
                expected, len(nodes), expected, expected, expected)
        time.sleep(0.5)
    messages = [Message(content=RecordDict(), message_type=IDENTITY, dst_node_id=n) for n in nodes]
    claims: dict[int, int] = {}
    seen: set[int] = set()
    for reply in grid.send_and_receive(messages, timeout=timeout):
        node = reply.metadata.src_node_id
        reason, pid = (f"error reply ({reply.error.reason})", None) if reply.has_error() \
            else claimed_partition(reply.content, expected)
        if node in seen:
            reason = "a second identity reply of this node"
        seen.add(node)
        if reason:
            log(WARNING, "identity: node %s is left out: %s", node, reason)
            claims.pop(node, None)
            continue
        claims[node] = pid
    by_id: dict[int, list[int]] = {}
    for node, pid in claims.items():
        by_id.setdefault(pid, []).append(node)
    mapping = {}
    for pid, nodes_of in sorted(by_id.items()):
        if len(nodes_of) == 1:
            mapping[nodes_of[0]] = pid
            continue
        for node in nodes_of:
            log(WARNING, "identity: node %s is left out: partition id %d is also claimed by node(s) %s", node, pid,
                ", ".join(str(n) for n in nodes_of if n != node))
    if not mapping:
        from fedcal.results import RunFailed  # the run store (pandas) loads only when needed

        raise RunFailed(f"no node reported a valid partition id ({len(nodes)} asked; reasons in the log): is "
                        "fedcal.app.client:app the ClientApp, and has each SuperNode its own 'partition-id'?")
    return mapping


def claimed_partition(content: RecordDict, expected: int) -> tuple[str | None, int | None]:
    """(why an identity reply's ``partition-id`` is unusable or None, the id): an integer — or an
    integral number, as a MetricRecord may carry it — in [0, ``expected``)."""
    rec = content.get("identity") if "identity" in content else None
    value = rec.get("partition-id") if isinstance(rec, (MetricRecord, ConfigRecord)) else None
    if value is None:
        return "no 'partition-id' in its 'identity' record", None
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) \
        and value == int(value) and 0 <= int(value) < expected
    if not ok:
        return f"invalid partition id {value!r} (must be an integer in [0, {expected}): num-clients)", None
    return None, int(value)


def identified_grid(grid: Grid, mapping: dict[int, int]) -> Grid:
    """``grid`` restricted to the nodes of ``mapping`` (:func:`discover_clients`): the others are
    never offered to a strategy's sampling, so a node left out at the handshake is never trained."""
    return _IdentifiedGrid(grid, set(mapping))


class WrappedGrid(Grid):
    """A Grid that hands every call to the ``grid`` it wraps, through Flower's public Grid API.
    fedcal's grid wrappers (the identified nodes, the Ray reply poll, the placement record, the
    model-poisoning step) subclass it and override only what they change."""

    def __init__(self, grid: Grid):
        self.grid = grid

    @property
    def run(self):
        return self.grid.run

    def set_run(self, run_id: int) -> None:
        self.grid.set_run(run_id)

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self):
        return self.grid.get_node_ids()

    def get_nodes(self):
        return self.grid.get_nodes()

    def push_messages(self, messages):
        return self.grid.push_messages(messages)

    def pull_messages(self, reply_to_message_ids=None, *, message_ids=None):
        # positionally: the first parameter is Flower 1.42's message_ids and 1.43's reply_to_message_ids
        return self.grid.pull_messages(pulled_ids(reply_to_message_ids, message_ids))

    def send_and_receive(self, messages, *, timeout=None):
        return self.grid.send_and_receive(messages, timeout=timeout)


class _IdentifiedGrid(WrappedGrid):
    """A Grid whose ``get_node_ids`` lists only the identified nodes; everything else is the
    wrapped grid's."""

    def __init__(self, grid: Grid, nodes: set[int]):
        super().__init__(grid)
        self.nodes = nodes

    def get_node_ids(self):
        return [n for n in self.grid.get_node_ids() if n in self.nodes]


def config_digest(cfg: RunConfig) -> str:
    """16 hex digits of the SHA-256 of every key and value of ``cfg`` (sorted): what a node checks
    the config it rebuilt against."""
    return hashlib.sha256(json.dumps(sorted(cfg.to_flower().items())).encode()).hexdigest()[:16]


def _defaults() -> dict[str, Any]:
    return _defaults_of(field_names())


@functools.lru_cache(maxsize=4)
def _defaults_of(names: tuple[str, ...]) -> dict[str, Any]:
    # keyed on the field set: a group registered later (a plug-in task's) brings its defaults
    return RunConfig().to_flower()


def config_record(cfg: RunConfig) -> ConfigRecord:
    """The run config as the ``config`` record a message carries to the nodes: the keys whose
    values differ from :class:`RunConfig`'s defaults, and :data:`CONFIG_DIGEST`, the digest of the
    whole config.

    Every node rebuilds the full config from its own defaults and these keys, and refuses it
    when the digest differs (its fedcal declares other defaults). So the server stays the one
    authority over every key, while a train message — sent to every sampled node every round,
    and logged by Flower when the strategy starts — carries a few keys instead of all ~200
    (``benchmarks/message_bytes.py`` measures both).
    """
    defaults = _defaults()
    changed = {k: v for k, v in cfg.to_flower().items() if v != defaults[k] or type(v) is not type(defaults[k])}
    return ConfigRecord({**changed, CONFIG_DIGEST: config_digest(cfg)})


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
    ``config`` record (the single authority: :func:`config_record`'s changed keys and digest, or
    every key); the node's own run config is the fallback only for a message that carries none
    (``run_simulation`` gives apps an empty run config, real SuperNodes the app's defaults).

    Raises ValueError when the config rebuilt from this node's defaults does not match the
    server's digest: the node would otherwise train with values the server never chose.
    """
    rec = msg.content.get("config") if "config" in msg.content else None
    raw: dict[str, Any] = dict(rec) if isinstance(rec, ConfigRecord) else {}
    server_round = int(raw.pop("server-round", 0))
    digest = raw.pop(CONFIG_DIGEST, None)
    known = {key_of(n) for n in field_names()}
    ours = {k: v for k, v in raw.items() if k in known}
    if not ours and digest is None:
        ours = {k: v for k, v in context.run_config.items() if k in known}
    cfg, own_digest = _parse(tuple(sorted(ours.items())))
    if digest is not None and digest != own_digest:
        raise ValueError(f"run config digest {own_digest} rebuilt on this node from the {len(ours)} key(s) the server "
                         f"sent differs from the server's {digest}: this node's fedcal has other defaults "
                         "(install the server's fedcal version)")
    return cfg, server_round


@functools.lru_cache(maxsize=16)
def _parse(items: tuple) -> tuple[RunConfig, str]:
    cfg = RunConfig.from_flower(dict(items))
    return cfg, config_digest(cfg)


def client_id(context: Context) -> int:
    """The node's client id: its ``partition-id`` node config."""
    if "partition-id" not in context.node_config:
        raise KeyError("node config lacks 'partition-id': start the SuperNode with "
                       "--node-config \"partition-id=<k> num-partitions=<K>\"")
    return int(context.node_config["partition-id"])


def client_record(partition_id: int, malicious: bool, **extra: Any) -> ConfigRecord:
    """Who answered a train message, for the reply's :data:`CLIENT_RECORD`: the partition id,
    whether the client attacked, and ``extra`` (e.g. the τ it trained at). Not in the reply's
    MetricRecord, whose numbers Flower's default aggregation averages and logs every round as
    if they were metrics (an "average partition id" of 2.6)."""
    return ConfigRecord({"partition-id": int(partition_id), "malicious": bool(malicious), **extra})


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
