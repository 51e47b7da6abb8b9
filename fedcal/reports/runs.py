"""The final metrics of finished runs, read from the run store only.

"The last round's metrics" of a run means the metrics of its last *evaluated* round: the last
round that logged ``accuracy`` (central evaluation may run every k rounds, and a last round may
have logged its timing without its evaluation). This is the one reader of it, behind the τ
tables, the sweep tables and ``fedcal run``'s closing line.

**Unfinished runs are never final.** A run directory without a ``DONE`` matching its config hash
(interrupted, crashed, still running: :func:`fedcal.results.run_status`) is left out of every
final table, and :func:`finished_only` logs one warning line per run it leaves out, naming the
directory and how far the run got (``rounds logged up to 16 of 60``). Per-round tables
(``rounds.csv`` of a sweep) keep the rows of unfinished runs, flagged ``finished = False``; the τ
report's trajectories, which average runs per τ beside the final table, use the finished runs
only (an interrupted seed would change the mean and the run count part-way through).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from fedcal.config import RunConfig, key_of
from fedcal.results import CODE, FINISHED, load_metrics, run_status

EVALUATED = "accuracy"  # a round that logged this metric was evaluated
log = logging.getLogger("fedcal.reports")


def finished_only(run_dirs: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
                  table: str = "the final tables") -> list[Path]:
    """The finished runs among ``run_dirs`` (order kept); logs one warning line per run left
    out of ``table``: ``left out of cells.csv: <dir>: unfinished (no DONE marker; rounds logged
    up to 16 of 60)``."""
    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    out = []
    for d in map(Path, run_dirs):
        status = run_status(d)
        if status.finished:
            out.append(d)
        else:
            log.warning("left out of %s: %s", table, status.describe())
    return out


def final_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    """Wide rows of the last evaluated round of each finished run in ``metrics`` (tidy rows of
    :func:`fedcal.results.load_metrics`): ``run_id``, the config columns, ``code`` (which code
    made the run), ``round`` and one
    column per metric (alphabetical), one row per ``run_id`` in ``run_id`` order. Runs that
    never evaluated are left out, and so are the rows flagged ``finished = False`` (unfinished
    runs; :func:`finished_only` names them)."""
    if FINISHED in metrics.columns:
        metrics = metrics[metrics[FINISHED].astype(bool)]
    evaluated = metrics[metrics["metric"] == EVALUATED]
    if evaluated.empty:
        return pd.DataFrame()
    last = evaluated.groupby("run_id")["round"].max()
    done = metrics[metrics["round"] == metrics["run_id"].map(last)]
    config_cols = [key_of(f) for f in RunConfig.__dataclass_fields__]
    index = ["run_id", *[c for c in [*config_cols, CODE] if c in done.columns], "round"]
    wide = done.pivot_table(index=index, columns="metric", values="value").reset_index()
    wide.columns.name = None
    # pivot_table drops a metric that is NaN in every row (a diverged model); keep it, as NaN
    return wide.reindex(columns=[*index, *sorted(set(done["metric"]))])


def final_metrics(run_dirs: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
                  table: str = "the final metrics") -> pd.DataFrame:
    """One row per finished run directory with an evaluated round: its last evaluated round's
    metrics (wide: ``accuracy``, ``ece``, ``sece``, ``brier``, ``nll`` and any other metric the run
    logged per round; timings are in :func:`fedcal.results.load_timings`), the round (``round``), its
    config columns (kebab-case keys) and ``run_id``. Unfinished runs are left out, each named in a warning (``table`` says
    where they were left out of). See :func:`final_rows`."""
    return final_rows(load_metrics(finished_only(run_dirs, table)))
