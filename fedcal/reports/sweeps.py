"""Sweep tables (flwr-free): every cell's final metrics with its config columns
(``cells.csv``) and the per-round rows (``rounds.csv``), read back from the run store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from fedcal.config import RunConfig
from fedcal.reports.runs import final_rows
from fedcal.results import load_metrics, run_dir_for


def collect(configs: Sequence[RunConfig], varying: Sequence[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, rounds): final metrics per cell (wide, with config columns; :func:`final_rows`
    without its ``round`` column) sorted by the ``varying`` keys, and all per-round rows."""
    rounds = load_metrics([run_dir_for(c) for c in configs])
    if rounds.empty:
        return pd.DataFrame(), rounds
    cells = final_rows(rounds)
    if cells.empty:
        return cells, rounds
    cells = cells.drop(columns="round")
    if varying:
        cells = cells.sort_values(list(varying)).reset_index(drop=True)
    return cells, rounds


def write_results(configs: Sequence[RunConfig], out_dir: str | os.PathLike[str],
                  varying: Sequence[str] | None = None) -> pd.DataFrame:
    """Write ``cells.csv`` and ``rounds.csv`` of a sweep to ``out_dir``; returns the cells."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells, rounds = collect(configs, varying)
    cells.to_csv(out / "cells.csv", index=False)
    rounds.to_csv(out / "rounds.csv", index=False)
    return cells
