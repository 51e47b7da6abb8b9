"""Wall time per round: fedcal through Flower (Ray engine and in-process engine) vs a plain
PyTorch loop, and the Ray path with Flower's and Ray's own settings (``FEDCAL_RAY_DEFAULTS=1``:
Flower's Grid with its 0.1 s reply poll, Ray's 100 KiB inline limit and CPU count) to show what
fedcal's settings of the Ray path change.

All three do the same work — the paper's MNIST–MLP configuration (K=50, M=5, 13 attackers,
B=64, E=5, β=0.01, TSA τ=5), the same clients per round, central evaluation on the 10k
test images after every round — in this run, on this machine. Prints seconds per round
(steady state: round 1, which includes Ray's actor start-up and data loading, is excluded),
total wall time including start-up, peak resident memory of this process (children not
included: Ray's actors live in their own processes), and the ratios to the plain loop.

    python benchmarks/round_time.py --rounds 20 --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time

from fedcal.config import RunConfig
from fedcal.reference import ReferenceSpec, run_plain
from fedcal.results import load_metrics, load_timings
from fedcal.app.engine import RAY_DEFAULTS_ENV, simulate


def round_parser(doc: str) -> argparse.ArgumentParser:
    """The options of a round-time benchmark (this one and ray_profile.py): rounds, data, model."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--lr", type=float, default=0.01)
    return ap


def round_config(args: argparse.Namespace, output_dir: str, **overrides) -> RunConfig:
    """The paper's configuration with TSA τ = 5 for ``args`` of :func:`round_parser`."""
    return RunConfig.from_flower(dict(dataset=args.dataset, model=args.model, lr=args.lr, tau=5.0,
                                      num_rounds=args.rounds, data_dir=args.data_dir, output_dir=output_dir,
                                      **overrides))


def main() -> None:
    args = round_parser(__doc__).parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cfg = round_config(args, tmp)
        t0 = time.perf_counter()
        plain_rows = run_plain(ReferenceSpec.from_config(cfg))
        plain_total = time.perf_counter() - t0
        results = {}
        for engine in ("inprocess", "ray", "ray-defaults"):
            t0 = time.perf_counter()
            if engine == "ray-defaults":
                os.environ[RAY_DEFAULTS_ENV] = "1"
            try:
                run_dir = simulate(cfg.replace(engine=engine.split("-")[0], output_dir=f"{tmp}/{engine}"),
                                   progress=False)
            finally:
                os.environ.pop(RAY_DEFAULTS_ENV, None)
            total = time.perf_counter() - t0
            df = load_metrics(run_dir)
            timings = load_timings(run_dir)
            results[engine] = (timings[timings.metric == "round_seconds"].sort_values("round")["value"].tolist(), total,
                               df)

    steady = lambda xs: statistics.mean(xs[2:]) if len(xs) > 2 else float("nan")  # noqa: E731
    plain = steady([r["round_seconds"] for r in plain_rows])
    print(f"{args.dataset}-{args.model}, K={cfg.num_clients} M={cfg.clients_per_round} B={cfg.batch_size} "
          f"E={cfg.local_steps}, {args.rounds} rounds; peak RSS of this process "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print(f"{'path':<36}{'s/round (steady)':>18}{'× plain':>9}{'total s':>10}")
    print(f"{'(a) plain PyTorch loop (limit)':<36}{plain:>18.3f}{1:>9.2f}{plain_total:>10.1f}")
    names = {"ray": "(b) fedcal run, Flower + Ray", "ray-defaults": "(b0) same, Flower's/Ray's settings",
             "inprocess": "(c) fedcal run, engine=inprocess"}
    for engine in ("ray", "ray-defaults", "inprocess"):
        rounds, total, _ = results[engine]
        per = steady(rounds)
        print(f"{names[engine]:<36}{per:>18.3f}{per / plain:>9.2f}{total:>10.1f}")
    # the three paths compute the same thing: show it
    last = {e: r[2][(r[2]["round"] == args.rounds) & (r[2].metric == "accuracy")]["value"].item()
            for e, r in results.items()}
    print(f"final accuracy: plain {plain_rows[-1]['accuracy']:.6f}, "
          + ", ".join(f"{e} {a:.6f}" for e, a in last.items()))


if __name__ == "__main__":
    main()
