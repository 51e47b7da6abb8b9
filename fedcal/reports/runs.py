"""The final metrics of finished (or interrupted) runs, read from the run store only.

"The last round's metrics" of a run means the metrics of its last *evaluated* round: the last
round that logged ``accuracy`` (central evaluation may run every k rounds, and an interrupted
run may have logged a round's timing without its evaluation). This is the one reader of it,
behind the τ tables, the sweep tables and ``fedcal run``'s closing line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from fedcal.config import RunConfig, key_of
from fedcal.results import load_metrics

EVALUATED = "accuracy"  # a round that logged this metric was evaluated


def final_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    """Wide rows of the last evaluated round of each run in ``metrics`` (tidy rows of
    :func:`fedcal.results.load_metrics`): ``run_id``, the config columns, ``round`` and one
    column per metric (alphabetical), one row per ``run_id`` in ``run_id`` order. Runs that
    never evaluated are left out."""
    evaluated = metrics[metrics["metric"] == EVALUATED]
    if evaluated.empty:
        return pd.DataFrame()
    last = evaluated.groupby("run_id")["round"].max()
    done = metrics[metrics["round"] == metrics["run_id"].map(last)]
    config_cols = [key_of(f) for f in RunConfig.__dataclass_fields__]
    index = ["run_id", *[c for c in config_cols if c in done.columns], "round"]
    wide = done.pivot_table(index=index, columns="metric", values="value").reset_index()
    wide.columns.name = None
    # pivot_table drops a metric that is NaN in every row (a diverged model); keep it, as NaN
    return wide.reindex(columns=[*index, *sorted(set(done["metric"]))])


def final_metrics(run_dirs: Sequence[str | os.PathLike[str]] | str | os.PathLike[str]) -> pd.DataFrame:
    """One row per run directory with an evaluated round: its last evaluated round's metrics
    (wide: ``accuracy``, ``ece``, ``sece``, ``brier``, ``nll``, ``round_seconds``), the round
    (``round``), its config columns (kebab-case keys) and ``run_id``. See :func:`final_rows`."""
    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    return final_rows(load_metrics([Path(d) for d in run_dirs]))
