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

import csv
import logging
import math
import os
from pathlib import Path
from typing import NamedTuple, Sequence

import pandas as pd

from fedcal.config import ConfigError, RunConfig, field_names, key_of, task_config
from fedcal.results import (CODE, COLUMNS, CONFIG_FILE, FINISHED, METRICS_FILE, config_hash, load_config,
                            load_metrics, run_status)

EVALUATED = "accuracy"  # a round that logged this metric was evaluated
log = logging.getLogger("fedcal.reports")

#: metrics that are wall-clock timings, not results: two runs of one config differ in them
TIMINGS = ("round_seconds",)


class DuplicateRunError(ConfigError):
    """Two run directories hold the same run (config hash) with different results: a report cannot
    tell which one is the result. The message names both directories."""


def evaluated_rounds(cfg: RunConfig) -> tuple[str, list[int]] | None:
    """(metric, rounds) a finished run of ``cfg`` has evaluated: round 0, every ``eval-every``-th round
    and the last (the task's own keys: its :attr:`fedcal.config.TaskConfig.schedule`); None for a task without rounds."""
    schedule = task_config(cfg.task).schedule
    if schedule is None:
        return None
    metric, last_key, every_key = schedule
    last, every = getattr(cfg, last_key), getattr(cfg, every_key)
    return metric, sorted({0, last, *range(every, last + 1, every)})


def _rounds_text(rounds: Sequence[int]) -> str:
    """``3, 5-9, 12``: a sorted round list, runs of consecutive rounds as ranges (at most 6 items)."""
    parts: list[str] = []
    start = prev = None
    for r in sorted(rounds):
        if prev is not None and r == prev + 1:
            prev = r
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = r
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(parts[:6]) + (", …" if len(parts) > 6 else "")


def _rounds(rounds: Sequence[int]) -> str:
    return ("round " if len(rounds) == 1 else "rounds ") + _rounds_text(rounds)


def read_metrics_strict(run_dir: Path) -> tuple[list[tuple[int, str, float]], str]:
    """(rows ``(round, metric, value)``, "") of a run's ``metrics.csv`` when every row is whole, else
    ([], why): a missing file, a header other than the run store's, a row with missing or extra
    fields, a round or value that is not a number, or a row of another run (its config hash). A
    torn last row — the process killed in the middle of a write — is caught here: pandas would read
    it as NaN fields."""
    path = run_dir / METRICS_FILE
    try:
        with open(path, newline="") as f:
            lines = list(csv.reader(f))
    except FileNotFoundError:
        return [], f"its {METRICS_FILE} is missing"
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        return [], f"its {METRICS_FILE} cannot be read ({exc})"
    if not lines or tuple(lines[0]) != COLUMNS:
        return [], f"its {METRICS_FILE} has no run-store header ({', '.join(COLUMNS)})"
    rows, hashes = [], set()
    for i, line in enumerate(lines[1:], start=2):
        if len(line) != len(COLUMNS) or not all(line[j] for j in (0, 1, 2, 4)):
            return [], f"its {METRICS_FILE} is torn (line {i} has {len(line)} of {len(COLUMNS)} fields)"
        try:
            rnd, value = float(line[1]), float(line[3])
        except ValueError:
            return [], f"its {METRICS_FILE} is torn (line {i}: round {line[1]!r}, value {line[3]!r})"
        if not rnd.is_integer() or rnd < 0:
            return [], f"its {METRICS_FILE} is torn (line {i}: round {line[1]!r})"
        if len(line[4]) != 12 or any(c not in "0123456789abcdef" for c in line[4]):
            return [], f"its {METRICS_FILE} is torn (line {i}: config hash {line[4]!r})"
        hashes.add(line[4])
        rows.append((int(rnd), line[2], value))
    if len(hashes) > 1:
        return [], f"its {METRICS_FILE} holds rows of {len(hashes)} config hashes ({', '.join(sorted(hashes))})"
    return rows, ""


def check_rounds(rows: Sequence[tuple[int, str, float]], cfg: RunConfig) -> str:
    """"" when ``rows`` (of :func:`read_metrics_strict`) log each (round, metric) once and evaluate
    exactly the rounds of the task's schedule (:func:`evaluated_rounds`); else why not, one line."""
    seen: dict[tuple[int, str], int] = {}
    for rnd, metric, _ in rows:
        seen[rnd, metric] = seen.get((rnd, metric), 0) + 1
    twice = sorted({r for (r, _), k in seen.items() if k > 1})
    if twice:
        return (f"its {METRICS_FILE} logs {_rounds(twice)} more than once (two writers, or "
                "an interrupted run resumed into the same directory)")
    schedule = evaluated_rounds(cfg)
    if schedule is None:
        return ""
    metric, want = schedule
    have = {r for (r, m) in seen if m == metric}
    missing, extra = sorted(set(want) - have), sorted(have - set(want))
    _, last_key, every_key = task_config(cfg.task).schedule  # type: ignore[misc]
    plan = f"{key_of(last_key)} = {getattr(cfg, last_key)}, {key_of(every_key)} = {getattr(cfg, every_key)}"
    if missing:
        return f"its {METRICS_FILE} lacks the evaluation ({metric}) of {_rounds(missing)} ({plan})"
    if extra:
        return f"its {METRICS_FILE} evaluates {_rounds(extra)} outside its schedule ({plan})"
    return ""


class RunCheck(NamedTuple):
    """What :func:`check_run` found: the run's config when readable, and why it cannot be reported
    ("" when it can)."""

    run_dir: Path
    cfg: RunConfig | None
    why: str


def check_run(run_dir: str | os.PathLike[str]) -> RunCheck:
    """Can ``run_dir`` be reported? Finished (``DONE`` matching its config hash), ``config.json``
    readable, ``metrics.csv`` whole, rounds unique and complete, and the task's own tables readable
    with their columns (:attr:`fedcal.config.TaskConfig.tables`: the inference task's
    ``accuracy.csv``). ``why`` is one line: ``<dir>: unfinished (no DONE marker; rounds logged up to
    16 of 60)``, ``<dir>: finished, but its metrics.csv is torn (line 7 has 3 of 5 fields)`` …"""
    d = Path(run_dir)
    status = run_status(d)
    if not status.finished:
        return RunCheck(d, None, status.describe())
    try:
        cfg = load_config(d)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # ConfigError is a ValueError
        why = str(exc).split("; known keys")[0]  # a ConfigError lists every known key after its first clause
        return RunCheck(d, None, f"{d}: finished, but its {CONFIG_FILE} cannot be read ({why})")
    rows, why = read_metrics_strict(d)
    if not why:
        why = check_rounds(rows, cfg)
    for name, columns in task_config(cfg.task).tables:
        if why:
            break
        why = _check_table(d / name, columns)
    return RunCheck(d, cfg, f"{d}: finished, but {why}" if why else "")


def _check_table(path: Path, columns: Sequence[str]) -> str:
    """"" when the table at ``path`` reads and has ``columns``; else why not, one line."""
    try:
        table = pd.read_csv(path)
    except FileNotFoundError:
        return f"its {path.name} is missing"
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        return f"its {path.name} cannot be read ({exc})"
    if not set(columns) <= set(table.columns):
        names = ", ".join(columns[:-1]) + f" and {columns[-1]}" if len(columns) > 1 else columns[0]
        return f"its {path.name} lacks the {names} columns"
    return ""


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
