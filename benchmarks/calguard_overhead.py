"""CalGuard's cost against FedAvg, measured in the same run on the same inputs.

1. **Aggregation** (``aggregate_updates`` on n replies of a model, the root set of 100 samples):
   FedAvg's data-size weighted mean vs CalGuard's (one root forward pass per reply plus the
   current model's, the robust score, the weighted mean). Ratio and the extra time per reply.
2. **Whole rounds** (a ``fedcal run`` through the in-process engine, ``--rounds`` rounds of the
   SPEC configuration, TSA τ = 5): the mean round time (train + aggregate + central evaluation)
   under each strategy, and their ratio.

    python benchmarks/calguard_overhead.py                   # MNIST–MLP and CIFAR10–CNN
    python benchmarks/calguard_overhead.py --skip-rounds     # aggregation only (no dataset needed)
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
from flwr.app import ArrayRecord

from fedcal import strategies
from fedcal.models import build_model

from aggregation import best_of  # this folder's timer: warm-up, then the best of `repeat` runs

SHAPES = {"mnist-mlp": ("mlp", (1, 28, 28), 10), "cifar10-cnn": ("cnn", (3, 32, 32), 10)}


def aggregation(name: str, n: int, repeat: int) -> tuple[float, float]:
    model_name, shape, classes = SHAPES[name]
    model = build_model(model_name, shape, classes, seed=0)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    keys = [k for k, v in state.items() if v.is_floating_point()]
    d = sum(state[k].numel() for k in keys)
    g = torch.Generator().manual_seed(0)
    updates = 1e-3 * torch.randn(n, d, generator=g)
    weights = torch.full((n,), 100.0)
    x_root, y_root = torch.rand(100, *shape, generator=g), torch.arange(100) % classes
    nodes = list(range(1, n + 1))
    common = dict(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)
    fedavg = strategies.FedAvg(**common)
    guard = strategies.CalGuard(model=build_model(model_name, shape, classes), root_x=x_root, root_y=y_root, **common)
    for s in (fedavg, guard):
        s._sent = {1: ArrayRecord(state)}  # what configure_train remembers: the arrays sent this round
    t_avg = best_of(lambda: fedavg.aggregate_updates(1, nodes, updates, weights), repeat)
    t_guard = best_of(lambda: guard.aggregate_updates(1, nodes, updates, weights), repeat)
    return t_avg, t_guard


def rounds(dataset: str, extra: dict, n_rounds: int) -> dict[str, float]:
    from fedcal.app.engine import simulate
    from fedcal.config import RunConfig
    from fedcal.results import load_timings

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for strategy in ("fedavg", "calguard"):
            cfg = RunConfig.from_flower({"dataset": dataset, "tau": 5.0, "num-rounds": n_rounds, "strategy": strategy,
                                         "engine": "inprocess", "output-dir": tmp, "device": "cpu", **extra})
            run_dir = simulate(cfg, progress=False, force=True)
            m = load_timings([run_dir])
            secs = m[(m["metric"] == "round_seconds") & (m["round"] >= 2)]["value"]  # round 1 warms caches
            out[strategy] = float(secs.mean())
    return out


def main() -> None:
    import logging

    logging.getLogger("flwr").setLevel(logging.ERROR)  # each strategy warns that federated evaluation is off
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[5, 20])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--data-dir", default=os.environ.get("FEDCAL_DATA_DIR", ""))
    ap.add_argument("--skip-rounds", action="store_true")
    args = ap.parse_args()
    import pandas as pd

    from fedcal.reports import markdown_table

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU; aggregation: best of {args.repeat}\n")
    rows = []
    for name in SHAPES:
        for n in args.n:
            t_avg, t_guard = aggregation(name, n, args.repeat)
            rows.append({"model": name, "replies": n, "FedAvg_s": f"{t_avg:.5f}", "CalGuard_s": f"{t_guard:.5f}",
                         "ratio": f"{t_guard / t_avg:.1f}", "extra_s_per_reply": f"{(t_guard - t_avg) / n:.5f}"})
    print(markdown_table(pd.DataFrame(rows), "aggregate_updates, 100-sample root set"))
    if args.skip_rounds:
        return
    rows = []
    for name, dataset, extra in (("mnist-mlp", "mnist", {}), ("cifar10-cnn", "cifar10", {"model": "cnn", "lr": 0.05})):
        r = rounds(dataset, {**extra, "data-dir": args.data_dir}, args.rounds)
        rows.append({"run": name, "FedAvg_s_per_round": f"{r['fedavg']:.4f}",
                     "CalGuard_s_per_round": f"{r['calguard']:.4f}", "ratio": f"{r['calguard'] / r['fedavg']:.3f}"})
    print(markdown_table(pd.DataFrame(rows), f"whole rounds (in-process engine, mean of rounds 2..{args.rounds}, "
                                             "TSA τ = 5, M = 5, train + aggregate + central evaluation)"))

if __name__ == "__main__":
    main()
