"""Run a fedcal simulation of any task: Flower's Simulation Engine (Ray backend, the default) or the
in-process engine (``engine=inprocess``: the same apps through a Grid without Ray)."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterable
from contextlib import nullcontext
from pathlib import Path

from flwr.app import Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp
from tqdm.auto import tqdm

from fedcal.app.quiet import quiet_flower
from fedcal.config import RunConfig
from fedcal.progress import bar_fits, log_reporter, phase, reporting, round_note, tqdm_reporter, write_above_bars
from fedcal.results import RunFailed, RunLocked, RunStore, lock_holder, run_dir_for, warn_reused
from fedcal.tasks.nodes import WrappedGrid


#: seconds between two looks for replies in ``send_and_receive`` on the Ray path (Flower's
#: in-memory Grid looks every 0.1 s, which alone added ~50 ms to every MNIST–MLP round)
REPLY_POLL_S = 0.001


class PromptGrid(WrappedGrid):
    """Flower's grid with a ``send_and_receive`` that looks for replies every ``poll`` seconds.

    The Grid that Flower's Simulation Engine hands the ServerApp polls its LinkState every
    0.1 s, so each round waited on average 50 ms after its last reply. Everything is delegated
    to ``grid`` through the public :class:`flwr.serverapp.Grid` API; ``send_and_receive`` keeps
    Flower's semantics (push, then pull until every reply is in or ``timeout`` has passed).
    """

    def __init__(self, grid: Grid, poll: float = REPLY_POLL_S):
        self.grid, self.poll = grid, poll

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        pending = set(self.push_messages(messages))
        end = time.time() + (timeout if timeout is not None else 0.0)
        replies: list[Message] = []
        while timeout is None or time.time() < end:
            got = list(self.pull_messages(pending))
            replies.extend(got)
            pending.difference_update(m.metadata.reply_to_message_id for m in got)
            if not pending:
                break
            time.sleep(self.poll)
        return replies


def _prompt(server_app: ServerApp, run_dir: Path, prompt: bool = True) -> ServerApp:
    """``server_app`` run on a :class:`PromptGrid` (unless not ``prompt``) around a
    :class:`fedcal.app.cluster.PlacementGrid` (where each reply was computed, into ``run_dir``)
    around the grid it is given."""
    from fedcal.app.cluster import PlacementGrid

    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        placed = PlacementGrid(grid, run_dir)
        server_app(PromptGrid(placed) if prompt else placed, context)

    return app


#: Ray passes task arguments and results up to this size inline in its RPCs; larger ones go
#: through its shared-memory object store (one put and one fetch each way). Ray's default,
#: 100 KiB, sends every model of the paper through the store: a MNIST–MLP Message is 0.8 MB, a
#: CIFAR10–CNN one 3.5 MB. Inline, a Message's round trip to an actor costs about half as much
#: (benchmarks/ray_profile.py). Larger models (> 8 MiB) still go through the store.
RAY_INLINE_BYTES = 8 * 1024 * 1024


#: environment variable: ``1`` runs the Ray path with Flower's and Ray's own settings (Flower's
#: Grid, Ray's inline size and CPU count) — benchmarks/round_time.py's side-by-side baseline
RAY_DEFAULTS_ENV = "FEDCAL_RAY_DEFAULTS"


def _ray_defaults() -> bool:
    return os.environ.get(RAY_DEFAULTS_ENV) == "1"


def backend_config(cfg: RunConfig) -> dict:
    """Ray backend settings: per-virtual-client CPUs and (fractional) GPUs, and Ray's start-up
    arguments: quiet, and Messages of up to :data:`RAY_INLINE_BYTES` passed inline (not with
    :data:`RAY_DEFAULTS_ENV` set).

    Ray's CPU count is left to Ray: counting more CPUs than cores (3 actors for the 5 clients of
    a round on 2 cores, instead of waves of 2, 2 and 1) was measured with
    benchmarks/ray_profile.py's ``--backend`` and gained nothing on MNIST–MLP (client phase
    within noise) while the CNN's time-shared convolutions got slower."""
    from fedcal.app.cluster import attach_address

    init_args: dict = {"logging_level": "ERROR", "log_to_driver": False, "include_dashboard": False}
    address = attach_address(cfg.ray_address)
    if address:  # a running cluster (docs/cluster.md): Ray refuses start-up settings when attaching
        init_args["address"] = address
    elif not _ray_defaults():  # start-up settings apply only to a Ray instance started here
        init_args["_system_config"] = {"max_direct_call_object_size": RAY_INLINE_BYTES}
    return {
        "client_resources": {"num_cpus": cfg.client_cpus, "num_gpus": cfg.client_gpus},
        "init_args": init_args,
    }


def check_run_start(cfg: RunConfig) -> None:
    """What only the machine that runs ``cfg`` can check, before any engine starts: its device
    exists here (``device=cuda:1`` on a machine with one GPU) and its tracker's package is
    installed. Each fails with one line naming the key."""
    from fedcal.tracking import check_tracker
    from fedcal.local_training import resolve_device

    resolve_device(cfg.device)
    check_tracker(cfg.tracker)


def simulate(cfg: RunConfig, *, progress: bool = True, verbose: bool = False, force: bool = False,
             desc: str | None = None, restart: bool = False) -> Path:
    """Run ``cfg`` as a Flower simulation of its task (``task``: federated training, robust
    federated inference, …); returns its run directory.

    A run already finished with the same config hash is skipped unless ``force``. An unfinished
    one resumes from its checkpoint (the task does, through :meth:`fedcal.results.RunStore.session`)
    unless ``restart``, which discards what earlier attempts left first
    (:meth:`fedcal.results.RunStore.discard`).
    """
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # silence a Ray FutureWarning
    from fedcal.app.client import build_client_app
    from fedcal.app.flower_private import run_simulation
    from fedcal.app.server import server_app_for
    from fedcal.tasks import get_task, preflight

    run_dir = run_dir_for(cfg)
    store = RunStore(run_dir, cfg)
    store.check()  # a run-name reused for another config: refused before Ray starts, even with force
    if not force and store.is_done():
        if progress:
            tqdm.write(f"{run_dir}: already finished, skipped")
        warn_reused([run_dir])
        return run_dir
    holder = lock_holder(run_dir)
    if holder is not None:  # another process writes the run: fail at once, before any engine starts
        raise RunLocked(f"run directory {str(run_dir)!r} is being written by another process (pid {holder}); wait "
                        "for it to end or stop it — one writer at a time")
    if restart:
        store.discard()
    check_run_start(cfg)
    preflight(cfg)  # the task's data and names: fail fast (naming the key) before any engine starts
    rounds = get_task(cfg.task).rounds(cfg)
    # a bar for the rounds where one fits: on a terminal, or as the only bar of a log file (under a
    # grid command's bar, a log file would keep the escape codes that position a second bar);
    # where none fits, the rounds and phases are rate-limited lines above the open bar
    bars = progress and bar_fits()
    bar = tqdm(total=rounds, desc=desc or run_dir.name, disable=not bars or rounds is None, unit="round")
    # the phases without rounds (robust inference's client training, DeepSet epochs, attacks; a
    # backbone's pretraining) show a bar each under a fedcal command; with progress off, whatever
    # reporter the caller installed (a sweep worker's log lines) gets them, and the rounds too
    prefix = f"{desc or run_dir.name}: "
    phases = (reporting(tqdm_reporter(prefix)) if bars else reporting(log_reporter(write_above_bars, prefix))
              if progress else nullcontext())
    round_phase = phase("rounds", rounds, "rounds") if not bars and rounds else nullcontext(None)

    try:
        with quiet_flower(verbose), warnings.catch_warnings(), phases, round_phase as quiet_rounds:
            def on_round(server_round: int, metrics: dict[str, float]) -> None:
                if server_round > 0:
                    if "accuracy" in metrics:
                        bar.set_postfix(acc=f"{100 * metrics['accuracy']:.1f}", sece=f"{100 * metrics['sece']:+.2f}",
                                        refresh=False)
                    bar.update(1)
                    if quiet_rounds is not None:
                        quiet_rounds.update(1, round_note(metrics))

            warnings.simplefilter("ignore", DeprecationWarning)
            server_app = server_app_for(cfg, on_round)
            client_app = build_client_app()  # the handlers of every task registered by now (a plug-in's too)
            if cfg.engine == "batched":
                from fedcal.app.batched import simulate_batched

                simulate_batched(cfg)
            elif cfg.engine == "inprocess":
                from fedcal.app.inprocess import run_inprocess

                run_inprocess(server_app, client_app, cfg.num_clients, seed=cfg.seed)
            else:
                run_simulation(
                    server_app=_prompt(server_app, run_dir, prompt=not _ray_defaults()),
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
