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
import tomllib
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Mapping, Sequence

from tqdm.auto import tqdm

from fedcal.config import ConfigError, RunConfig, parse_override
from fedcal.results import RunNameConflict, RunStore, check_run_dir, config_hash, run_dir_for, warn_reused


@dataclass
class SweepGrid:
    """A base config plus the axes whose cartesian product gives the cells (not Flower's ``Grid``)."""

    base: dict[str, Any] = field(default_factory=dict)
    axes: dict[str, list[Any]] = field(default_factory=dict)

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> SweepGrid:
        data = tomllib.loads(Path(path).read_text())
        unknown = set(data) - {"base", "grid"}
        if unknown:
            raise ConfigError(f"grid file {path}: unknown table(s) {sorted(unknown)}; use [base] and [grid]")
        axes = {k: (v if isinstance(v, list) else [v]) for k, v in data.get("grid", {}).items()}
        return cls(dict(data.get("base", {})), axes)

    def add_axis(self, text: str) -> None:
        """``key=v1,v2,...`` (each value TOML, bare words are strings)."""
        key, raw = (s.strip() for s in text.split("=", 1)) if "=" in text else (text, "")
        if not raw:
            raise ConfigError(f"--grid {text!r} is not of the form key=v1,v2")
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


def _run_cell(flower_cfg: dict[str, Any], progress: str = "") -> tuple[str, str | None]:
    """Run one cell; ``progress``: "bars" (this process's terminal: the run's own bars under the
    cells bar), "log" (a worker process: its rounds and long phases as lines on stderr, so a long
    cell is never silent) or "" (nothing)."""
    from fedcal.app.engine import simulate
    from fedcal.progress import log_reporter, reporting

    cfg = RunConfig.from_flower(flower_cfg)
    lines = log_reporter(lambda line: print(line, file=sys.stderr, flush=True), prefix=f"{run_dir_for(cfg).name}: ")
    try:
        with reporting(lines if progress == "log" else None):
            simulate(cfg, progress=progress == "bars")
        return str(run_dir_for(cfg)), None
    except Exception:  # noqa: BLE001 — one failed cell must not stop the sweep
        return str(run_dir_for(cfg)), traceback.format_exc()


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


def run_sweep(configs: Sequence[RunConfig], jobs: int = 1, progress: bool = True) -> dict[str, str]:
    """Run every unfinished cell; returns {run dir: traceback} of the cells that failed.

    Cells with ``engine=batched`` that share a round protocol train together as one batched
    computation (:mod:`fedcal.app.batched`; with ``jobs`` > 1, split into that many batches
    run in parallel), the others one simulation each.

    Before anything runs, a cell whose run directory holds a run of a different config is refused
    (:class:`fedcal.results.RunNameConflict`, naming the first such cell)."""
    for c in configs:
        check_run_dir(run_dir_for(c), c)
    todo = [c for c in configs if not RunStore(run_dir_for(c), c).is_done()]
    warn_reused([run_dir_for(c) for c in configs if c not in todo])
    bar = tqdm(total=len(configs), initial=len(configs) - len(todo), desc="cells", unit="cell", disable=not progress)
    failures: dict[str, str] = {}
    batches, todo = _split_batched(todo, jobs, progress)
    try:
        if batches:
            threads = max(1, (os.cpu_count() or 1) // len(batches)) if jobs > 1 else None
            if len(batches) == 1 or jobs <= 1:
                for cells in batches:
                    failures.update(_run_batch_cells([c.to_flower() for c in cells]))
                    bar.update(len(cells))
            else:
                with ProcessPoolExecutor(max_workers=len(batches), mp_context=get_context("spawn"),
                                         initializer=_worker_init, initargs=(threads,)) as pool:
                    futures = {pool.submit(_run_batch_cells, [c.to_flower() for c in cells]): len(cells)
                               for cells in batches}
                    for fut in as_completed(futures):
                        failures.update(fut.result())
                        bar.update(futures[fut])
        if jobs <= 1:
            for cfg in todo:
                run_dir, err = _run_cell(cfg.to_flower(), "bars" if progress else "")
                if err:
                    failures[run_dir] = err
                bar.update(1)
        else:
            threads = max(1, (os.cpu_count() or 1) // jobs)
            with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                                     initializer=_worker_init, initargs=(threads,)) as pool:
                futures = [pool.submit(_run_cell, c.to_flower(), "log" if progress else "") for c in todo]
                for fut in as_completed(futures):
                    run_dir, err = fut.result()
                    if err:
                        failures[run_dir] = err
                    bar.update(1)
    finally:
        bar.close()
    for run_dir, err in failures.items():
        tqdm.write(f"cell {run_dir} failed:\n{err}")
    return failures
