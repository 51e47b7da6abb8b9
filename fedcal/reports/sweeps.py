"""Sweep tables (flwr-free): every finished cell's final metrics with its config columns
(``cells.csv``) and the per-round rows of every cell (``rounds.csv``), read back from the run
store.

Unfinished cells (no ``DONE`` matching their config hash: interrupted, crashed, not run) are never
in ``cells.csv``, nor are finished cells whose files fail the run checks (torn ``metrics.csv``,
incomplete rounds); each is named in a warning line (:func:`fedcal.reports.runs.finished_only`).
Their rows stay in ``rounds.csv``, flagged ``finished = False``. ``cells.csv`` holds one row per
cell, with its config columns, so no cell is averaged with another; its ``chance_level`` column flags
a cell whose final accuracy is within noise of chance (:mod:`fedcal.reports.chance`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from fedcal.config import RunConfig
from fedcal.reports.chance import cfg_chance
from fedcal.reports.runs import final_rows, finished_only, load_rounds
from fedcal.results import FINISHED, run_dir_for

CHANCE = "chance_level"


def collect(configs: Sequence[RunConfig], varying: Sequence[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, rounds).

    * cells: the final metrics of each *finished* cell (wide, with config columns; :func:`final_rows`
      without its ``round`` column) sorted by the ``varying`` keys: ``accuracy``, ``brier``,
      ``ece``, ``nll``, ``sece``, plus one column for any other metric the runs
      logged per round (e.g. a strategy's per-round reply counts), of the last evaluated round, and
      ``chance_level``;
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
    chance = {c.dataset + "/" + c.data_dir: cfg_chance(c) for c in configs}
    cells[CHANCE] = [bool(lv is not None and lv.flags(a)) for lv, a in
                     zip((chance[f"{ds}/{dd}"] for ds, dd in zip(cells["dataset"], cells["data-dir"])),
                         cells["accuracy"])]
    if varying:
        cells = cells.sort_values(list(varying)).reset_index(drop=True)
    return cells, rounds


def write_results(configs: Sequence[RunConfig], out_dir: str | os.PathLike[str],
                  varying: Sequence[str] | None = None) -> pd.DataFrame:
    """Write ``cells.csv`` (finished cells) and ``rounds.csv`` (every cell's rounds, with
    ``finished``) of a sweep to ``out_dir``; returns the cells."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells, rounds = collect(configs, varying)
    cells.to_csv(out / "cells.csv", index=False)
    rounds.to_csv(out / "rounds.csv", index=False)
    return cells


#: the metrics a sweep prints, in the unit of every printed table (percent; cells.csv keeps fractions)
PRINTED = {"accuracy": ("accuracy_%", "{:.2f}"), "ece": ("ece_%", "{:.2f}"), "sece": ("sece_%", "{:+.2f}"),
           "brier": ("brier", "{:.4f}"), "nll": ("nll", "{:.4f}")}


def printed_cells(cells: pd.DataFrame, axes: Sequence[str]) -> str:
    """The table ``fedcal sweep`` prints: the axes, then accuracy, ECE and sECE in percent (as the
    τ and defense tables print them) and Brier and NLL, one line per cell, and the note on the
    units and sECE's sign. ``cells.csv`` keeps the fractions (docs/results.md says so)."""
    from fedcal.reports.markdown import SECE_SIGN, UNITS_NOTE

    if cells.empty:
        return "(no finished cell)"
    shown = cells[[a for a in axes if a in cells.columns]].copy()
    for name, (label, fmt) in PRINTED.items():
        if name in cells.columns:
            scale = 100 if label.endswith("_%") else 1
            shown[label] = [fmt.format(scale * v) if pd.notna(v) else "nan" for v in cells[name]]
    return shown.to_string(index=False) + f"\n({UNITS_NOTE}; {SECE_SIGN})"

