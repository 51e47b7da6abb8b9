"""Sweep throughput on a Ray cluster against local worker processes, with the same CPUs.

The same grid (τ × seeds, in-process engine per cell) runs, each into a fresh folder:

* ``jobs``: ``run_sweep(..., jobs=N)`` — N spawned local worker processes (the baseline);
* ``cluster``: ``run_sweep(..., cluster=...)`` on a local Ray cluster of N worker nodes with one CPU
  each (``ray.cluster_utils.Cluster``, head without CPUs), cells written in place (the workers see
  the driver's folder); each sweep connects as a new driver, as ``fedcal sweep --cluster`` does, so
  it starts its Ray worker processes as ``--jobs`` starts its worker processes;
* ``cluster-ship``: the same cluster, every run directory shipped back to the driver (what a
  cluster without a shared filesystem does).

Each path runs ``--repeats`` times, alternating with the others. It prints each run's seconds,
cells per hour of the median run, the ratio to the baseline, the extra wall-clock per cell
((T − T_jobs) · N / cells: the dispatch overhead a cell costs on the cluster path), a Ray no-op
task's round trip, the cluster's start-up time (not counted in cells/hour), and how far each
path's final metrics are from the baseline's. Ray's temp dir is private (``RAY_TMPDIR``), so no
other process on the machine attaches to this cluster.

    python benchmarks/cluster_sweep.py                      # N = 2, 8 cells of 20 rounds, 3 runs per path
    python benchmarks/cluster_sweep.py --jobs 2 --seeds 4 --rounds 40
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd

from fedcal.app.cluster import ClusterSpec
from fedcal.app.sweep import SweepGrid, run_sweep
from fedcal.reports import collect

COMPARED = ("accuracy", "ece", "sece", "brier", "nll")


def grid(out: Path, seeds: int, rounds: int):
    base = dict(dataset="synthetic", num_clients=10, clients_per_round=5, num_rounds=rounds, batch_size=32,
                local_steps=5, lr=0.05, engine="inprocess", output_dir=str(out))
    return SweepGrid(base, {"tau": [0.5, 2.0], "seed": list(range(seeds))}).configs()


def final(configs) -> pd.DataFrame:
    cells, _ = collect(configs, ["tau", "seed"])
    return cells.sort_values(["tau", "seed"]).reset_index(drop=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="local worker processes = cluster worker nodes (1 CPU each)")
    ap.add_argument("--seeds", type=int, default=4, help="seeds per τ (2 τ values)")
    ap.add_argument("--rounds", type=int, default=20, help="rounds per cell")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each path (alternating)")
    args = ap.parse_args()

    ray_tmp = tempfile.mkdtemp(prefix="fcb", dir="/tmp")
    os.environ["RAY_TMPDIR"] = ray_tmp
    os.environ.pop("RAY_ADDRESS", None)
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    work = Path(tempfile.mkdtemp(prefix="fedcal-cluster-bench-"))
    times: dict[str, list[float]] = {"jobs": [], "cluster": [], "cluster-ship": []}
    frames = {}
    try:
        import ray
        from ray.cluster_utils import Cluster

        t = time.perf_counter()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        for _ in range(args.jobs):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        startup = time.perf_counter() - t
        try:
            noop = ray.remote(num_cpus=1)(lambda: None)
            ray.get(noop.remote())  # a worker process up on a node
            trips = []
            for _ in range(20):
                t = time.perf_counter()
                ray.get(noop.remote())
                trips.append(time.perf_counter() - t)
            # every cluster sweep below connects as its own driver, as `fedcal sweep --cluster` does:
            # its Ray job starts its worker processes (imports included), as --jobs starts its workers
            ray.shutdown()
            # the paths alternate, each run into a fresh folder, so a change in the machine's load
            # during the benchmark falls on every path alike
            for rep in range(args.repeats):
                for name in times:
                    configs = grid(work / f"{name}-{rep}", args.seeds, args.rounds)
                    t = time.perf_counter()
                    if name == "jobs":
                        failures = run_sweep(configs, jobs=args.jobs, progress=False)
                    else:
                        spec = ClusterSpec(cluster.address, store="ship" if name == "cluster-ship" else "auto")
                        failures = run_sweep(configs, progress=False, cluster=spec)
                    assert failures == {}, failures
                    times[name].append(time.perf_counter() - t)
                    frames.setdefault(name, final(configs))
        finally:
            if ray.is_initialized():
                ray.shutdown()
            cluster.shutdown()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)

    cells = len(frames["jobs"])
    base = statistics.median(times["jobs"])
    print(f"{cells} cells (synthetic, 10 clients, 5 per round, {args.rounds} rounds, engine=inprocess per cell); "
          f"{args.jobs} local worker processes vs a local Ray cluster of {args.jobs} worker nodes × 1 CPU; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end; {args.repeats} runs per path, "
          f"alternating")
    print(f"cluster start-up (head + {args.jobs} nodes, driver attached): {startup:.1f} s (not in cells/hour); "
          f"Ray no-op task round trip: median {1000 * statistics.median(trips):.1f} ms")
    print(f"{'path':14s} {'seconds (each run)':>22s} {'cells/hour':>11s} {'× jobs':>7s} {'extra s/cell':>13s}  "
          "max |Δ metric| vs jobs")
    for name, runs in times.items():
        seconds = statistics.median(runs)
        delta = (frames[name][list(COMPARED)] - frames["jobs"][list(COMPARED)]).abs().max()
        extra = (seconds - base) * args.jobs / cells
        print(f"{name:14s} {' '.join(f'{r:.1f}' for r in runs):>22s} {3600 * cells / seconds:11.0f} "
              f"{base / seconds:7.2f} {extra:13.2f}  " + ", ".join(f"{m} {delta[m]:.1e}" for m in COMPARED))
    print("cells/hour, × jobs and extra s/cell ((T − T_jobs) · N / cells) from the median run of each path")


if __name__ == "__main__":
    main()
