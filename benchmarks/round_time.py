"""Wall time per round: fedcal through Flower (Ray engine and in-process engine) vs a plain
PyTorch loop.

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
import resource
import statistics
import tempfile
import time

from fedcal.config import RunConfig
from fedcal.reference import run_plain
from fedcal.results import load_metrics
from fedcal.app.engine import simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--lr", type=float, default=0.01)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cfg = RunConfig.from_flower(dict(dataset=args.dataset, model=args.model, lr=args.lr, tau=5.0,
                                         num_rounds=args.rounds, data_dir=args.data_dir, output_dir=tmp))
        t0 = time.perf_counter()
        plain_rows = run_plain(cfg)
        plain_total = time.perf_counter() - t0
        results = {}
        for engine in ("inprocess", "ray"):
            t0 = time.perf_counter()
            run_dir = simulate(cfg.replace(engine=engine, output_dir=f"{tmp}/{engine}"), progress=False)
            total = time.perf_counter() - t0
            df = load_metrics(run_dir)
            results[engine] = (df[df.metric == "round_seconds"].sort_values("round")["value"].tolist(), total, df)

    steady = lambda xs: statistics.mean(xs[2:]) if len(xs) > 2 else float("nan")  # noqa: E731
    plain = steady([r["round_seconds"] for r in plain_rows])
    print(f"{args.dataset}-{args.model}, K={cfg.num_clients} M={cfg.clients_per_round} B={cfg.batch_size} "
          f"E={cfg.local_steps}, {args.rounds} rounds; peak RSS of this process "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print(f"{'path':<36}{'s/round (steady)':>18}{'× plain':>9}{'total s':>10}")
    print(f"{'(a) plain PyTorch loop (limit)':<36}{plain:>18.3f}{1:>9.2f}{plain_total:>10.1f}")
    names = {"ray": "(b) fedcal run, Flower + Ray", "inprocess": "(c) fedcal run, engine=inprocess"}
    for engine in ("ray", "inprocess"):
        rounds, total, _ = results[engine]
        per = steady(rounds)
        print(f"{names[engine]:<36}{per:>18.3f}{per / plain:>9.2f}{total:>10.1f}")
    # the three paths compute the same thing: show it
    last = {e: r[2][(r[2]["round"] == args.rounds) & (r[2].metric == "accuracy")]["value"].item()
            for e, r in results.items()}
    print(f"final accuracy: plain {plain_rows[-1]['accuracy']:.6f}, ray {last['ray']:.6f}, "
          f"inprocess {last['inprocess']:.6f}")


if __name__ == "__main__":
    main()
