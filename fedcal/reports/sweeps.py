"""Sweep tables (flwr-free): every finished cell's final metrics with its config columns
(``cells.csv``) and the per-round rows of every cell (``rounds.csv``), read back from the run
store.

Unfinished cells (no ``DONE`` matching their config hash: interrupted, crashed, not run) are never
in ``cells.csv``, nor are finished cells whose files fail the run checks (torn ``metrics.csv``,
incomplete rounds); each is named in a warning line (:func:`fedcal.reports.runs.finished_only`).
Their rows stay in ``rounds.csv``, flagged ``finished = False``. ``cells.csv`` holds one row per
cell, with its config columns, so no cell is averaged with another; its ``chance_level`` column flags
a cell whose final accuracy is within noise of chance (:mod:`fedcal.reports.chance`), its ``stalled``
column a cell whose last round accepted no reply: its clients' training from the model diverged (NaN
updates, rejected and named in the run's rejections.csv), so the "final" model is a broken one kept
from an earlier round — above chance, perhaps, but no result of the setting.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from fedcal.config import RunConfig
from fedcal.reports.chance import cfg_chance
from fedcal.reports.runs import STALLED, final_rows, finished_only, load_rounds, stalled_runs
from fedcal.results import FINISHED, run_dir_for

CHANCE = "chance_level"
def left_out(cells: pd.DataFrame) -> pd.Series:
    """Per cell: whether its model is at chance or stalled — no result of its setting, so counted but left out
    of any mean over seeds and any trend (the seed summary, the sweep plot). Either column may be absent (an
    older ``cells.csv``)."""
    out = pd.Series(False, index=cells.index)
    for flag in (CHANCE, STALLED):
        if flag in cells.columns:
            out |= cells[flag].astype(bool)
    return out


def collect(configs: Sequence[RunConfig], varying: Sequence[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, rounds).

    * cells: the final metrics of each *finished* cell (wide, with config columns; :func:`final_rows`
      without its ``round`` column) sorted by the ``varying`` keys: ``accuracy``, ``brier``,
      ``ece``, ``nll``, ``sece``, plus one column for any other metric the runs
      logged per round (e.g. a strategy's per-round reply counts), of the last evaluated round, and
      ``chance_level`` and ``stalled`` (:func:`stalled_runs`);
    * rounds: every cell's per-round rows (:func:`fedcal.results.load_metrics`), unfinished cells'
      included and flagged ``finished = False`` (so are finished cells whose files fail the run
      checks: they are not final either).
    """
    dirs = [run_dir_for(c) for c in configs]
    sound = set(finished_only(dirs, "cells.csv"))  # names every cell left out
    rounds = load_rounds(dirs, "rounds.csv")
    if rounds.empty:
        return pd.DataFrame(), rounds
    rounds[FINISHED] = rounds[FINISHED] & rounds["run_id"].isin({d.name for d in sound})
    cells = final_rows(rounds)  # sound, finished cells only
    if cells.empty:
        return cells, rounds
    cells = cells.drop(columns="round").copy()  # one block again: the pivot left it fragmented
    # by run directory (its name is the run id), not by the data-dir a run recorded: a run store made on
    # another machine (a lent GPU's /tmp/data) is read here with this machine's data-dir
    chance = {d.name: cfg_chance(c) for d, c in zip(dirs, configs)}
    cells[CHANCE] = [bool(lv is not None and lv.flags(a)) for lv, a in
                     zip(cells["run_id"].map(chance), cells["accuracy"])]
    cells[STALLED] = cells["run_id"].map(stalled_runs(rounds)).fillna(False).astype(bool)
    if varying:
        cells = cells.sort_values(list(varying)).reset_index(drop=True)
    return cells, rounds


def write_results(configs: Sequence[RunConfig], out_dir: str | os.PathLike[str],
                  varying: Sequence[str] | None = None) -> pd.DataFrame:
    """Write ``cells.csv`` (finished cells) and ``rounds.csv`` (every cell's rounds, with
    ``finished``) of a sweep to ``out_dir``, and with a ``seed`` axis of several finished seeds
    ``seeds.csv`` / ``seeds.md`` (:func:`seed_summary`); returns the cells."""
    from fedcal.reports.chance import footnote

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells, rounds = collect(configs, varying)
    cells.to_csv(out / "cells.csv", index=False)
    rounds.to_csv(out / "rounds.csv", index=False)
    for stale in ("seeds.csv", "seeds.md"):  # never a summary of an earlier invocation beside these cells
        (out / stale).unlink(missing_ok=True)
    if varying and SEED in varying and not cells.empty and cells[SEED].nunique() > 1:
        summary = seed_summary(cells, rounds, varying)
        summary.to_csv(out / "seeds.csv", index=False)
        seeds = ", ".join(map(str, sorted(cells[SEED].unique())))
        (out / "seeds.md").write_text(seed_markdown(summary, f"(mean ± std over seeds {seeds})",
                                                    footnote(cfg_chance(c) for c in configs)))
    return cells


#: the metrics a sweep prints, in the unit of every printed table (percent; cells.csv keeps fractions)
PRINTED = {"accuracy": ("accuracy_%", "{:.2f}"), "ece": ("ece_%", "{:.2f}"), "sece": ("sece_%", "{:+.2f}"),
           "brier": ("brier", "{:.4f}"), "nll": ("nll", "{:.4f}")}


def printed_cells(cells: pd.DataFrame, axes: Sequence[str]) -> str:
    """The table ``fedcal sweep`` prints, in Markdown: the axes, then accuracy, ECE and sECE in percent
    (as the τ and defense tables print them) and Brier and NLL, one line per cell, and the note on the
    units and sECE's sign. ``cells.csv`` keeps the fractions (docs/results.md says so)."""
    from fedcal.reports.markdown import SECE_SIGN, UNITS_NOTE, markdown_table

    if cells.empty:
        return "(no finished cell)"
    shown = cells[[a for a in axes if a in cells.columns]].copy()
    for name, (label, fmt) in PRINTED.items():
        if name in cells.columns:
            scale = 100 if label.endswith("_%") else 1
            shown[label] = [fmt.format(scale * v) if pd.notna(v) else "nan" for v in cells[name]]
    # Markdown, as every other table a command prints (the τ, defense and seed tables)
    return markdown_table(shown) + f"\n{UNITS_NOTE}; {SECE_SIGN}"


SEED = "seed"
#: the metrics a seed summary averages (fractions, as in cells.csv)
SEED_METRICS = ("accuracy", "ece", "sece", "brier", "nll")
#: replies the server rejected in all rounds of a row's seeds (a NaN update, a wrong shape: the
#: reason is in each run's rejections.csv) — a row whose attackers' replies were dropped measured a
#: weaker attack than its setting names, so the summary carries the count
REJECTED = "replies_rejected_total"


def seed_summary(cells: pd.DataFrame, rounds: pd.DataFrame, axes: Sequence[str]) -> pd.DataFrame:
    """Mean and standard deviation over seeds of each :data:`SEED_METRICS` per value of the other
    ``axes``, with the seed count, the chance-level and stalled counts and :data:`REJECTED`. A cell whose
    model is at chance or stalled is counted (``chance_level``; ``stalled`` above chance) but left out of the means
    (``seeds_in_means`` says how many are in them): a diverged seed's NLL alone would set the row's (the
    sweep plot draws it as a cross, :func:`fedcal.reports.sweep_curves`).

    Cells that differ in a hashed key that is not an axis (a sweep run over two run stores, a key
    changed between invocations) are never averaged together: such rows gain a ``config`` column
    naming the keys (:func:`fedcal.reports.groups.frame_config_labels`). Two cells of one seed in
    one row are a ValueError naming them (a seed is never counted twice)."""
    from fedcal.reports.groups import CONFIG, frame_config_labels

    by = [a for a in axes if a != SEED and a in cells.columns]
    frame = cells[[*by, SEED, "run_id", *SEED_METRICS, CHANCE]].copy()
    # stalled above chance only: a stalled model at chance is counted once, as at chance (an older cells.csv
    # has no stalled column)
    frame[STALLED] = (cells[STALLED].astype(bool) & ~frame[CHANCE].astype(bool)) if STALLED in cells.columns else False
    frame[CONFIG] = frame_config_labels(cells, [*axes, SEED])
    if frame[CONFIG].nunique() > 1:
        by = [CONFIG, *by]
    twice = frame[frame.duplicated([*by, SEED], keep=False)]
    if not twice.empty:
        raise ValueError(f"two cells of one seed in one row: {', '.join(twice['run_id'])}")
    rejected = rounds[rounds["metric"] == "replies_rejected"].groupby("run_id")["value"].sum() \
        if not rounds.empty else pd.Series(dtype=float)
    frame[REJECTED] = frame["run_id"].map(rejected).fillna(0).astype(int)
    if not by:
        frame["_all"], by = 0, ["_all"]
    g = frame.groupby(by, sort=True)
    sound = frame[~left_out(frame)].groupby(by, sort=True)[list(SEED_METRICS)]
    out = g.size().rename("seeds").to_frame().join(sound.mean().add_suffix("_mean"))
    out = out.join(sound.std(ddof=1).add_suffix("_std")).join(sound.size().rename("seeds_in_means"))
    out = out.join(g[CHANCE].sum().astype(int)).join(g[STALLED].sum().astype(int)).join(g[REJECTED].sum())
    return out.reset_index().drop(columns="_all", errors="ignore")


def seed_markdown(summary: pd.DataFrame, title: str = "", chance_note: str = "") -> str:
    """:func:`seed_summary` as Markdown: "mean ± std" cells in the printed units (accuracy, ECE and
    sECE in percent), the chance marker on a row with chance-level models (and ``chance_note``,
    :func:`fedcal.reports.chance.footnote`, under the table), and the rejected replies' column only
    when some row had one."""
    from fedcal.reports.chance import marked
    from fedcal.reports.markdown import SECE_SIGN, UNITS_NOTE, markdown_table

    keys = [c for c in summary.columns if not c.endswith(("_mean", "_std")) and
            c not in ("seeds", "seeds_in_means", CHANCE, STALLED, REJECTED)]
    shown = summary[keys].copy()
    n = summary["seeds_in_means"].fillna(0).astype(int)
    for name, (label, fmt) in PRINTED.items():
        scale = 100 if label.endswith("_%") else 1
        cells = ["—" if k == 0 else f"{fmt.format(scale * m)} ± {fmt.format(scale * s).lstrip('+')}" if k > 1
                 else fmt.format(scale * m) for m, s, k in zip(summary[f"{name}_mean"], summary[f"{name}_std"], n)]
        if name == "accuracy":
            stalled = summary[STALLED] if STALLED in summary.columns else [0] * len(summary)
            cells = [marked(t, bool(c)) + ("" if not c else f" ({c} of {k} seeds at chance, not in the means)")
                     + ("" if not st else f" ({st} of {k} seeds stalled, not in the means)")
                     for t, c, st, k in zip(cells, summary[CHANCE], stalled, summary["seeds"])]
        shown[label] = cells
    shown["seeds"] = summary["seeds"]
    if summary[REJECTED].any():
        shown["replies rejected"] = summary[REJECTED]
    floats = {k: "{:g}" for k in keys if pd.api.types.is_float_dtype(summary[k])}
    note = "\n" + chance_note if chance_note and summary[CHANCE].any() else ""
    return markdown_table(shown, title, formats=floats) + note + f"\n{UNITS_NOTE}; {SECE_SIGN}\n"
