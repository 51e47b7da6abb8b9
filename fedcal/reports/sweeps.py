"""Sweep tables (flwr-free): every finished cell's final metrics with its config columns
(``cells.csv``) and the per-round rows of every cell (``rounds.csv``), read back from the run
store.

Unfinished cells (no ``DONE`` matching their config hash: interrupted, crashed, not run) are never
in ``cells.csv``; each is named in a warning line (:func:`fedcal.reports.runs.finished_only`).
Their rows stay in ``rounds.csv``, flagged ``finished = False``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from fedcal.config import RunConfig
from fedcal.reports.runs import final_rows, finished_only
from fedcal.results import load_metrics, run_dir_for


def collect(configs: Sequence[RunConfig], varying: Sequence[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, rounds).

    * cells: the final metrics of each *finished* cell (wide, with config columns; :func:`final_rows`
      without its ``round`` column) sorted by the ``varying`` keys: ``accuracy``, ``brier``,
      ``ece``, ``nll``, ``sece``, plus one column for any other metric the runs
      logged per round (e.g. a strategy's per-round reply counts), of the last evaluated round;
    * rounds: every cell's per-round rows (:func:`fedcal.results.load_metrics`), unfinished cells'
      included and flagged ``finished = False``.
    """
    dirs = [run_dir_for(c) for c in configs]
    finished_only(dirs, "cells.csv")  # names every cell left out
    rounds = load_metrics(dirs)
    if rounds.empty:
        return pd.DataFrame(), rounds
    cells = final_rows(rounds)  # finished cells only
    if cells.empty:
        return cells, rounds
    cells = cells.drop(columns="round")
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
