"""Run a fedcal simulation of any task: Flower's Simulation Engine (Ray backend, the default) or the
in-process engine (``engine=inprocess``: the same apps through a Grid without Ray)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from tqdm.auto import tqdm

from fedcal.app.quiet import quiet_flower
from fedcal.config import RunConfig
from fedcal.data import load_dataset
from fedcal.results import RunFailed, RunStore, run_dir_for


def backend_config(cfg: RunConfig) -> dict:
    """Ray backend settings: per-virtual-client CPUs and (fractional) GPUs."""
    return {
        "client_resources": {"num_cpus": cfg.client_cpus, "num_gpus": cfg.client_gpus},
        "init_args": {"logging_level": "ERROR", "log_to_driver": False, "include_dashboard": False},
    }


def simulate(cfg: RunConfig, *, progress: bool = True, verbose: bool = False, force: bool = False,
             desc: str | None = None) -> Path:
    """Run ``cfg`` as a Flower simulation of its task (``task``: federated training, robust
    federated inference, …); returns its run directory.

    A run already finished with the same config hash is skipped unless ``force``.
    """
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # silence a Ray FutureWarning
    from fedcal.app.client import app as client_app
    from fedcal.app.flower_private import run_simulation
    from fedcal.app.server import server_app_for
    from fedcal.tasks import get_task

    run_dir = run_dir_for(cfg)
    store = RunStore(run_dir, cfg)
    store.check()  # a run-name reused for another config: refused before Ray starts, even with force
    if not force and store.is_done():
        if progress:
            tqdm.write(f"{run_dir}: already finished, skipped")
        return run_dir
    if cfg.task in ("train", "inference"):  # the image tasks: fail fast (naming the key) before Ray starts
        load_dataset(cfg.dataset, cfg.data_dir)
    rounds = get_task(cfg.task).rounds(cfg)
    bar = tqdm(total=rounds, desc=desc or run_dir.name, disable=not progress,
               unit="run" if rounds is None else "round")

    def on_round(server_round: int, metrics: dict[str, float]) -> None:
        if server_round > 0:
            if "accuracy" in metrics:
                bar.set_postfix(acc=f"{100 * metrics['accuracy']:.1f}", sece=f"{100 * metrics['sece']:+.2f}",
                                refresh=False)
            bar.update(1)

    try:
        with quiet_flower(verbose), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            server_app = server_app_for(cfg, on_round)
            if cfg.engine == "batched":
                from fedcal.app.batched import simulate_batched

                simulate_batched(cfg)
            elif cfg.engine == "inprocess":
                from fedcal.app.inprocess import run_inprocess

                run_inprocess(server_app, client_app, cfg.num_clients, seed=cfg.seed)
            else:
                run_simulation(
                    server_app=server_app,
                    client_app=client_app,
                    num_supernodes=cfg.num_clients,
                    backend_config=backend_config(cfg),
                    verbose_logging=verbose,
                )
    finally:
        bar.close()
    if not store.is_done():
        what = "its task" if rounds is None else f"{rounds} rounds"
        raise RunFailed(f"simulation ended before finishing {what}; partial results in {run_dir}")
    return run_dir
