"""benchmarks/byzfl_agreement.py: the verdict by hand, the step count fitted to the budget, the
one-line skip without byzfl, and a 2-step comparison where byzfl is importable."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def _module():
    spec = importlib.util.spec_from_file_location("byzfl_agreement", ROOT / "benchmarks" / "byzfl_agreement.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_the_verdict_compares_the_seed_ranges():
    v = _module().verdict
    assert v([0.90, 0.92, 0.91], [0.915, 0.95]) == "within spread"  # ranges 0.90-0.92 and 0.915-0.95 overlap
    assert v([0.50, 0.52], [0.60, 0.61]) == "differs: fedcal higher by 8.0 points beyond the seed ranges"
    assert v([0.60, 0.70], [0.10, 0.45]) == "differs: ByzFL higher by 15.0 points beyond the seed ranges"
    assert v([0.6], []) == "incomplete"
    assert v([0.80], [0.85, 0.86]) == "no verdict: one seed on a side (fedcal +5.5 points)"  # no spread on a side
    # a diverged fedcal run (NaN) counts at chance, 11.35 %: beside ByzFL's 9.8 % both are at chance
    assert v([0.098, 0.098], [float("nan"), 0.1135]) == "within spread (both at chance)"
    assert v([0.6135, 0.62], [float("nan"), float("nan")]) == "differs: ByzFL higher by 50.0 points beyond the seed ranges"
    assert _module()._cell_text([float("nan"), 0.1135]) == "11.3 ± 0.0 (n=2 † 1 diverged)"


def test_the_table_names_the_measured_reason_and_keeps_the_reading(tmp_path):
    mod = _module()
    rows = [{"side": s, "rule": "mean", "attack": "signflip", "seed": i, "steps": 40, "accuracy": a, "cpu_s": 10}
            for s, accs in (("byzfl", (0.70, 0.72)), ("fedcal", (0.80, 0.84))) for i, a in enumerate(accs)]
    rows += [{"side": s, "rule": "trmean", "attack": "alie", "seed": 0, "steps": 40, "accuracy": a, "cpu_s": 10}
             for s, a in (("byzfl", 0.7), ("fedcal", 0.7))] * 2
    (tmp_path / "reasons.csv").write_text("rule,attack,reason\nmean,signflip,the partition\ntrmean,alie,unused\n")
    (tmp_path / "reading.md").write_text("Reading. By hand.\n")
    text = mod.write_table(rows, tmp_path, 40)
    # 70-72 against 80-84: 8 points apart beyond the ranges, and the reason given for the cell
    assert "| 71.0 ± 1.0 (n=2) | 82.0 ± 2.0 (n=2) | differs: fedcal higher by 8.0 points beyond the seed ranges; " \
           "the partition | – / – |" in text  # no benign reference: no cost
    assert "| within spread |" in text and "unused" not in text  # a reason only where the cell differs
    assert text.rstrip().endswith("Reading. By hand.") and (tmp_path / "table.md").read_text() == text
    # with the benign reference (mean 90 % on ByzFL, 86 % on fedcal) each side's cost: 90 − 71, 86 − 82
    rows += [{"side": s, "rule": "mean", "attack": "none", "seed": 0, "steps": 40, "accuracy": a, "cpu_s": 10}
             for s, a in (("byzfl", 0.90), ("fedcal", 0.86))]
    assert "the partition | 19.0 / 4.0 |" in mod.write_table(rows, tmp_path, 40)


def test_the_step_count_fits_the_cpu_budget():
    choose = _module().choose_steps
    # 2 runs of 0.5 + 1.5 s/step, 3 seeds: 6 s per step; 40 min = 2400 s -> 400 steps
    assert choose({("byzfl", "mean", "alie"): 0.5, ("fedcal", "mean", "alie"): 1.5}, 3, 2400) == 400
    assert choose({("byzfl", "mean", "alie"): 0.001}, 3, 2400) == 800  # never beyond ByzFL's 800
    assert choose({("byzfl", "mean", "alie"): 1e6}, 3, 2400) == 1


def test_without_byzfl_it_is_skipped_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "byzfl", None)  # import byzfl raises ImportError
    monkeypatch.setitem(sys.modules, "byzfl.benchmark", None)
    monkeypatch.setitem(sys.modules, "byzfl.benchmark.train", None)
    assert _module().main(["--out", str(tmp_path / "out"), "--steps", "2"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("byzfl_agreement: skipped: byzfl is not importable")
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(importlib.util.find_spec("byzfl") is None, reason="byzfl is not installed (optional extra)")
@pytest.mark.skipif(not (DATA / "mnist_train.npz").exists(), reason="no MNIST in ../shared/data")
def test_a_two_step_comparison_runs_both_sides(tmp_path):
    mod = _module()
    out = tmp_path / "out"
    assert mod.main(["--out", str(out), "--data-dir", str(DATA), "--steps", "2", "--seeds", "1",
                     "--cells", "trmean:signflip"]) == 0
    with open(out / "runs.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(r["side"] for r in rows) == ["byzfl", "fedcal"]
    assert all(r["rule"] == "trmean" and r["attack"] == "signflip" and r["steps"] == "2" for r in rows)
    assert all(0.0 <= float(r["accuracy"]) <= 1.0 and float(r["cpu_s"]) > 0 for r in rows)
    table = (out / "table.md").read_text()
    assert "| TrMean (f=3) | SignFlipping |" in table
    # run again: the finished runs are kept, not repeated
    assert mod.main(["--out", str(out), "--data-dir", str(DATA), "--steps", "2", "--seeds", "1",
                     "--cells", "trmean:signflip"]) == 0
    with open(out / "runs.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 2
