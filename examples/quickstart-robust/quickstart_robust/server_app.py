"""ServerApp: Flower's usual structure; the strategy comes from fedcal.strategies."""

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from fedcal.strategies import STRATEGIES, UpdateAggregationStrategy
from quickstart_robust.task import Net, make_data, test, train

app = ServerApp()
TRAIN_KEYS = ("lr", "local-steps", "num-sybils", "nan-partition")


def root_train_fn_for(cfg):
    """FLTrust's server step: the benign training procedure on a small clean root set."""
    x_root, y_root = make_data(100, seed=7)

    def root_train_fn(arrays: ArrayRecord, server_round: int) -> ArrayRecord:
        net = Net()
        net.load_state_dict(arrays.to_torch_state_dict())
        train(net, x_root, y_root, int(cfg["local-steps"]), float(cfg["lr"]), seed=server_round)
        return ArrayRecord(net.state_dict())

    return root_train_fn


def make_strategy(name: str, cfg) -> UpdateAggregationStrategy:
    """Any fedcal strategy by its name; the rules' own settings where the defaults do not fit."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose from {sorted(STRATEGIES)}")
    rule = {
        "multikrum": lambda: {"f": int(cfg["num-sybils"]) + 1},
        "trimmed_mean": lambda: {"f": int(cfg["num-sybils"]) + 1},
        "fltrust": lambda: {"root_train_fn": root_train_fn_for(cfg)},
    }.get(name, dict)()
    return STRATEGIES[name](fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=2, min_available_nodes=2,
                            **rule)


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    torch.manual_seed(0)
    strategy = make_strategy(str(cfg["strategy"]), cfg)
    x_test, y_test = make_data(1000, seed=99)

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        net = Net()
        net.load_state_dict(arrays.to_torch_state_dict())
        return MetricRecord({"accuracy": test(net, x_test, y_test)})

    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()),
                            num_rounds=int(cfg["num-server-rounds"]),
                            train_config=ConfigRecord({k: cfg[k] for k in TRAIN_KEYS}),
                            evaluate_fn=evaluate)
    print(f"[{cfg['strategy']}] final accuracy: {evaluate(0, result.arrays)['accuracy']:.3f}")
    torch.save(result.arrays.to_torch_state_dict(), "final_model.pt")
