"""ClientApp: honest clients train; sybils send one shared poisoned update; one sends NaN."""

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from quickstart_robust.task import NUM_CLASSES, Net, load_data, make_data, train

app = ClientApp()


@app.query("identity")
def identity(msg: Message, context: Context) -> Message:
    """Tell the server which partition this node holds (its logs name clients by it)."""
    record = MetricRecord({"partition-id": int(context.node_config["partition-id"])})
    return Message(content=RecordDict({"identity": record}), reply_to=msg)


@app.train()
def train_fn(msg: Message, context: Context) -> Message:
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    pid = int(context.node_config["partition-id"])
    cfg = msg.content["config"]  # the server sends lr, local-steps, … with every round
    rnd = int(cfg["server-round"])
    if pid < int(cfg["num-sybils"]):
        # Colluding sybils: identical data with flipped labels, identical seed → identical,
        # boosted updates.
        x, y = make_data(200, seed=42)
        start = {k: v.clone() for k, v in model.state_dict().items()}
        train(model, x, (y + 1) % NUM_CLASSES, int(cfg["local-steps"]), float(cfg["lr"]), seed=rnd)
        state = {k: start[k] + 3.0 * (v - start[k]) for k, v in model.state_dict().items()}
    else:
        x, y = load_data(pid)
        train(model, x, y, int(cfg["local-steps"]), float(cfg["lr"]), seed=rnd * 100 + pid)
        state = model.state_dict()
        if pid == int(cfg["nan-partition"]):
            state = {k: torch.full_like(v, float("nan")) for k, v in state.items()}
    content = RecordDict({"arrays": ArrayRecord(state), "metrics": MetricRecord({"num-examples": len(y)})})
    return Message(content=content, reply_to=msg)
