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
from fedcal.reports.chance import MARK, cfg_chance
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


#: the reasons a seed is left out of a mean over seeds (:func:`left_out_reasons`)
DIVERGED = "diverged: its final metrics are NaN"
STALLED_REASON = "stalled: its last round accepted no reply"
#: the column of a summary over seeds that names each seed left out of its means, with the reason
LEFT_OUT = "left_out"


def left_out_reasons(cells: pd.DataFrame, accuracy: str = "accuracy", scale: float = 1.0) -> pd.Series:
    """Per run: why it is left out of every mean over seeds — ``""`` when it is in. A run is left out when
    its final metrics are NaN (:data:`DIVERGED`), its model is at chance (``at chance (9.80 %)``: the
    ``chance_level`` flag, :mod:`fedcal.reports.chance`; its marker in the text) or it stalled (:data:`STALLED_REASON`). ``accuracy``
    names the accuracy column, ``scale`` what makes it a fraction (100 for ``accuracy_%``)."""
    reasons = pd.Series("", index=cells.index, dtype=object)
    acc = pd.to_numeric(cells[accuracy], errors="coerce")
    for flag, reason in ((STALLED, STALLED_REASON), (CHANCE, None)):
        if flag in cells.columns:
            hit = cells[flag].fillna(False).astype(bool)
            reasons[hit] = [reason or f"at chance ({100 * a / scale:.2f} % {MARK})" for a in acc[hit]]
    reasons[acc.isna()] = DIVERGED
    return reasons


def left_out_names(cells: pd.DataFrame, reasons: pd.Series, by: Sequence[str]) -> pd.Series:
    """Per group of ``by``: the seeds left out of its means with their reasons (``seed 1: diverged: …``;
    ``""`` when none), indexed like ``cells.groupby(by)``."""
    named = cells.assign(_why=reasons).groupby(list(by), sort=False, dropna=False)
    return named.apply(lambda g: "; ".join(f"seed {int(s)}: {w}" for s, w in zip(g[SEED], g["_why"]) if w),
                       include_groups=False).rename(LEFT_OUT)


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
    ``axes``, with ``seeds`` the number of seeds averaged, the chance-level and stalled counts and :data:`REJECTED`.
    A cell whose model is at chance, stalled or whose metrics are NaN is left out of the means and named with its
    reason in ``left_out`` (:func:`left_out_reasons`; counted in ``chance_level`` / ``stalled``): a diverged
    seed's NLL alone would set the row's (the sweep plot draws it as a cross, :func:`fedcal.reports.sweep_curves`).

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
    reasons = left_out_reasons(frame)
    sound = frame[reasons.eq("")].groupby(by, sort=True)[list(SEED_METRICS)]
    out = pd.DataFrame(index=g.size().index).join(sound.size().rename("seeds"))
    out["seeds"] = out["seeds"].fillna(0).astype(int)
    out = out.join(sound.mean().add_suffix("_mean")).join(sound.std(ddof=1).add_suffix("_std"))
    out = out.join(g[CHANCE].sum().astype(int)).join(g[STALLED].sum().astype(int)).join(g[REJECTED].sum())
    out = out.join(left_out_names(frame, reasons, by))
    return out.reset_index().drop(columns="_all", errors="ignore")


def seed_markdown(summary: pd.DataFrame, title: str = "", chance_note: str = "") -> str:
    """:func:`seed_summary` as Markdown: "mean ± std" cells in the printed units (accuracy, ECE and
    sECE in percent) over the ``seeds`` averaged, the rejected replies' column only when some row had one, and
    the seeds left out of the means, each with its reason (``chance_note``,
    :func:`fedcal.reports.chance.footnote`, under the table when one is at chance)."""
    from fedcal.reports.markdown import SECE_SIGN, UNITS_NOTE, markdown_table

    keys = [c for c in summary.columns if not c.endswith(("_mean", "_std")) and
            c not in ("seeds", "seeds_in_means", CHANCE, STALLED, REJECTED, LEFT_OUT)]
    shown = summary[keys].copy()
    n = summary["seeds"].fillna(0).astype(int)
    for name, (label, fmt) in PRINTED.items():
        scale = 100 if label.endswith("_%") else 1
        shown[label] = ["—" if k == 0 else f"{fmt.format(scale * m)} ± {fmt.format(scale * s).lstrip('+')}" if k > 1
                        else fmt.format(scale * m) for m, s, k in zip(summary[f"{name}_mean"], summary[f"{name}_std"], n)]
    shown["seeds"] = summary["seeds"]
    if summary[REJECTED].any():
        shown["replies rejected"] = summary[REJECTED]
    if LEFT_OUT in summary.columns and summary[LEFT_OUT].fillna("").ne("").any():
        shown["left out of the means"] = summary[LEFT_OUT].fillna("")
    floats = {k: "{:g}" for k in keys if pd.api.types.is_float_dtype(summary[k])}
    note = "\n" + chance_note if chance_note and summary[CHANCE].any() else ""
    return markdown_table(shown, title, formats=floats) + note + f"\n{UNITS_NOTE}; {SECE_SIGN}\n"
