"""Sweep throughput: cells per hour for the paper's 9-τ × 5-seed MNIST–MLP table, per engine.

Runs the grid τ ∈ {0.2, 0.25, 0.33, 0.5, 1, 2, 3, 4, 5} × seeds (paper configuration,
100 rounds; τ = 1 is the benign run) once per engine named in ``--engines`` — the in-process
engine ``--jobs`` cells at a time (the baseline) and the batched engine
(:mod:`fedcal.app.batched`: every cell of the grid in one batched computation, split into
``--jobs`` parallel batches) — each into its own fresh folder, and prints cells per hour, the
ratio to the first engine, and how far the engines' per-round metrics (accuracy, ECE, sECE,
Brier, NLL) are apart on the same cells. It also prints the arithmetic of one run-round
(training and evaluation FLOPs of the MLP) and what each engine sustains, since on a CPU that,
not the framework, bounds any speed-up.

    python benchmarks/sweep_throughput.py --jobs 2 --data-dir ../shared/data
    python benchmarks/sweep_throughput.py --engines inprocess:2 batched:1 batched:2   # jobs per engine
    python benchmarks/sweep_throughput.py --engines inprocess:2 batched:1 --eval-every 10
    python benchmarks/sweep_throughput.py --seeds 1 --rounds 20      # a quick look
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import pandas as pd

from fedcal.config import RunConfig
from fedcal.data import load_dataset
from fedcal.models import build_model
from fedcal.studies.taus import tau_configs
from fedcal.results import load_metrics, run_dir_for
from fedcal.app.sweep import run_sweep

TAUS = (0.2, 0.25, 0.33, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0)
COMPARED = ("accuracy", "ece", "sece", "brier", "nll")


def grid(out: str, seeds: int, rounds: int, engine: str, data_dir: str, eval_every: int = 1) -> list[RunConfig]:
    configs = []
    for seed in range(seeds):
        base = RunConfig.from_flower(dict(dataset="mnist", data_dir=data_dir, output_dir=out, seed=seed,
                                          num_rounds=rounds, engine=engine, eval_every=eval_every))
        configs += tau_configs(base, TAUS)
    return configs


def round_flops(cfg: RunConfig) -> float:
    """FLOPs of one run-round: M clients × E steps × B samples × 3 passes (forward, two
    backward) and the central evaluation of the test set (one forward), 2 FLOPs per weight."""
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    weights = sum(p.numel() for n, p in build_model(cfg.model, ds.input_shape, ds.num_classes).named_parameters()
                  if n.endswith("weight"))
    train = cfg.clients_per_round * cfg.local_steps * cfg.batch_size * 3 * 2 * weights
    evaluate = len(ds.y_test) * 2 * weights / cfg.eval_every
    return train + evaluate


def sgemm_gflops(device: str, size: int = 4096, repeat: int = 3) -> float:
    """The float32 matrix-product rate of the device the runs use (GFLOP/s, best of
    ``repeat``): the ceiling for a computation made of matrix products."""
    import torch

    a = torch.randn(size, size, device=device)
    sync = torch.cuda.synchronize if a.is_cuda else (lambda: None)
    a @ a
    sync()
    best = min(_timed(lambda: (a @ a, sync())) for _ in range(repeat))
    return 2 * size ** 3 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def metrics_of(configs: list[RunConfig]) -> pd.DataFrame:
    frames = []
    for c in configs:
        df = load_metrics(run_dir_for(c))
        df = df[df.metric.isin(COMPARED)].assign(tau=c.tau, seed=c.seed)
        frames.append(df[["tau", "seed", "round", "metric", "value"]])
    return pd.concat(frames).set_index(["tau", "seed", "round", "metric"])["value"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--engines", nargs="+", default=["inprocess", "batched"],
                    help="engines to time, each ENGINE or ENGINE:JOBS (JOBS overrides --jobs for it)")
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--eval-every", type=int, default=1, help="central evaluation every k rounds (the table's: 1)")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.engines:
            engine, _, jobs = spec.partition(":")
            configs = grid(f"{tmp}/{spec}", args.seeds, args.rounds, engine, args.data_dir, args.eval_every)
            t0 = time.perf_counter()
            failures = run_sweep(configs, jobs=int(jobs or args.jobs), progress=False)
            elapsed = time.perf_counter() - t0
            if failures:
                raise SystemExit(f"{engine}: {len(failures)} cells failed:\n" + next(iter(failures.values())))
            results[spec] = (elapsed, metrics_of(configs))
    cells = len(TAUS) * args.seeds
    flops = round_flops(grid("unused", 1, args.rounds, "inprocess", args.data_dir, args.eval_every)[0])
    print(f"{cells} cells of {args.rounds} rounds (MNIST–MLP, 9 τ × {args.seeds} seeds, eval-every {args.eval_every}), "
          f"engine[:jobs] "
          f"(default jobs {args.jobs}), "
          f"{os.cpu_count()} cores; one run-round = {flops / 1e9:.2f} GFLOP (training + central evaluation)")
    from fedcal.local_training import resolve_device

    device = resolve_device("auto")
    peak = sgemm_gflops(str(device))
    print(f"float32 matrix products on the runs' device ({device}): {peak:.0f} GFLOP/s (4096² sgemm), so no engine "
          f"can do a "
          f"run-round in less than {flops / peak / 1e9 * 1e3:.1f} ms")
    print(f"{'engine':<14}{'seconds':>9}{'cells/hour':>12}{'× first':>9}{'GFLOP/s':>9}  max |Δ metric| vs first")
    base_time, base_metrics = results[args.engines[0]]
    for engine, (elapsed, metrics) in results.items():
        gap = (metrics - base_metrics).abs()
        worst = ", ".join(f"{m} {gap.xs(m, level='metric').max():.1e}" for m in COMPARED)
        print(f"{engine:<14}{elapsed:>9.1f}{3600 * cells / elapsed:>12.0f}{base_time / elapsed:>9.2f}"
              f"{flops * cells * args.rounds / elapsed / 1e9:>9.1f}  {worst}")


if __name__ == "__main__":
    main()
