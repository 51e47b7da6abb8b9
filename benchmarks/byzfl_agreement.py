"""fedcal's Byzantine cells against ByzFL's own training, side by side, cell by cell.

Where ``byzfl`` is importable (``pip install byzfl``; an optional extra, not a fedcal dependency)
this runs, for each cell (rule × attack) and seed:

* ByzFL's benchmark training — ``byzfl.benchmark.train.start_training`` on a setting built by
  ByzFL's own pipeline (``generate_all_combinations`` … ``compute_number_of_workers`` of
  ``byzfl.benchmark.benchmark``): D-SGD, ``cnn_mnist``, lr 0.1, client momentum 0.9, weight decay
  1e-4, batch 25, 10 honest clients and f = 3 Byzantine, Dirichlet α = 1 (``dirichlet_niid``),
  the whole training set (``size_train_set = 1``), on the CPU;
* fedcal's equivalent: the ``fedcal`` train task (``engine = batched``, the stacked clients' step —
  the in-process Flower path's run up to float rounding, ``--fedcal-engine inprocess`` runs that
  instead), 13 clients all in every round, 3 of them attackers, ``local-steps = 1`` at lr 0.1,
  ``client-momentum = 0.9`` (ByzFL's buffer), weight decay 1e-4, batch 25, Dirichlet α = 1, and
  ``model = lenet`` — ByzFL's ``cnn_mnist`` (two 5×5 conv + max-pool layers at 20 and 50
  channels, 800→500→10), PyTorch's default initialisation on both sides;

and writes ``runs.csv`` (one row per run: side, rule, attack, seed, steps, accuracy, CPU seconds)
and ``table.md`` (per cell: each side's mean ± half-range over the seeds and a verdict — "within
spread" when the two sides' seed ranges overlap, else "differs" with the gap in points; and what
the attack costs each side — its benign reference's mean minus the cell's —, so a cell whose gap
is the two trainings' own, the benign reference's, shows it) to
``--out`` (default docs/results/byzfl-agreement); a cell that differs carries the measured reason
``reasons.csv`` there gives (rule, attack, reason: written by hand from a measurement), and
``reading.md`` there (the hand-written reading) is kept below the table. Finished runs are kept in runs.csv and skipped
when the command is run again (a stopped comparison resumes).

The cells: the benign reference — ByzFL's ``Average`` with f = 0 against fedcal's mean over the 10
clients without attack: what the two trainings differ by before any attack —, then ByzFL's ``Average`` (fedcal: the unweighted mean — ``trimmed_mean`` with ``trim-f = 0``;
fedcal's ``fedavg`` weights by the clients' sample counts, ByzFL's average does not), ``TrMean``
(``trim-f = 3``) and ``NNM`` + ``TrMean`` (``pre-aggregation = nnm``, ``pre-f = 3``), under
``SignFlipping`` (``signflip``), ``ALittleIsEnough`` τ = 1.5 (``alie``, ``alie-z = 1.5``: fedcal
crafts updates, ByzFL gradients, so ByzFL's μ + τσ of gradients is fedcal's μ − zσ of updates),
``Optimal_ALittleIsEnough`` (``opt-alie``) and ``Optimal_InnerProductManipulation`` (``opt-ipm``).

Differences by construction (named in table.md): fedcal's 13 clients share the training set
(the 3 attackers hold 3/13 of it, unused by the model-poisoning attacks; ByzFL deals it to the 10
honest clients only); the partitions, the initial weights and the batches are drawn by each side's
own generator; ByzFL applies the weight decay at the server after aggregation, fedcal in each
client's step before the momentum (so the attacks see it in the honest updates); fedcal crafts
from updates (−η times a gradient), ByzFL from gradients, so a sign fixed in the attack's formula
means the opposite direction: fedcal's ``alie`` z = 1.5 is ByzFL's τ = 1.5 (μ − zσ of updates is
μ + τσ of gradients), but fedcal's ``opt-alie`` searches μ + τσ of updates, τ ≥ 0 — ByzFL's
Optimal ALIE mirrored (τ ≤ 0 in ByzFL's terms, its ``delta = −10``); the ``opt-alie-mirror``
rows run ByzFL's side so, against fedcal's ``opt-alie``, to measure what that sign costs.

Cost: ``--budget-cpu-min`` (default 40) — the command first runs every cell on both sides for
``--probe-steps`` steps (seed 0), takes each run's CPU seconds / steps as an upper bound of its
per-step cost (the setup included), and picks the largest step count (same on both sides, at most
800, ByzFL's) whose comparison fits the budget; ``--steps`` fixes it instead. Runs use one torch
thread, so CPU seconds are the cost on one core.

    PYTHONPATH=. /path/to/venv-with-byzfl/bin/python benchmarks/byzfl_agreement.py --steps 40  # the reading
    ... --steps 40 --alpha inf --out docs/results/byzfl-agreement/iid --cells mean:none,mean:alie  # a measurement
    python benchmarks/byzfl_agreement.py --steps 200 --seeds 3 --cells mean:signflip,trmean:alie
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shutil
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results" / "byzfl-agreement"
FIELDS = ["side", "rule", "attack", "seed", "steps", "accuracy", "cpu_s"]
HONEST, F, ALPHA, LR, MOMENTUM, WD, BATCH = 10, 3, 1.0, 0.1, 0.9, 1e-4, 25
BYZFL_MAX_STEPS = 800  # ByzFL's default benchmark length
#: MNIST's test-set chance rate (the majority class, 1135 of 10,000) and the accuracy up to which a
#: model is within noise of it (one-sided binomial test at level 0.01, as fedcal's reports flag it)
CHANCE, CHANCE_FLAG = 0.1135, 0.1209


@dataclass(frozen=True)
class Rule:
    key: str
    label: str
    byzfl: tuple[str, tuple[str, ...]]  # (aggregator, pre-aggregators)
    fedcal: dict


@dataclass(frozen=True)
class Attack:
    key: str
    label: str
    byzfl: tuple[str, dict]  # (ByzFL attack name, its parameters)
    fedcal: dict
    f: int = F  # Byzantine clients (0: the benign reference, 10 honest clients alone)
    same_as: str = ""  # a ByzFL-only variant: compared with fedcal's runs of this attack (not rerun)


RULES = (
    Rule("mean", "Average / mean", ("Average", ()), {"strategy": "trimmed_mean", "trim_f": 0}),
    Rule("trmean", "TrMean (f=3)", ("TrMean", ()), {"strategy": "trimmed_mean", "trim_f": F}),
    Rule("nnm-trmean", "NNM + TrMean (f=3)", ("TrMean", ("NNM",)),
         {"strategy": "trimmed_mean", "trim_f": F, "pre_aggregation": "nnm", "pre_f": F}),
)
ATTACKS = (
    Attack("none", "no attack (f=0)", ("SignFlipping", {}), {"attack": "none"}, f=0),
    Attack("signflip", "SignFlipping", ("SignFlipping", {}), {"attack": "signflip"}),
    Attack("alie", "ALIE (tau=1.5)", ("ALittleIsEnough", {"tau": 1.5}), {"attack": "alie", "alie_z": 1.5}),
    Attack("opt-alie", "Optimal ALIE", ("Optimal_ALittleIsEnough", {}), {"attack": "opt-alie"}),
    Attack("opt-ipm", "Optimal IPM", ("Optimal_InnerProductManipulation", {}), {"attack": "opt-ipm"}),
)
#: the comparison's cells: the benign reference (the mean without attack) and every rule × attack
CELLS = ((RULES[0], ATTACKS[0]), *((r, a) for r in RULES for a in ATTACKS[1:]))
#: a measurement, not a cell: ByzFL's Optimal ALIE searching τ ≤ 0 (``delta = −10``) — fedcal's
#: ``opt-alie`` direction (μ + τσ of updates = μ − τσ of gradients) — against fedcal's opt-alie runs
MIRROR = Attack("opt-alie-mirror", "Optimal ALIE, ByzFL with delta = −10 (fedcal's direction)",
                ("Optimal_ALittleIsEnough", {"delta": -10.0}), {"attack": "opt-alie"}, same_as="opt-alie")
MEASUREMENTS = tuple((r, MIRROR) for r in RULES)


def set_alpha(alpha: float, weight_decay: float = WD) -> None:
    """Both sides' label skew and weight decay for this command (``--alpha``, ``--weight-decay``)."""
    global ALPHA, WD
    if not (alpha > 0):
        raise SystemExit(f"--alpha: {alpha} is not a Dirichlet alpha (> 0, or inf for IID)")
    ALPHA, WD = alpha, weight_decay


def byzfl_missing() -> str | None:
    """Why ByzFL's side cannot run here (one line), or None."""
    try:
        import byzfl.benchmark.train  # noqa: F401
    except ImportError as exc:
        return f"byzfl is not importable ({exc}); pip install byzfl (an optional extra) to compare"
    return None


# ---------------------------------------------------------------------------------- ByzFL's side
def torchvision_mnist(data_dir: Path, root: Path) -> Path:
    """ByzFL reads MNIST through torchvision (``root/MNIST/raw``, IDX files); written here, once,
    from fedcal's offline ``mnist_{train,test}.npz`` (no download)."""
    import numpy as np

    raw = root / "MNIST" / "raw"
    names = {"train": "train", "test": "t10k"}
    if all((raw / f"{p}-labels-idx1-ubyte").exists() for p in names.values()):
        return root
    raw.mkdir(parents=True, exist_ok=True)
    for split, prefix in names.items():
        d = np.load(data_dir / f"mnist_{split}.npz")
        x, y = d["x"].astype(np.uint8), d["y"].astype(np.uint8)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 0x803, *x.shape) + x.tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, len(y)) + y.tobytes())
    return root


def byzfl_setting(rule: Rule, attack: Attack, seed: int, steps: int, data: Path, results: Path) -> dict:
    """One setting of ByzFL's benchmark, built by ByzFL's own pipeline from a one-cell config."""
    from byzfl.benchmark import benchmark as bench

    agg, pre = rule.byzfl
    name, params = attack.byzfl
    config = {
        "benchmark_config": {"training_algorithm": {"name": "DSGD", "parameters": {}}, "nb_steps": steps,
                             "device": "cpu", "training_seed": seed, "nb_training_seeds": 1,
                             "nb_honest_clients": HONEST, "f": attack.f, "data_distribution_seed": seed,
                             "nb_data_distribution_seeds": 1, "size_train_set": 1.0,
                             "set_honest_clients_as_clients": False,
                             "data_distribution": ({"name": "iid", "distribution_parameter": 1.0}
                                                   if math.isinf(ALPHA) else
                                                   {"name": "dirichlet_niid", "distribution_parameter": ALPHA})},
        "model": {"name": "cnn_mnist", "dataset_name": "mnist", "nb_labels": 10, "loss": "NLLLoss",
                  "learning_rate": LR, "learning_rate_decay": 1.0, "milestones": []},
        "aggregator": {"name": agg, "parameters": {}},
        "pre_aggregators": [{"name": p, "parameters": {}} for p in pre],
        "honest_clients": {"momentum": MOMENTUM, "weight_decay": WD, "batch_size": BATCH},
        "attack": {"name": name, "parameters": dict(params)},
        "evaluation_and_results": {"evaluation_delta": max(1, steps), "batch_size_evaluation": 1000,
                                   "evaluate_on_test": True, "store_per_client_metrics": False,
                                   "store_models": False, "data_folder": str(data),
                                   "results_directory": str(results)},
    }
    settings = bench.generate_all_combinations(config, ["pre_aggregators", "milestones"])
    settings = bench.ensure_key_parameters(settings)
    settings = bench.set_tolerated_f_equal_to_real_f(settings)
    settings = bench.set_declared_as_aggregation_parameter(settings)
    settings = bench.compute_number_of_workers(settings)
    if len(settings) != 1:
        raise RuntimeError(f"ByzFL's pipeline made {len(settings)} settings of one cell")
    return settings[0]


def run_byzfl(rule: Rule, attack: Attack, seed: int, steps: int, work: Path, data_dir: Path) -> tuple[float, float]:
    """(final test accuracy, CPU seconds) of ByzFL's training of one cell and seed."""
    from byzfl.benchmark.train import start_training

    data = torchvision_mnist(data_dir, work / "byzfl-data")
    results = work / "byzfl" / f"{rule.key}-{attack.key}-s{seed}-{steps}"
    shutil.rmtree(results, ignore_errors=True)
    setting = byzfl_setting(rule, attack, seed, steps, data, results)
    cpu = time.process_time()
    start_training(setting)
    cpu = time.process_time() - cpu
    [acc_file] = results.glob(f"*/test_accuracy_tr_seed_{seed}_dd_seed_{seed}.txt")
    return float(acc_file.read_text().strip().split(",")[-1]), cpu


# ---------------------------------------------------------------------------------- fedcal's side
def fedcal_config(rule: Rule, attack: Attack, seed: int, steps: int, out: Path, data_dir: Path,
                  engine: str = "batched"):
    from fedcal.config import RunConfig

    n = HONEST + attack.f
    return RunConfig(dataset="mnist", data_dir=str(data_dir), model="lenet", num_clients=n, clients_per_round=n,
                     attacker_ratio=attack.f / n, **partition(), lr=LR, batch_size=BATCH,
                     local_steps=1, client_momentum=MOMENTUM, weight_decay=WD, num_rounds=steps,
                     eval_every=steps, seed=seed, engine=engine, device="cpu", output_dir=str(out),
                     **rule.fedcal, **attack.fedcal)


def partition() -> dict:
    """fedcal's partition keys for ``ALPHA`` (inf: IID, as ByzFL's ``iid``)."""
    return {"partition": "iid"} if math.isinf(ALPHA) else {"partition": "dirichlet", "dirichlet_alpha": ALPHA}


def run_fedcal(rule: Rule, attack: Attack, seed: int, steps: int, work: Path, data_dir: Path,
               engine: str = "batched") -> tuple[float, float]:
    """(final test accuracy, CPU seconds) of fedcal's run of one cell and seed (``engine``: batched,
    the stacked clients' step; inprocess, the Flower path — the same run up to float rounding)."""
    from fedcal.app.engine import simulate
    from fedcal.results import run_dir_for

    cfg = fedcal_config(rule, attack, seed, steps, work / "fedcal", data_dir, engine)
    cpu = time.process_time()
    simulate(cfg, progress=False)
    cpu = time.process_time() - cpu
    with open(run_dir_for(cfg) / "metrics.csv") as fh:  # long format: run_id, round, metric, value
        acc = {int(r["round"]): float(r["value"]) for r in csv.DictReader(fh) if r["metric"] == "accuracy"}
    return acc[steps], cpu


SIDES = {"byzfl": run_byzfl, "fedcal": run_fedcal}


# ---------------------------------------------------------------------------------- the table
def verdict(byzfl: list[float], fedcal: list[float]) -> str:
    """"within spread" when the two sides' seed ranges overlap, else "differs: …" with the gap
    between them in accuracy points; a side of one seed has no spread: no verdict, the gap."""
    if not byzfl or not fedcal:
        return "incomplete"
    byzfl, fedcal = [_at_chance_if_diverged(v) for v in byzfl], [_at_chance_if_diverged(v) for v in fedcal]
    if max(byzfl + fedcal) <= CHANCE_FLAG:
        return "within spread (both at chance)"
    if len(byzfl) < 2 or len(fedcal) < 2:
        gap = 100 * (mean(fedcal) - mean(byzfl))
        return f"no verdict: one seed on a side (fedcal {gap:+.1f} points)"
    lo_b, hi_b, lo_f, hi_f = min(byzfl), max(byzfl), min(fedcal), max(fedcal)
    if lo_f <= hi_b and lo_b <= hi_f:
        return "within spread"
    gap = 100 * (lo_f - hi_b if lo_f > hi_b else lo_b - hi_f)
    higher = "fedcal" if lo_f > hi_b else "ByzFL"
    return f"differs: {higher} higher by {gap:.1f} points beyond the seed ranges"


def _at_chance_if_diverged(accuracy: float) -> float:
    """A diverged run (fedcal's accuracy NaN: its weights are no longer finite) at the chance rate."""
    return CHANCE if math.isnan(accuracy) else accuracy


def _verdict_text(acc: dict[str, list[float]], reason: str | None) -> str:
    """The verdict, and where it is not "within spread" the measured reason ``reasons.csv`` gives."""
    v = verdict(acc["byzfl"], acc["fedcal"])
    return f"{v}; {reason}" if reason and v != "within spread" else v


def _cost_text(benign: dict[str, list[float]], acc: dict[str, list[float]], attack: Attack) -> str:
    """What the attack costs each side: its benign reference's mean accuracy minus the cell's, in
    points (– for the reference itself, or a side without both)."""
    if attack.f == 0:
        return "–"
    cost = [f"{100 * (mean(benign[s]) - mean(_at_chance_if_diverged(v) for v in acc[s])):.1f}"
            if benign[s] and acc[s] else "–" for s in SIDES]
    return " / ".join(cost)


def _cell_text(values: list[float]) -> str:
    """mean ± half-range in points, n; a diverged run counted at chance and marked †."""
    if not values:
        return "–"
    diverged = sum(math.isnan(v) for v in values)
    values = [_at_chance_if_diverged(v) for v in values]
    half = 50 * (max(values) - min(values))
    mark = f" † {diverged} diverged" if diverged else ""
    return f"{100 * mean(values):.1f} ± {half:.1f} (n={len(values)}{mark})"


def write_table(rows: list[dict], out: Path, steps: int, notes: str = "") -> str:
    """table.md from the runs: per cell, each side's mean ± half-range (points) and the verdict."""
    lines = [f"# fedcal vs ByzFL, cell by cell ({steps} D-SGD steps, f = {F} of {HONEST} honest, "
             f"{'IID' if math.isinf(ALPHA) else f'Dirichlet alpha = {ALPHA:g}'}, weight decay {WD:g}, MNIST)", "",
             "Test accuracy (%) after the last step: mean ± half the range over the seeds. "
             "Written by `benchmarks/byzfl_agreement.py` (its docstring: the settings and the differences "
             "by construction).", "",
             "| rule | attack | ByzFL | fedcal | verdict | attack's cost (ByzFL / fedcal) | "
             "CPU s (ByzFL / fedcal, per run) |",
             "|---|---|---|---|---|---|---|"]
    benign = {s: [_at_chance_if_diverged(float(r["accuracy"])) for r in rows if r["side"] == s
                  and r["rule"] == CELLS[0][0].key and r["attack"] == CELLS[0][1].key and int(r["steps"]) == steps]
              for s in SIDES}
    reasons = {(r["rule"], r["attack"]): r["reason"] for r in read_runs(out / "reasons.csv")}
    for rule, attack in (*CELLS, *MEASUREMENTS):
        key = {"byzfl": attack.key, "fedcal": attack.same_as or attack.key}
        got = {s: [r for r in rows if r["side"] == s and r["rule"] == rule.key and r["attack"] == key[s]
                   and int(r["steps"]) == steps] for s in SIDES}
        if attack.same_as and not got["byzfl"]:
            continue
        if not any(got.values()):
            continue
        acc = {s: [float(r["accuracy"]) for r in got[s]] for s in SIDES}
        cpu = {s: (f"{mean(float(r['cpu_s']) for r in got[s]):.0f}" if got[s] else "–") for s in SIDES}
        lines.append(f"| {rule.label} | {attack.label} | {_cell_text(acc['byzfl'])} | {_cell_text(acc['fedcal'])} | "
                     f"{_verdict_text(acc, reasons.get((rule.key, attack.key)))} | {_cost_text(benign, acc, attack)} | "
                     f"{cpu['byzfl']} / {cpu['fedcal']} |")
    total = sum(float(r["cpu_s"]) for r in rows if int(r["steps"]) == steps)
    lines += ["", f"Total CPU of these runs: {total / 60:.1f} min (one torch thread each)."]
    reading = out / "reading.md"  # the hand-written reading of the table, kept when it is rewritten
    notes = notes or (reading.read_text().strip() if reading.exists() else "")
    if notes:
        lines += ["", notes]
    text = "\n".join(lines) + "\n"
    (out / "table.md").write_text(text)
    return text


def read_runs(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path) as fh:
        return list(csv.DictReader(fh))


def append_run(path: Path, row: dict) -> None:
    new = not path.exists()
    with open(path, "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)


def take_claim(path: Path) -> bool:
    """Claim one run for this process (a file holding its pid, created exclusively), so that several
    processes of the same command share the runs; a claim whose process is gone is taken over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            os.kill(int(path.read_text() or 0), 0)
            return False  # its process is alive
        except (ProcessLookupError, ValueError, FileNotFoundError):
            path.write_text(str(os.getpid()))
            return True
    with os.fdopen(fd, "w") as fh:
        fh.write(str(os.getpid()))
    return True


def choose_steps(per_step: dict[tuple[str, str, str], float], seeds: int, budget_s: float) -> int:
    """The largest step count (≤ ByzFL's 800) whose runs — every cell, both sides, ``seeds`` seeds,
    at the measured CPU seconds per step — fit ``budget_s``."""
    cost = seeds * sum(per_step.values())
    return max(1, min(BYZFL_MAX_STEPS, int(budget_s // cost))) if cost > 0 else BYZFL_MAX_STEPS


def pick_cells(text: str) -> list[tuple[Rule, Attack]]:
    if not text:
        return list(CELLS)
    rules, attacks = {r.key: r for r in RULES}, {a.key: a for a in (*ATTACKS, MIRROR)}
    out = []
    for item in text.split(","):
        r, _, a = item.strip().partition(":")
        if r not in rules or a not in attacks:
            raise SystemExit(f"--cells: {item!r} is not rule:attack with rule in {', '.join(rules)} and attack in "
                             f"{', '.join(attacks)}")
        out.append((rules[r], attacks[a]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--work", type=Path, default=None, help="scratch folder (default: <out>/.work, not committed)")
    p.add_argument("--data-dir", default="", help="folder with mnist_{train,test}.npz (fedcal's data-dir)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=0, help="D-SGD steps (0: chosen from --budget-cpu-min)")
    p.add_argument("--budget-cpu-min", type=float, default=40.0)
    p.add_argument("--probe-steps", type=int, default=3)
    p.add_argument("--cells", default="", help="rule:attack,... (default: all 13, mean:none the benign reference)")
    p.add_argument("--sides", default="byzfl,fedcal")
    p.add_argument("--fedcal-engine", default="batched", choices=("batched", "inprocess"),
                   help="fedcal's engine (batched: the stacked clients' step; inprocess: the Flower path)")
    p.add_argument("--weight-decay", type=float, default=WD, choices=(0.0, WD),
                   help="both sides' weight decay (0: removes where each applies it; use its own --out)")
    p.add_argument("--alpha", type=float, default=ALPHA,
                   help="Dirichlet alpha of both sides' label skew (inf: IID, ByzFL's iid); use its own --out")
    args = p.parse_args(argv)
    set_alpha(args.alpha, args.weight_decay)

    missing = byzfl_missing()
    if missing:
        print(f"byzfl_agreement: skipped: {missing}")
        return 0
    import torch

    from fedcal.data.datasets import default_data_dir

    torch.set_num_threads(1)
    data_dir = default_data_dir(args.data_dir)
    if not (data_dir / "mnist_train.npz").exists():
        print(f"byzfl_agreement: skipped: no {data_dir / 'mnist_train.npz'} (fedcal data mnist writes it)")
        return 0
    cells, sides = pick_cells(args.cells), [s for s in args.sides.split(",") if s]
    run_side = {"byzfl": run_byzfl,
                "fedcal": lambda *a: run_fedcal(*a, engine=args.fedcal_engine)}
    out = args.out
    work = args.work or out / ".work"
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    runs_csv = out / "runs.csv"

    steps = args.steps
    if not steps:  # measure every cell on both sides, then fit the budget
        per_step = {}
        for rule, attack in cells:
            for side in sides:
                acc, cpu = run_side[side](rule, attack, 0, args.probe_steps, work / "probe", data_dir)
                per_step[(side, rule.key, attack.key)] = cpu / args.probe_steps
                print(f"probe {side:6s} {rule.key:10s} {attack.key:8s}: {cpu / args.probe_steps:.2f} CPU s/step "
                      f"(setup included)", flush=True)
        steps = choose_steps(per_step, args.seeds, 60 * args.budget_cpu_min)
        with open(out / "probe.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["side", "rule", "attack", "probe_steps", "cpu_s_per_step"])
            for (side, r, a), v in per_step.items():
                w.writerow([side, r, a, args.probe_steps, f"{v:.3f}"])
        print(f"steps = {steps} (budget {args.budget_cpu_min:g} CPU-min, {args.seeds} seeds, {len(cells)} cells)")

    # seed-major: every cell's first seed before any cell's second, so a stopped comparison has
    # whole columns of seeds (and resumes where it stopped)
    for seed in range(args.seeds):
        for rule, attack in cells:
            for side in sides:
                if side == "fedcal" and attack.same_as:  # fedcal's runs of attack.same_as are its side
                    continue
                # read before each run: another process (the other side, other cells) may append meanwhile
                done = {(r["side"], r["rule"], r["attack"], int(r["seed"]), int(r["steps"])) for r in read_runs(runs_csv)}
                if (side, rule.key, attack.key, seed, steps) in done:
                    continue
                claim = work / "claims" / f"{side}-{rule.key}-{attack.key}-s{seed}-{steps}"
                if not take_claim(claim):  # another process of the same command runs it now
                    continue
                try:
                    acc, cpu = run_side[side](rule, attack, seed, steps, work, data_dir)
                    append_run(runs_csv, {"side": side, "rule": rule.key, "attack": attack.key, "seed": seed,
                                          "steps": steps, "accuracy": f"{acc:.4f}", "cpu_s": f"{cpu:.1f}"})
                finally:
                    claim.unlink(missing_ok=True)
                print(f"{side:6s} {rule.key:10s} {attack.key:8s} seed {seed}: accuracy {acc:.4f}, {cpu:.0f} CPU s",
                      flush=True)
    print(write_table(read_runs(runs_csv), out, steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
