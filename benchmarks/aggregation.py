"""Aggregation time per rule for n clients × d parameters, against two baselines measured
in the same run on the same inputs:

* the time to read the n·d float32 values once (``updates.sum()``: a memory-bound pass);
* Flower's own MultiKrum (``select_multikrum`` + ``aggregate_arrayrecords`` on RecordDicts).

    python benchmarks/aggregation.py                       # n ∈ {5,17,50}, d ∈ {1e5,1e6,1.1e7}
    python benchmarks/aggregation.py --n 5 17 --d 100000   # a subset
"""

from __future__ import annotations

import argparse
import gc
import time

import torch

from fedcal import aggregate as agg


def best_of(fn, repeat: int) -> float:
    fn()  # warm-up (allocations, thread pools)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def flower_multikrum(n: int, updates: torch.Tensor, f: int):
    from flwr.app import ArrayRecord, MetricRecord, RecordDict
    from flwr.serverapp.strategy.multikrum import select_multikrum
    from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

    contents = [RecordDict({"arrays": ArrayRecord([updates[i].numpy()]),
                            "metrics": MetricRecord({"num-examples": 10})}) for i in range(n)]

    def run():
        chosen = select_multikrum(contents, num_malicious_nodes=f, num_nodes_to_select=n - f)
        return aggregate_arrayrecords(chosen, "num-examples")

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[5, 17, 50])
    ap.add_argument("--d", type=float, nargs="+", default=[1e5, 1e6, 1.1e7])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}; "
          f"best of {args.repeat}, seconds (×read = time / time to read the n·d floats once)")
    header = f"{'n':>4} {'d':>10} {'rule':<18}{'seconds':>10}{'×read':>9}"
    print(header)
    print("-" * len(header))
    for d in (int(x) for x in args.d):
        for n in args.n:
            for name, secs, read in bench_one(n, d, args.device, args.repeat):
                print(f"{n:>4} {d:>10.2e} {name:<18}{secs:>10.4f}{secs / read:>9.1f}")
            gc.collect()


def bench_one(n: int, d: int, device: str, repeat: int) -> list[tuple[str, float, float]]:
    """(rule, seconds, seconds to read the inputs once) for one (n, d)."""
    g = torch.Generator().manual_seed(0)
    updates = torch.randn(n, d, generator=g).to(device)
    weights = torch.rand(n, generator=g).to(device) + 0.5
    root = torch.randn(d, generator=g).to(device)
    f = max(1, n // 5)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def timed(fn) -> float:
        return best_of(lambda: (fn(), sync()), repeat)

    fg, ids = agg.FoolsGoldHistory(), list(range(n))
    rules = {
        "fedavg": lambda: agg.fedavg(updates, weights),
        "trimmed_mean": lambda: agg.trimmed_mean(updates, f),
        "median": lambda: agg.coordinate_median(updates),
        "geometric_median": lambda: agg.geometric_median(updates, weights),
        "median_of_means": lambda: agg.median_of_means(updates, 3, generator=torch.Generator().manual_seed(0)),
        "multikrum": lambda: agg.multikrum(updates, f, weights=weights),
        "fltrust": lambda: agg.fltrust(updates, root),
        "foolsgold": lambda: fg(ids, updates),
    }
    read = timed(lambda: updates.sum())
    rows = [("read n·d once", read, read)] + [(k, timed(v), read) for k, v in rules.items()]
    if device == "cpu":
        rows.append(("flwr MultiKrum", timed(flower_multikrum(n, updates, f)), read))
    return rows

if __name__ == "__main__":
    main()
