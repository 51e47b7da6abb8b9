"""Figures a reader does not misread (issue 34 §6): reliability diagrams, sECE's sign, round ticks,
no line through a τ that was never run, one unit (percent) in printed tables."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch

from fedcal.metrics import calibration_metrics, reliability_bins
from fedcal.reports import plots
from fedcal.reports.defense import defense_plot


def spy_savefig(monkeypatch, record):
    """Call ``record(fig)`` on every figure as it is saved (whatever path the plot takes to savefig)."""
    from matplotlib.figure import Figure

    real = Figure.savefig

    def savefig(fig, *args, **kwargs):
        record(fig)
        return real(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)


def _bins(acc, conf, count):
    n = len(acc)
    edges = np.linspace(0, 1, n + 1)
    return pd.DataFrame({"lower": edges[:-1], "upper": edges[1:], "count": count, "confidence": conf,
                         "accuracy": acc})


def test_panel_ece_and_sece_equal_the_runs_metrics():
    g = torch.Generator().manual_seed(0)
    logits, labels = 3 * torch.randn(400, 5, generator=g), torch.randint(0, 5, (400,), generator=g)
    bins = pd.DataFrame({k: v.numpy() for k, v in reliability_bins(logits, labels).items()})
    m = calibration_metrics(logits, labels)
    assert plots.bins_ece_sece(bins) == pytest.approx((m["ece"], m["sece"]), abs=1e-12)


def test_reliability_panel_shows_accuracy_whole_in_under_confident_bins():
    # bin 0: over-confident (acc 0.2 < conf ~0.5 bin centre); bin 1: under-confident (acc 0.9 > conf 0.6)
    bins = _bins([np.nan, 0.2, 0.9, np.nan], [np.nan, 0.4, 0.6, np.nan], [0, 30, 70, 0])
    fig, (a, h) = plt.subplots(2, 1)
    plots.reliability_panel(a, h, bins, "t")
    bars = {c.get_label(): c for c in a.containers}
    acc_tops = sorted(p.get_y() + p.get_height() for p in bars["accuracy"].patches)
    assert acc_tops == pytest.approx([20.0, 90.0])  # in %, full height
    under = bars["gap: under-confident"].patches
    over = bars["gap: over-confident"].patches
    assert len(under) == 1 and len(over) == 1
    assert (under[0].get_y(), under[0].get_y() + under[0].get_height()) == pytest.approx((60.0, 90.0))
    assert (over[0].get_y(), over[0].get_y() + over[0].get_height()) == pytest.approx((20.0, 40.0))
    # the gap boxes are hatch outlines: nothing filled lies over the accuracy bars
    assert not under[0].get_fill() and not over[0].get_fill()
    assert all(p.get_fill() for p in bars["accuracy"].patches)
    ece, sece = 0.3 * 0.2 + 0.7 * 0.3, 0.3 * -0.2 + 0.7 * 0.3
    text = " ".join(t.get_text() for t in a.texts)
    assert f"ECE {100 * ece:.2f}%" in text and f"sECE {100 * sece:+.2f}%" in text
    plt.close(fig)


def test_every_figure_showing_sece_says_which_sign_is_under_confident(tmp_path, monkeypatch):
    seen = []
    spy_savefig(monkeypatch, lambda fig: seen.append(" ".join(t.get_text() for t in fig.texts)))
    bins = _bins([0.2, 0.9], [0.4, 0.6], [30, 70])
    plots.reliability_grid([("a", bins), ("b", bins)], tmp_path / "rel.png")
    traj = pd.DataFrame({"tau": [1.0] * 4, "metric": ["accuracy", "accuracy", "sece", "sece"], "round": [0, 1, 0, 1],
                         "mean": [0.1, 0.2, 0.0, 0.01], "std": 0.0, "runs": 1})
    plots.trajectories(traj, "tau", tmp_path / "traj.png")
    table = pd.DataFrame({"strategy": ["fedavg", "fedavg"], "tau": [1.0, 5.0], "accuracy_%": [90, 80],
                          "sece_%": [0, 3]})
    plots.defense_bars(table, tmp_path / "bars.png")
    assert len(seen) == 3
    for name, text in zip(("rel.png", "traj.png", "bars.png"), seen):
        assert "> 0 under-confident" in text, name
        assert (tmp_path / name).exists()


def test_trajectory_round_ticks_are_integers(tmp_path, monkeypatch):
    ticks = []

    def record(fig):
        fig.canvas.draw()
        ticks.extend(t for ax in fig.axes for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1])

    spy_savefig(monkeypatch, record)
    traj = pd.DataFrame({"tau": 1.0, "metric": "accuracy", "round": [0, 1, 2, 3], "mean": [0.1, 0.2, 0.3, 0.4],
                         "std": 0.0, "runs": 1})
    plots.trajectories(traj, "tau", tmp_path / "t.png")  # 4 rounds: matplotlib alone ticks 0, 0.5, 1, …
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_defense_plot_draws_no_line_through_a_tau_that_was_never_run(tmp_path, monkeypatch):
    """CalGuard was run at τ = 0.2 and 5 only (no benign CalGuard run): its line must break at τ = 1,
    where only FedAvg was run, not join 0.2 to 5 through it."""
    lines = {}
    spy_savefig(monkeypatch, lambda fig: lines.update(
        {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in fig.axes[0].get_lines()}))
    rows = [("fedavg", 0.2, 3.0), ("fedavg", 1.0, 0.5), ("fedavg", 5.0, -4.0),
            ("calguard", 0.2, 1.0), ("calguard", 5.0, -1.0)]
    table = pd.DataFrame([{"strategy": s, "tau": t, "sece": v, "dataset": "mnist", "dirichlet_alpha": 0.5,
                           "attacker_ratio": 0.25, "tsa_step_frac": 1.0, "tsa_blend": 1.0, "tsa_duty": 1.0}
                          for s, t, v in rows])
    defense_plot(table, tmp_path / "d.png")
    x, y = lines["calguard"]
    assert x == [0.2, 1.0, 5.0] and y[0] == 1.0 and np.isnan(y[1]) and y[2] == -1.0
    assert lines["fedavg"] == ([0.2, 1.0, 5.0], [3.0, 0.5, -4.0])  # a line whose every τ was run is whole


def test_the_sweep_prints_percent_like_the_tau_tables_and_says_the_sign():
    from fedcal.reports.sweeps import printed_cells

    cells = pd.DataFrame({"tau": [0.5, 2.0], "accuracy": [0.9123, 0.5], "ece": [0.0312, 0.2],
                          "sece": [0.0311, -0.15], "brier": [0.12345, 0.3], "nll": [0.3, 1.0], "seed": [0, 0]})
    text = printed_cells(cells, ["tau"])
    lines = text.splitlines()

    def cells_of(line):  # a Markdown row, as every printed table of fedcal is
        assert line.startswith("| ") and line.endswith(" |"), line
        return [c.strip() for c in line.strip("|").split("|")]

    assert cells_of(lines[0]) == ["tau", "accuracy_%", "ece_%", "sece_%", "brier", "nll"]
    assert lines[1] == "|---|---|---|---|---|---|"
    assert cells_of(lines[2]) == ["0.5", "91.23", "3.12", "+3.11", "0.1235", "0.3000"]
    assert cells_of(lines[3]) == ["2.0", "50.00", "20.00", "-15.00", "0.3000", "1.0000"]
    assert "> 0 under-confident" in lines[-1] and "percent" in lines[-1]


def test_sweep_curves_of_a_cells_csv_read_back_warn_nothing_and_tick_the_swept_values(tmp_path, monkeypatch):
    """cells.csv holds every config column; pandas reads it back one block per column, and adding a
    column to such a frame raised pandas' PerformanceWarning in every sweep plot made from it."""
    import warnings

    from fedcal.config import RunConfig

    base = RunConfig().to_flower()
    rows = [{**base, "tau": t, "seed": s, "accuracy": 0.9 - 0.01 * t, "sece": 0.01 * (1 - t)}
            for t in (0.5, 2.0, 5.0) for s in (0, 1)]
    pd.DataFrame(rows).to_csv(tmp_path / "cells.csv", index=False)
    cells = pd.read_csv(tmp_path / "cells.csv")
    ticks = {}
    spy_savefig(monkeypatch, lambda fig: ticks.update(x=[list(ax.get_xticks()) for ax in fig.axes]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.PerformanceWarning)
        plots.sweep_curves(cells, "tau", tmp_path / "s.png")
    assert ticks["x"] == [[0.5, 2.0, 5.0]] * 2
