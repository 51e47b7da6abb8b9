"""What a checkpoint costs, as a share of a round, measured in the same run.

Each case is one run through the in-process engine with ``checkpoint-every=1`` (a checkpoint
after every round but the last): every call of :meth:`fedcal.results.RunStore.save_checkpoint`
is timed: capturing the state (for distill also fetching every client's state over Flower
messages), serialising it, fsync and rename. The round's own time is its ``round_seconds``
(``timings.csv``) minus the checkpoint written inside it (a round's seconds include the
checkpoint of the round before). Printed per case: the mean round time without checkpoints, the
mean checkpoint time and size, and the checkpoint cost per round as a share of a round at
``checkpoint-every`` = 1 and at the default: cost / (k × round time). Rounds 1.. only (round 0
is the initial evaluation); the first checkpoint is left out of the mean (it warms the writer).

Cases (paper scale, SPEC's federation: 50 clients, 5 per round):

* ``mnist-mlp``: MNIST–MLP, ``local-epochs=1``, FedAvg — the global model is the whole state;
* ``mnist-mlp-foolsgold``: the same under FoolsGold, whose per-client histories (one model-sized
  vector per client seen) are the largest strategy state; a few rounds see few clients, so the
  row below it times the checkpoint of a long run, all 50 clients' histories held (written by the
  same ``save_checkpoint`` in the train task's layout), against the same round time;
* ``cifar10-cnn``: CIFAR10–CNN, ``local-epochs=2 augment=crop-flip lr=0.05``, FedAvg;
* ``distill``: RFD-LoRA on the sentiment corpus with ``num-clients=12`` (docs/distill.md's
  Table 1 setting): the student, its AdamW state, the recorded uploads and 12 clients' adapters.

    python benchmarks/checkpoint_cost.py --data-dir ../shared/data            # every case, 4 rounds
    python benchmarks/checkpoint_cost.py --data-dir ../shared/data --cases mnist-mlp --rounds 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

CASES = {
    "mnist-mlp": {"dataset": "mnist", "model": "mlp", "local-epochs": 1},
    "mnist-mlp-foolsgold": {"dataset": "mnist", "model": "mlp", "local-epochs": 1, "strategy": "foolsgold"},
    "cifar10-cnn": {"dataset": "cifar10", "model": "cnn", "lr": 0.05, "local-epochs": 2, "augment": "crop-flip"},
    "distill": {"task": "distill", "num-clients": 12},
}


def measure(case: str, rounds: int, data_dir: str, out: str) -> dict[str, float]:
    """One run of ``case`` with a checkpoint after every round; the per-round and per-checkpoint
    times and the checkpoint's size."""
    from fedcal.app.engine import simulate
    from fedcal.config import RunConfig
    from fedcal.results import CHECKPOINT_FILE, RunStore, load_timings

    spec = dict(CASES[case])
    rounds_key = "dst-rounds" if spec.get("task") == "distill" else "num-rounds"
    cfg = RunConfig.from_flower({**spec, rounds_key: rounds, "checkpoint-every": 1, "engine": "inprocess",
                                 "device": "cpu", "data-dir": data_dir, "output-dir": out, "tau": 5.0})
    costs: dict[int, float] = {}
    sizes: list[int] = []
    real = RunStore.save_checkpoint

    def timed(store, server_round, state):
        t0 = time.perf_counter()
        out_ = real(store, server_round, state)
        costs[server_round] = time.perf_counter() - t0
        sizes.append((store.dir / CHECKPOINT_FILE).stat().st_size)
        return out_

    RunStore.save_checkpoint = timed
    try:
        run_dir = simulate(cfg, progress=False, force=True)
    finally:
        RunStore.save_checkpoint = real
    seconds = load_timings(run_dir).set_index("round")["value"]
    own = [seconds[r] - costs.get(r - 1, 0.0) for r in range(1, rounds + 1)]
    ckpt = [costs[r] for r in sorted(costs)][1:] or list(costs.values())
    return {"round_s": statistics.mean(own), "checkpoint_s": statistics.mean(ckpt),
            "checkpoint_mb": statistics.mean(sizes) / 1e6, "checkpoints": len(costs)}


def full_foolsgold(num_clients: int, out: str, repeat: int = 4) -> dict[str, float]:
    """A FoolsGold checkpoint once every client has a history (a long run: ``num_clients``
    model-sized vectors, the MNIST–MLP's), written by :meth:`RunStore.save_checkpoint` in the
    train task's state layout; mean seconds of ``repeat`` − 1 writes after a first one."""
    from fedcal.checkpoint import rng_state
    from fedcal.config import RunConfig
    from fedcal.models import build_model
    from fedcal.results import CHECKPOINT_FILE, RunStore

    model = build_model("mlp", (1, 28, 28), 10, seed=0)
    d = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(0)
    history = {c: 1e-3 * torch.randn(d, generator=g) for c in range(num_clients)}
    cfg = RunConfig.from_flower({"dataset": "mnist", "strategy": "foolsgold", "output-dir": out, "run-name": "full"})
    store = RunStore(f"{out}/full", cfg)
    store.start()
    store.log_round(0, {"accuracy": 0.1})
    state = {"arrays": model.state_dict(), "strategy": {"history": history}, "rows": [], "rejections": [],
             "aggregated": 1, "rng": rng_state()}
    times = []
    for r in range(1, repeat + 1):
        t0 = time.perf_counter()
        store.save_checkpoint(r, state)
        times.append(time.perf_counter() - t0)
    size = (store.dir / CHECKPOINT_FILE).stat().st_size
    return {"checkpoint_s": statistics.mean(times[1:]), "checkpoint_mb": size / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated cases")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per run (a checkpoint after each but the last)")
    ap.add_argument("--data-dir", default=os.environ.get("FEDCAL_DATA_DIR", ""), help="folder with the .npz data")
    args = ap.parse_args()
    from fedcal.config import RunConfig

    default = RunConfig().checkpoint_every
    print(f"checkpoint cost per round, in-process engine, {os.cpu_count()} CPU cores, torch threads "
          f"{torch.get_num_threads()}, {args.rounds} rounds per run (a checkpoint after rounds "
          f"1..{args.rounds - 1})")
    print(f"{'case':<22}{'round s':>10}{'ckpt s':>10}{'ckpt MB':>10}{'every=1':>10}{f'every={default}':>11}")
    for case in args.cases.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            m = measure(case, args.rounds, args.data_dir, tmp)
        share1 = m["checkpoint_s"] / m["round_s"]
        print(f"{case:<22}{m['round_s']:>10.3f}{m['checkpoint_s']:>10.4f}{m['checkpoint_mb']:>10.2f}"
              f"{100 * share1:>9.2f}%{100 * share1 / default:>10.2f}%", flush=True)
        if case == "mnist-mlp-foolsgold":  # a short run holds few histories: the long run's checkpoint too
            with tempfile.TemporaryDirectory() as tmp:
                full = full_foolsgold(50, tmp)
            share1 = full["checkpoint_s"] / m["round_s"]
            print(f"{'  ... 50 histories':<22}{m['round_s']:>10.3f}{full['checkpoint_s']:>10.4f}"
                  f"{full['checkpoint_mb']:>10.2f}{100 * share1:>9.2f}%{100 * share1 / default:>10.2f}%", flush=True)


if __name__ == "__main__":
    main()
