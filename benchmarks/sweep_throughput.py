"""Sweep throughput: cells per hour for the paper's 9-τ × 5-seed MNIST–MLP table.

Runs the grid τ ∈ {0.2, 0.25, 0.33, 0.5, 1, 2, 3, 4, 5} × seeds 0–4 (paper configuration,
100 rounds; τ = 1 is the benign run) with the in-process engine, ``--jobs`` cells at a time,
and prints cells per hour. Finished cells in ``--out`` are skipped (and not counted), so the
same folder later feeds the reproduction tables; use an empty folder to time the whole grid.

    python benchmarks/sweep_throughput.py --jobs 2 --out runs/mnist-tau-seeds --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import os
import time

from fedcal.config import RunConfig
from fedcal.reports import tau_configs
from fedcal.results import RunStore, run_dir_for
from fedcal.app.sweep import run_sweep

TAUS = (0.2, 0.25, 0.33, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--out", default="runs/mnist-tau-seeds")
    ap.add_argument("--data-dir", default="../shared/data")
    args = ap.parse_args()
    configs = []
    for seed in range(args.seeds):
        base = RunConfig.from_flower(dict(dataset="mnist", data_dir=args.data_dir, output_dir=args.out, seed=seed,
                                          num_rounds=args.rounds, engine="inprocess"))
        configs += tau_configs(base, TAUS)
    todo = sum(not RunStore(run_dir_for(c), c).is_done() for c in configs)
    t0 = time.perf_counter()
    failures = run_sweep(configs, jobs=args.jobs)
    elapsed = time.perf_counter() - t0
    ran = todo - len(failures)
    print(f"{len(configs)} cells ({todo} to run, {len(failures)} failed), {args.jobs} jobs, "
          f"{os.cpu_count()} cores: {elapsed:.0f} s")
    if ran:
        print(f"throughput: {3600 * ran / elapsed:.0f} cells/hour "
              f"({elapsed / ran:.1f} s per cell of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
