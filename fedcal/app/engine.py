"""Run a fedcal simulation of any task: Flower's Simulation Engine (Ray backend, the default) or the
in-process engine (``engine=inprocess``: the same apps through a Grid without Ray)."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterable
from pathlib import Path

from flwr.app import Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp
from tqdm.auto import tqdm

from fedcal.app.quiet import quiet_flower
from fedcal.config import RunConfig
from fedcal.data import load_dataset
from fedcal.results import RunFailed, RunStore, run_dir_for


#: seconds between two looks for replies in ``send_and_receive`` on the Ray path (Flower's
#: in-memory Grid looks every 0.1 s, which alone added ~50 ms to every MNIST–MLP round)
REPLY_POLL_S = 0.001


class PromptGrid(Grid):
    """Flower's grid with a ``send_and_receive`` that looks for replies every ``poll`` seconds.

    The Grid that Flower's Simulation Engine hands the ServerApp polls its LinkState every
    0.1 s, so each round waited on average 50 ms after its last reply. Everything is delegated
    to ``grid`` through the public :class:`flwr.serverapp.Grid` API; ``send_and_receive`` keeps
    Flower's semantics (push, then pull until every reply is in or ``timeout`` has passed).
    """

    def __init__(self, grid: Grid, poll: float = REPLY_POLL_S):
        self.grid, self.poll = grid, poll

    @property
    def run(self):
        return self.grid.run

    def set_run(self, run) -> None:
        self.grid.set_run(run)

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.grid.get_node_ids()

    def get_nodes(self):
        return self.grid.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
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


def _prompt(server_app: ServerApp) -> ServerApp:
    """``server_app`` run on a :class:`PromptGrid` around the grid it is given."""
    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        server_app(PromptGrid(grid), context)

    return app


#: Ray passes task arguments and results up to this size inline in its RPCs; larger ones go
#: through its shared-memory object store (one put and one fetch each way). Ray's default,
#: 100 KiB, sends every model of the paper through the store: a MNIST–MLP Message is 0.8 MB, a
#: CIFAR10–CNN one 3.5 MB. Inline, a Message's round trip to an actor costs about half as much
#: (benchmarks/ray_profile.py). Larger models (> 8 MiB) still go through the store.
RAY_INLINE_BYTES = 8 * 1024 * 1024


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _round_span(messages: int, actors: int, slots: float) -> float:
    """Time a round's ``messages`` equal client runs take on ``actors`` actors sharing
    ``slots`` actors' worth of cores (each run alone takes 1): waves of ``actors`` runs, a wave
    of k runs taking max(1, k / slots)."""
    full, rest = divmod(messages, actors)
    return full * max(1.0, actors / slots) + (max(1.0, rest / slots) if rest else 0.0)


def ray_actor_cpus(cfg: RunConfig, cores: int | None = None) -> float | None:
    """Ray's CPU count for a training run on a machine with fewer cores than a round needs, or
    None (Ray counts the cores itself).

    Flower starts ``cores // client_cpus`` actors. When that is fewer than the clients trained
    per round (M), a round runs in waves, and the last, partial wave leaves cores idle (M = 5 on
    2 cores: waves of 2, 2 and 1, three client runs long). Counting more CPUs gives more actors,
    which the OS time-shares: the fewest actors with the shortest round (:func:`_round_span`) —
    3 for M = 5 on 2 cores, whose round lasts 2.5 client runs. Each actor still gets
    ``client_cpus`` CPUs' worth of threads (Ray sets its thread count from its own resources),
    so every client computes exactly what it computed before. Not for GPU runs (GPUs bound the
    actors there) nor tasks other than ``train``.
    """
    cores = cores or _cores()
    fit = int(cores // cfg.client_cpus)
    m = cfg.clients_per_round
    if cfg.task != "train" or cfg.client_gpus > 0 or fit < 1 or fit >= m:
        return None
    slots = cores / cfg.client_cpus
    best = min(range(fit, m + 1), key=lambda n: (round(_round_span(m, n, slots), 9), n))
    return best * cfg.client_cpus if best > fit else None


def backend_config(cfg: RunConfig) -> dict:
    """Ray backend settings: per-virtual-client CPUs and (fractional) GPUs, and Ray's start-up
    arguments: quiet, Messages of up to :data:`RAY_INLINE_BYTES` passed inline, and the CPU
    count of :func:`ray_actor_cpus` on machines with fewer cores than a round has clients."""
    init_args: dict = {"logging_level": "ERROR", "log_to_driver": False, "include_dashboard": False}
    if not os.environ.get("RAY_ADDRESS"):  # start-up settings apply only to a Ray instance started here
        init_args["_system_config"] = {"max_direct_call_object_size": RAY_INLINE_BYTES}
        cpus = ray_actor_cpus(cfg)
        if cpus is not None:
            init_args["num_cpus"] = cpus
    return {
        "client_resources": {"num_cpus": cfg.client_cpus, "num_gpus": cfg.client_gpus},
        "init_args": init_args,
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
                    server_app=_prompt(server_app),
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
