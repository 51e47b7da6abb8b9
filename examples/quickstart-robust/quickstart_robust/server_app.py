"""ServerApp: Flower's usual structure; the strategy comes from fedcal.strategies."""

import json
from logging import INFO
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from fedcal.strategies import STRATEGIES, Bulyan, Krum, UpdateAggregationStrategy
from quickstart_robust.task import Net, make_data, test, train

app = ServerApp()
TRAIN_KEYS = ("lr", "local-steps", "num-sybils", "nan-partition")
#: every strategy this app runs: fedcal's registry (its run-config names) and Flower's names of the
#: rules both ship (fedcal's classes take Flower's arguments)
CHOICES = {**STRATEGIES, "krum": Krum, "bulyan": Bulyan}
#: where outputs go when output-dir is "" (and what a relative output-dir is resolved against): this
#: app's own folder, wherever Flower runs the ServerApp from (under `flwr run`, the SuperLink's
#: working directory is not this folder)
APP_DIR = Path(__file__).resolve().parents[1]


def root_set():
    """The server's small clean data set (FLTrust trains on it, CalGuard measures on it)."""
    return make_data(100, seed=7)


def root_train_fn_for(cfg):
    """FLTrust's server step: the benign training procedure on the root set."""
    x_root, y_root = root_set()

    def root_train_fn(arrays: ArrayRecord, server_round: int) -> ArrayRecord:
        net = Net()
        net.load_state_dict(arrays.to_torch_state_dict())
        train(net, x_root, y_root, int(cfg["local-steps"]), float(cfg["lr"]), seed=server_round)
        return ArrayRecord(net.state_dict())

    return root_train_fn


def rule_arguments(name: str, cfg) -> dict:
    """Each rule's own arguments where its defaults do not fit ten clients with num-sybils sybils
    and one NaN reply (nine valid replies a round)."""
    f = int(cfg["num-sybils"]) + 1
    if name == "multikrum":
        return {"num_malicious_nodes": f, "num_nodes_to_select": None}  # None: average n - f
    if name == "krum":
        return {"num_malicious_nodes": f}
    if name == "bulyan":
        return {"num_malicious_nodes": 1}  # Bulyan needs 4f + 3 valid replies: f = 1 of nine
    if name == "trimmed_mean":
        return {"f": f}
    if name == "fltrust":
        return {"root_train_fn": root_train_fn_for(cfg)}
    if name == "calguard":
        x_root, y_root = root_set()
        return {"model": Net(), "root_x": x_root, "root_y": y_root}
    return {}


def make_strategy(name: str, cfg, node_label=None) -> UpdateAggregationStrategy:
    """Any strategy of CHOICES by its name, built before the first round (a bad name or argument
    fails here, with the name)."""
    if name not in CHOICES:
        raise ValueError(f"unknown strategy {name!r}; choose from {sorted(CHOICES)}")
    return CHOICES[name](fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=2, min_available_nodes=2,
                         node_label=node_label, **rule_arguments(name, cfg))


def node_labels(grid: Grid) -> dict[int, int]:
    """Each connected node's partition id, asked once with a query message, so that the strategy
    names clients as ``node <id> (partition <k>)`` in its logs."""
    nodes = list(grid.get_node_ids())
    replies = grid.send_and_receive([Message(RecordDict(), message_type="query.identity", dst_node_id=n)
                                     for n in nodes])
    labels = {}
    for reply in replies:
        if not reply.has_error() and "identity" in reply.content:
            labels[reply.metadata.src_node_id] = int(reply.content["identity"]["partition-id"])
    return labels


def output_dir(cfg) -> Path:
    """``output-dir`` from the run config: "" → this app's ``outputs/``; a relative path is taken
    against this app's folder, never against the (SuperLink's) working directory."""
    raw = str(cfg.get("output-dir", ""))
    return APP_DIR / "outputs" if not raw else APP_DIR / raw if not Path(raw).is_absolute() else Path(raw)


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    torch.manual_seed(0)
    name = str(cfg["strategy"])
    labels = node_labels(grid)
    strategy = make_strategy(name, cfg, node_label=labels.get)
    x_test, y_test = make_data(1000, seed=99)

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        net = Net()
        net.load_state_dict(arrays.to_torch_state_dict())
        return MetricRecord({"accuracy": test(net, x_test, y_test)})

    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()),
                            num_rounds=int(cfg["num-server-rounds"]),
                            train_config=ConfigRecord({k: cfg[k] for k in TRAIN_KEYS}),
                            evaluate_fn=evaluate)
    accuracy = evaluate(0, result.arrays)["accuracy"]
    out = output_dir(cfg) / name
    out.mkdir(parents=True, exist_ok=True)
    torch.save(result.arrays.to_torch_state_dict(), out / "final_model.pt")
    rejected = {r: [f"partition {labels.get(n, 'unknown')}: {why}" for n, why in acc.rejections]
                for r, acc in strategy.replies.items()}
    (out / "result.json").write_text(json.dumps({"strategy": name, "accuracy": accuracy, "rejected": rejected},
                                                indent=1))
    log(INFO, "[%s] final accuracy %.3f; model and result.json in %s", name, accuracy, out)
