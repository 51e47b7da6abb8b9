"""Seconds per round and peak GPU memory with fractional GPUs: Ray engine vs in-process engine.

    python benchmarks/gpu_round_time.py --rounds 10 --fake-pixels /tmp/fake --timeout 150

For each setup (CIFAR10–CNN with lr = 0.05, CIFAR100–ResNet-18 with lr = 0.01; the paper's
protocol otherwise: K = 50, M = 5, 13 TSA attackers with τ = 5, B = 64, E = 5, central
evaluation on the 10k test images after every round, ``device=cuda``) it runs ``fedcal run``
through Flower's Simulation Engine (``engine=ray``) with ``client-gpus`` ∈ {1, 0.5, 0.25}
(Ray then runs at most 1, 2 or 4 virtual clients on the GPU at once; each also takes
``client-cpus = 1``), and through the in-process engine (``engine=inprocess``: every client in
one process, one after the other, ``client-gpus`` unused). Each run is its own subprocess, so
each starts with an empty GPU.

Printed per run:

* s/round (steady): mean of the run store's ``round_seconds`` (``timings.csv``) over rounds 2..N (round 1 holds
  Ray's actor start-up, CUDA initialisation and data loading), as benchmarks/round_time.py;
* total s: the subprocess's wall time, start-up, data loading and Ray included;
* GPU MiB peak: the peak of the device's used memory (NVML ``memory.used``, what
  ``nvidia-smi --query-gpu=memory.used`` prints: every process on the GPU, the CUDA contexts
  of the server process and of each Ray actor included) sampled every 0.1 s by a background
  thread of this process, minus the value before the run started;
* GPU procs: the most processes seen on the GPU at once (NVML's compute processes; the server
  process counts one) — how many clients actually shared the GPU;
* torch alloc MiB: ``torch.cuda.max_memory_allocated()`` of the run's own process (the server,
  and for ``inprocess`` every client too; a Ray actor's tensors are not in it).

``--fake-pixels DIR`` writes ``<dataset>_{train,test}.npz`` with CIFAR's shapes, uniformly random
pixels and balanced labels (5000 / 500 per class for CIFAR-10 / CIFAR-100, as the real sets)
into DIR and reads the data from there: a round's compute does not depend on pixel values,
and balanced labels give the Dirichlet partition the same client sizes as the real sets. Use
it where no offline copy exists (no CIFAR-100 copy exists offline; the CIFAR-10 copy does not
fit what travels to a GPU machine). Accuracies of such runs mean nothing and are not printed.
Without it, ``--data-dir`` is read as usual.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SETUPS = {  # name: run-config overrides
    "cifar10-cnn": dict(dataset="cifar10", model="cnn", lr=0.05),
    "cifar100-resnet18": dict(dataset="cifar100", model="resnet18", lr=0.01),
}


# ---------------------------------------------------------------------- one run (subprocess)
def child(spec: dict) -> None:
    """Run one config; print one JSON line with its per-round seconds and memory."""
    import torch

    from fedcal.app.engine import simulate
    from fedcal.config import RunConfig
    from fedcal.results import load_timings

    with tempfile.TemporaryDirectory() as tmp:
        cfg = RunConfig.from_flower(dict(tau=5.0, output_dir=tmp, **spec))
        run_dir = simulate(cfg, progress=False)
        df = load_timings(run_dir)
    rs = df[df.metric == "round_seconds"].sort_values("round")
    print("RESULT " + json.dumps({
        "rounds": rs["round"].astype(int).tolist(), "round_seconds": rs["value"].tolist(),
        "torch_max_alloc_mib": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "torch": torch.__version__,
    }), flush=True)


# ---------------------------------------------------------------------- GPU memory sampler
class GpuSampler:
    """Samples the GPU's used memory (and its compute processes) every ``period`` seconds in a
    background thread: NVML through pynvml when importable, else ``nvidia-smi`` (no process
    count then)."""

    def __init__(self, period: float = 0.1):
        self.period = period
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._h = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.source = "NVML (pynvml) memory.used"
        except Exception:  # noqa: BLE001 - no pynvml: fall back to the CLI
            self._nvml = None
            self.source = "nvidia-smi --query-gpu=memory.used"
            try:
                self.sample()
            except (OSError, subprocess.CalledProcessError):  # no GPU (a CPU smoke test of this script)
                self.source = "none (no GPU found)"

    def sample(self) -> tuple[float, int | None]:
        """(used MiB, number of compute processes or None)."""
        if self._nvml is not None:
            used = self._nvml.nvmlDeviceGetMemoryInfo(self._h).used / 2**20
            try:
                procs = len(self._nvml.nvmlDeviceGetComputeRunningProcesses(self._h))
            except Exception:  # noqa: BLE001
                procs = None
            return used, procs
        if self.source.startswith("none"):
            return 0.0, None
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=True).stdout
        return float(out.split()[0]), None

    def device_name(self) -> str:
        if self.source.startswith("none"):
            return "no GPU"
        if self._nvml is not None:
            name = self._nvml.nvmlDeviceGetName(self._h)
            return name.decode() if isinstance(name, bytes) else name
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, check=True).stdout.strip()

    def start(self) -> None:
        self.peak, self.procs, self._stop = 0.0, 0, threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            used, procs = self.sample()
            self.peak = max(self.peak, used)
            self.procs = None if procs is None else max(self.procs or 0, procs)
            self._stop.wait(self.period)

    def stop(self) -> tuple[float, int | None]:
        self._stop.set()
        self._t.join()
        return self.peak, self.procs


# ---------------------------------------------------------------------- fake-pixel data
def write_fake_pixels(out: Path, datasets: set[str]) -> None:
    import numpy as np

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    classes = {"cifar10": 10, "cifar100": 100}
    for name in sorted(datasets):
        for split, n in (("train", 50_000), ("test", 10_000)):
            path = out / f"{name}_{split}.npz"
            if path.exists():
                continue
            y = rng.permutation(np.arange(n, dtype=np.int64) % classes[name])
            x = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
            np.savez(path, x=x, y=y)


# ---------------------------------------------------------------------- driver
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--fake-pixels", default="", metavar="DIR",
                    help="write random-pixel CIFAR-10/100 npz files into DIR and read data from there")
    ap.add_argument("--setups", default=",".join(SETUPS), help=f"comma-separated, of {', '.join(SETUPS)}")
    ap.add_argument("--engines", default="ray:1,ray:0.5,ray:0.25,inprocess",
                    help="comma-separated: ray:<client-gpus> or inprocess")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a smoke test of this script")
    ap.add_argument("--timeout", type=float, default=240, help="seconds allowed per run")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return

    setups = [s for s in args.setups.split(",") if s]
    engines = []
    for e in args.engines.split(","):
        if e == "inprocess":
            engines.append(("inprocess", dict(engine="inprocess")))
        else:
            gpus = float(e.split(":")[1])
            engines.append((f"ray, client-gpus={gpus:g}", dict(engine="ray", client_gpus=gpus)))
    data_dir = args.data_dir
    if args.fake_pixels:
        write_fake_pixels(Path(args.fake_pixels), {SETUPS[s]["dataset"] for s in setups})
        data_dir = args.fake_pixels

    sampler = GpuSampler()
    base, _ = sampler.sample()
    rows, info = [], {}
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for setup in setups:
        for ename, eover in engines:
            spec = dict(SETUPS[setup], num_rounds=args.rounds, data_dir=data_dir, device=args.device, **eover)
            before, _ = sampler.sample()
            sampler.start()
            t0 = time.perf_counter()
            try:
                p = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env,
                                   capture_output=True, text=True, timeout=args.timeout)
                out, err, rc = p.stdout, p.stderr, p.returncode
            except subprocess.TimeoutExpired as exc:
                out, err, rc = exc.stdout or "", exc.stderr or "", "timeout"
                out, err = (x.decode() if isinstance(x, bytes) else x for x in (out, err))
            total = time.perf_counter() - t0
            peak, procs = sampler.stop()
            res = next((json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")), None)
            if res is None:
                print(f"--- {setup} / {ename} failed (rc {rc}); its stderr ends:\n{err[-4000:]}", file=sys.stderr,
                      flush=True)
                rows.append((setup, ename, None, total, peak - before, procs, None))
                continue
            info = res
            steady = [s for r, s in zip(res["rounds"], res["round_seconds"]) if r >= 2]
            per = statistics.mean(steady) if steady else float("nan")
            rows.append((setup, ename, per, total, peak - before, procs, res["torch_max_alloc_mib"]))
            print(f"# {setup:<18} {ename:<22} {per:8.3f} s/round  {total:6.1f} s  GPU +{peak - before:7.0f} MiB  "
                  f"procs {procs}  torch alloc {res['torch_max_alloc_mib']} MiB  "
                  f"rounds {[round(x, 3) for x in res['round_seconds']]}", file=sys.stderr, flush=True)

    print(f"{info.get('device') or sampler.device_name()}, torch {info.get('torch', '?')}; "
          f"K=50 M=5 B=64 E=5, TSA tau=5, {args.rounds} rounds per run, device={args.device}; "
          f"data: {'random pixels, balanced labels (--fake-pixels)' if args.fake_pixels else data_dir}")
    print(f"GPU memory: {sampler.source}, whole device, peak during the run minus before it "
          f"(idle: {base:.0f} MiB), sampled every {sampler.period:g} s from this process")
    print(f"{'setup':<19}{'engine':<23}{'s/round':>9}{'total s':>9}{'GPU MiB peak':>14}{'GPU procs':>11}"
          f"{'torch alloc MiB':>17}")
    for setup, ename, per, total, gpu, procs, alloc in rows:
        per_s = "failed" if per is None else f"{per:.3f}"
        alloc_s = "-" if alloc is None else f"{alloc:.0f}"
        procs_s = "?" if procs is None else str(procs)
        print(f"{setup:<19}{ename:<23}{per_s:>9}{total:>9.1f}{gpu:>14.0f}{procs_s:>11}{alloc_s:>17}")
    print("s/round: steady state (mean of rounds 2..N); total s: the run's whole wall time, start-up included; "
          "torch alloc: torch.cuda.max_memory_allocated() of the run's own process (server, and every client "
          "for inprocess; not Ray's actors)")
    if any(r[2] is None for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
