"""The files of a run directory, the run store's errors, and atomic writes."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from fedcal.config import ConfigError
from fedcal.signals import Terminated


METRICS_FILE = "metrics.csv"


MODEL_FILE = "model.pt"


CONFIG_FILE = "config.json"


DONE_FILE = "DONE"


AUDIT_FILE = "aggregation.csv"  # per round and accepted node: its weight and the rule's audit (train task)


REJECTIONS_FILE = "rejections.csv"  # every reply a strategy rejected (written by the train task)


POISONING_FILE = "poisoning.csv"  # every attacker reply of a model-poisoning run, crafted or not (train task)


TIMINGS_FILE = "timings.csv"  # wall-clock seconds per round, out of metrics.csv (not a result)


RELIABILITY_FILE = "reliability.csv"  # the final model's reliability bins (train, lm, detect)


#: every file a run's checkpoint may record — the store's own and the tables the checkpointed tasks
#: write through it (lm: generations.csv; detect: kept.csv, example.csv; train: the federated calibration's
#: per-client table and reliability diagram, the bootstrap intervals) —, each a plain name inside
#: the run directory. The store saves no checkpoint recording another name and resumes from none
#: that names one (a crafted checkpoint must not write or truncate files elsewhere).
CHECKPOINTED_FILES = frozenset({METRICS_FILE, RELIABILITY_FILE, REJECTIONS_FILE, AUDIT_FILE, POISONING_FILE,
                                TIMINGS_FILE, "generations.csv", "kept.csv", "example.csv", "federated_calibration.csv",
                                "federated_reliability.csv", "calibration_intervals.csv"})


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
