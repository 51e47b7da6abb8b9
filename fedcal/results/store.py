"""The run store's writer: one run directory, one writer at a time (:class:`RunStore`), its
checkpoints, resumption and finish."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import fcntl
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from fedcal.config import RunConfig
from fedcal.provenance import provenance
from fedcal.results.files import (CHECKPOINT_FILE, CHECKPOINT_FORMAT, CHECKPOINTED_FILES, COLUMNS, CONFIG_FILE,
                                  DONE_FILE, LOCK_FILE, METRICS_FILE, MODEL_FILE, RUN_LOG, RunLocked, TIMINGS_FILE,
                                  TIMING_COLUMNS, atomic_write, failure_reason, log)
from fedcal.results.identity import check_run_dir, config_hash

if TYPE_CHECKING:
    import pandas as pd


@dataclasses.dataclass
class Checkpoint:
    """What :meth:`RunStore.session` hands a task resuming a run: the last round the checkpoint
    covers and the task's state as the task saved it (:meth:`RunStore.save_checkpoint`)."""

    round: int
    state: dict[str, Any]


class UnusableCheckpoint(ValueError):
    """A checkpoint that cannot be resumed from (the message says why, one line): the run starts
    over instead (:meth:`RunStore.session`, :meth:`RunStore.resumable`)."""


def _remove(path: Path) -> None:
    """Remove a file of the run (a directory in its place too: it can only be debris)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _checked(saved: Any, config_hash: str, rounds: int | None) -> tuple[int, dict[str, dict[str, Any]], dict]:
    """(round, files, state) of a loaded checkpoint, every field checked against the run (its
    config hash and ``rounds``) and the store's file names; :class:`UnusableCheckpoint` saying
    what is wrong otherwise. A checkpoint is untrusted input: it may have been edited or crafted."""
    if not isinstance(saved, dict):
        raise UnusableCheckpoint(f"it holds a {type(saved).__name__}, not a checkpoint")
    missing = [k for k in ("format", "config_hash", "round", "files", "state") if k not in saved]
    if missing:
        raise UnusableCheckpoint(f"it lacks {', '.join(missing)}")
    if saved["format"] != CHECKPOINT_FORMAT or saved["config_hash"] != config_hash:
        raise UnusableCheckpoint("written for another config or by another checkpoint format")
    round_, files, state = saved["round"], saved["files"], saved["state"]
    if type(round_) is not int or round_ < 0 or (rounds is not None and round_ >= rounds):
        last = "" if rounds is None else rounds - 1
        raise UnusableCheckpoint(f"its round {round_!r} is not one of the run's rounds 0-{last}")
    if not isinstance(files, dict) or not isinstance(state, dict):
        raise UnusableCheckpoint("its files or state is not a dict")
    for name, info in files.items():
        if name not in CHECKPOINTED_FILES:
            raise UnusableCheckpoint(f"it names a file {str(name)[:80]!r} that is not one of the run's "
                                     f"({', '.join(sorted(CHECKPOINTED_FILES))})")
        kind = info.get("kind") if isinstance(info, dict) else None
        if kind == "append":
            if type(info.get("size")) is not int or info["size"] < 0:
                raise UnusableCheckpoint(f"its size of {name} is {info.get('size')!r}, not a byte count")
        elif kind == "table":
            if not isinstance(info.get("data"), bytes):
                raise UnusableCheckpoint(f"its content of {name} is not bytes")
        else:
            raise UnusableCheckpoint(f"its entry of {name} is neither an appended file nor a table")
    if files.get(METRICS_FILE, {}).get("kind") != "append":
        raise UnusableCheckpoint(f"it does not record {METRICS_FILE}")
    return round_, files, state


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
        self._files: dict[str, str] = {}  # the run's files written so far: name → "append" or "table"
        self._rounds: int | None = None  # the rounds of the session's run (None: not given)
        self._pending_resume: tuple[str, str] | None = None  # "resumed …" not said yet (_announce_resume)
        self._tracker: Any = None  # the run-config key `tracker`'s view of the run (fedcal.tracking)

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
        """Give up the lock (a no-op when not held) and close the run's tracker."""
        self._close_tracker()
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
        for name in (*sorted(CHECKPOINTED_FILES), DONE_FILE, CONFIG_FILE, MODEL_FILE, CHECKPOINT_FILE):
            _remove(self.dir / name)
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.dir / CONFIG_FILE, json.dumps(
            {"run_id": self.run_id, "config_hash": self.config_hash, "config": self.cfg.to_flower(),
             "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "provenance": provenance()}, indent=2))
        with open(self.dir / METRICS_FILE, "w", newline="") as f:
            csv.writer(f).writerow(COLUMNS)
        self._files = {METRICS_FILE: "append"}
        self.resumed_from = self._pending_resume = None
        self.log_event("started" + (f" ({rounds} rounds)" if rounds is not None else "")
                       + f", pid {os.getpid()}")
        self._open_tracker()

    @contextlib.contextmanager
    def session(self, *, rounds: int | None = None, resume: bool = True) -> Iterator[Checkpoint | None]:
        """The life of one attempt of the run: take the lock, resume from the checkpoint when there
        is a usable one (``resume``) — yielding it — or start fresh (:meth:`start`, yielding None);
        an exception that ends the attempt (a crash, Ctrl-C, SIGTERM turned into an exception)
        is logged as ``failed: <reason>`` in ``run.log`` before it propagates; the lock is
        released at the end either way. The task calls :meth:`finish` inside it.

        A checkpoint is untrusted input: one whose fields do not fit the run — a round outside
        ``0 .. rounds - 1``, a file that is not one of the run's (:data:`CHECKPOINTED_FILES`), a
        missing or mistyped entry, a file cut shorter than it recorded — is not resumed from (one
        warning, the run starts over). The task checks its own state with :meth:`resumable`."""
        self.check()
        self.acquire()
        self._rounds = rounds
        try:
            checkpoint = self._restore(rounds) if resume else None
            if checkpoint is None:
                self.start(rounds)
            yield checkpoint
            self._announce_resume()
        except BaseException as exc:
            self._announce_resume()
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
        self._announce_resume()
        with open(self.dir / METRICS_FILE, "a", newline="") as f:
            w = csv.writer(f)
            for name, value in metrics.items():
                w.writerow((self.run_id, server_round, name, repr(float(value)), self.config_hash))
            f.flush()
            os.fsync(f.fileno())
        self._files[METRICS_FILE] = "append"
        self._tracked(f"round {server_round}", lambda t: t.log_metrics(server_round, metrics))

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
        self._announce_resume()
        atomic_write(self.dir / DONE_FILE, self.config_hash)
        self.log_event("finished")
        _remove(self.dir / CHECKPOINT_FILE)
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
            if name not in CHECKPOINTED_FILES:  # a resume would refuse it: the task's table must be listed there
                raise ValueError(f"{name} is not among the files a checkpoint records (CHECKPOINTED_FILES)")
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

    def resumable(self, checkpoint: Checkpoint | None, check: Callable[[Checkpoint], None]) -> Checkpoint | None:
        """``checkpoint`` if the task's ``check`` of its state passes, else None, the run started
        over (one warning naming why, as for a checkpoint the store itself cannot use). ``check``
        raises (any exception: a missing key, a tensor of the wrong shape or not finite, a random
        state that does not restore, a rule state the strategy refuses) and changes nothing; the
        task calls this once, after building what the check compares against and before using
        the state. Where there is no checkpoint, None."""
        if checkpoint is None:
            return None
        try:
            check(checkpoint)
        except Exception as exc:  # noqa: BLE001 — any unusable state means starting over, said once
            self._pending_resume = None
            self._unusable(exc)
            self.start(self._rounds)
            return None
        self._announce_resume()
        return checkpoint

    def _unusable(self, exc: Exception) -> None:
        why = " ".join(str(exc).split()) or type(exc).__name__
        why = why if len(why) <= 300 else why[:297] + "..."
        log.warning("%s: cannot resume from its checkpoint (%s); starting the run over", self.dir, why)
        self.log_event(f"checkpoint unusable ({why}); starting over")

    def _restore(self, rounds: int | None = None) -> Checkpoint | None:
        """The checkpoint to resume from, with the run's files put back as they were when it was
        written; None (after one warning line saying why, when there was a checkpoint) when the
        run must start over: no checkpoint, an unreadable or foreign one, one whose fields do not
        fit the run (:func:`_checked`: its round among ``rounds``, its files among the run's), or a
        file cut shorter than the checkpoint recorded."""
        from fedcal.checkpoint import load

        path = self.dir / CHECKPOINT_FILE
        if not path.exists() and not path.is_symlink():
            return None
        try:
            if not path.is_file() or path.is_symlink():
                raise UnusableCheckpoint(f"{CHECKPOINT_FILE} is not a regular file")
            saved = load(path)
            round_, files, state = _checked(saved, self.config_hash, rounds)
            if not (self.dir / CONFIG_FILE).is_file():
                raise UnusableCheckpoint(f"no {CONFIG_FILE}")
            for name, info in files.items():
                target = self.dir / name
                if target.is_symlink() or (target.exists() and not target.is_file()):
                    raise UnusableCheckpoint(f"{name} is not a regular file")
                if info["kind"] == "append" and (not target.exists() or target.stat().st_size < info["size"]):
                    raise UnusableCheckpoint(f"{name} is shorter than at the checkpoint")
        except Exception as exc:  # noqa: BLE001 — any unusable checkpoint means starting over, said once
            self._unusable(exc)
            return None
        for name, info in files.items():
            if info["kind"] == "append":
                os.truncate(self.dir / name, info["size"])
            else:
                tmp = self.dir / (name + ".tmp")
                tmp.write_bytes(info["data"])
                os.replace(tmp, self.dir / name)
        for name in (*sorted(CHECKPOINTED_FILES), MODEL_FILE, DONE_FILE):
            if name not in files:  # written after the checkpoint by the attempt that stopped
                _remove(self.dir / name)
        self._files = {name: info["kind"] for name, info in files.items()}
        self.resumed_from = round_
        code, then = provenance()["code"], saved.get("code")
        other = f"; the earlier rounds were made by code {then}, these by {code}" if then and then != code else ""
        # said once the task has taken the state (resumable), or its first round is logged: a state the
        # task then refuses is one warning (starting over), not "resumed" and then that
        self._pending_resume = (f"from round {round_}", other)
        self._open_tracker()
        return Checkpoint(round_, state)

    def _announce_resume(self) -> None:
        pending, self._pending_resume = self._pending_resume, None
        if pending is not None:
            self.resumed(*pending)

    # ------------------------------------------------------------------ tracker (fedcal.tracking)
    def _open_tracker(self) -> None:
        """Open the run's tracker (run-config key ``tracker``) and give it the run config. A
        missing tracker package fails here, at the run's start, with one line naming it."""
        from fedcal.tracking import open_tracker

        self._close_tracker()
        self._tracker = open_tracker(getattr(self.cfg, "tracker", "none"), self.dir, self.run_id,
                                     resumed_from=self.resumed_from)
        if self._tracker is not None:
            self._tracked("config", lambda t: t.log_config({"run-id": self.run_id, "config-hash": self.config_hash,
                                                            **self.cfg.to_flower()}))

    def _tracked(self, what: str, call: Callable[[Any], None]) -> None:
        """Call the tracker; a tracker that fails (a full disk, a store it cannot write) is
        dropped with one logged line, never the run: metrics.csv is the record, the tracker a view."""
        if self._tracker is None:
            return
        try:
            call(self._tracker)
        except Exception as exc:  # noqa: BLE001 - any tracker error; the run goes on without it
            log.warning("%s: tracker %s failed on the %s (%s); the run goes on without it", self.dir,
                        type(self._tracker).__name__, what, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            tracker, self._tracker = self._tracker, None
            with contextlib.suppress(Exception):
                tracker.close()

    def _close_tracker(self) -> None:
        tracker, self._tracker = getattr(self, "_tracker", None), None
        if tracker is not None:
            with contextlib.suppress(Exception):  # closing only flushes; the run's outcome is already decided
                tracker.close()

    def resumed(self, what: str, note: str = "") -> None:
        """Say in ``run.log`` and on the console (a line of information, above the progress bars:
        :func:`fedcal.progress.notice`) that this attempt resumed, and from where (``what``: ``from
        round 40``, ``after the clients' collection``)."""
        from fedcal.progress import notice

        self.log_event(f"resumed {what}, pid {os.getpid()}{note}")
        notice(f"{self.dir}: resumed {what} (--restart starts over){note}", log)
