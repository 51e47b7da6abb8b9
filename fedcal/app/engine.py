"""Run a fedcal simulation of any task: Flower's Simulation Engine (Ray backend, the default) or the
in-process engine (``engine=inprocess``: the same apps through a Grid without Ray)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
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


class EngineStopped(RuntimeError):
    """Flower's Simulation Engine stopped (crashed, or its Ray cluster went away) while the
    ServerApp still waited on it."""


class EngineWatch:
    """What the ServerApp's thread knows of the thread that runs Flower's Simulation Engine.

    Flower runs the ServerApp in a thread of its own and does not stop it when the engine ends
    by an exception (Ctrl-C, SIGTERM, a crash of the engine): the ServerApp would wait for replies
    forever, and the process, whose exit waits for that thread, would hang. :func:`simulate` calls
    :meth:`stop` with what ended the engine; every call the ServerApp then makes on its grid
    (:class:`PromptGrid`) raises it — ``KeyboardInterrupt`` or
    :class:`fedcal.signals.Terminated` as such, anything else as :class:`EngineStopped` — so the
    run's ``run.log`` says what happened and its lock is released."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.cause: BaseException | None = None
        self.thread: threading.Thread | None = None  # the ServerApp's
        self.raised: BaseException | None = None  # what the grid raised in it
        self.failed: BaseException | None = None  # what the ServerApp raised by itself

    def stop(self, cause: BaseException) -> None:
        self.cause = cause
        self.stopped.set()

    def check(self) -> None:
        if not self.stopped.is_set():
            return
        from fedcal.signals import Terminated

        cause = self.cause
        if isinstance(cause, KeyboardInterrupt):
            exc: BaseException = KeyboardInterrupt()
        elif isinstance(cause, Terminated):
            exc = Terminated(cause.signum)
        else:
            exc = EngineStopped(f"Flower's simulation engine stopped: {engine_failure(cause)}")
        self.raised = exc
        raise exc

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the ServerApp's thread to end; whether it did."""
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)
            return not self.thread.is_alive()
        return True


def engine_failure(exc: BaseException | None) -> str:
    """One line naming what ended Flower's engine: the innermost exception of the chain Flower
    wraps it in (``RuntimeError: An error was encountered`` from ``Simulation Runtime crashed``
    from the cause)."""
    seen = set()
    while exc is not None and id(exc) not in seen and (exc.__cause__ or exc.__context__) is not None:
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    if exc is None:
        return "stopped"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class PromptGrid(WrappedGrid):
    """Flower's grid with a ``send_and_receive`` that looks for replies every ``poll`` seconds and
    stops when the engine did (``watch``, :class:`EngineWatch`: every call raises once it stopped).

    The Grid that Flower's Simulation Engine hands the ServerApp polls its LinkState every
    0.1 s, so each round waited on average 50 ms after its last reply. Everything is delegated
    to ``grid`` through the public :class:`flwr.serverapp.Grid` API; ``send_and_receive`` keeps
    Flower's semantics (push, then pull until every reply is in or ``timeout`` has passed).
    """

    def __init__(self, grid: Grid, poll: float = REPLY_POLL_S, watch: EngineWatch | None = None):
        self.grid, self.poll, self.watch = grid, poll, watch

    def _check(self) -> None:
        if self.watch is not None:
            self.watch.check()

    def get_node_ids(self):
        self._check()
        return self.grid.get_node_ids()

    def push_messages(self, messages):
        self._check()
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids):
        self._check()
        return self.grid.pull_messages(message_ids)

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


def _prompt(server_app: ServerApp, run_dir: Path, prompt: bool = True, watch: EngineWatch | None = None) -> ServerApp:
    """``server_app`` run on a :class:`PromptGrid` (polling as often as Flower's own grid unless
    ``prompt``) watching ``watch`` around a :class:`fedcal.app.cluster.PlacementGrid` (where each
    reply was computed, into ``run_dir``) around the grid it is given. Once the engine stopped,
    the ServerApp ends quietly: what stopped it is the engine's exception, raised by :func:`simulate`."""
    from fedcal.app.cluster import PlacementGrid

    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        if watch is not None:
            watch.thread = threading.current_thread()
        placed = PlacementGrid(grid, run_dir)
        poll = REPLY_POLL_S if prompt else getattr(grid, "pull_interval", 0.1)
        try:
            server_app(PromptGrid(placed, poll, watch), context)
        except BaseException as exc:
            if watch is None or exc is not watch.raised:
                if watch is not None:
                    watch.failed = exc
                raise

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
    from fedcal.app.ray_attach import attach_address

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


#: seconds :func:`simulate` waits for the ServerApp's thread to end after the engine stopped
#: (it ends at its next grid call, at most one evaluation away)
SERVER_JOIN_S = 5.0

log = logging.getLogger("fedcal.engine")


def start_ray(cfg: RunConfig) -> bool:
    """Start Ray for an ``engine=ray`` run, or attach to the cluster :func:`fedcal.app.ray_attach.attach_target`
    finds, before Flower's engine would (Flower's Ray backend uses a Ray already started); returns
    whether it started or attached (False: this process was connected already).

    Why fedcal and not Flower: a head that does not answer is given up after
    :data:`fedcal.app.ray_attach.CONNECT_TIMEOUT_S` with one line naming its address (Ray retries for
    minutes); a cluster that cannot host one client (``client-cpus``/``client-gpus`` against its
    nodes) is refused in one line before Flower's actor pool fails on it; the cluster attached to
    is named in one line with why (the key, ``$RAY_ADDRESS``, or a local ``ray start``); and
    ``ray.init`` replaces the process's SIGTERM handler (Ray's exits without a word in ``run.log``),
    so fedcal's is put back. Flower's own settings are kept: its ``PYTHONPATH`` runtime env."""
    import ray

    from fedcal.app.ray_attach import ClusterError, attach_target, cluster_nodes, connect, require_fit, resolve_address

    if ray.is_initialized():
        return False
    target = attach_target(cfg.ray_address)
    if target is None and cfg.ray_address == "auto":
        target = ("auto", "run-config key ray-address=")
    address, why = resolve_address(*target) if target else (None, "")
    init_args = dict(backend_config(cfg)["init_args"])
    init_args.pop("address", None)
    # as Flower's Ray backend does: actors import what this process imports (a checkout on PYTHONPATH)
    pythonpath = os.pathsep.join([*sys.path, *filter(None, [os.environ.get("PYTHONPATH")])])
    handler = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    connect(address, why, {**init_args, "runtime_env": {"env_vars": {"PYTHONPATH": pythonpath}}})
    if handler is not None:  # ray.init installs its own (sys.exit) and Ray's C++ one (kills the process)
        signal.signal(signal.SIGTERM, handler)
    try:
        where = f"the Ray cluster at {address} ({why})" if address else "the Ray instance started for this run"
        require_fit(cluster_nodes(), cfg.client_cpus, cfg.client_gpus,
                    f"one client (client-cpus={cfg.client_cpus:g}, client-gpus={cfg.client_gpus:g})", where)
    except ClusterError:
        ray.shutdown()
        raise
    if address:
        log.warning("engine=ray: attached to %s", where)
    return True


class _EngineThreadLog(logging.Filter):
    """Flower's warnings and errors logged by the thread that runs its engine (the crash of its
    Ray backend with two tracebacks, "ActorPool is empty", ...): left out unless ``--verbose``;
    :func:`simulate` says what ended the engine in one line."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread


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
                _run_on_ray(cfg, server_app, client_app, run_dir, verbose)
    finally:
        bar.close()
    if not store.is_done():
        what = "its task" if rounds is None else f"{rounds} rounds"
        raise RunFailed(f"simulation ended before finishing {what}; partial results in {run_dir}")
    return run_dir


def _run_on_ray(cfg: RunConfig, server_app: ServerApp, client_app, run_dir: Path, verbose: bool) -> None:
    """``server_app`` and ``client_app`` on Flower's Simulation Engine (Ray), started or attached
    by :func:`start_ray`. When the engine ends by an exception — Ctrl-C, SIGTERM, a crash — the
    ServerApp's thread is stopped too (:class:`EngineWatch`; its ``run.log`` says why, its
    checkpoint stays) before the exception goes on: ``KeyboardInterrupt`` and
    :class:`fedcal.signals.Terminated` as they are, a crash of the engine as one
    :class:`fedcal.results.RunFailed` line naming its cause. Flower's own log of the crash is
    left out unless ``verbose``."""
    import ray

    from fedcal.app.flower_private import run_simulation

    watch = EngineWatch()
    quiet = None if verbose else _EngineThreadLog()
    flower = logging.getLogger("flwr")
    started = False
    try:
        started = start_ray(cfg)
        if quiet is not None:
            flower.addFilter(quiet)
        run_simulation(
            server_app=_prompt(server_app, run_dir, prompt=not _ray_defaults(), watch=watch),
            client_app=client_app,
            num_supernodes=cfg.num_clients,
            backend_config=backend_config(cfg),
            verbose_logging=verbose,
        )
    except BaseException as exc:
        if watch.thread is None or exc is watch.failed:
            raise  # nothing ran yet (Ray or the cluster refused), or the ServerApp failed by itself
        watch.stop(exc)
        ended = watch.join(SERVER_JOIN_S)
        if not isinstance(exc, Exception):
            raise  # Ctrl-C, SIGTERM: the ServerApp's run.log says so too
        note = "" if ended else f" (its ServerApp had not stopped after {SERVER_JOIN_S:g} s)"
        raise RunFailed(f"Flower's simulation engine stopped: {engine_failure(exc)}{note}; "
                        f"partial results in {run_dir}") from None
    finally:
        if quiet is not None:
            flower.removeFilter(quiet)
        if started and ray.is_initialized():  # Flower shuts Ray down when its engine ends; not when it never began
            ray.shutdown()
