"""Aggregation time per rule for n clients × d parameters, against baselines measured in the
same run on the same inputs:

* the time to read the n·d float32 values once (``updates.sum()``: a memory-bound pass);
* the peers' implementations of the same rules: Flower's own (MultiKrum: ``select_multikrum``
  + ``aggregate_arrayrecords`` on RecordDicts; FedMedian's ``np.median`` of the stacked
  layers; FedTrimmedAvg's ``trim_mean``) and ByzFL's (``pip install byzfl``: Average, Median,
  TrMean, MultiKrum, GeometricMedian; skipped when not installed — it is not a fedcal
  dependency).

For each fedcal rule with peers, ``÷peer`` is its time over the fastest peer's. Before timing,
fedcal's results are checked against ByzFL's where the two compute the same thing (mean;
median at odd n — ByzFL's is the lower median; trimmed mean; MultiKrum with ByzFL's f one
larger, whose n − f − 1 nearest neighbours are fedcal's n − f − 2, keeping n − f − 1):
a mismatch stops the benchmark. ByzFL's GeometricMedian runs a fixed 3 Weiszfeld steps from
0, fedcal's runs to convergence (tol), so that pair is timed, not compared.

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


def flower_fedavg(n: int, updates: torch.Tensor):
    """Flower's FedAvg aggregation (``aggregate_arrayrecords``, weighted by num-examples)."""
    from flwr.app import ArrayRecord, MetricRecord, RecordDict
    from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

    contents = [RecordDict({"arrays": ArrayRecord([updates[i].numpy()]),
                            "metrics": MetricRecord({"num-examples": 10 + i})}) for i in range(n)]
    return lambda: aggregate_arrayrecords(contents, "num-examples")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[5, 17, 50])
    ap.add_argument("--d", type=float, nargs="+", default=[1e5, 1e6, 1.1e7])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}; "
          f"best of {args.repeat}, seconds (×read = time / time to read the n·d floats once; "
          f"÷peer = time / fastest peer's time for the same rule){'' if _byzfl() else '; byzfl not installed'}")
    header = f"{'n':>4} {'d':>10} {'rule':<28}{'seconds':>10}{'×read':>9}{'÷peer':>8}"
    print(header)
    print("-" * len(header))
    for d in (int(x) for x in args.d):
        for n in args.n:
            rows = bench_one(n, d, args.device, args.repeat)
            times = {name: secs for name, secs, _ in rows}
            for name, secs, read in rows:
                peers = [times[p] for p in PEERS.get(name, ()) if p in times]
                ratio = f"{secs / min(peers):>8.2f}" if peers else ""
                print(f"{n:>4} {d:>10.2e} {name:<28}{secs:>10.4f}{secs / read:>9.1f}{ratio}")
            gc.collect()


#: fedcal rule → the peers' rows that compute the same aggregate.
PEERS = {
    "fedavg": ("flwr FedAvg",),
    "fedavg (unweighted)": ("byzfl Average",),
    "median": ("flwr FedMedian", "byzfl Median"),
    "trimmed_mean": ("flwr FedTrimmedAvg", "byzfl TrMean"),
    "multikrum": ("flwr MultiKrum", "byzfl MultiKrum"),
    "geometric_median (3 steps)": ("byzfl GeometricMedian",),
}


def _byzfl():
    try:
        import byzfl
    except ImportError:
        return None
    return byzfl


def peer_rules(n: int, updates: torch.Tensor, f: int) -> dict:
    """The peers' implementations (CPU only): Flower's and, when installed, ByzFL's."""
    import numpy as np
    from flwr.serverapp.strategy.fedtrimmedavg import trim_mean

    rows = {
        "flwr MultiKrum": flower_multikrum(n, updates, f),
        "flwr FedAvg": flower_fedavg(n, updates),
        # FedMedian.aggregate_train / FedTrimmedAvg.aggregate_train on one layer: the layers
        # are stacked and reduced with NumPy (what those methods do per array key)
        "flwr FedMedian": lambda: np.median(np.stack(list(updates.numpy())), axis=0),
        "flwr FedTrimmedAvg": lambda: trim_mean(np.stack(list(updates.numpy())), f / n),
    }
    byzfl = _byzfl()
    if byzfl is not None:
        rows.update({
            "byzfl Average": lambda: byzfl.Average()(updates),
            "byzfl Median": lambda: byzfl.Median()(updates),
            "byzfl TrMean": lambda: byzfl.TrMean(f)(updates),
            "byzfl MultiKrum": lambda: byzfl.MultiKrum(f)(updates),
            "byzfl GeometricMedian": lambda: byzfl.GeometricMedian()(updates),
        })
    return rows


def check_parity(n: int, updates: torch.Tensor, f: int) -> None:
    """fedcal equals ByzFL where both compute the same aggregate (else AssertionError)."""
    byzfl = _byzfl()
    if byzfl is None:
        return
    close = lambda a, b: torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # noqa: E731
    close(agg.fedavg(updates), byzfl.Average()(updates))
    if n % 2:
        assert torch.equal(agg.coordinate_median(updates), byzfl.Median()(updates)), "median differs from ByzFL's"
    close(agg.trimmed_mean(updates, f), byzfl.TrMean(f)(updates))
    if n - (f + 1) - 1 >= 1 and 2 * (f + 1) < n:
        close(agg.multikrum(updates, f, m=n - f - 1), byzfl.MultiKrum(f + 1)(updates))


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
        "fedavg (unweighted)": lambda: agg.fedavg(updates),
        "trimmed_mean": lambda: agg.trimmed_mean(updates, f),
        "median": lambda: agg.coordinate_median(updates),
        "geometric_median": lambda: agg.geometric_median(updates, weights),
        # ByzFL's runs a fixed T = 3 Weiszfeld steps: the same work as 3 of fedcal's
        "geometric_median (3 steps)": lambda: agg.geometric_median(updates, max_iter=3, tol=0.0),
        "median_of_means": lambda: agg.median_of_means(updates, 3, generator=torch.Generator().manual_seed(0)),
        "multikrum": lambda: agg.multikrum(updates, f, weights=weights),
        "fltrust": lambda: agg.fltrust(updates, root),
        "foolsgold": lambda: fg(ids, updates),
    }
    read = timed(lambda: updates.sum())
    rows = [("read n·d once", read, read)] + [(k, timed(v), read) for k, v in rules.items()]
    if device == "cpu":
        check_parity(n, updates, f)
        rows += [(k, timed(v), read) for k, v in peer_rules(n, updates, f).items()]
    return rows

if __name__ == "__main__":
    main()
