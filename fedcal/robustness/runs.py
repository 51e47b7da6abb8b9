"""The robustness of finished runs' final models (flwr-free): one evaluation per run and spec
(:func:`fedcal.robustness.evaluate_robustness`), cached in the run directory as
``robustness/<spec key>.json`` so no model is attacked twice; several runs at once in separate
processes. The tables of :mod:`fedcal.reports.robustness` read what these return.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from fedcal.local_training import resolve_device
from fedcal.results import UnfinishedRunError, atomic_write, config_hash, load_config, load_model, run_status
from fedcal.robustness.evaluate import RobustnessSpec, evaluate_robustness

#: the folder of a run directory holding its cached robustness evaluations
ROBUSTNESS_DIR = "robustness"


def _cache_path(run_dir: Path, spec: RobustnessSpec) -> Path:
    return run_dir / ROBUSTNESS_DIR / f"{spec.key()}.json"


def evaluate_run(run_dir: str | os.PathLike[str], spec: RobustnessSpec, device: str = "auto",
                 force: bool = False) -> dict[str, float]:
    """The robustness metrics of a finished run's final model under ``spec`` (cached).

    Raises :class:`fedcal.results.UnfinishedRunError` for an unfinished run and
    FileNotFoundError for a finished run without ``model.pt``. The cache file holds the spec
    and the run's config hash next to the metrics; a cache of another model is recomputed.
    """
    run_dir = Path(run_dir)
    path = _cache_path(run_dir, spec)
    status = run_status(run_dir)
    if not status.finished:
        raise UnfinishedRunError(f"no final model: {status.describe()}")
    ident = config_hash(load_config(run_dir))
    if path.exists() and not force:  # a cached evaluation of this very model under this spec
        cached = json.loads(path.read_text())
        if cached.get("config_hash") == ident and cached.get("spec") == spec.as_record():
            return cached["metrics"]
    _, model, ds = load_model(run_dir)
    metrics = evaluate_robustness(model, ds, spec, resolve_device(device))
    path.parent.mkdir(exist_ok=True)
    atomic_write(path, json.dumps({"spec": spec.as_record(), "config_hash": ident,
                                    "metrics": metrics}, indent=1))  # metrics keep their order
    return metrics


def _evaluate_worker(run_dir: str, spec: RobustnessSpec, device: str, force: bool,
                     threads: int) -> dict[str, float] | str:
    import torch

    torch.set_num_threads(threads)
    return _evaluate_or_reason(run_dir, spec, device, force)


def _evaluate_or_reason(run_dir: str, spec: RobustnessSpec, device: str, force: bool) -> dict[str, float] | str:
    try:
        return evaluate_run(run_dir, spec, device, force)
    except Exception as exc:  # noqa: BLE001 — one model that cannot be attacked must not lose the others
        return f"{type(exc).__name__}: {exc}"


def evaluate_runs(run_dirs: Sequence[str | os.PathLike[str]], spec: RobustnessSpec, device: str = "auto",
                  jobs: int = 1, force: bool = False,
                  progress: Callable | None = None) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """Evaluate (and cache) every run in ``run_dirs``, ``jobs`` at a time in separate processes;
    returns ({run dir: metrics}, {run dir: reason}) — the second for the runs whose evaluation
    failed."""
    dirs = [str(d) for d in run_dirs]
    if jobs <= 1:
        outcomes = {d: _evaluate_or_reason(d, spec, device, force) for d in (progress(dirs) if progress else dirs)}
    else:
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        threads = max(1, (os.cpu_count() or 1) // jobs)
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
            futures = {d: pool.submit(_evaluate_worker, d, spec, device, force, threads) for d in dirs}
            outcomes = {d: futures[d].result() for d in (progress(dirs) if progress else dirs)}
    metrics = {d: m for d, m in outcomes.items() if isinstance(m, dict)}
    return metrics, {d: m for d, m in outcomes.items() if isinstance(m, str)}
