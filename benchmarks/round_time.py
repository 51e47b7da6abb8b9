"""Wall time per round: fedcal through Flower's Simulation Engine vs a plain PyTorch loop.

Both do the same work — the paper's MNIST–MLP configuration (K=50, M=5, 13 attackers,
B=64, E=5, β=0.01, TSA τ=5), the same clients per round, central evaluation on the 10k
test images after every round — in this run, on this machine. Prints seconds per round
(steady state: round 1, which includes Ray's actor start-up and data loading, is excluded),
total wall time including start-up, and the ratio Flower/plain.

    python benchmarks/round_time.py --rounds 20 --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from fedcal.config import RunConfig
from fedcal.reference import run_plain
from fedcal.results import load_metrics
from fedcal.simulations.engine import simulate


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
        t0 = time.perf_counter()
        run_dir = simulate(cfg, progress=False)
        flower_total = time.perf_counter() - t0
        df = load_metrics(run_dir)

    steady = lambda xs: statistics.mean(xs[2:]) if len(xs) > 2 else float("nan")  # noqa: E731
    plain = steady([r["round_seconds"] for r in plain_rows])
    flower = steady(df[df.metric == "round_seconds"].sort_values("round")["value"].tolist())
    print(f"{args.dataset}-{args.model}, K={cfg.num_clients} M={cfg.clients_per_round} B={cfg.batch_size} "
          f"E={cfg.local_steps}, {args.rounds} rounds")
    print(f"{'path':<32}{'s/round (steady)':>18}{'total s':>10}")
    print(f"{'plain PyTorch loop (limit)':<32}{plain:>18.3f}{plain_total:>10.1f}")
    print(f"{'fedcal run (Flower + Ray)':<32}{flower:>18.3f}{flower_total:>10.1f}")
    print(f"ratio Flower/plain: {flower / plain:.2f}x per round, {flower_total / plain_total:.2f}x total")


if __name__ == "__main__":
    main()
