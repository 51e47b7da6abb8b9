"""Peak memory of a run per engine: the in-process and batched engines vs Flower's Simulation Engine (Ray).

    python benchmarks/engine_memory.py --rounds 10 --data-dir ../shared/data

The paper's MNIST–MLP configuration (K=50, M=5, 13 attackers with TSA τ=5, B=64, E=5, central
evaluation on the 10k test images after every round) as ``fedcal run engine=inprocess``,
``engine=ray`` and ``engine=batched``, each in its own subprocess (``device=cpu``). While it runs, a loop in this
process samples the subprocess's whole process tree (``psutil.Process.children(recursive=True)``:
for Ray the GCS server, the raylet, its agents and every worker/actor process, all started
under the run's process) every 0.2 s and sums the members' memory:

* RSS sum: the sum of every process's resident set size. Pages shared between processes (the
  torch and Ray libraries each worker maps, Ray's shared-memory object store) count once per
  process, so this overstates what the tree takes from the machine;
* PSS sum: the sum of proportional set sizes (a shared page split among its sharers), which
  adds up to what the tree takes;
* procs: the number of processes in the tree at the RSS peak;
* driver RSS: the peak RSS of the run's own process alone (the ServerApp, and for ``inprocess``
  every client too).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

import psutil


def child(engine: str, rounds: int, data_dir: str) -> None:
    from fedcal.app.engine import simulate
    from fedcal.config import RunConfig
    from fedcal.results import load_metrics

    with tempfile.TemporaryDirectory() as tmp:
        cfg = RunConfig.from_flower(dict(dataset="mnist", model="mlp", tau=5.0, num_rounds=rounds, data_dir=data_dir,
                                         device="cpu", engine=engine, output_dir=tmp))
        run_dir = simulate(cfg, progress=False)
        df = load_metrics(run_dir)
    acc = df[(df.metric == "accuracy") & (df["round"] == rounds)]["value"].item()
    print("RESULT " + json.dumps({"accuracy": acc}), flush=True)


def tree_memory(root: psutil.Process) -> tuple[int, int, int, int]:
    """(RSS sum, PSS sum, process count, root's RSS) of ``root`` and its descendants, bytes."""
    procs = [root]
    try:
        procs += root.children(recursive=True)
    except psutil.Error:
        pass
    rss = pss = n = root_rss = 0
    for p in procs:
        try:
            info = p.memory_full_info()
        except psutil.Error:  # exited between listing and reading
            continue
        rss += info.rss
        pss += getattr(info, "pss", 0)
        n += 1
        if p.pid == root.pid:
            root_rss = info.rss
    return rss, pss, n, root_rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--engines", default="inprocess,ray,batched")
    ap.add_argument("--period", type=float, default=0.2, help="seconds between samples")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.rounds, args.data_dir)
        return

    rows = []
    for engine in args.engines.split(","):
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, __file__, "--child", engine, "--rounds", str(args.rounds),
                                 "--data-dir", args.data_dir], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        root = psutil.Process(proc.pid)
        peak = (0, 0, 0, 0)
        peak_pss = peak_root = max_procs = 0
        while proc.poll() is None:
            rss, pss, n, root_rss = tree_memory(root)
            if rss > peak[0]:
                peak = (rss, pss, n, root_rss)
            peak_pss, peak_root, max_procs = max(peak_pss, pss), max(peak_root, root_rss), max(max_procs, n)
            time.sleep(args.period)
        out, err = proc.communicate()
        wall = time.perf_counter() - t0
        res = next((json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")), None)
        if res is None:
            print(f"--- {engine} failed (rc {proc.returncode}); its stderr ends:\n{err[-4000:]}", file=sys.stderr)
        rows.append((engine, wall, peak[0], peak_pss, peak[2], max_procs, peak_root, res))

    mib = 2**20
    print(f"mnist-mlp, K=50 M=5 B=64 E=5, TSA tau=5, {args.rounds} rounds, device=cpu, {psutil.cpu_count()} CPUs; "
          f"process tree of each run sampled every {args.period:g} s")
    print(f"{'engine':<11}{'wall s':>8}{'peak RSS sum MiB':>18}{'peak PSS sum MiB':>18}{'procs at peak':>15}"
          f"{'most procs':>12}{'driver RSS MiB':>16}{'accuracy':>10}")
    for engine, wall, rss, pss, n, most, root_rss, res in rows:
        acc = "failed" if res is None else f"{res['accuracy']:.4f}"
        print(f"{engine:<11}{wall:>8.1f}{rss / mib:>18.0f}{pss / mib:>18.0f}{n:>15}{most:>12}{root_rss / mib:>16.0f}"
              f"{acc:>10}")
    print("RSS sum counts shared pages once per process; PSS sum splits them among their sharers; "
          "driver RSS: the run's own process alone")
    if any(r[-1] is None for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
