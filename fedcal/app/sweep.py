"""Sweeps: a grid of run configs, each cell one Flower simulation.

A grid is a base config plus lists of values whose cartesian product gives the cells, from a
TOML file::

    [base]                      # fixed run-config keys
    dataset = "mnist"
    data-dir = "../shared/data"
    [grid]                      # every combination of these lists is a cell
    tau = [0.2, 1.0, 5.0]
    seed = [0, 1, 2, 3, 4]

and/or ``--grid key=v1,v2`` flags. Finished cells (a ``DONE`` matching their config hash) are
skipped, so an interrupted sweep resumes where it stopped and loses nothing. Independent cells
run in parallel worker processes (``jobs``); a progress bar shows cells done and time left.
Results (``cells.csv``, ``rounds.csv``) are written from the run store by
:func:`fedcal.reports.write_results`.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
import tomllib
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Mapping, Sequence

from tqdm.auto import tqdm

from fedcal.config import ConfigError, RunConfig, parse_override
from fedcal.results import (RunLocked, RunNameConflict, RunStore, check_run_dir, config_hash, run_dir_for,
                            warn_reused)
from fedcal.signals import Terminated, die_with_parent, sigterm_raises


@dataclass
class SweepGrid:
    """A base config plus the axes whose cartesian product gives the cells (not Flower's ``Grid``)."""

    base: dict[str, Any] = field(default_factory=dict)
    axes: dict[str, list[Any]] = field(default_factory=dict)

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> SweepGrid:
        """The grid of a TOML file (``[base]`` keys and ``[grid]`` axes), refused in one line
        (:class:`ConfigError` naming the file) when it cannot be read, is no TOML, has another
        table, or an axis without values (a grid of no cell is a typo, not an empty study)."""
        where = f"grid file {str(path)!r}"
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"{where}: no such file") from None
        except IsADirectoryError:
            raise ConfigError(f"{where}: a directory, not a TOML file") from None
        except OSError as exc:
            raise ConfigError(f"{where}: cannot be read ({exc.strerror or exc})") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}: not a TOML file ({exc})") from None
        unknown = set(data) - {"base", "grid"}
        if unknown:
            raise ConfigError(f"{where}: unknown table(s) {sorted(unknown)}; use [base] and [grid]")
        for table in ("base", "grid"):
            if not isinstance(data.get(table, {}), dict):
                raise ConfigError(f"{where}: {table} must be a table ([{table}] with key = value lines), "
                                  f"got {data[table]!r}")
        axes = {k: (v if isinstance(v, list) else [v]) for k, v in data.get("grid", {}).items()}
        for key, values in axes.items():
            if not values:
                raise ConfigError(f"{where}: axis {key!r} has no value (a grid with an empty axis has no cell)")
        return cls(dict(data.get("base", {})), axes)

    def add_axis(self, text: str) -> None:
        """``key=v1,v2,...`` (each value TOML, bare words are strings; an empty value is refused)."""
        key, raw = (s.strip() for s in text.split("=", 1)) if "=" in text else (text, "")
        if not raw:
            raise ConfigError(f"--grid {text!r} is not of the form key=v1,v2")
        if any(not v.strip() for v in raw.split(",")):
            raise ConfigError(f"--grid {text!r}: empty value (two commas, or one at the end)")
        self.axes[key] = [parse_override(f"{key}={v.strip()}")[1] for v in raw.split(",")]

    def configs(self, overrides: Mapping[str, Any] | None = None) -> list[RunConfig]:
        """Every cell, validated up front (a bad value fails before anything runs)."""
        keys = list(self.axes)
        cells = []
        for values in itertools.product(*(self.axes[k] for k in keys)) if keys else [()]:
            raw = {**self.base, **(overrides or {}), **dict(zip(keys, values))}
            cells.append(RunConfig.from_flower(raw))
        seen: dict[str, RunConfig] = {}
        for c in cells:  # duplicate cells would race on one run directory
            first = seen.setdefault(str(run_dir_for(c)), c)
            if config_hash(first) != config_hash(c):  # e.g. one run-name for cells that differ
                raise RunNameConflict(f"cells of different configs share the run directory {str(run_dir_for(c))!r} "
                                      f"(a fixed 'run-name'?): leave run-name empty in a sweep")
        return list(seen.values())


def _worker_init(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _worker_main(conn: Connection, threads: int) -> None:
    """A sweep worker process: runs the jobs its parent sends (:func:`_run_job`), one at a time,
    replying with each result, until it is sent None, its parent goes away, or it is stopped.
    It dies with its parent (:func:`fedcal.signals.die_with_parent`), and SIGTERM ends the
    running cell as an exception, so the cell's ``run.log`` says it was terminated and its lock
    is released before the worker exits."""
    die_with_parent()
    _worker_init(threads)
    with sigterm_raises():
        try:
            while (job := conn.recv()) is not None:
                kind, payload = job
                conn.send(_run_job(kind, payload))
        except (KeyboardInterrupt, Terminated, EOFError, BrokenPipeError):
            return


class _Workers:
    """``jobs`` spawned worker processes the sweep hands one job at a time (never a queue of them:
    a job starts only when the parent sends it, so after a stop no new cell starts).

    Used as a context manager: leaving it normally lets the workers finish and exit; leaving it by
    an exception — Ctrl-C (``KeyboardInterrupt``), SIGTERM (:class:`fedcal.signals.Terminated`) or
    any other — stops them at once: each gets SIGTERM (its cell logs ``failed: terminated`` and
    releases its run's lock), and one still alive after ``grace`` seconds gets SIGKILL. Why not
    ``concurrent.futures.ProcessPoolExecutor``: it hands each worker queued calls ahead of time
    and its shutdown cannot stop a running one, so a stopped sweep kept starting and running
    cells."""

    def __init__(self, jobs: int, threads: int, grace: float = 10.0):
        self.ctx = get_context("spawn")
        self.threads, self.grace = threads, grace
        self.idle: list[tuple[Any, Connection]] = [self._spawn() for _ in range(jobs)]
        self.busy: dict[Connection, tuple[Any, tuple]] = {}

    def _spawn(self) -> tuple[Any, Connection]:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker_main, args=(child, self.threads), name="fedcal-sweep-worker")
        proc.start()
        child.close()
        return proc, parent

    def run(self, jobs: Sequence[tuple[str, Any]], on_result: Callable[[tuple[str, Any], Any], None]) -> None:
        """Run every job, calling ``on_result(job, result)`` as each finishes (a job whose worker
        died gets ``result`` = the exception describing it, and the worker is replaced)."""
        pending = list(reversed(jobs))
        while pending or self.busy:
            while pending and self.idle:
                proc, conn = self.idle.pop()
                job = pending.pop()
                conn.send(job)
                self.busy[conn] = ((proc, conn), job)
            for conn in wait(list(self.busy)):
                (proc, conn), job = self.busy.pop(conn)
                try:
                    result = conn.recv()
                except (EOFError, OSError):
                    proc.join()
                    result = RuntimeError(f"the worker running it died (exit code {proc.exitcode})")
                    conn.close()
                    proc, conn = self._spawn()
                self.idle.append((proc, conn))
                on_result(job, result)

    def __enter__(self) -> _Workers:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        procs = [p for p, _ in self.idle] + [p for (p, _), _ in self.busy.values()]
        conns = [c for _, c in self.idle] + [c for (_, c), _ in self.busy.values()]
        if kind is None:
            for conn in conns:
                try:
                    conn.send(None)
                except OSError:  # a worker that is gone already
                    pass
        else:
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
        deadline = time.monotonic() + self.grace
        for proc in procs:
            proc.join(None if kind is None else max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in conns:
            conn.close()


def _run_cell(flower_cfg: dict[str, Any], restart: bool = False, progress: str = "",
              force: bool = False) -> tuple[str, str | None]:
    """Run one cell (from scratch with ``restart``; again, if finished, with ``force``);
    ``progress``: "bars" (this process's terminal: the run's own bars under the cells bar), "log"
    (a worker process: its rounds and long phases as lines on stderr, so a long cell is never
    silent) or "" (nothing)."""
    from fedcal.app.engine import simulate
    from fedcal.progress import log_reporter, reporting

    cfg = RunConfig.from_flower(flower_cfg)
    lines = log_reporter(lambda line: print(line, file=sys.stderr, flush=True), prefix=f"{run_dir_for(cfg).name}: ")
    try:
        with reporting(lines if progress == "log" else None):
            simulate(cfg, progress=progress == "bars", restart=restart, force=force)
        return str(run_dir_for(cfg)), None
    except RunLocked as exc:  # another process runs this cell (a second sweep): one line, not a traceback
        return str(run_dir_for(cfg)), str(exc)
    except Exception:  # noqa: BLE001 — one failed cell must not stop the sweep
        return str(run_dir_for(cfg)), traceback.format_exc()


def _run_job(kind: str, payload: Any):
    """A sweep job: ``("cell", (config, restart, progress, force))`` or ``("batch", configs)``."""
    if kind == "batch":
        return _run_batch_cells(payload)
    return _run_cell(*payload)


def _run_batch_cells(flower_cfgs: list[dict[str, Any]]) -> dict[str, str]:
    from fedcal.app.batched import run_batched

    configs = [RunConfig.from_flower(c) for c in flower_cfgs]
    try:
        return run_batched(configs)
    except Exception:  # noqa: BLE001 — one failed batch must not stop the sweep
        err = traceback.format_exc()
        return {str(run_dir_for(c)): err for c in configs}


def _split_batched(todo: list[RunConfig], jobs: int, progress: bool) -> tuple[list[list[RunConfig]], list[RunConfig]]:
    """The ``engine=batched`` cells as batches (one per group of equal protocol, split into
    ``jobs`` parts), and every other cell; a batched cell the engine does not cover is run
    in-process instead (same config hash, same run directory), with a notice."""
    from fedcal.app.batched import batched_unsupported, group_key

    groups: dict[tuple, list[RunConfig]] = {}
    others: list[RunConfig] = []
    for c in todo:
        if c.engine != "batched":
            others.append(c)
            continue
        why = batched_unsupported(c)
        if why:
            if progress:
                tqdm.write(f"{run_dir_for(c).name}: engine=batched does not cover {why}; run in-process")
            others.append(c.replace(engine="inprocess"))
        else:
            groups.setdefault(group_key(c), []).append(c)
    batches = []
    for cells in groups.values():
        parts = max(1, min(jobs, len(cells)))
        batches += [cells[i::parts] for i in range(parts)]
    return batches, others


def reused_line(reused: int, cells: int) -> str:
    """What a grid command says of the finished cells it reuses instead of running them again."""
    return f"{reused} of {cells} cells already finished, reused (use --force to re-run)"


def run_sweep(configs: Sequence[RunConfig], jobs: int = 1, progress: bool = True,
              restart: bool = False, cluster: Any = None, force: bool = False) -> dict[str, str]:
    """Run every unfinished cell (every cell, finished ones again, with ``force``: the study
    commands' ``--force``); returns {run dir: traceback} of the cells that failed.

    Finished cells are reused, said in one line (``k of n cells already finished, reused (use
    --force to re-run)``); with ``force`` their results are discarded first and they run again
    (:meth:`fedcal.results.RunStore.discard`).

    Cells with ``engine=batched`` that share a round protocol train together as one batched
    computation (:mod:`fedcal.app.batched`; with ``jobs`` > 1, split into that many batches
    run in parallel), the others one simulation each; an unfinished cell resumes from its
    checkpoint unless ``restart`` (then it starts over; finished cells are skipped either way).

    With ``jobs`` > 1 the cells run in ``jobs`` worker processes (:class:`_Workers`). Stop means
    stop: Ctrl-C or SIGTERM (with :func:`fedcal.signals.sigterm_raises` in effect, as under the
    ``fedcal`` command) starts no further cell, stops the workers (their running cells log
    ``failed: terminated`` and release their run directories) and re-raises.

    With ``cluster`` (a :class:`fedcal.app.cluster.ClusterSpec`) every job is a Ray task on that
    cluster instead (:func:`fedcal.app.cluster.run_cells`; ``jobs`` then only splits batched
    cells); output folders are made absolute first, as a worker's working folder is its own.

    Before anything runs, a cell whose run directory holds a run of a different config is refused
    (:class:`fedcal.results.RunNameConflict`, naming the first such cell)."""
    if cluster is not None:
        # a cell is a Ray task: engine=ray in it would start (and shut down) Ray inside a Ray worker,
        # so those cells run in-process there (same hash and directory; the engines agree, docs/design.md)
        if progress and any(c.engine == "ray" for c in configs):
            tqdm.write("--cluster: cells with engine=ray run in-process in their Ray task (engine=inprocess)")
        configs = [c.replace(output_dir=str(Path(c.output_dir).absolute()),
                             engine="inprocess" if c.engine == "ray" else c.engine) for c in configs]
    for c in configs:
        check_run_dir(run_dir_for(c), c)
    finished = [c for c in configs if RunStore(run_dir_for(c), c).is_done()]
    if force:
        for c in finished:
            RunStore(run_dir_for(c), c).discard()
        finished = []
    elif finished:
        tqdm.write(reused_line(len(finished), len(configs)))
    todo = [c for c in configs if c not in finished]
    warn_reused([run_dir_for(c) for c in finished])
    bar = tqdm(total=len(configs), initial=len(configs) - len(todo), desc="cells", unit="cell", disable=not progress)
    failures: dict[str, str] = {}
    batches, todo = _split_batched(todo, jobs, progress)
    jobs_list = [("batch", [c.to_flower() for c in cells]) for cells in batches]
    in_process = cluster is None and (jobs <= 1 or len(batches) + len(todo) <= 1)
    mode = ("bars" if in_process else "log") if progress else ""  # a worker's bars would garble the terminal
    jobs_list += [("cell", (c.to_flower(), restart, mode, force)) for c in todo]

    def done(job: tuple[str, Any], result: Any) -> None:
        kind, payload = job
        if isinstance(result, Exception):  # the worker died (killed, out of memory): its cells failed
            cells = payload if kind == "batch" else [payload[0]]
            result = {str(run_dir_for(RunConfig.from_flower(c))): str(result) for c in cells}
        elif kind == "cell":
            result = {result[0]: result[1]} if result[1] else {}
        failures.update(result)
        bar.update(len(payload) if kind == "batch" else 1)

    try:
        if cluster is not None:
            from fedcal.app.cluster import run_cells

            run_cells(jobs_list, _run_job, cluster, done, progress=progress)
        elif in_process:
            for job in jobs_list:
                done(job, _run_job(*job))
        else:
            threads = max(1, (os.cpu_count() or 1) // min(jobs, len(jobs_list)))
            with _Workers(min(jobs, len(jobs_list)), threads) as workers:
                workers.run(jobs_list, done)
    finally:
        bar.close()
    for run_dir, err in failures.items():
        tqdm.write(f"cell {run_dir} failed:\n{err}")
    return failures
