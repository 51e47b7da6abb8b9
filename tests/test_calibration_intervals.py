"""Per-run bootstrap intervals in the τ tables (fedcal.reports.intervals, fedcal.reports.taus): the
estimate with its interval, "mean ± sd" with the seeds' interval half-width, and a Δ sECE inside
the intervals marked "not resolved"."""

from __future__ import annotations

import pandas as pd
import pytest

from fedcal.calibration_metrics import INTERVALS_FILE
from fedcal.reports.intervals import RESOLVED, attach_intervals
from fedcal.reports.taus import seed_summary, seeds_markdown, to_markdown


def _run(tmp_path, run_id, ece, sece, half):
    d = tmp_path / run_id
    d.mkdir()
    pd.DataFrame([{"metric": "ece", "estimate": ece, "lo": ece - half, "hi": ece + half},
                  {"metric": "sece", "estimate": sece, "lo": sece - half, "hi": sece + half}]).to_csv(
        d / INTERVALS_FILE, index=False)
    return d


def _table(rows):
    return pd.DataFrame([{"strategy": "fedavg", "tau": tau, "run": run, "accuracy_%": 90.0, "ece_%": 100 * ece,
                          "sece_%": 100 * sece, "brier": 0.1, "nll": 0.3, "run_id": rid, "code": "x", "seed": seed,
                          "d_accuracy": 0.0, "d_sece": 0.0}
                         for tau, run, ece, sece, rid, seed in rows])


def test_a_difference_inside_the_intervals_is_not_resolved(tmp_path):
    # benign sECE -1 % [-2, 0]; tau 0.2: +0.5 % [-0.5, 1.5] overlaps; tau 5: -5 % [-6, -4] does not
    dirs = [_run(tmp_path, "b", 0.02, -0.01, 0.01), _run(tmp_path, "t02", 0.01, 0.005, 0.01),
            _run(tmp_path, "t5", 0.05, -0.05, 0.01)]
    table = _table([(1.0, "benign", 0.02, -0.01, "b", 0), (0.2, "TSA τ=0.2", 0.01, 0.005, "t02", 0),
                    (5.0, "TSA τ=5", 0.05, -0.05, "t5", 0)])
    table["d_sece"] = table["sece_%"] - table["sece_%"][0]
    out = attach_intervals(table.assign(config="-"), dirs, ["config", "strategy", "seed"]).drop(columns="config")
    assert out[RESOLVED].isna().tolist() == [True, False, False]
    assert out[RESOLVED].tolist()[1:] == [0.0, 1.0]
    assert out["sece_lo_%"].tolist() == pytest.approx([-2.0, -0.5, -6.0])
    md = to_markdown(out)
    lines = md.splitlines()
    assert "-1.00 [-2.00, +0.00]" in lines[2] and "2.00 [1.00, 3.00]" in lines[2]
    assert "+1.50 (not resolved)" in lines[3]
    assert "-4.00 |" in lines[4] and "not resolved" not in lines[4]


def test_without_intervals_the_table_is_unchanged(tmp_path):
    table = _table([(1.0, "benign", 0.02, -0.01, "b", 0), (5.0, "TSA τ=5", 0.05, -0.05, "t5", 0)])
    (tmp_path / "b").mkdir()
    (tmp_path / "t5").mkdir()
    out = attach_intervals(table, [tmp_path / "b", tmp_path / "t5"], ["strategy", "seed"])
    pd.testing.assert_frame_equal(out, table)
    assert to_markdown(out) == to_markdown(table)


def test_seed_rows_carry_the_interval_half_width_and_mark_unresolved_seeds(tmp_path):
    rows, dirs = [], []
    for seed, (sece_t, half) in enumerate([(-0.05, 0.01), (-0.02, 0.01)]):  # seed 1's Δ overlaps its benign's
        dirs += [_run(tmp_path, f"b{seed}", 0.02, -0.01, half), _run(tmp_path, f"t{seed}", 0.05, sece_t, half)]
        rows += [(1.0, "benign", 0.02, -0.01, f"b{seed}", seed), (5.0, "TSA τ=5", 0.05, sece_t, f"t{seed}", seed)]
    table = _table(rows)
    table["d_sece"] = table["sece_%"] - table.groupby("seed")["sece_%"].transform("first")
    out = attach_intervals(table, dirs, ["strategy", "seed"])
    agg = seed_summary(out)
    tsa = agg[agg["run"] == "TSA τ=5"].iloc[0]
    assert tsa["ece_hw"] == pytest.approx(1.0) and tsa[RESOLVED] == 1 and tsa["sece_compared"] == 2
    md = seeds_markdown(agg).splitlines()
    assert "(CI ±1.00)" in md[3] and "(not resolved in 1/2 seeds)" in md[3]


def test_a_runs_final_line_carries_its_bootstrap_intervals(tmp_path):
    """`fedcal run`'s final summary gains a second line with the ECE and sECE intervals the run
    recorded (calibration-bootstrap), in percent, ECE unsigned and sECE signed; none without them."""
    from fedcal.tasks.train import _interval_note

    d = _run(tmp_path, "r", 0.2205, 0.2205, 0.02)
    frame = pd.read_csv(d / INTERVALS_FILE).assign(level=0.95, resamples=1000)
    frame.to_csv(d / INTERVALS_FILE, index=False)
    assert _interval_note(d) == ("\n95 % bootstrap intervals over the test set (1000 resamples): "
                                 "ECE [20.05, 24.05]%  sECE [+20.05, +24.05]%")
    assert _interval_note(tmp_path / "none") == ""
