"""fedcal on a Ray cluster: one ``engine=ray`` simulation attached to a running cluster, and a
sweep's cells as Ray tasks (docs/cluster.md).

Ray is the scheduler; nothing here schedules. Three pieces:

* :mod:`fedcal.app.ray_attach` — which running cluster a simulation attaches to and why (the
  ``ray-address`` key, ``$RAY_ADDRESS``, or the cluster ``ray start`` left on this machine), a
  deadline for its head to answer, and the refusal of a cluster where no node can host one client
  or cell, each in one ``ClusterError`` line naming the address. Attaching, Ray refuses start-up
  options (``_system_config``), so fedcal passes them only when it starts Ray.
* :class:`PlacementGrid` and :func:`add_placement` — every client reply of a Ray simulation
  says which Ray node and host computed it; the ServerApp's side writes ``placement.csv``
  (and the cluster's nodes, ``cluster.json``) into the run directory and strips the record
  before the strategy sees the reply.
* :func:`run_cells` — a sweep's jobs (one cell, or a batch of ``engine=batched`` cells) as Ray
  tasks with declared resources (``cell_cpus``, fractional ``cell_gpus``) and Ray's retries on
  node failure. A worker needs no shared filesystem: it runs its cells into a local temporary
  folder (seeded with what an unfinished run left, so it resumes) and returns the run
  directories' files, which the driver writes into the store, ``DONE`` last. When the store is
  shared (the worker sees a marker file the driver wrote), the worker writes in place and
  nothing is shipped or written twice.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import secrets
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message
from flwr.serverapp import Grid

from fedcal.app.ray_attach import attach_target, cluster_nodes, connect, require_fit, resolve_address
from fedcal.tasks.nodes import WrappedGrid

log = logging.getLogger("fedcal.cluster")

#: the reply record that carries a client's placement (stripped before the strategy sees it)
PLACEMENT_RECORD = "fedcal.placement"
PLACEMENT_FILE = "placement.csv"  # per reply of a Ray simulation: which Ray node and host computed it
CLUSTER_FILE = "cluster.json"  # the Ray nodes a simulation ran on
NODE_FILE = "node.json"  # which Ray node ran a sweep cell (the last attempt's)
PLACEMENT_COLUMNS = ("round", "message_type", "node_id", "partition_id", "ray_node_id", "hostname", "pid")
#: files of a run directory never shipped: the lock belongs to the writer on its own machine
_NOT_SHIPPED = frozenset({".lock"})


# ---------------------------------------------------------------------- placement of client replies
def _in_ray_actor() -> bool:
    """Whether this process is a Ray actor (Flower's Simulation Engine runs ClientApps in actors;
    a sweep cell's in-process clients run in a Ray *task*, and report nothing)."""
    ray = sys.modules.get("ray")  # never import Ray for it: a process that has not is not in Ray
    if ray is None or not ray.is_initialized():
        return False
    try:
        return ray.get_runtime_context().get_actor_id() is not None
    except Exception:  # noqa: BLE001 — placement is provenance; it never fails a reply
        return False


def add_placement(reply: Message, context: Context) -> Message:
    """``reply`` with a :data:`PLACEMENT_RECORD` naming the Ray node, host and process that made it,
    when made in a Ray actor (a node id lookup and a host name: cheap); else unchanged."""
    if not _in_ray_actor() or reply.has_error():
        return reply
    import ray

    reply.content[PLACEMENT_RECORD] = ConfigRecord({
        "ray_node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname(),
        "pid": os.getpid(), "partition_id": int(context.node_config.get("partition-id", -1))})
    return reply


class PlacementGrid(WrappedGrid):
    """A Grid that writes where every reply was computed to ``run_dir/placement.csv`` (one row per
    reply carrying a placement record: round (the message group), message type, Flower node id,
    partition id, Ray node id, host, pid) and the cluster's nodes to ``run_dir/cluster.json``
    (once, at the first reply), and strips the record so the strategy sees the reply as sent.

    A resumed run appends the rounds it re-runs again: both attempts ran them."""

    def __init__(self, grid: Grid, run_dir: Path):
        self.grid, self.run_dir, self._nodes_written = grid, Path(run_dir), False

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self._record(list(self.grid.pull_messages(message_ids)))

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self._record(list(self.grid.send_and_receive(messages, timeout=timeout)))

    def _record(self, replies: list[Message]) -> list[Message]:
        rows = []
        for msg in replies:
            if msg.has_error() or PLACEMENT_RECORD not in msg.content:
                continue
            rec = msg.content[PLACEMENT_RECORD]
            del msg.content[PLACEMENT_RECORD]
            rows.append((msg.metadata.group_id, msg.metadata.message_type, msg.metadata.src_node_id,
                         rec.get("partition_id", -1), rec.get("ray_node_id", ""), rec.get("hostname", ""),
                         rec.get("pid", -1)))
        if rows:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            path = self.run_dir / PLACEMENT_FILE
            new = not path.exists()
            with open(path, "a", newline="") as f:
                writer = csv.writer(f)
                if new:
                    writer.writerow(PLACEMENT_COLUMNS)
                writer.writerows(rows)
            if not self._nodes_written:
                self._nodes_written = True
                (self.run_dir / CLUSTER_FILE).write_text(json.dumps(cluster_nodes(), indent=2))
        return replies


# ---------------------------------------------------------------------- sweep cells as Ray tasks
@dataclass(frozen=True)
class ClusterSpec:
    """Where and how a sweep's cells run on a Ray cluster.

    ``address``: ``host:port`` or ``auto`` (the running cluster, as ``ray.init`` finds it);
    ``cell_cpus``/``cell_gpus``: Ray resources of one cell (fractional GPUs: four cells at 0.25
    share one); ``max_retries``: Ray's re-runs of a cell whose node or worker died; ``store``:
    ``auto`` (write in place when the driver's output folder is visible to the worker, else ship
    the run directory back) or ``ship`` (always ship: a cluster without a shared filesystem)."""

    address: str = "auto"
    cell_cpus: float = 1.0
    cell_gpus: float = 0.0
    max_retries: int = 3
    store: str = "auto"

    def __post_init__(self) -> None:
        from fedcal.config.execution import ray_address_parts

        if self.address != "auto" and ray_address_parts(self.address) is None:
            raise ValueError(f"--cluster {self.address!r} is not a Ray cluster address: give host:port of its head "
                             "(or ray://host:port), or auto")
        if not (math.isfinite(self.cell_cpus) and self.cell_cpus > 0):  # nan fails every comparison
            raise ValueError(f"--cell-cpus must be a finite number > 0, got {self.cell_cpus}")
        if not (math.isfinite(self.cell_gpus) and self.cell_gpus >= 0):
            raise ValueError(f"--cell-gpus must be a finite number >= 0, got {self.cell_gpus}")
        if self.max_retries < 0:
            raise ValueError(f"--cell-retries must be >= 0 (Ray's re-runs of a cell whose node died), "
                             f"got {self.max_retries}")
        if self.store not in ("auto", "ship"):
            raise ValueError(f"cluster store must be auto or ship, got {self.store!r}")


def _marker(output_dir: str | Path, token: str) -> Path:
    return Path(output_dir) / f".fedcal-cluster-{token}"


def _read_tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative POSIX paths → bytes), the lock left out."""
    if not root.is_dir():
        return {}
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in _NOT_SHIPPED and not p.name.endswith(".tmp")}


def _write_tree(root: Path, files: dict[str, bytes], done_last: str | None = None) -> None:
    """Write ``files`` under ``root``, each through a temporary file and a rename; ``done_last``
    (the DONE marker) after every other file, so a reader never sees it before the results."""
    order = sorted(files, key=lambda name: name == done_last)
    for name in order:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(files[name])
        os.replace(tmp, path)


def _placement() -> dict[str, Any]:
    import ray

    ctx = ray.get_runtime_context()
    return {"ray_node_id": ctx.get_node_id(), "hostname": socket.gethostname(),
            "ip": ray.util.get_node_ip_address(), "pid": os.getpid(), "attempt_start": time.time()}


def _cell_task(runner: Callable[[str, Any], Any], kind: str, payload: Any, seeds: dict[str, dict[str, bytes]],
               token: str, ship: bool, threads: int) -> dict[str, Any]:
    """One sweep job on a Ray worker, run by ``runner`` (the sweep's :func:`fedcal.app.sweep._run_job`,
    passed in — by reference — so this module does not import the sweep's). Returns the job's result,
    where it ran and — when shipping — every run directory's files (keyed by the driver's path)."""
    import torch

    from fedcal.config import RunConfig
    from fedcal.results import CONFIG_FILE, run_dir_for

    torch.set_num_threads(threads)
    where = _placement()
    flower_cfgs = payload if kind == "batch" else [payload[0]]
    out_dirs = {RunConfig.from_flower(c).output_dir for c in flower_cfgs}
    if not ship and all(_marker(d, token).exists() for d in out_dirs):  # the driver's store is here
        result = runner(kind, payload)
        return {"result": result, "where": where, "files": None}
    tmp = Path(tempfile.mkdtemp(prefix="fedcal-cell-"))
    try:
        local, back = [], {}
        for i, c in enumerate(flower_cfgs):  # one folder per cell: cells of a batch may share a name
            cfg = RunConfig.from_flower(c)
            here = cfg.replace(output_dir=str(tmp / str(i)))
            back[str(run_dir_for(here))] = str(run_dir_for(cfg))
            _write_tree(run_dir_for(here), seeds.get(str(run_dir_for(cfg)), {}))  # resume what was left
            local.append(here.to_flower())
        result = runner(kind, local if kind == "batch" else (local[0], *payload[1:]))
        files = {}
        for here_dir, there_dir in back.items():
            tree = _read_tree(Path(here_dir))
            if CONFIG_FILE in tree:  # config.json names the driver's folder, as if run there (not hashed)
                stored = json.loads(tree[CONFIG_FILE])
                stored["config"]["output-dir"] = str(Path(there_dir).parent)
                tree[CONFIG_FILE] = json.dumps(stored, indent=2).encode()
            files[there_dir] = tree
        if kind == "batch":
            result = {back.get(k, k): v for k, v in result.items()}
        else:
            result = (back.get(result[0], result[0]), result[1])
        return {"result": result, "where": where, "files": files}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _install(run_dir: Path, files: dict[str, bytes]) -> None:
    """Put a shipped run directory into the store: stale files of an earlier attempt that the
    worker's copy no longer has (a checkpoint the finished run removed) go, ``DONE`` comes last."""
    from fedcal.results import DONE_FILE

    run_dir.mkdir(parents=True, exist_ok=True)
    for path in list(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if path.is_file() and path.name not in _NOT_SHIPPED and path.name != NODE_FILE and rel not in files:
            path.unlink()
    (run_dir / DONE_FILE).unlink(missing_ok=True)  # the results first, then (if finished) DONE
    _write_tree(run_dir, files, done_last=DONE_FILE)


def run_cells(jobs: list[tuple[str, Any]], runner: Callable[[str, Any], Any], spec: ClusterSpec,
              on_result: Callable[[tuple[str, Any], Any], None], progress: bool = False) -> None:
    """Run sweep ``jobs`` (``("cell", (config, restart, mode))`` / ``("batch", configs)``) as Ray
    tasks on the cluster at ``spec.address``, each by ``runner(kind, payload)`` on a worker (a
    module-level function, which Ray sends by reference), calling ``on_result(job, result)`` as
    each ends (``result`` as ``runner`` returns it, or the exception that ended the task after Ray's
    retries). Connects to the cluster unless this process already is (and then
    leaves the connection as it was). Ctrl-C or SIGTERM cancels every task not yet ended (a
    running cell gets KeyboardInterrupt, logs it in its ``run.log`` and releases its lock)."""
    import ray

    from fedcal.config import RunConfig
    from fedcal.results import RunLocked, RunStore

    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # silence a Ray FutureWarning
    own = not ray.is_initialized()
    where = "the connected Ray cluster"
    if own:  # a cluster that does not answer, or cannot run one cell, is refused in one line before any task
        target = attach_target() if spec.address == "auto" else (spec.address, "--cluster")
        address, why = resolve_address(*(target or ("auto", "--cluster")))
        connect(address, why, {"logging_level": "ERROR", "log_to_driver": progress})
        where = f"the Ray cluster at {address} ({why})"
    token = secrets.token_hex(8)
    markers = set()
    try:
        require_fit(cluster_nodes(), spec.cell_cpus, spec.cell_gpus,
                    f"one cell (--cell-cpus {spec.cell_cpus:g}, --cell-gpus {spec.cell_gpus:g})", where)
        if own:
            log.warning("cells run as Ray tasks on %s", where)
        remote = ray.remote(_cell_task).options(num_cpus=spec.cell_cpus, num_gpus=spec.cell_gpus,
                                                max_retries=spec.max_retries, retry_exceptions=False)
        threads = max(1, int(spec.cell_cpus))
        refs: dict[Any, tuple[tuple[str, Any], list[RunStore]]] = {}
        ship = spec.store == "ship"
        for job in jobs:
            kind, payload = job
            cfgs = [RunConfig.from_flower(c) for c in _job_configs(job)]
            _mark_outputs(cfgs, markers, token)
            try:
                held, seeds = _hold_and_read(cfgs) if ship else ([], {})
            except RunLocked as exc:
                on_result(job, exc)
                continue
            refs[remote.remote(runner, kind, payload, seeds, token, ship, threads)] = (job, held)
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1)
                job, held = refs.pop(ready[0])
                try:
                    out = ray.get(ready[0])
                except Exception as exc:  # noqa: BLE001 — the task failed after Ray's retries
                    for store in held:
                        store.release()
                    on_result(job, RuntimeError(f"the Ray task running it failed: {str(exc).splitlines()[0]}"))
                    continue
                try:
                    _store_result(job, out)
                finally:
                    for store in held:
                        store.release()
                on_result(job, out["result"])
        except BaseException:  # Ctrl-C, SIGTERM: nothing further starts, running cells are interrupted
            for ref in refs:
                ray.cancel(ref)
            for _, held in refs.values():
                for store in held:
                    store.release()
            raise
    finally:
        for d in markers:
            _marker(d, token).unlink(missing_ok=True)
        if own:
            ray.shutdown()


def _job_configs(job: tuple[str, Any]) -> list:
    """The Flower run configs of a sweep job: a batch's configs, or a cell's one."""
    kind, payload = job
    return list(payload) if kind == "batch" else [payload[0]]


def _mark_outputs(cfgs: list, markers: set, token: str) -> None:
    """Mark each output directory not yet marked as in use by this sweep (``token``), once."""
    for c in cfgs:
        if c.output_dir not in markers:
            Path(c.output_dir).mkdir(parents=True, exist_ok=True)
            _marker(c.output_dir, token).write_text(token)
            markers.add(c.output_dir)


def _hold_and_read(cfgs: list) -> tuple[list, dict[str, dict[str, bytes]]]:
    """Take each run's lock (the driver is the run's one writer while a worker computes it
    elsewhere) and read its directory to ship to the worker; a run locked by another writer
    releases those already taken and raises :class:`~fedcal.results.RunLocked`."""
    from fedcal.results import RunLocked, RunStore, run_dir_for

    seeds, held = {}, []
    try:
        for c in cfgs:
            store = RunStore(run_dir_for(c), c)
            store.acquire()
            held.append(store)
            # with restart too: the worker's restart keeps run.log, which then says so
            seeds[str(run_dir_for(c))] = _read_tree(run_dir_for(c))
    except RunLocked:
        for store in held:
            store.release()
        raise
    return held, seeds


def _store_result(job: tuple[str, Any], out: dict[str, Any]) -> None:
    """Install the run directories a worker shipped back and record, in each of the job's run
    directories, where it ran."""
    from fedcal.config import RunConfig
    from fedcal.results import run_dir_for

    for there, files in (out["files"] or {}).items():
        _install(Path(there), files)
    for c in _job_configs(job):
        d = run_dir_for(RunConfig.from_flower(c))
        if d.is_dir():
            (d / NODE_FILE).write_text(json.dumps(out["where"], indent=2))


def placement_table(run_dirs: Iterable[str | Path]) -> list[dict[str, Any]]:
    """One row per run directory that records where it ran (``node.json``): run, Ray node, host."""
    rows = []
    for d in run_dirs:
        path = Path(d) / NODE_FILE
        if path.exists():
            rows.append({"run": Path(d).name, **json.loads(path.read_text())})
    return rows

