"""Is what a ``DONE`` run left whole? The one notion of "finished" every reader shares: ``fedcal
runs`` (:func:`fedcal.results.run_state`) and every report (:func:`fedcal.reports.runs.check_run`,
behind :func:`fedcal.reports.runs.finished_only`).

A run is finished when its ``DONE`` matches its config hash (:func:`fedcal.results.run_status`)
*and* what it left is whole (:func:`damage`): ``config.json`` readable, ``metrics.csv`` whole (no
torn row, no row of another run), each (round, metric) logged once and every round of the task's
evaluation schedule evaluated, and the task's own tables readable. A ``DONE`` run that fails these
checks is *damaged*: no reader reports it as finished.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Sequence

from fedcal.config import RunConfig, key_of, get_task
from fedcal.results.files import COLUMNS, CONFIG_FILE, METRICS_FILE
from fedcal.results.identity import load_config


def evaluated_rounds(cfg: RunConfig) -> tuple[str, list[int]] | None:
    """(metric, rounds) a finished run of ``cfg`` has evaluated: round 0, every ``eval-every``-th round
    and the last (the task's own keys: its :attr:`fedcal.config.Task.schedule`); None for a task without rounds."""
    schedule = get_task(cfg.task).schedule
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
    _, last_key, every_key = get_task(cfg.task).schedule  # type: ignore[misc]
    plan = f"{key_of(last_key)} = {getattr(cfg, last_key)}, {key_of(every_key)} = {getattr(cfg, every_key)}"
    if missing:
        return f"its {METRICS_FILE} lacks the evaluation ({metric}) of {_rounds(missing)} ({plan})"
    if extra:
        return f"its {METRICS_FILE} evaluates {_rounds(extra)} outside its schedule ({plan})"
    return ""


def damage(run_dir: str | os.PathLike[str]) -> tuple[RunConfig | None, str]:
    """(its config, "") when what a ``DONE`` run left is whole: ``config.json`` readable,
    ``metrics.csv`` whole, rounds unique and complete, and the task's own tables readable with
    their columns (:attr:`fedcal.config.Task.tables`: the inference task's ``accuracy.csv``);
    else (its config or None, why not: ``its metrics.csv is torn (line 7 has 3 of 5 fields)``)."""
    d = Path(run_dir)
    try:
        cfg = load_config(d)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # ConfigError is a ValueError
        why = str(exc).split("; known keys")[0]  # a ConfigError lists every known key after its first clause
        return None, f"its {CONFIG_FILE} cannot be read ({why})"
    rows, why = read_metrics_strict(d)
    if not why:
        why = check_rounds(rows, cfg)
    for name, columns in get_task(cfg.task).tables:
        if why:
            break
        why = _check_table(d / name, columns)
    return cfg, why


def _check_table(path: Path, columns: Sequence[str]) -> str:
    """"" when the table at ``path`` reads and has ``columns``; else why not, one line."""
    import pandas as pd  # lazily: the ClientApp process never loads pandas

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
