"""The report commands' bad-input matrix (issue 30): run folders built the way users build them.

``tests/test_bad_inputs.py`` throws every bad reply at every strategy; this module throws every
kind of run folder a user ends up with at every report, table and analysis command: runs of
several configurations in one folder (a 100-round/50-client run beside 20-round/10-client ones),
the same run twice (a copied directory), unfinished runs, finished runs with a torn, missing or
doubly-written ``metrics.csv`` or an incomplete evaluation schedule, a corrupt ``config.json``, an
``--out`` that is a file, chance-level models (a constant predictor), a TSA run at τ = 1 and a set
without a benign run. The folders are written with fedcal's own :class:`fedcal.results.RunStore`
(small fake metrics, no training).

Each expectation is independent of the code under test: the seeds a row must count, the keys that
tell two configurations apart, a constant predictor's accuracy computed from the test labels, the
binomial chance threshold summed by hand.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fedcal.cli import main as cli_main
from fedcal.config import RunConfig
from fedcal.results import RunStore, run_dir_for

BASE = {"dataset": "digits", "num-clients": 10, "clients-per-round": 5, "num-rounds": 20}
SMALL = "num-clients=10 num-rounds=20"  # the config labels the two configurations must get
BIG = "num-clients=50 num-rounds=100"


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch):
    """The run store fsyncs every round; hundreds of fake rounds on a shared disk need not."""
    import os

    monkeypatch.setattr(os, "fsync", lambda fd: None)


def digits_labels() -> np.ndarray:
    from fedcal.data import load_dataset

    return load_dataset("digits").y_test.numpy()


def constant_predictor_accuracy() -> float:
    """What a model answering the most frequent test class for every input scores on digits."""
    y = digits_labels()
    return float(np.bincount(y).max() / len(y))


def train_run(root: Path, acc: float = 0.9, finish: bool = True, **overrides) -> Path:
    """A finished train run of ``BASE`` + ``overrides`` whose accuracy climbs linearly from 0.1 at
    round 0 to ``acc`` at its last round; every round of its schedule is logged, as the task does."""
    cfg = RunConfig.from_flower({**BASE, "output-dir": str(root), **overrides})
    store = RunStore(run_dir_for(cfg), cfg)
    store.start()
    n, every = cfg.num_rounds, cfg.eval_every
    for r in range(n + 1):
        row: dict[str, float] = {"round_seconds": 0.1}
        if r in (0, n) or r % every == 0:
            a = 0.1 + (acc - 0.1) * r / n
            row.update(accuracy=a, ece=0.05, sece=0.01 * cfg.tau, brier=1 - a, nll=2 - a)
        if r:
            row.update(replies_received=5, replies_accepted=5, replies_rejected=0)
        store.log_round(r, row)
    store.write_table("reliability.csv", pd.DataFrame({"lower": [0.0, 0.5], "upper": [0.5, 1.0], "count": [200, 250],
                                                       "confidence": [0.3, 0.8], "accuracy": [0.2, 0.9]}))
    if finish:
        store.finish()
    return store.dir


def report(dirs, out: Path, capsys) -> tuple[int, str, str]:
    code = cli_main(["report", *map(str, dirs), "--out", str(out)])
    io = capsys.readouterr()
    return code, io.out, io.err


# --------------------------------------------------------------------------- grouping by configuration
@pytest.fixture
def mixed(tmp_path):
    """The newcomer's folder: one 100-round/50-client run pair (seed 0) beside 20-round/10-client
    pairs (seeds 0–3); each pair a benign run and TSA at τ = 5."""
    runs = tmp_path / "runs"
    big = {"num-clients": 50, "num-rounds": 100}
    dirs = {("big", "benign", 0): train_run(runs, 0.80, attack="none", **big),
            ("big", "tsa", 0): train_run(runs, 0.70, tau=5.0, **big)}
    for seed in range(4):
        dirs["small", "benign", seed] = train_run(runs, 0.60 + 0.01 * seed, attack="none", seed=seed)
        dirs["small", "tsa", seed] = train_run(runs, 0.50 + 0.01 * seed, tau=5.0, seed=seed)
    return dirs


def test_report_keeps_configurations_apart_and_counts_each_seed_once(mixed, tmp_path, capsys):
    code, _, err = report(mixed.values(), tmp_path / "rep", capsys)
    assert code == 0, err
    seeds = pd.read_csv(tmp_path / "rep" / "table_seeds.csv")
    tsa = seeds[seeds["tau"] == 5.0].set_index("config")
    # two τ = 5 rows, one per configuration — never one row of "5 seeds" (seed 0 twice)
    assert sorted(tsa.index) == sorted([BIG, SMALL])
    assert tsa.loc[BIG, "seeds"] == 1 and tsa.loc[SMALL, "seeds"] == 4
    # each Δ against the benign run of its own configuration and seed: 0.70 − 0.80 and 0.50 − 0.60 → −10 points
    assert tsa["d_accuracy_mean"].tolist() == pytest.approx([-10.0, -10.0])
    assert tsa.loc[SMALL, "accuracy_%_mean"] == pytest.approx(100 * np.mean([0.50, 0.51, 0.52, 0.53]))
    md = (tmp_path / "rep" / "table.md").read_text()
    assert md.splitlines()[2].startswith("| config | tau | run |")
    assert sum(f"| {BIG} | 5 | TSA τ=5 |" in line for line in md.splitlines()) == 1


def test_trajectories_never_average_runs_of_different_lengths(mixed, tmp_path, capsys):
    assert report(mixed.values(), tmp_path / "rep", capsys)[0] == 0
    traj = pd.read_csv(tmp_path / "rep" / "trajectories.csv")
    acc = traj[(traj["metric"] == "accuracy") & (traj["tau"] == 5.0)]
    lines = acc.groupby("config").agg(last=("round", "max"), counts=("runs", "unique"))
    assert lines.loc[BIG, "last"] == 100 and list(lines.loc[BIG, "counts"]) == [1]
    assert lines.loc[SMALL, "last"] == 20 and list(lines.loc[SMALL, "counts"]) == [4]
    # no jump where the short runs end: the big line is its one run's own ramp
    big = acc[acc["config"] == BIG].set_index("round")["mean"]
    assert big.loc[20] == pytest.approx(0.1 + 0.6 * 20 / 100) and big.loc[21] == pytest.approx(0.1 + 0.6 * 21 / 100)


def test_execution_keys_never_split_a_row(tmp_path, capsys):
    """engine, output-dir and data-dir say where a run executed, not what it computed."""
    dirs = [train_run(tmp_path / "a", 0.6, attack="none", engine="ray"),
            train_run(tmp_path / "b", 0.61, attack="none", seed=1, engine="inprocess", **{"data-dir": "elsewhere"}),
            train_run(tmp_path / "a", 0.5, tau=5.0), train_run(tmp_path / "b", 0.52, tau=5.0, seed=1, engine="batched")]
    assert report(dirs, tmp_path / "rep", capsys)[0] == 0
    seeds = pd.read_csv(tmp_path / "rep" / "table_seeds.csv")
    assert "config" not in seeds.columns and seeds["seeds"].tolist() == [2, 2]


def test_a_copied_run_counts_once_and_a_differing_copy_is_an_error(mixed, tmp_path, capsys):
    original = mixed["small", "tsa", 0]
    copy = original.parent / "copied-by-hand"
    shutil.copytree(original, copy)
    code, _, err = report([*mixed.values(), copy], tmp_path / "rep", capsys)
    assert code == 0
    tsa = pd.read_csv(tmp_path / "rep" / "table_seeds.csv").query("tau == 5.0").set_index("config")
    assert tsa.loc[SMALL, "seeds"] == 4  # not 5: the copy is the same run
    assert f"{copy}: the same run as {original}" in err
    # the copy's results differ: which one is the result? an error naming both, no table
    metrics = (copy / "metrics.csv").read_text().replace(",accuracy,0.5,", ",accuracy,0.55,")
    (copy / "metrics.csv").write_text(metrics)
    code, _, err = report([*mixed.values(), copy], tmp_path / "rep2", capsys)
    assert code == 2
    assert err.splitlines()[-1].startswith(f"fedcal: error: {original} and {copy} hold the same run")
    assert not (tmp_path / "rep2" / "table.csv").exists()


# --------------------------------------------------------------------------- unsound finished runs
def _torn(d: Path) -> str:
    text = (d / "metrics.csv").read_text()
    (d / "metrics.csv").write_text(text[:-25])  # killed in the middle of its last row
    return "its metrics.csv is torn"


def _missing(d: Path) -> str:
    (d / "metrics.csv").unlink()
    return "its metrics.csv is missing"


def _two_writers(d: Path) -> str:
    lines = (d / "metrics.csv").read_text().splitlines()
    (d / "metrics.csv").write_text("\n".join([*lines, *lines[1:40]]) + "\n")  # rounds written again
    return "more than once"


def _incomplete(d: Path) -> str:
    lines = (d / "metrics.csv").read_text().splitlines()
    kept = [line for line in lines if ",15," not in line and ",16," not in line]
    (d / "metrics.csv").write_text("\n".join(kept) + "\n")
    return "lacks the evaluation (accuracy) of rounds 15-16"


def _corrupt_config(d: Path) -> str:
    (d / "config.json").write_text('{"run_id": "x", "config": {')
    return "unreadable config.json"


@pytest.mark.parametrize("damage", [_torn, _missing, _two_writers, _incomplete, _corrupt_config])
def test_a_finished_run_with_bad_files_is_left_out_loudly(tmp_path, capsys, damage):
    runs = {(a, s): train_run(tmp_path / "runs", 0.6 if a == "none" else 0.5, attack=a,
                              tau=1.0 if a == "none" else 5.0, seed=s) for a in ("none", "tsa") for s in range(4)}
    bad = runs["tsa", 3]
    why = damage(bad)
    code, _, err = report(runs.values(), tmp_path / "rep", capsys)
    assert code == 0, err
    left_out = [line for line in err.splitlines() if str(bad) in line]
    assert len(left_out) == 1 and "left out of the report" in left_out[0] and why in left_out[0], err
    table = pd.read_csv(tmp_path / "rep" / "table.csv")
    assert bad.name not in set(table["run_id"])
    assert table[table["tau"] == 5.0]["seed"].tolist() == [0, 1, 2]


def test_a_corrupt_config_or_an_output_file_is_one_line(tmp_path, capsys):
    run = train_run(tmp_path / "runs", attack="none")
    (run / "config.json").write_text("{not json")
    code, _, err = report([run], tmp_path / "rep", capsys)
    assert code == 2 and "Traceback" not in err and err.splitlines()[-1].startswith("fedcal: error:")
    for argv in (["posthoc", str(run)], ["stealth", str(run)], ["triage", str(run), "--benign", str(run)]):
        assert cli_main([*argv, "--out", str(tmp_path / "a")]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith(f"fedcal: error: {run}: its config.json cannot be read"), err
    good = train_run(tmp_path / "runs", tau=5.0)
    target = tmp_path / "results.csv"
    target.write_text("not a folder")
    for argv, option, value in ((["report", str(good)], "--out", target),
                                (["report", str(good)], "--out", target / "sub"),
                                (["posthoc", str(good)], "--out", target),
                                (["sweep", "--grid", "seed=0", "dataset=digits"], "--report", target)):
        assert cli_main([*argv, option, str(value)]) == 2
        err = capsys.readouterr().err
        assert err.splitlines() == [f"fedcal: error: {option} {str(value)!r}: {str(target)!r} is a file, not a folder"]


def finished_distill_run(tmp_path) -> RunStore:
    """A finished run directory of the distill task (its model a placeholder): what an image analysis
    must refuse by its task, before it loads any data."""
    cfg = RunConfig.from_flower({"task": "distill", "dst-corpus": "synthetic", "output-dir": str(tmp_path)})
    store = RunStore(run_dir_for(cfg), cfg)
    store.start()
    store.save_model({"w": torch.zeros(1)})
    store.finish()
    return store


def test_robustness_runs_on_a_distill_run_says_what_it_needs(tmp_path, capsys, monkeypatch):
    import fedcal.data.datasets as datasets

    monkeypatch.setattr(datasets, "_torchvision", lambda *a: pytest.fail("tried to download a dataset"))
    store = finished_distill_run(tmp_path)
    assert cli_main(["robustness", "--runs", str(store.dir), "--report", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"fedcal: error: --runs evaluates image-classifier runs (task = train), not {store.dir} "
                   "(task distill)"]


# --------------------------------------------------------------------------- labels
def test_a_tau_1_tsa_run_is_labelled_with_its_tau_and_a_missing_benign_run_is_said(tmp_path, capsys):
    dirs = [train_run(tmp_path / "runs", 0.6, tau=1.0), train_run(tmp_path / "runs", 0.5, tau=5.0)]
    assert report(dirs, tmp_path / "rep", capsys)[0] == 0
    table = pd.read_csv(tmp_path / "rep" / "table.csv")
    assert table["run"].tolist() == ["TSA τ=1", "TSA τ=5"]
    md = (tmp_path / "rep" / "table.md").read_text()
    assert "nan" not in md
    assert [line.count("no benign run in this set") for line in md.splitlines() if "TSA" in line] == [2, 2]
    seeds = [train_run(tmp_path / "more", 0.5 + s / 100, tau=5.0, seed=s) for s in (0, 1)]
    assert report(seeds, tmp_path / "rep2", capsys)[0] == 0
    md = (tmp_path / "rep2" / "table.md").read_text()
    assert "nan ± nan" not in md and md.count("no benign run in this set") == 2


# --------------------------------------------------------------------------- chance-level models
def test_the_binomial_chance_threshold_by_hand():
    from fedcal.reports.chance import ALPHA, ChanceLevel, labels_chance

    def critical(n: int, p: float) -> int:  # smallest k with P(X > k) <= alpha, summed term by term
        tail = 1.0
        for k in range(n + 1):
            tail -= math.comb(n, k) * p ** k * (1 - p) ** (n - k)
            if tail <= ALPHA:
                return k
        return n

    y = digits_labels()
    level = labels_chance(y, 10)
    p = np.bincount(y).max() / len(y)
    assert level.rate == pytest.approx(p) and p > 0.1  # the majority class beats 1/K on this test set
    assert level.threshold == pytest.approx(critical(len(y), p) / len(y))
    assert ChanceLevel(classes=10, n=200, majority=0.05).rate == 0.1  # 1/K where it is higher
    assert level.flags(p) and level.flags(0.02) and not level.flags(level.threshold + 1 / len(y))
    assert not level.flags(float("nan"))


def test_a_constant_predictor_is_flagged_in_the_tau_table_and_sweep_cells(tmp_path, capsys):
    from fedcal.app.sweep import SweepGrid
    from fedcal.reports import write_results

    constant = constant_predictor_accuracy()
    dirs = [train_run(tmp_path / "runs", 0.9, attack="none"), train_run(tmp_path / "runs", constant, tau=50.0)]
    assert report(dirs, tmp_path / "rep", capsys)[0] == 0
    table = pd.read_csv(tmp_path / "rep" / "table.csv").set_index("run")
    assert table.loc["TSA τ=50", "chance_level"] and not table.loc["benign", "chance_level"]
    md = (tmp_path / "rep" / "table.md").read_text()
    row = next(line for line in md.splitlines() if "TSA τ=50" in line)
    assert f"{100 * constant:.2f} †" in row and "† clean accuracy within noise of chance" in md
    grid = SweepGrid({**BASE, "output-dir": str(tmp_path / "runs")}, {"tau": [1.0, 50.0]})
    cfgs = [c.replace(attack="none") if c.tau == 1 else c for c in grid.configs()]
    cells = write_results(cfgs, tmp_path / "sweep", ["tau"])
    assert cells.set_index("tau")["chance_level"].to_dict() == {1.0: False, 50.0: True}


def constant_model(run: Path, cls: int) -> None:
    """Replace a run's model.pt by a digits MLP that answers class ``cls`` whatever the input."""
    from fedcal.models import build_model

    model = build_model("mlp", (64,), 10, seed=0)
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.zero_()
        model.head.bias[cls] = 5.0
    torch.save(model.state_dict(), run / "model.pt")


def test_analyses_flag_a_constant_predictor_and_refuse_mixed_configs(tmp_path, capsys):
    majority = int(np.bincount(digits_labels()).argmax())
    benign = train_run(tmp_path / "runs", attack="none")
    attacked = train_run(tmp_path / "runs", tau=5.0)
    other = train_run(tmp_path / "runs", tau=5.0, **{"num-rounds": 10})
    for run in (benign, attacked, other):
        constant_model(run, majority)
    from fedcal.models import build_model
    from fedcal.local_training import local_train
    from fedcal.data import load_dataset

    ds = load_dataset("digits")
    trained = build_model("mlp", ds.input_shape, 10, seed=0)
    local_train(trained, ds.x_train, ds.y_train, steps=60, batch_size=32, lr=0.1,
                generator=torch.Generator().manual_seed(0))
    torch.save(trained.state_dict(), benign / "model.pt")
    assert cli_main(["posthoc", str(benign), str(attacked), "--n-cal", "50", "--methods", "temperature",
                     "--out", str(tmp_path / "p")]) == 0
    t = pd.read_csv(tmp_path / "p" / "posthoc.csv")
    assert t.groupby("run")["chance_level"].agg(set).to_dict() == {"benign": {False}, "tsa τ=5": {True}}
    assert "at chance level" in capsys.readouterr().out
    for cmd in ("triage", "similarity"):
        assert cli_main([cmd, str(attacked), str(other), "--benign", str(benign), "--out", str(tmp_path / cmd)]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and "differ in num-rounds" in err[0] and str(other) in err[0], err


# --------------------------------------------------------------------------- the other tables
def test_defense_table_keeps_configurations_apart_and_a_chance_row_misses_the_target(tmp_path):
    from fedcal.reports.defense import defense_report

    constant = constant_predictor_accuracy()
    dirs = []
    for rounds, acc in ((20, 0.9), (10, 0.8)):
        extra = {"num-rounds": rounds}
        dirs += [train_run(tmp_path / "runs", acc, attack="none", **extra),
                 train_run(tmp_path / "runs", acc, attack="none", strategy="median", **extra),
                 train_run(tmp_path / "runs", constant if rounds == 20 else acc - 0.01, tau=5.0, strategy="median",
                           **extra)]
    md = defense_report(dirs, tmp_path / "rep", posthoc=False)
    table = pd.read_csv(tmp_path / "rep" / "table.csv")
    assert sorted(table["config"].unique()) == ["num-rounds=10", "num-rounds=20"]
    attacked = table[table["tau"] == 5.0].set_index("config")
    assert attacked.loc["num-rounds=10", "d_accuracy"] == pytest.approx(-1.0)
    # the constant predictor is no result: out of the mean (no seed left to average), counted, named, target missed
    chance_row = attacked.loc["num-rounds=20"]
    assert chance_row["seeds"] == 0 and pd.isna(chance_row["d_accuracy"])
    assert chance_row["chance_level"] == 1 and chance_row["target"] == "no"
    assert chance_row["left_out"] == f"seed 0: at chance ({100 * constant:.2f} % †)"
    assert "†" in md and "within noise of chance" in md


def fake_accuracy(store: RunStore, clean: dict[str, float], attacked: dict[str, float], cfg: RunConfig) -> None:
    rows = [{"aggregator": a, "attack": k, "f_adv": cfg.inf_f, "amplification": 2.0, "accuracy": v,
             "queries": 450, "seed": cfg.seed, "n": cfg.num_clients, "f": cfg.inf_f}
            for k, table in (("none", clean), ("lma", attacked)) for a, v in table.items()]
    store.write_table("accuracy.csv", pd.DataFrame(rows))


def test_inference_never_ranks_a_constant_answer_as_robust(tmp_path, capsys):
    from fedcal.reports.inference import robust_ranking

    constant = constant_predictor_accuracy()
    dirs = []
    for seed in (0, 1):
        for steps in (20, 50):  # two configurations: PGD-CW's steps
            cfg = RunConfig.from_flower({"task": "inference", "dataset": "digits", "num-clients": 7, "inf-f": 2,
                                         "seed": seed, "inf-pgd-steps": steps, "output-dir": str(tmp_path)})
            store = RunStore(run_dir_for(cfg), cfg)
            store.start()
            # the mean degrades under attack; the "deepset" answers one class: unmoved, at chance
            fake_accuracy(store, {"mean": 0.9, "deepset": constant}, {"mean": 0.5, "deepset": constant}, cfg)
            store.finish()
            dirs.append(store.dir)
    assert report(dirs, tmp_path / "rep", capsys)[0] == 0
    cells = pd.read_csv(tmp_path / "rep" / "cells.csv")
    assert cells.groupby("aggregator")["chance_level"].agg(set).to_dict() == {"deepset": {True}, "mean": {False}}
    assert sorted(cells["config"].unique()) == ["inf-pgd-steps=20", "inf-pgd-steps=50"]
    table = pd.read_csv(tmp_path / "rep" / "table_n7_f2.csv")
    assert len(table) == 4 and table.groupby("config").size().tolist() == [2, 2]  # 2 aggregators × 2 configs
    worst = table.set_index(["config", "aggregator"])["worst case"]
    assert worst.loc[("inf-pgd-steps=20", "deepset")].endswith("†")
    ranking, left_out = robust_ranking(cells[cells["config"] == "inf-pgd-steps=20"])
    assert list(ranking.index) == ["mean"] and left_out == ["deepset"]
    assert "within noise of chance" in (tmp_path / "rep" / "table_n7_f2.md").read_text()


def test_distill_tables_keep_configurations_apart_and_flag_chance_ca(tmp_path, capsys):
    from fedcal.distill.run_data import DistillRunSpec, text_task

    dirs = []
    for rounds in (2, 3):
        for seed in (0, 1):
            cfg = RunConfig.from_flower({"task": "distill", "dst-corpus": "synthetic", "dst-rounds": rounds,
                                         "seed": seed, "output-dir": str(tmp_path)})
            labels = text_task(DistillRunSpec.from_config(cfg)).test_labels
            chance = float(np.bincount(labels).max() / len(labels))
            ca = chance if rounds == 3 else 0.95
            store = RunStore(run_dir_for(cfg), cfg)
            store.start()
            for r in range(rounds + 1):
                store.log_round(r, {"ca": ca, "ra": ca, "asr": 0.1, "flip": 0.0, "upload_bytes": 100.0,
                                    "upload_bytes_r8": 100.0})
            store.finish()
            dirs.append(store.dir)
    assert report(dirs, tmp_path / "rep", capsys)[0] == 0
    table = pd.read_csv(tmp_path / "rep" / "table.csv").set_index("config")
    assert sorted(table.index) == ["dst-rounds=2", "dst-rounds=3"] and set(table["seeds"]) == {2}
    assert table.loc["dst-rounds=3", "CA"].endswith("†") and not table.loc["dst-rounds=2", "CA"].endswith("†")


def test_lm_and_detect_tables_keep_configurations_apart(tmp_path, capsys):
    dirs = []
    for rounds in (2, 3):
        for tau in (1.0, 5.0):
            cfg = RunConfig.from_flower({"task": "lm", "lm-corpus": "synthetic", "num-rounds": rounds, "tau": tau,
                                         "attack": "none" if tau == 1 else "tsa", "output-dir": str(tmp_path / "lm")})
            store = RunStore(run_dir_for(cfg), cfg)
            store.start()
            for r in range(rounds + 1):
                store.log_round(r, {"accuracy": 0.3, "perplexity": 20.0, "nll": 3.0, "ece": 0.1, "sece": 0.05,
                                    "brier": 0.8, "nucleus": 10.0})
            store.finish()
            dirs.append(store.dir)
    assert report(dirs, tmp_path / "lm-rep", capsys)[0] == 0
    lm = pd.read_csv(tmp_path / "lm-rep" / "table.csv")
    assert sorted(set(lm["config"])) == ["num-rounds=2", "num-rounds=3"] and set(lm["runs"]) == {1}
    dirs = []
    for rounds in (2, 3):
        for seed in (0, 1):
            cfg = RunConfig.from_flower({"task": "detect", "det-rounds": rounds, "seed": seed, "attack": "none",
                                         "output-dir": str(tmp_path / "det")})
            store = RunStore(run_dir_for(cfg), cfg)
            store.start()
            for r in range(rounds + 1):
                store.log_round(r, {"map50": 0.5, "obj_ece": 0.1, "obj_sece": 0.0, "mean_obj_prob": 0.2,
                                    "positive_rate": 0.1, "boxes_kept": 2.0, "boxes_kept_object": 2.0,
                                    "boxes_kept_class": 1.5, "gt_boxes": 2.5})
            store.finish()
            dirs.append(store.dir)
    assert report(dirs, tmp_path / "det-rep", capsys)[0] == 0
    det = pd.read_csv(tmp_path / "det-rep" / "table.csv")
    assert sorted(det["config"]) == ["det-rounds=2", "det-rounds=3"] and set(det["seeds"]) == {2}


def test_sweep_curves_draw_one_line_per_configuration(tmp_path):
    from fedcal.reports.groups import frame_config_labels

    cells = pd.DataFrame({"task": "train", "tau": [1.0, 5.0, 1.0, 5.0, 1.0], "seed": [0, 0, 0, 0, 1],
                          "num-rounds": [20, 20, 10, 10, 20], "engine": ["ray", "ray", "ray", "ray", "inprocess"],
                          "accuracy": [0.9, 0.8, 0.7, 0.6, 0.9], "sece": 0.0})
    assert frame_config_labels(cells, ["tau"]) == ["num-rounds=20", "num-rounds=20", "num-rounds=10",
                                                   "num-rounds=10", "num-rounds=20"]
    assert frame_config_labels(cells, ["tau", "num-rounds"]) == [""] * 5
    # a key a run's config predates (NaN in its column) is its default, as when the config is parsed
    cells["optimizer"] = ["sgd", None, "sgd", "sgd", None]
    assert frame_config_labels(cells, ["tau", "num-rounds"]) == [""] * 5
    cells.loc[0, "optimizer"] = "adamw"
    assert frame_config_labels(cells, ["tau", "num-rounds"])[:2] == ["optimizer=adamw", "optimizer=sgd"]


def test_every_task_has_an_evaluation_schedule_and_real_runs_pass_it(tmp_path):
    """The schedule the run checks hold a run to is listed per task (the reports cannot read the
    task registry): every task must be listed, and a real run of each round-based schedule passes."""
    from fedcal.app.engine import simulate
    from fedcal.config import field_names, get_task, task_names
    from fedcal.reports.runs import check_run

    schedules = {t: get_task(t).schedule for t in task_names()}
    assert schedules["inference"] is None and schedules["train"] == ("accuracy", "num_rounds", "eval_every")
    assert all(set(s[1:]) <= set(field_names()) for s in schedules.values() if s is not None)
    cfg = RunConfig.from_flower({**BASE, "num-rounds": 5, "eval-every": 2, "engine": "inprocess",
                                 "num-clients": 4, "clients-per-round": 2, "local-steps": 1,
                                 "output-dir": str(tmp_path)})
    run = simulate(cfg, progress=False)
    assert check_run(run).why == ""
    rounds = pd.read_csv(run / "metrics.csv").query("metric == 'accuracy'")["round"].tolist()
    assert rounds == [0, 2, 4, 5]


def test_a_run_made_before_a_config_key_existed_stays_in_the_final_tables(tmp_path):
    """Its config.json lacks the newer key: the joined column is NaN for it, which a pivot indexed by
    the config columns silently dropped."""
    from fedcal.reports import final_metrics

    dirs = [train_run(tmp_path, 0.5 + s / 10, attack="none", seed=s) for s in (0, 1)]
    stored = json.loads((dirs[0] / "config.json").read_text())
    del stored["config"]["optimizer"]  # a key added after the run was made (hash_when_set: same hash)
    (dirs[0] / "config.json").write_text(json.dumps(stored))
    final = final_metrics(dirs)
    assert final["seed"].tolist() == [0, 1] and final["accuracy"].tolist() == pytest.approx([0.5, 0.6])
