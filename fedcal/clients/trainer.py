"""The one ClientApp that trains for every client, benign or malicious.

What a client does is chosen from the run config and the node's partition id (its
client id): the config travels with each train message (so the server is the single
authority over it), falling back to the node's own Flower run config.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedcal.attacks import behaviour_for, client_round
from fedcal.config import RunConfig, key_of
from fedcal.data import client_data
from fedcal.models import build_model
from fedcal.train import resolve_device

app = ClientApp()

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


@app.train()
def train(msg: Message, context: Context) -> Message:
    cfg, server_round = message_config(msg, context)
    check_partitions(cfg, context)
    cid = client_id(context)
    data = client_data(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.partition, cfg.dirichlet_alpha,
                       cfg.seed, cid)
    device = resolve_device(cfg.device)
    model = _model(cfg.model, tuple(data.x.shape[1:]), data.num_classes)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    behaviour = behaviour_for(cfg, cid)
    stats = client_round(model, data.x, data.y, data.num_classes, behaviour, cfg, server_round, cid, device)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    content = RecordDict({
        "arrays": ArrayRecord(state),
        "metrics": MetricRecord({
            "train-loss": stats.loss,
            "num-examples": stats.num_examples,
            "partition-id": cid,
            "malicious": int(behaviour.malicious),
        }),
    })
    return Message(content=content, reply_to=msg)


@app.query("identity")
def identity(msg: Message, context: Context) -> Message:
    """Tell the server which client (partition) this node is."""
    record = MetricRecord({"partition-id": client_id(context)})
    return Message(content=RecordDict({"identity": record}), reply_to=msg)
