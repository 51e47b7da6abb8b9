"""Reading the run store: whether a run finished and how far it got, its metrics, timings, model
and provenance, and what happened to it (``fedcal runs``)."""

from __future__ import annotations

import fcntl
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Sequence

from fedcal.config import RunConfig, get_task
from fedcal.provenance import provenance
from fedcal.results.files import (CHECKPOINT_FILE, CODE, COLUMNS, CONFIG_FILE, DONE_FILE, FINISHED, LOCK_FILE,
                                  METRICS_FILE, MODEL_FILE, RUN_LOG, TIMINGS_FILE, TIMING_COLUMNS, UNRECORDED,
                                  UnfinishedRunError, log)
from fedcal.results.identity import load_config, load_run_config, stored_identity

if TYPE_CHECKING:
    import pandas as pd


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


def _done_state(run_dir: Path) -> tuple[RunConfig | None, str]:
    """(stored config or None, why the run is unfinished — "" when it is finished)."""
    try:
        cfg, want = stored_identity(run_dir)
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
    schedule = get_task(cfg.task).schedule if cfg is not None else None
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


_EVENT = re.compile(r"^(\S+) (.*)$")


class RunState(NamedTuple):
    """What ``fedcal runs`` says about a run directory (:func:`run_state`)."""

    run_dir: Path
    status: str  # one of "finished", "damaged" (DONE, but its files are not whole), "unfinished", "interrupted",
    #: "failed", "running"
    last_round: int | None  # the last round logged in metrics.csv
    num_rounds: int | None  # the rounds the run was started for (None: no round structure, or unknown)
    reason: str  # failed / interrupted: the reason from run.log; unfinished / damaged: why it is not finished
    resumed_from: str | None  # the last attempt's "resumed from round N" / "resumed after …" (None: not resumed)
    checkpoint: str | None  # the last checkpoint of the last attempt, e.g. "round 40" (None: none)
    pid: int | None  # running: the writer's pid
    #: interrupted: the round a re-run resumes from (its checkpoint.pt is there), None: it starts over
    resumable_from: int | None = None

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
        elif self.status == "interrupted":
            how = self.reason.removeprefix("interrupted (").removesuffix(")") if self.reason.startswith(
                "interrupted (") else self.reason
            detail = [how, rounds, None if self.resumable_from is not None else
                      "no checkpoint: a re-run starts from round 0", resumed]
            detail = [d for d in detail if d]
            head = f"{self.run_dir}: interrupted"
            if self.resumable_from is not None:
                head += f", resumable from round {self.resumable_from}"
            return head + (f" ({'; '.join(detail)})" if detail else "")
        elif self.status == "damaged":
            detail = [f"DONE, but {self.reason}", "no report reads it; --force re-runs it"]
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


#: how :func:`fedcal.results.files.failure_reason` begins the reason of an attempt a signal stopped
STOPPED_BY_SIGNAL = ("interrupted (", "terminated (")


def _checkpoint_round(run_dir: Path, checkpoint: str | None) -> int | None:
    """The round the last attempt's checkpoint (``round 40`` in run.log) resumes from, when its
    ``checkpoint.pt`` is on disk; else None (a re-run starts over)."""
    found = re.fullmatch(r"round (\d+)", checkpoint or "")
    if found is None or not (run_dir / CHECKPOINT_FILE).exists():
        return None
    return int(found.group(1))


def run_state(run_dir: str | os.PathLike[str]) -> RunState:
    """Finished, damaged (a ``DONE`` run whose files are not whole, e.g. a torn ``metrics.csv``:
    finished for no reader, the same check as the reports', :func:`fedcal.results.checks.check_run`),
    running (a process holds its lock), interrupted (its last attempt was stopped by
    Ctrl-C, SIGINT or SIGTERM: resumable from its checkpoint's round when ``checkpoint.pt`` is
    there), failed (its last attempt ended with another ``failed: <reason>`` in ``run.log``) or
    unfinished (killed without a word, or never
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
        from fedcal.results.checks import damage  # the reports' check: one notion of finished

        why = damage(d)[1]
        if why:  # DONE, but what it left is not whole: no reader reports it
            return RunState(d, "damaged", status.last_round, num, why, resumed, None, None)
        return RunState(d, "finished", status.last_round, num, "", resumed, None, None)
    if pid is not None and pid != os.getpid():
        return RunState(d, "running", status.last_round, num, "", resumed, checkpoint, pid)
    last = attempt[-1][1] if attempt else ""
    if last.startswith("failed: "):
        reason = last[len("failed: "):]
        if reason.startswith(STOPPED_BY_SIGNAL):  # Ctrl-C / SIGINT / SIGTERM: stopped, not broken
            return RunState(d, "interrupted", status.last_round, num, reason, resumed, checkpoint, None,
                            _checkpoint_round(d, checkpoint))
        return RunState(d, "failed", status.last_round, num, reason, resumed, checkpoint, None)
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
