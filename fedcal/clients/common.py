"""Helpers shared by fedcal's ClientApp handlers: the run config carried by a message, the
node's client id, and a model built once per process."""

from __future__ import annotations

import functools
from typing import Any

import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict

from fedcal.config import RunConfig, key_of
from fedcal.models import build_model

_CONFIG_KEYS = {key_of(f) for f in RunConfig.__dataclass_fields__}


def message_config(msg: Message, context: Context) -> tuple[RunConfig, int]:
    """(run config, server round) of a train message."""
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


@functools.lru_cache(maxsize=4)
def _model(name: str, input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
    # Built once per process; every call overwrites all weights and buffers.
    return build_model(name, input_shape, num_classes)


def check_partitions(cfg: RunConfig, context: Context) -> None:
    """A node told a different federation size than the run's would train on the wrong shard."""
    k = context.node_config.get("num-partitions")
    if k is not None and int(k) != cfg.num_clients:
        raise ValueError(f"node config num-partitions={k} but run-config 'num-clients'={cfg.num_clients}: "
                         "they must be equal")


def identity(msg: Message, context: Context) -> Message:
    """Tell the server which client (partition) this node is."""
    record = MetricRecord({"partition-id": client_id(context)})
    return Message(content=RecordDict({"identity": record}), reply_to=msg)
