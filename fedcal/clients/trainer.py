"""The one ClientApp that trains for every client, benign or malicious.

What a client does is chosen from the run config and the node's partition id (its
client id): the config travels with each train message (so the server is the single
authority over it), falling back to the node's own Flower run config.

The same ClientApp answers robust federated inference (``task = "inference"``): the
``train.local`` and ``query.probits`` handlers of :mod:`fedcal.clients.responder` are
registered on it, so one Flower App serves both tasks.
"""

from __future__ import annotations

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedcal.attacks import behaviour_for, client_round
from fedcal.clients import responder
from fedcal.clients.common import _model, check_partitions, client_id, identity, message_config
from fedcal.data import client_data
from fedcal.train import resolve_device

__all__ = ["app", "train", "identity", "message_config", "client_id", "check_partitions"]

app = ClientApp()
app.query("identity")(identity)
app.train("local")(responder.train_local)
app.query("probits")(responder.probits)


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
