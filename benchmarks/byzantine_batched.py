"""The Byzantine strategy × attack table, cross-silo, by the in-process engine and by the batched
engine, timed in the same run: the ratio says what ``engine=batched`` saves on the table.

The cells are ``fedcal byzantine``'s own (:func:`fedcal.studies.byzantine.byzantine_cells`): every
strategy spec × (benign + each attack) × seed, in the cross-silo setting of the Byzantine-robust
literature — 10 honest clients and 3 attackers (``attacker-ratio`` 0.23 of 13), all 13 trained every
round, the rules' f = 3. Each engine runs the same cells ``--jobs`` at a time into its own fresh
folder; the batched engine trains the clients of every run as one stacked model and crafts each
run's attacks from its stacked honest updates (:mod:`fedcal.tasks.train_batched`). Printed: each
engine's seconds, ``batched / inprocess`` (below 1: the batched engine is faster), and the largest
difference of the runs' per-round metrics between the engines (float summation order).

    python benchmarks/byzantine_batched.py        # digits, FedAvg and trimmed mean × none, ALIE, IPM, 5 rounds
    python benchmarks/byzantine_batched.py --dataset mnist --data-dir ../shared/data --rounds 30 --seeds 3 \
        --strategies fedavg trimmed_mean median nnm+trimmed_mean --attacks alie ipm minmax fang-trmean
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import pandas as pd

from fedcal.app.sweep import run_sweep
from fedcal.config import RunConfig
from fedcal.results import load_metrics, run_dir_for
from fedcal.studies.byzantine import byzantine_cells, byzantine_configs

COMPARED = ("accuracy", "ece", "sece", "brier", "nll")
CROSS_SILO = dict(num_clients=13, clients_per_round=13, partition="iid")
RATIO = 0.23  # 3 of 13: round-half-up(0.23 · 13) = 3 attackers, f = ⌈0.23 · 13⌉ = 3


def configs(out: str, engine: str, args: argparse.Namespace) -> list[RunConfig]:
    base = RunConfig.from_flower(dict(CROSS_SILO, dataset=args.dataset, data_dir=args.data_dir, output_dir=out,
                                      num_rounds=args.rounds, local_steps=args.local_steps, engine=engine,
                                      eval_every=args.eval_every))
    return byzantine_configs(byzantine_cells(base, args.strategies, args.attacks, [RATIO], range(args.seeds)))


def metrics_of(cfgs: list[RunConfig]) -> pd.Series:
    frames = []
    for c in cfgs:
        df = load_metrics(run_dir_for(c))
        df = df[df.metric.isin(COMPARED)].assign(cell=f"{c.pre_aggregation}+{c.strategy}/{c.attack}/{c.seed}")
        frames.append(df[["cell", "round", "metric", "value"]])
    return pd.concat(frames).set_index(["cell", "round", "metric"])["value"].sort_index()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="digits")
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--local-steps", type=int, default=5)
    ap.add_argument("--eval-every", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1, help="cells (in-process) or batches (batched) run at a time")
    ap.add_argument("--strategies", nargs="+", default=["fedavg", "trimmed_mean"])
    ap.add_argument("--attacks", nargs="+", default=["alie", "ipm"])
    args = ap.parse_args()
    timed = {}
    with tempfile.TemporaryDirectory() as tmp:
        for engine in ("inprocess", "batched"):
            cfgs = configs(f"{tmp}/{engine}", engine, args)
            t0 = time.perf_counter()
            failures = run_sweep(cfgs, jobs=args.jobs, progress=False)
            elapsed = time.perf_counter() - t0
            if failures:
                raise SystemExit(f"{engine}: {len(failures)} cells failed:\n" + next(iter(failures.values())))
            timed[engine] = (elapsed, metrics_of(cfgs))
    (t_in, m_in), (t_b, m_b) = timed["inprocess"], timed["batched"]
    gap = (m_b - m_in).abs()
    print(f"{len(cfgs)} runs of {args.rounds} rounds ({args.dataset}, cross-silo: 13 clients a round, 3 attackers; "
          f"{' '.join(args.strategies)} × none {' '.join(args.attacks)} × {args.seeds} seed(s)), jobs {args.jobs}, "
          f"{os.cpu_count()} cores")
    print(f"{'engine':<11}{'seconds':>9}{'runs/hour':>11}")
    for engine, (elapsed, _) in timed.items():
        print(f"{engine:<11}{elapsed:>9.1f}{3600 * len(cfgs) / elapsed:>11.0f}")
    print(f"batched / inprocess = {t_b / t_in:.2f}; max |Δ metric|: "
          + ", ".join(f"{m} {gap.xs(m, level='metric').max():.1e}" for m in COMPARED))


if __name__ == "__main__":
    main()
