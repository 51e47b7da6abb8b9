"""Run identity and the run store: which directory a config's results live in, and what is in it.

Run identity (:func:`config_hash`, :func:`collection_hash`, :func:`default_run_name`,
:func:`run_dir_for`): a run is named after the keys that change what it computes, so a finished
run is recognised (and skipped) whichever machine or folder produced it. Committed results are
identified by these names: the hashes below must never change for an existing task.

A run directory holds

* ``config.json`` — the resolved run config, its hash and the code and package versions that
  made the run (:mod:`fedcal.provenance`);
* ``metrics.csv`` — tidy rows ``run_id, round, metric, value, config_hash``, appended and
  flushed after every round, so an interrupted run keeps every finished round;
* ``reliability.csv`` — reliability-diagram bins of the final global model;
* ``model.pt`` — the final global model's state dict (for post-hoc calibration, triage, CKA);
* ``timings.csv`` — wall-clock seconds per round (``run_id, round, metric, value``): kept out of
  ``metrics.csv`` so that two runs of one config have byte-identical metrics;
* ``run.log`` — one timestamped line per event of the run's life: started, resumed from round N,
  checkpoint, failed (with the reason), finished; appended across attempts, never truncated;
* ``checkpoint.pt`` — while a run is unfinished, everything it needs to continue after its last
  checkpointed round (:meth:`RunStore.save_checkpoint`; removed when the run finishes);
* ``.lock`` — held (``fcntl.flock``) by the one process writing the run, holding its pid;
* ``DONE`` — written last; a run with a ``DONE`` matching its config hash is finished.

A run directory has one writer at a time: :meth:`RunStore.start` and :meth:`RunStore.session`
take the lock and a second writer fails at once (:class:`RunLocked`, naming the directory and
the holder's pid). A run resumes from its checkpoint (:meth:`RunStore.session`): the files it
appends to are cut back to their length at the checkpoint and the tables it rewrites are put
back as they were, so a resumed run's files equal an uninterrupted run's.

Tables and plots are built from these files only (:func:`load_metrics`; the final metrics of runs:
:func:`fedcal.reports.final_metrics`).

Unfinished runs (no ``DONE`` matching the hash of the config in their ``config.json``:
interrupted, crashed, or still running) are never reported as final: :func:`run_status` tells
finished from unfinished and how far an unfinished run got, :func:`load_metrics` flags every
per-round row with ``finished``, and every final table (:mod:`fedcal.reports`) leaves unfinished
runs out and logs one line for each run it left out.

A run directory belongs to one config: :meth:`RunStore.start` refuses (:class:`RunNameConflict`)
to start a run in a directory that holds a run of a different config (the same ``run-name``
reused), instead of overwriting it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import contextlib
import csv
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence


from fedcal.config import ConfigError, RunConfig, config_fields, fields_of, key_of, setting_of, task_config
from fedcal.provenance import provenance
from fedcal.signals import Terminated

if TYPE_CHECKING:
    import pandas as pd

METRICS_FILE = "metrics.csv"
MODEL_FILE = "model.pt"
CONFIG_FILE = "config.json"
DONE_FILE = "DONE"
AUDIT_FILE = "aggregation.csv"  # per round and accepted node: its weight and the rule's audit (train task)
REJECTIONS_FILE = "rejections.csv"  # every reply a strategy rejected (written by the train task)
TIMINGS_FILE = "timings.csv"  # wall-clock seconds per round, out of metrics.csv (not a result)
RUN_LOG = "run.log"  # the run's events, one timestamped line each
CHECKPOINT_FILE = "checkpoint.pt"  # the state an unfinished run resumes from
LOCK_FILE = ".lock"  # flock-ed by the run's one writer; holds its pid
TIMING_COLUMNS = ("run_id", "round", "metric", "value")
CHECKPOINT_FORMAT = 1  # the layout of checkpoint.pt; another value is not resumed from
COLUMNS = ("run_id", "round", "metric", "value", "config_hash")
FINISHED = "finished"  # the column of load_metrics that flags the rows of finished runs
CODE = "code"  # the column of load_metrics naming the code that made each run
UNRECORDED = "unrecorded"  # the code of a run made before fedcal recorded provenance

log = logging.getLogger("fedcal.results")


class RunNameConflict(ConfigError):
    """A run directory already holds a run of a different config (a ``run-name`` reused): starting
    there would overwrite it. The message names the directory and the keys that differ."""


class RunFailed(RuntimeError):
    """A run ended without a result worth marking finished (e.g. no round aggregated anything,
    or the engine stopped before the task finished). Its run store keeps what it logged; the
    command prints this as one line."""


class RunLocked(RunFailed):
    """Another process is writing the run directory (it holds the run's lock file): a second
    writer would interleave its rounds with the first's. The message names the directory and
    the holder's pid."""


class UnfinishedRunError(FileNotFoundError):
    """A run's final results were asked for, but the run is unfinished (no ``DONE`` matching its
    config hash): its final model and final metrics do not exist."""


@dataclasses.dataclass
class Checkpoint:
    """What :meth:`RunStore.session` hands a task resuming a run: the last round the checkpoint
    covers and the task's state as the task saved it (:meth:`RunStore.save_checkpoint`)."""

    round: int
    state: dict[str, Any]


class RunStore:
    """Append-only store of one run's per-round results, its log, lock and checkpoint.

    A task runs inside :meth:`session` (the lock held, ``run.log`` told how the attempt ends) and
    writes through the store only, so the store knows every file of the run: those it appends to
    (:meth:`log_round`, :meth:`append_rows`, :meth:`log_timings`) and those it rewrites whole
    (:meth:`write_table`). That is what lets a checkpoint record the run's files exactly.
    """

    def __init__(self, run_dir: str | os.PathLike[str], cfg: RunConfig):
        self.dir = Path(run_dir)
        self.cfg = cfg
        self.run_id = self.dir.name
        self.config_hash = config_hash(cfg)
        #: the round this attempt resumed after (None: it started from round 0)
        self.resumed_from: int | None = None
        self._lock_fd: int | None = None
        self._files: dict[str, str] = {}  # the run's files written so far: name → "append" | "table"

    def __del__(self) -> None:  # a store dropped without finishing releases its lock
        self.release()

    # ------------------------------------------------------------------ lifecycle
    def is_done(self) -> bool:
        done = self.dir / DONE_FILE
        return done.exists() and done.read_text().strip() == self.config_hash

    def check(self) -> None:
        """Raise :class:`RunNameConflict` if the directory holds a run of another config
        (see :func:`check_run_dir`)."""
        check_run_dir(self.dir, self.cfg)

    def acquire(self) -> None:
        """Become the directory's one writer: an exclusive ``flock`` on ``.lock`` (holding this
        process's pid), kept until :meth:`release`, :meth:`finish` or the process's end (the
        kernel drops it with the process, however it ends). Raises :class:`RunLocked` at once,
        naming the holder's pid, when another writer holds it."""
        if self._lock_fd is not None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunLocked(f"run directory {str(self.dir)!r} is being written by another process (pid {holder}); "
                            "wait for it to end or stop it — one writer at a time") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def release(self) -> None:
        """Give up the lock (a no-op when not held)."""
        fd, self._lock_fd = getattr(self, "_lock_fd", None), None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def start(self, rounds: int | None = None) -> None:
        """Begin a fresh run: take the lock, clear partial results and the checkpoint of an earlier
        attempt of the same config, write config, log ``started`` (with the run's ``rounds`` when
        given). A directory holding a run of a different config is refused
        (:class:`RunNameConflict`), never overwritten."""
        self.check()
        self.acquire()
        for name in (METRICS_FILE, "reliability.csv", REJECTIONS_FILE, AUDIT_FILE, DONE_FILE, CONFIG_FILE,
                     MODEL_FILE, TIMINGS_FILE, CHECKPOINT_FILE):
            (self.dir / name).unlink(missing_ok=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.dir / CONFIG_FILE, json.dumps(
            {"run_id": self.run_id, "config_hash": self.config_hash, "config": self.cfg.to_flower(),
             "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "provenance": provenance()}, indent=2))
        with open(self.dir / METRICS_FILE, "w", newline="") as f:
            csv.writer(f).writerow(COLUMNS)
        self._files = {METRICS_FILE: "append"}
        self.resumed_from = None
        self.log_event("started" + (f" ({rounds} rounds)" if rounds is not None else "")
                       + f", pid {os.getpid()}")

    @contextlib.contextmanager
    def session(self, *, rounds: int | None = None, resume: bool = True) -> Iterator[Checkpoint | None]:
        """The life of one attempt of the run: take the lock, resume from the checkpoint when there
        is a usable one (``resume``) — yielding it — or start fresh (:meth:`start`, yielding None);
        an exception that ends the attempt (a crash, Ctrl-C, SIGTERM turned into an exception)
        is logged as ``failed: <reason>`` in ``run.log`` before it propagates; the lock is
        released at the end either way. The task calls :meth:`finish` inside it."""
        self.check()
        self.acquire()
        try:
            checkpoint = self._restore() if resume else None
            if checkpoint is None:
                self.start(rounds)
            yield checkpoint
        except BaseException as exc:
            self.log_event(f"failed: {failure_reason(exc)}")
            raise
        finally:
            self.release()

    def log_event(self, text: str) -> None:
        """Append ``<local time> <text>`` to ``run.log`` and make it durable."""
        self.dir.mkdir(parents=True, exist_ok=True)
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(str(text).split())}\n"
        with open(self.dir / RUN_LOG, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def log_round(self, server_round: int, metrics: Mapping[str, float]) -> None:
        """Append one round's metrics and flush them to disk."""
        with open(self.dir / METRICS_FILE, "a", newline="") as f:
            w = csv.writer(f)
            for name, value in metrics.items():
                w.writerow((self.run_id, server_round, name, repr(float(value)), self.config_hash))
            f.flush()
            os.fsync(f.fileno())
        self._files[METRICS_FILE] = "append"

    def log_timings(self, server_round: int, seconds: Mapping[str, float]) -> None:
        """Append one round's wall-clock timings (``round_seconds``, …) to ``timings.csv``: they
        differ between two runs of one config, so they stay out of ``metrics.csv``."""
        path = self.dir / TIMINGS_FILE
        new = not path.exists()
        with open(path, "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(TIMING_COLUMNS)
            for name, value in seconds.items():
                w.writerow((self.run_id, server_round, name, repr(float(value))))
        self._files[TIMINGS_FILE] = "append"

    def write_table(self, name: str, frame: pd.DataFrame) -> Path:
        path = self.dir / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        frame.to_csv(tmp, index=False)
        os.replace(tmp, path)
        self._files[name] = "table"
        return path

    def append_rows(self, name: str, rows: Sequence[Mapping[str, Any]]) -> Path:
        """Append ``rows`` to the CSV table ``name`` (created with a header from the first rows'
        keys). Every later row must have exactly those columns, in any order: a table never
        silently gains or loses a column."""
        path = self.dir / name
        if not rows:
            return path
        new = not path.exists()
        if new:
            columns = list(rows[0])
        else:
            with open(path, newline="") as f:
                columns = next(csv.reader(f))
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            if new:
                w.writeheader()
            for row in rows:
                if set(row) != set(columns):
                    raise ValueError(f"{name}: row columns {sorted(row)} differ from the table's {columns}")
                w.writerow(row)
        self._files[name] = "append"
        return path

    def save_model(self, state_dict: Mapping[str, Any]) -> Path:
        """The final global model (``model.pt``, a state dict) for post-hoc analyses."""
        import torch

        path = self.dir / MODEL_FILE
        tmp = path.with_suffix(".tmp")
        torch.save({k: v.detach().cpu() for k, v in state_dict.items()}, tmp)
        os.replace(tmp, path)
        return path

    def finish(self) -> None:
        """Mark the run finished (``DONE``), log it, drop the checkpoint and release the lock."""
        atomic_write(self.dir / DONE_FILE, self.config_hash)
        self.log_event("finished")
        (self.dir / CHECKPOINT_FILE).unlink(missing_ok=True)
        self.release()

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_due(self, server_round: int, last_round: int) -> bool:
        """Whether the state after ``server_round`` is checkpointed: every ``checkpoint-every``
        rounds (0: never), never after the last round (the run then finishes instead)."""
        every = self.cfg.checkpoint_every
        return every > 0 and 0 < server_round < last_round and server_round % every == 0

    def save_checkpoint(self, server_round: int,
                        state: Mapping[str, Any] | Callable[[], Mapping[str, Any]]) -> float:
        """Checkpoint the run after ``server_round``: the task's ``state`` (tensors, numbers,
        strings, lists, dicts: what ``torch.load(weights_only=True)`` reads back; or a function
        returning it, so that capturing it counts in the checkpoint's cost) and the run's
        files — the length of each file appended to (flushed to disk first), the bytes of each
        table rewritten — in one file written atomically (:func:`fedcal.checkpoint.save_atomic`):
        a crash mid-write leaves the previous checkpoint. Logs ``checkpoint`` with its cost;
        returns the seconds it took."""
        from fedcal.checkpoint import save_atomic

        t0 = time.perf_counter()
        if callable(state):
            state = state()
        files: dict[str, dict[str, Any]] = {}
        for name, kind in self._files.items():
            path = self.dir / name
            if kind == "append":
                with open(path, "rb+") as f:
                    os.fsync(f.fileno())
                    files[name] = {"kind": "append", "size": os.fstat(f.fileno()).st_size}
            else:
                files[name] = {"kind": "table", "data": path.read_bytes()}
        size = save_atomic(self.dir / CHECKPOINT_FILE, {
            "format": CHECKPOINT_FORMAT, "config_hash": self.config_hash, "round": int(server_round),
            "files": files, "state": dict(state), "code": provenance()["code"]})
        seconds = time.perf_counter() - t0
        self.log_event(f"checkpoint: round {server_round} ({size / 1e6:.3g} MB, {seconds:.3g} s)")
        return seconds

    def discard(self) -> None:
        """Start over explicitly (``--restart``): take the lock and remove every file of the run
        but its log (which records the restart), so the next attempt finds no checkpoint nor
        anything else an earlier attempt left. Subfolders (caches of finished runs) are kept."""
        if not self.dir.exists():
            return
        self.check()
        self.acquire()
        try:
            for path in self.dir.iterdir():
                if path.is_file() and path.name not in (RUN_LOG, LOCK_FILE):
                    path.unlink()
            self.log_event("restart requested: earlier results and checkpoint discarded")
        finally:
            self.release()

    def _restore(self) -> Checkpoint | None:
        """The checkpoint to resume from, with the run's files put back as they were when it was
        written; None (after one warning line saying why, when there was a checkpoint) when the
        run must start over: no checkpoint, an unreadable or foreign one, or a file cut shorter
        than the checkpoint recorded."""
        from fedcal.checkpoint import load

        path = self.dir / CHECKPOINT_FILE
        if not path.exists():
            return None
        try:
            saved = load(path)
            round_, files, state = int(saved["round"]), dict(saved["files"]), dict(saved["state"])
            if saved.get("format") != CHECKPOINT_FORMAT or saved.get("config_hash") != self.config_hash:
                raise ValueError("written for another config or by another checkpoint format")
            if not (self.dir / CONFIG_FILE).exists():
                raise ValueError(f"no {CONFIG_FILE}")
            for name, info in files.items():
                if info["kind"] == "append" and (not (self.dir / name).exists()
                                                 or (self.dir / name).stat().st_size < info["size"]):
                    raise ValueError(f"{name} is shorter than at the checkpoint")
        except Exception as exc:  # noqa: BLE001 — any unusable checkpoint means starting over, said once
            log.warning("%s: cannot resume from its checkpoint (%s); starting the run over", self.dir, exc)
            self.log_event(f"checkpoint unusable ({exc}); starting over")
            return None
        for name, info in files.items():
            if info["kind"] == "append":
                os.truncate(self.dir / name, info["size"])
            else:
                tmp = self.dir / (name + ".tmp")
                tmp.write_bytes(info["data"])
                os.replace(tmp, self.dir / name)
        for name in (METRICS_FILE, "reliability.csv", REJECTIONS_FILE, AUDIT_FILE, TIMINGS_FILE, MODEL_FILE,
                     DONE_FILE):
            if name not in files:  # written after the checkpoint by the attempt that stopped
                (self.dir / name).unlink(missing_ok=True)
        self._files = {name: info["kind"] for name, info in files.items()}
        self.resumed_from = round_
        code, then = provenance()["code"], saved.get("code")
        other = f"; the earlier rounds were made by code {then}, these by {code}" if then and then != code else ""
        self.resumed(f"from round {round_}", other)
        return Checkpoint(round_, state)

    def resumed(self, what: str, note: str = "") -> None:
        """Say in ``run.log`` and on the console (a warning line) that this attempt resumed, and
        from where (``what``: ``from round 40``, ``after the clients' collection``)."""
        self.log_event(f"resumed {what}, pid {os.getpid()}{note}")
        log.warning("%s: resumed %s (--restart starts over)%s", self.dir, what, note)


def failure_reason(exc: BaseException) -> str:
    """One line saying why an attempt ended: ``interrupted (Ctrl-C or SIGINT)``, ``terminated (signal 15)``,
    else ``<exception type>: <first line of its message>`` (at most 300 characters)."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C or SIGINT)"
    if isinstance(exc, Terminated):
        return f"terminated ({exc})"
    if isinstance(exc, SystemExit):
        return f"exited (status {exc.code})"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: a reader sees the old
    file or the new one, never half of one."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------- run identity
# Keys that describe where and how a run executes, not what it computes (the "execution" group
# and the fields declared hashed=False): left out of every hash, so the same experiment on CPU or
# GPU, or in another output folder, is recognised as the same.
def _non_semantic() -> frozenset[str]:
    return frozenset(s.name for s in config_fields() if not s.hashed)
# What the clients' probits of an inference run depend on (their local training and the queries):
# runs that differ only in aggregator or attack settings reuse each other's probits. A subset of
# groups, so named one by one.
_COLLECTION_KEYS = ("dataset", "model", "num_clients", "dirichlet_alpha", "lr", "momentum", "weight_decay",
                    "batch_size", "seed", "inf_server_frac", "inf_local_epochs", "inf_test_queries")


def hashed_keys(task: str) -> frozenset[str]:
    """Field names whose values make up the hash of a run of ``task``: the hashed keys of the groups
    its :class:`fedcal.config.TaskConfig` names (``identity_groups``), with or without the ``task``
    key itself as the task declares (see the task's config module for why it chose them)."""
    tc = task_config(task)
    keys = frozenset(fields_of(*tc.identity_groups)) - _non_semantic()
    return keys if tc.hash_task_key else keys - {"task"}


def config_hash(cfg: RunConfig) -> str:
    """Stable 12-hex hash of the keys that change what a run computes (not where it runs)."""
    keys = hashed_keys(cfg.task)
    # a key declared hash_when_set counts only at a non-default value (so adding it renamed nothing)
    semantic = {k: v for k, v in cfg.to_dict().items()
                if k in keys and not (setting_of(k).hash_when_set and v == setting_of(k).default)}
    blob = json.dumps(semantic, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def collection_hash(cfg: RunConfig) -> str:
    """Hash of what an inference run's collected client probits depend on."""
    keys = {k: getattr(cfg, k) for k in _COLLECTION_KEYS}
    if cfg.inf_augment != "none":  # added later: collections made before keep their hash
        keys["inf_augment"] = cfg.inf_augment
    if cfg.inf_client_output != "probits":  # likewise: a logits collection also holds the clients' logits
        keys["inf_client_output"] = cfg.inf_client_output
    blob = json.dumps(keys, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


# What an inference run's learned aggregators depend on beyond its collection, per component: runs that
# differ only in attack or evaluation settings (or in the other component's keys) reuse each other's.
_AGGREGATOR_KEYS = {"deepset": ("inf_f", "agg_hidden", "agg_epochs", "agg_adv_epochs", "agg_lr", "agg_attack_steps",
                                "agg_restarts", "agg_adv_attack"),
                    "fusion": ("agg_hidden", "agg_epochs", "agg_lr", "agg_latent")}


def aggregator_hash(cfg: RunConfig, component: str) -> str:
    """Hash of what one learned component of an inference run depends on — ``"deepset"`` (the DeepSet,
    before and after adversarial training) or ``"fusion"`` (the purifiers' autoencoders and fusion
    classifiers) —: the collection and that component's training keys, not the attacks, nor how many
    queries or which aggregators the run evaluates."""
    keys = {k: getattr(cfg, k) for k in _AGGREGATOR_KEYS[component]}
    keys["collection"] = collection_hash(cfg)
    blob = json.dumps(keys, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def default_run_name(cfg: RunConfig) -> str:
    """Readable, unique-per-config directory name: the task's own name parts (its config module's
    ``run_name``) and the config hash's first 8 hex digits."""
    return task_config(cfg.task).default_run_name(cfg, config_hash(cfg)[:8])


def run_dir_for(cfg: RunConfig) -> Path:
    """``<output-dir>/<run-name or default run name>``."""
    return Path(cfg.output_dir) / (cfg.run_name or default_run_name(cfg))


def load_run_config(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    return json.loads((Path(run_dir) / CONFIG_FILE).read_text())


def load_config(run_dir: str | os.PathLike[str]) -> RunConfig:
    """The validated run config a run directory was produced with."""
    return RunConfig.from_flower(load_run_config(run_dir)["config"])


def check_run_dir(run_dir: str | os.PathLike[str], cfg: RunConfig) -> None:
    """Refuse to (re)start ``cfg`` in ``run_dir`` if the directory holds a run of another config.

    A directory without ``config.json`` is free; one whose ``config.json`` has ``cfg``'s hash
    holds an earlier attempt (or a finished run) of the same config, which is resumed, skipped or
    re-run (``--force``) as before. Any other ``config.json`` means the ``run-name`` is reused for
    a different config: :class:`RunNameConflict`, one line naming the directory and the keys that
    differ. The hash of the stored config is recomputed from its keys (so a directory written
    before a config key was renamed still matches); the stored hash is used when the stored
    config no longer parses.
    """
    if not (Path(run_dir) / CONFIG_FILE).exists():
        return
    want = config_hash(cfg)
    try:
        other, have = _stored_identity(Path(run_dir))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunNameConflict(f"run directory {str(run_dir)!r} has an unreadable {CONFIG_FILE} ({exc}): it is not "
                              f"overwritten; remove it or choose another 'run-name'") from None
    if have == want:
        return
    diff: list[str] = []
    if other is not None:
        keys = sorted((hashed_keys(cfg.task) | hashed_keys(other.task)) - {"task"})
        diff = [f"{key_of(k)}={getattr(other, k)!r} there, {getattr(cfg, k)!r} here" for k in keys
                if getattr(other, k) != getattr(cfg, k)]
        if other.task != cfg.task:
            diff.insert(0, f"task={other.task!r} there, {cfg.task!r} here")
    what = ("; ".join(diff[:3]) + (f"; and {len(diff) - 3} more" if len(diff) > 3 else "") if diff
            else f"config hash {have or '?'} there, {want} here")
    raise RunNameConflict(f"run directory {str(run_dir)!r} already holds a run of a different config ({what}): "
                          f"it is not overwritten; choose another 'run-name' or remove the directory")


class RunStatus(NamedTuple):
    """Whether a run directory holds a finished run, and how far an unfinished one got."""

    run_dir: Path
    finished: bool
    last_round: int | None  # the last round logged in metrics.csv (None: no round logged)
    num_rounds: int | None  # the rounds a train run was configured for (None: other tasks, or unreadable)
    why: str  # "" when finished; else why it is not, e.g. "no DONE marker"

    def describe(self) -> str:
        """One line: ``<dir>: unfinished (no DONE marker; rounds logged up to 16 of 60)``."""
        if self.finished:
            return f"{self.run_dir}: finished"
        if self.last_round is None:
            got = "no round logged"
        elif self.num_rounds is not None:
            got = f"rounds logged up to {self.last_round} of {self.num_rounds}"
        else:
            got = f"rounds logged up to {self.last_round}"
        return f"{self.run_dir}: unfinished ({self.why}; {got})"


def _stored_identity(run_dir: Path) -> tuple[RunConfig | None, str | None]:
    """(config, hash) of the run stored in ``run_dir``: the hash recomputed from the keys of its
    ``config.json`` (so a directory written before a key was renamed still matches), or the
    stored hash, with no config, when that config no longer parses. Raises OSError/ValueError/
    KeyError/TypeError when ``config.json`` is missing or unreadable."""
    stored = load_run_config(run_dir)
    raw = stored["config"]
    try:
        cfg = RunConfig.from_flower(raw)
        return cfg, config_hash(cfg)
    except (ConfigError, TypeError):
        return None, str(stored.get("config_hash", "")) or None


def _done_state(run_dir: Path) -> tuple[RunConfig | None, str]:
    """(stored config or None, why the run is unfinished — "" when it is finished)."""
    try:
        cfg, want = _stored_identity(run_dir)
    except FileNotFoundError:
        return None, f"not started (no {CONFIG_FILE})"
    except (OSError, ValueError, KeyError, TypeError):
        return None, f"unreadable {CONFIG_FILE}"
    done = run_dir / DONE_FILE
    marker = done.read_text().strip() if done.exists() else None
    if marker is not None and want is not None and marker == want:
        return cfg, ""
    return cfg, "no DONE marker" if marker is None else "its DONE marker belongs to another config"


def run_status(run_dir: str | os.PathLike[str]) -> RunStatus:
    """Is ``run_dir`` a finished run (a ``DONE`` equal to the hash of the config in its
    ``config.json``; the stored hash when that config no longer parses)? And if not, how far did
    it get (its last logged round)."""
    d = Path(run_dir)
    cfg, why = _done_state(d)
    schedule = task_config(cfg.task).schedule if cfg is not None else None
    num_rounds = getattr(cfg, schedule[1]) if cfg is not None and schedule is not None else None
    last = None if why.startswith("not started") else _last_round(d)
    return RunStatus(d, not why, last, num_rounds, why)


def is_finished(run_dir: str | os.PathLike[str]) -> bool:
    """Whether ``run_dir`` holds a finished run (:func:`run_status`), without reading its
    metrics (readers that hold them already need not read them twice)."""
    return not _done_state(Path(run_dir))[1]


def _last_round(run_dir: Path) -> int | None:
    import pandas as pd  # lazily: the ClientApp process never loads pandas
    path = run_dir / METRICS_FILE
    try:
        rounds = pd.read_csv(path, usecols=["round"])["round"]
    except (OSError, ValueError, pd.errors.EmptyDataError):
        return None
    return int(rounds.max()) if len(rounds) else None


def stored_provenance(run_dir: str | os.PathLike[str]) -> Mapping[str, Any] | None:
    """The provenance (:func:`fedcal.provenance.provenance`) a run directory's ``config.json``
    recorded, or None (made before fedcal recorded it, or no readable ``config.json``)."""
    try:
        stored = json.loads((Path(run_dir) / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return None
    prov = stored.get("provenance") if isinstance(stored, dict) else None
    return prov if isinstance(prov, dict) else None


def code_of(run_dir: str | os.PathLike[str]) -> str:
    """The ``code`` identity a run recorded, or :data:`UNRECORDED`."""
    prov = stored_provenance(run_dir)
    return str(prov.get("code", UNRECORDED)) if prov else UNRECORDED


def reuse_note(run_dir: str | os.PathLike[str]) -> str | None:
    """None when the finished run in ``run_dir`` was made by this process's code and packages;
    else what differs, e.g. ``code 1a2b3c4d5e6f there, 9f8e7d6c5b4a+0c1d2e3f here; torch 2.13.0
    there, 2.14.1 here``."""
    now = provenance()
    then = stored_provenance(run_dir)
    if then is None:
        return f"code {UNRECORDED} there, {now['code']} here"
    diff = [f"code {then.get('code')} there, {now['code']} here"] if then.get("code") != now["code"] else []
    old = then.get("packages") or {}
    for name in sorted(set(old) | set(now["packages"])):
        if old.get(name) != now["packages"].get(name):
            diff.append(f"{name} {old.get(name, 'absent')} there, {now['packages'].get(name, 'absent')} here")
    return "; ".join(diff) or None


def warn_reused(run_dirs: Sequence[str | os.PathLike[str]]) -> list[str]:
    """Log one warning for the finished runs in ``run_dirs`` that are about to be reused
    although other code or packages made them (:func:`reuse_note`); returns their lines. A
    reused run is never silent about its origin; ``--force`` re-runs it."""
    lines = [f"{d}: {note}" for d in run_dirs if (note := reuse_note(d))]
    if lines:
        shown = "\n  ".join(lines[:5]) + (f"\n  … and {len(lines) - 5} more" if len(lines) > 5 else "")
        log.warning("reusing %d finished run(s) made by other code than this process's (%s); their results "
                    "stay as they were computed, --force re-runs them:\n  %s", len(lines),
                    provenance()["code"], shown)
    return lines


def load_metrics(run_dirs: list[str | os.PathLike[str]] | str | os.PathLike[str]) -> pd.DataFrame:
    """Tidy per-round metrics of one or many runs, with their config columns joined, ``code``
    (the code that made the run, :func:`fedcal.provenance.code_of`) and, last, ``finished``
    (bool, :func:`run_status`): the rows of unfinished runs are kept, flagged
    ``finished = False``. Metric names are whatever the runs logged (accuracy, ece, …, and any
    per-round counts a task adds; wall-clock timings are in :func:`load_timings`)."""
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    frames = []
    for d in run_dirs:
        path = Path(d) / METRICS_FILE
        if not path.exists():
            continue
        df = pd.read_csv(path)
        cfg = load_run_config(d)["config"]
        # the config columns joined at once (one insert per key fragments the frame: 100+ keys)
        extra = pd.DataFrame({**{k: [v] * len(df) for k, v in cfg.items()}, CODE: code_of(d),
                              FINISHED: is_finished(d)}, index=df.index)
        frames.append(pd.concat([df.drop(columns=[c for c in extra if c in df.columns]), extra], axis=1))
    if not frames:
        return pd.DataFrame(columns=[*COLUMNS, FINISHED])
    return pd.concat(frames, ignore_index=True)


def load_timings(run_dirs: list[str | os.PathLike[str]] | str | os.PathLike[str]) -> pd.DataFrame:
    """Tidy wall-clock timings ``run_id, round, metric, value`` of one or many runs, from their
    ``timings.csv`` (``round_seconds`` per round); a run made before timings left ``metrics.csv``
    gives its ``round_seconds`` rows from there."""
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    frames = []
    for d in map(Path, run_dirs):
        if (d / TIMINGS_FILE).exists():
            frames.append(pd.read_csv(d / TIMINGS_FILE))
        elif (d / METRICS_FILE).exists():
            old = pd.read_csv(d / METRICS_FILE)
            frames.append(old[old["metric"] == "round_seconds"][list(TIMING_COLUMNS)])
    if not frames:
        return pd.DataFrame(columns=list(TIMING_COLUMNS))
    return pd.concat(frames, ignore_index=True)


def load_model(run_dir: str | os.PathLike[str]):
    """(RunConfig, model with the run's final global weights, dataset) of a finished run."""
    import torch

    from fedcal.data import load_dataset
    from fedcal.models import build_model

    status = run_status(run_dir)
    if not status.finished:
        raise UnfinishedRunError(f"no final model: {status.describe()}")
    cfg = load_config(run_dir)
    path = Path(run_dir) / MODEL_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: the run predates model saving")
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    model = build_model(cfg.model, ds.input_shape, ds.num_classes)
    model.load_state_dict(torch.load(path, weights_only=True))
    return cfg, model, ds


# ---------------------------------------------------------------------- what happened to a run
_EVENT = re.compile(r"^(\S+) (.*)$")


class RunState(NamedTuple):
    """What ``fedcal runs`` says about a run directory (:func:`run_state`)."""

    run_dir: Path
    status: str  # "finished" | "unfinished" | "failed" | "running"
    last_round: int | None  # the last round logged in metrics.csv
    num_rounds: int | None  # the rounds the run was started for (None: no round structure, or unknown)
    reason: str  # failed: the reason from run.log; unfinished: why it is not finished; else ""
    resumed_from: str | None  # the last attempt's "resumed from round N" / "resumed after …" (None: not resumed)
    checkpoint: str | None  # the last checkpoint of the last attempt, e.g. "round 40" (None: none)
    pid: int | None  # running: the writer's pid

    def line(self) -> str:
        """One line, e.g. ``runs/x: unfinished (round 16 of 60; checkpoint: round 15)``."""
        rounds = None
        if self.last_round is not None:
            rounds = f"round {self.last_round}" + (f" of {self.num_rounds}" if self.num_rounds is not None else "")
        resumed = f"resumed {self.resumed_from}" if self.resumed_from else None
        if self.status == "finished":
            detail = [resumed]
        elif self.status == "running":
            detail = [f"pid {self.pid}", rounds, resumed]
        elif self.status == "failed":
            detail = [self.reason, rounds, f"checkpoint: {self.checkpoint}" if self.checkpoint else None, resumed]
        else:
            detail = [rounds or "no round logged", f"checkpoint: {self.checkpoint}" if self.checkpoint else None,
                      resumed, self.reason or None]
        detail = [d for d in detail if d]
        return f"{self.run_dir}: {self.status}" + (f" ({'; '.join(detail)})" if detail else "")


def run_events(run_dir: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """The ``(time, event)`` lines of a run's ``run.log`` (empty when it has none)."""
    try:
        text = (Path(run_dir) / RUN_LOG).read_text(errors="replace")
    except OSError:
        return []
    return [(m.group(1), m.group(2)) for line in text.splitlines() if (m := _EVENT.match(line.strip()))]


def lock_holder(run_dir: str | os.PathLike[str]) -> int | None:
    """The pid of the process writing ``run_dir`` now (holding its lock), else None."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return int(text) if text.isdigit() else -1
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def run_state(run_dir: str | os.PathLike[str]) -> RunState:
    """Finished, running (a process holds its lock), failed (its last attempt ended with
    ``failed: <reason>`` in ``run.log``) or unfinished (interrupted, killed, or never
    finished), with how far it got, its last checkpoint and whether its last attempt resumed.
    Runs made before ``run.log`` existed are finished or unfinished by their ``DONE`` alone."""
    d = Path(run_dir)
    status = run_status(d)
    events = run_events(d)
    start = max((i for i, (_, e) in enumerate(events) if e.startswith("started")), default=0)
    attempt = events[start:]  # the last fresh start and everything after it (resumed attempts included)
    last_resume = next((i for i in range(len(attempt) - 1, -1, -1) if attempt[i][1].startswith("resumed ")), None)
    resumed = None
    if last_resume is not None:
        resumed = attempt[last_resume][1][len("resumed "):].split(",")[0]
    checkpoint = next((e[len("checkpoint: "):].split(" (")[0] for _, e in reversed(attempt)
                       if e.startswith("checkpoint: ")), None)
    num = next((int(m.group(1)) for _, e in attempt if (m := re.match(r"started \((\d+) rounds\)", e))),
               status.num_rounds)
    pid = lock_holder(d)
    if status.finished:
        return RunState(d, "finished", status.last_round, num, "", resumed, None, None)
    if pid is not None and pid != os.getpid():
        return RunState(d, "running", status.last_round, num, "", resumed, checkpoint, pid)
    last = attempt[-1][1] if attempt else ""
    if last.startswith("failed: "):
        return RunState(d, "failed", status.last_round, num, last[len("failed: "):], resumed, checkpoint, None)
    return RunState(d, "unfinished", status.last_round, num, status.why if not attempt else "", resumed, checkpoint,
                    None)


def find_run_dirs(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """``paths`` as run directories: a path holding ``config.json`` or ``run.log`` is one, any
    other folder stands for the run directories directly inside it (sorted). Raises
    FileNotFoundError naming a path that is neither."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / CONFIG_FILE).exists() or (p / RUN_LOG).exists():
            out.append(p)
            continue
        inside = sorted(c for c in p.iterdir() if (c / CONFIG_FILE).exists() or (c / RUN_LOG).exists()) \
            if p.is_dir() else []
        if not inside:
            raise FileNotFoundError(f"{p}: neither a run directory (config.json, run.log) nor a folder of run "
                                    "directories")
        out += inside
    return out
