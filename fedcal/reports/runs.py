"""The final metrics of finished runs, read from the run store only, and the checks every run
passes before any report reads it.

"The last round's metrics" of a run means the metrics of its last *evaluated* round: the last
round that logged ``accuracy`` (central evaluation may run every k rounds). This is the one
reader of it, behind the τ tables, the sweep tables and ``fedcal run``'s closing line.

**Only sound, finished runs are read** (:func:`finished_only`, the gate of every report). A run
directory is left out of every final table, with one warning line naming it and why, when

* it is unfinished: no ``DONE`` matching its config hash (interrupted, crashed, still running;
  :func:`fedcal.results.run_status`) — the line says how far it got (``rounds logged up to 16 of
  60``);
* its ``config.json`` cannot be read;
* its ``metrics.csv`` is missing or torn (a row with missing fields, a round or value that is not
  a number, a row of another run);
* its rounds are not unique and complete: a (round, metric) logged twice (two writers), or an
  evaluated round missing or extra against the task's evaluation schedule (:func:`evaluated_rounds`:
  round 0, every ``eval-every``-th round and the last);
* (inference) its ``accuracy.csv`` is missing or unreadable.

Two directories holding one run (the same config hash: the same configuration and seed, e.g. a
folder copied beside its original) are counted once, with a warning; when their results differ
the report stops with one line naming both (:class:`DuplicateRunError`).

Per-round tables (``rounds.csv`` of a sweep) keep the rows of unfinished runs, flagged
``finished = False``; the τ report's trajectories use the finished runs only.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import NamedTuple, Sequence

import pandas as pd

from fedcal.config import ConfigError, RunConfig, field_names, key_of
from fedcal.results import CODE, FINISHED, METRICS_FILE, config_hash, load_metrics, run_status
# the soundness checks live with the run store, so that `fedcal runs` and the reports share them
from fedcal.results.checks import check_rounds, damage, evaluated_rounds, read_metrics_strict  # noqa: F401

EVALUATED = "accuracy"  # a round that logged this metric was evaluated
log = logging.getLogger("fedcal.reports")

#: metrics that are wall-clock timings, not results: two runs of one config differ in them
TIMINGS = ("round_seconds",)


class DuplicateRunError(ConfigError):
    """Two run directories hold the same run (config hash) with different results: a report cannot
    tell which one is the result. The message names both directories."""


class RunCheck(NamedTuple):
    """What :func:`check_run` found: the run's config when readable, and why it cannot be reported
    ("" when it can)."""

    run_dir: Path
    cfg: RunConfig | None
    why: str


def check_run(run_dir: str | os.PathLike[str]) -> RunCheck:
    """Can ``run_dir`` be reported? Finished (``DONE`` matching its config hash) and whole
    (:func:`damage`). ``why`` is one line: ``<dir>: unfinished (no DONE marker; rounds logged up to
    16 of 60)``, ``<dir>: finished, but its metrics.csv is torn (line 7 has 3 of 5 fields)`` …"""
    d = Path(run_dir)
    status = run_status(d)
    if not status.finished:
        return RunCheck(d, None, status.describe())
    cfg, why = damage(d)
    return RunCheck(d, cfg, f"{d}: finished, but {why}" if why else "")


def _results(run_dir: Path) -> pd.DataFrame:
    """What a run computed, to compare two directories of one config: its metrics (timings left out)
    and, where the task writes one, its accuracy table."""
    rows, _ = read_metrics_strict(run_dir)
    frame = pd.DataFrame([r for r in rows if r[1] not in TIMINGS], columns=["round", "metric", "value"])
    frame = frame.sort_values(["round", "metric"]).reset_index(drop=True)
    if (run_dir / "accuracy.csv").exists():
        acc = pd.read_csv(run_dir / "accuracy.csv")
        frame = pd.concat([frame, acc.assign(metric="accuracy.csv").rename(columns={"accuracy": "value"})[
            ["metric", "value"]]], ignore_index=True)
    return frame


def _same_results(a: Path, b: Path) -> bool:
    ra, rb = _results(a), _results(b)
    if ra.shape != rb.shape or not (ra[["round", "metric"]].fillna(-1).astype(str).to_numpy()
                                    == rb[["round", "metric"]].fillna(-1).astype(str).to_numpy()).all():
        return False
    # equal to float64 round-off (identical runs write identical reprs; engines agree to 1e-5 only)
    return all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(x) and math.isnan(y))
               for x, y in zip(ra["value"], rb["value"]))


def finished_only(run_dirs: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
                  table: str = "the final tables") -> list[Path]:
    """The sound, finished runs among ``run_dirs`` (order kept; see the module docstring), each run
    once. Logs one warning line per run left out of ``table`` — ``left out of cells.csv: <dir>:
    unfinished (no DONE marker; rounds logged up to 16 of 60)`` — and one per directory that repeats
    another's run; raises :class:`DuplicateRunError` when two directories of one run differ in
    their results."""
    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    out: list[Path] = []
    by_hash: dict[str, Path] = {}
    for d in dict.fromkeys(Path(p) for p in run_dirs):  # one path given twice is one directory
        check = check_run(d)
        if check.why:
            log.warning("left out of %s: %s", table, check.why)
            continue
        h = config_hash(check.cfg)
        if h in by_hash:
            first = by_hash[h]
            if not _same_results(first, d):
                raise DuplicateRunError(f"{first} and {d} hold the same run (config hash {h}: one configuration "
                                        "and seed) with different results: keep one of them")
            log.warning("left out of %s: %s: the same run as %s (config hash %s, same results), counted once",
                        table, d, first, h)
            continue
        by_hash[h] = d
        out.append(d)
    return out


def load_rounds(run_dirs: Sequence[str | os.PathLike[str]], table: str = "the per-round table") -> pd.DataFrame:
    """:func:`fedcal.results.load_metrics` of every run directory whose ``metrics.csv`` pandas can
    parse — unfinished runs included, flagged ``finished = False`` —; a directory whose file it
    cannot parse (two writers interleaving their rows) is left out of ``table`` with a warning."""
    frames = []
    for d in run_dirs:
        try:
            frames.append(load_metrics([d]))
        except (OSError, ValueError, KeyError, pd.errors.ParserError) as exc:
            log.warning("left out of %s: %s: its %s cannot be parsed (%s)", table, d, METRICS_FILE,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else load_metrics([])


#: a run whose last round accepted none of the replies it received (its model is the one kept from an
#: earlier round: no result of its setting, above chance or not)
STALLED = "stalled"


def stalled_runs(rounds: pd.DataFrame) -> dict[str, bool]:
    """Per run id: whether its last round with a reply account received replies and accepted none
    (runs without the account, from before it existed, are absent)."""
    r = rounds[rounds["metric"].isin(["replies_received", "replies_accepted"])]
    if r.empty:
        return {}
    last = r[r["round"] == r.groupby("run_id")["round"].transform("max")]
    w = last.pivot_table(index="run_id", columns="metric", values="value")
    if not {"replies_received", "replies_accepted"} <= set(w.columns):
        return {}
    return ((w["replies_received"] > 0) & (w["replies_accepted"] == 0)).to_dict()


#: the line under a table with a stalled run
STALLED_NOTE = ("stalled: the run's last round accepted none of its replies (each rejected and named in its "
                "rejections.csv), so its final model is one kept from an earlier round, not one its setting trained to the end.\n")


def run_stalled(run_dir: str | os.PathLike[str]) -> bool:
    """Whether one run stalled (:func:`stalled_runs` on its ``metrics.csv``); False for a run without the
    reply account or whose file cannot be parsed (named in a warning by :func:`load_rounds`)."""
    return any(stalled_runs(load_rounds([run_dir], "the stalled-run check")).values())  # one run id per folder


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
    config_cols = [key_of(f) for f in field_names()]
    index = ["run_id", *[c for c in [*config_cols, CODE] if c in done.columns], "round"]
    # pivot on the run id alone, then join the run's config columns: a pivot indexed by 100+ config
    # columns is slow, fragments the frame, and drops a run whose config lacks a key (a NaN index)
    values = done.pivot_table(index="run_id", columns="metric", values="value", dropna=False)
    values.columns.name = None
    per_run = done.drop_duplicates("run_id")[index].sort_values("run_id")
    wide = per_run.merge(values, left_on="run_id", right_index=True, how="left").reset_index(drop=True)
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
