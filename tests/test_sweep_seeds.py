"""A sweep with a seed axis: its summary over seeds (``seeds.csv`` / ``seeds.md``), its plot's spread
bars, and chance-level and rejected-reply cells said, not averaged away — each against values
worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from fedcal.config import RunConfig
from fedcal.reports import plots
from fedcal.reports.sweeps import REJECTED, STALLED, seed_markdown, seed_summary, stalled_runs
from tests.test_plots_readable import spy_savefig

BASE = RunConfig().to_flower()


def _cells(rows):
    """cells.csv-like rows: every config column (as a sweep writes them) plus the final metrics."""
    out = []
    for ratio, seed, acc, sece, chance, extra in rows:
        out.append({**BASE, **extra, "attacker-ratio": ratio, "seed": seed, "run_id": f"r{ratio}-s{seed}",
                    "accuracy": acc, "ece": abs(sece), "sece": sece, "brier": 0.5, "nll": 999.0 if chance else 1.0,
                    "chance_level": chance})
    return pd.DataFrame(out)


def _rounds(rejected: dict[str, list[int]]) -> pd.DataFrame:
    return pd.DataFrame([{"run_id": r, "round": i + 1, "metric": "replies_rejected", "value": v}
                         for r, vs in rejected.items() for i, v in enumerate(vs)])


def test_the_summary_averages_over_seeds_and_leaves_a_chance_level_seed_out_of_the_means():
    cells = _cells([(0.1, 0, 0.60, 0.02, False, {}), (0.1, 1, 0.64, 0.06, False, {}), (0.1, 2, 0.62, 0.04, False, {}),
                    (0.4, 0, 0.50, -0.10, False, {}), (0.4, 1, 0.10, -0.90, True, {}), (0.4, 2, 0.54, -0.14, False, {})])
    rounds = _rounds({"r0.4-s1": [2, 5, 0], "r0.4-s2": [1], "r0.1-s0": [0, 0]})
    s = seed_summary(cells, rounds, ["seed", "attacker-ratio"]).set_index("attacker-ratio")
    assert "config" not in s.columns  # one configuration: no config column
    assert s.loc[0.1, "accuracy_mean"] == pytest.approx(0.62) and s.loc[0.1, "accuracy_std"] == pytest.approx(0.02)
    assert s.loc[0.1, "sece_std"] == pytest.approx(0.02)  # sd of 2, 6, 4 (points) with ddof 1 = 2
    # the chance-level seed (accuracy 0.10, NLL 999) is counted, not averaged: mean of 0.50 and 0.54
    assert s.loc[0.4, "accuracy_mean"] == pytest.approx(0.52)
    assert s.loc[0.4, "accuracy_std"] == pytest.approx(math.sqrt(2 * 0.02 ** 2))
    assert s.loc[0.4, "nll_mean"] == pytest.approx(1.0)
    # seeds: the count averaged; the seed left out named with its reason
    assert s.loc[0.4, ["seeds", "chance_level", REJECTED, "left_out"]].tolist() == [2, 1, 8, "seed 1: at chance (10.00 % †)"]
    assert s.loc[0.1, ["seeds", "chance_level", REJECTED, "left_out"]].tolist() == [3, 0, 0, ""]
    md = seed_markdown(s.reset_index(), "t", chance_note="† NOTE\n")
    row = next(line for line in md.splitlines() if line.startswith("| 0.4 |"))
    assert "| 52.00 ± 2.83 |" in row and row.endswith("| 2 | 8 | seed 1: at chance (10.00 % †) |")
    assert "\n\n† NOTE\n" in md  # a blank line first: a line right under a table would be read as its row
    assert "replies rejected" in md


def test_a_row_whose_every_seed_is_at_chance_shows_no_mean_and_no_rejected_column_without_rejections():
    cells = _cells([(0.4, 0, 0.10, -0.5, True, {}), (0.4, 1, 0.11, -0.6, True, {})])
    s = seed_summary(cells, _rounds({}), ["seed", "attacker-ratio"])
    md = seed_markdown(s, chance_note="† NOTE\n")
    row = next(line for line in md.splitlines() if line.startswith("| 0.4 |"))
    assert row.split(" | ")[1] == "—" and " | 0 | " in row
    assert row.endswith("| seed 0: at chance (10.00 % †); seed 1: at chance (11.00 % †) |")
    assert "replies rejected" not in md


def test_cells_of_another_configuration_are_another_row_and_a_seed_is_never_counted_twice():
    cells = _cells([(0.1, 0, 0.60, 0.0, False, {}), (0.1, 1, 0.62, 0.0, False, {}),
                    (0.1, 0, 0.30, 0.0, False, {"num-rounds": 7})])
    s = seed_summary(cells, _rounds({}), ["seed", "attacker-ratio"])
    assert s["config"].tolist() == ["num-rounds=100", "num-rounds=7"]
    assert s["accuracy_mean"].tolist() == pytest.approx([0.61, 0.30])
    twice = _cells([(0.1, 0, 0.60, 0.0, False, {}), (0.1, 0, 0.62, 0.0, False, {})])
    with pytest.raises(ValueError, match="two cells of one seed"):
        seed_summary(twice, _rounds({}), ["seed", "attacker-ratio"])


def test_the_sweep_plot_draws_spread_bars_and_a_chance_level_cell_as_a_cross_outside_the_mean(tmp_path, monkeypatch):
    cells = _cells([(0.1, 0, 0.60, 0.02, False, {}), (0.1, 1, 0.64, 0.06, False, {}),
                    (0.4, 0, 0.50, -0.10, False, {}), (0.4, 1, 0.10, -0.90, True, {}), (0.4, 2, 0.54, -0.14, False, {})])
    seen = {}

    def record(fig):
        ax = fig.axes[0]  # accuracy
        seen["mean"] = list(ax.get_lines()[0].get_ydata())
        seen["crosses"] = [list(c.get_offsets()[:, 1]) for c in ax.collections if len(c.get_offsets())
                           and c.get_label().startswith("a chance-level")]
        seen["bars"] = [c for c in ax.collections if c.get_label() != "a chance-level or stalled cell (not in the means)"]
        seen["note"] = [t.get_text() for t in fig.texts]

    spy_savefig(monkeypatch, record)
    plots.sweep_curves(cells, "attacker-ratio", tmp_path / "s.png")
    assert seen["mean"] == pytest.approx([62.0, 52.0])
    assert seen["crosses"] == [[pytest.approx(10.0)]]
    assert seen["bars"]  # the ± 1 sd error bars (a LineCollection)
    assert any("bars: ± 1 std" in t for t in seen["note"])


def test_a_single_seed_plot_has_no_bars_and_says_none(tmp_path, monkeypatch):
    cells = _cells([(0.1, 0, 0.60, 0.02, False, {}), (0.4, 0, 0.50, -0.10, False, {})])
    seen = {}
    spy_savefig(monkeypatch, lambda fig: seen.update(collections=len(fig.axes[0].collections),
                                                     note=[t.get_text() for t in fig.texts]))
    plots.sweep_curves(cells, "attacker-ratio", tmp_path / "s.png")
    assert seen["collections"] == 0 and not any("std" in t for t in seen["note"])


def test_a_run_store_made_with_another_data_dir_is_summarised_here(tmp_path):
    """A run store made on another machine (a lent GPU's /tmp/data) records that data-dir; the
    chance levels were looked up by it and raised KeyError for every such store."""
    from fedcal.app.engine import simulate
    from fedcal.app.sweep import SweepGrid
    from fedcal.reports import write_results

    keys = {"dataset": "synthetic", "num-clients": 4, "clients-per-round": 2, "num-rounds": 4, "batch-size": 16,
            "local-steps": 5, "lr": 0.1, "engine": "inprocess", "output-dir": str(tmp_path / "runs")}
    made = SweepGrid({**keys, "data-dir": str(tmp_path / "there")}, {"seed": [0, 1]}).configs()
    for cfg in made:
        simulate(cfg, progress=False)
    here = SweepGrid({**keys, "data-dir": str(tmp_path / "here")}, {"seed": [0, 1]}).configs()
    cells = write_results(here, tmp_path / "rep", ["seed"])
    assert cells["seed"].tolist() == [0, 1]
    summary = pd.read_csv(tmp_path / "rep" / "seeds.csv")
    assert summary[["seeds", "chance_level"]].values.tolist() == [[2, 0]]  # learnt: above chance
    assert summary["accuracy_mean"].iloc[0] == pytest.approx(np.mean(cells["accuracy"]))
    assert "mean ± std over seeds 0, 1" in (tmp_path / "rep" / "seeds.md").read_text()
    write_results(here[:1], tmp_path / "rep", ["seed"])  # one seed now: no summary of the earlier call stays
    assert not (tmp_path / "rep" / "seeds.csv").exists() and not (tmp_path / "rep" / "seeds.md").exists()


def test_a_stalled_run_is_found_from_its_last_round_and_kept_out_of_the_means():
    """A run whose model broke (every client's update from it NaN, all rejected) keeps a broken model above
    chance: 13.75 % with an sECE of -86 would set its row's means. Its last round accepted none of its
    replies; an earlier all-rejected round that the run recovered from does not make it stalled."""
    acct = lambda run, rows: [{"run_id": run, "round": r, "metric": m, "value": v}  # noqa: E731
                              for r, rec, acc in rows for m, v in (("replies_received", rec), ("replies_accepted", acc))]
    rounds = pd.DataFrame(acct("r5-s0", [(1, 5, 5), (2, 5, 5)]) + acct("r5-s1", [(1, 5, 5), (2, 5, 0)])
                          + acct("r5-s2", [(1, 5, 0), (2, 5, 4)]) + acct("r5-s3", [(1, 0, 0)]))
    assert stalled_runs(rounds) == {"r5-s0": False, "r5-s1": True, "r5-s2": False, "r5-s3": False}
    cells = _cells([(5.0, 0, 0.60, -0.06, False, {}), (5.0, 1, 0.1375, -0.86, False, {}),
                    (5.0, 2, 0.64, -0.08, False, {})])
    cells["run_id"] = ["r5-s0", "r5-s1", "r5-s2"]
    cells[STALLED] = cells["run_id"].map(stalled_runs(rounds))
    summary = seed_summary(cells, _rounds({}), ["seed", "attacker-ratio"])
    s = summary.iloc[0]
    assert s["accuracy_mean"] == pytest.approx(0.62) and s["sece_mean"] == pytest.approx(-0.07)
    assert [s["seeds"], s["chance_level"], s[STALLED]] == [2, 0, 1]
    md = seed_markdown(summary)
    assert "| 62.00 ± 2.83 |" in md and "seed 1: stalled: its last round accepted no reply |" in md
