"""Client side of robust federated inference (SPEC §7): each client trains its own classifier
on its own partition (``train.local``), then answers ``query.probits`` messages with its
probabilities. ``app`` is a ClientApp with only these handlers; fedcal's main ClientApp
(:mod:`fedcal.clients.trainer`) registers them too."""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedcal.clients.common import _model as cached_model
from fedcal.clients.common import check_partitions, client_id, identity, message_config
from fedcal.data import load_dataset
from fedcal.inference.federated import client_indices, train_local_classifier
from fedcal.models import build_model
from fedcal.train import resolve_device

app = ClientApp()
app.query("identity")(identity)  # the same identity handshake as the trainer's
MODEL_KEY = "local-model"


@app.train("local")
def train_local(msg: Message, context: Context) -> Message:
    """Train this client's classifier from scratch on its own Dirichlet partition."""
    cfg, _ = message_config(msg, context)
    check_partitions(cfg, context)
    cid = client_id(context)
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    idx = client_indices(ds.y_train.numpy(), cfg.num_clients, cfg.dirichlet_alpha, cfg.inf_server_frac,
                         cfg.seed)[cid]
    seed = cfg.seed * 1000 + cid  # each client its own initialisation and batches
    model = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=seed)
    loss = train_local_classifier(model, ds.x_train[idx], ds.y_train[idx], cfg.inf_local_epochs, cfg.lr,
                                  cfg.batch_size, seed=seed, device=resolve_device(cfg.device))
    context.state[MODEL_KEY] = ArrayRecord({k: v.detach().cpu() for k, v in model.state_dict().items()})
    return Message(content=RecordDict({"metrics": MetricRecord({"train-loss": loss, "num-examples": len(idx)})}),
                   reply_to=msg)


@app.query("probits")
def probits(msg: Message, context: Context) -> Message:
    """Answer a batch of queries with this client's probability vectors."""
    cfg, _ = message_config(msg, context)
    if MODEL_KEY not in context.state:
        raise RuntimeError("no local model: the node has not run train.local")
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    model = cached_model(cfg.model, ds.input_shape, ds.num_classes)  # built once per process
    model.load_state_dict(context.state[MODEL_KEY].to_torch_state_dict())
    x = torch.from_numpy(msg.content["queries"]["x"].numpy().copy())
    with torch.no_grad():
        p = model.eval()(x).softmax(dim=1)
    return Message(content=RecordDict({"probits": ArrayRecord({"p": p})}), reply_to=msg)
