"""Experiment trackers: a run's config and every round's metrics streamed to TensorBoard, MLflow or
Weights & Biases as the run goes (run-config key ``tracker``).

The run store (:class:`fedcal.results.RunStore`) is the one place every task's per-round rows pass
through, from every engine (Ray, in-process, batched), so it is the one caller: it opens a tracker
when a run starts or resumes, hands it each round's metrics right after they are flushed to
``metrics.csv`` and closes it when the run ends. ``metrics.csv`` stays the record the reports read;
a tracker is a view of it for the tools researchers already watch runs in.

Each tracker uses its own library — no file format is written here:

* ``tensorboard``: :class:`torch.utils.tensorboard.SummaryWriter` (needs the ``tensorboard``
  package) writes event files under ``<run dir>/tensorboard``; a resumed run passes
  ``purge_step`` so rounds logged after the checkpoint by the interrupted attempt are dropped
  rather than shown twice;
* ``mlflow``: :class:`mlflow.MlflowClient` on one SQLite store per output folder,
  ``<output-dir>/mlruns.db``, shared by every run written there (a sweep's cells side by side; MLflow 3
  refuses its old file store by default; ``mlflow ui --backend-store-uri sqlite:///<output-dir>/mlruns.db``
  shows it) — or on ``MLFLOW_TRACKING_URI`` when that is set (a team's server) — through an explicit
  client, not ``mlflow.start_run``'s process-global active run: a batched engine or a sweep
  writes several runs from one process); a resumed run continues its MLflow run, a run started
  over replaces its earlier MLflow run; MLflow's deprecation warnings are silenced (they cut
  through the progress bars);
* ``wandb``: :func:`wandb.init` with ``dir=<run dir>`` (offline unless ``WANDB_MODE`` says
  otherwise: the machines fedcal runs on often have no internet), one W&B run per fedcal run.

A tracker's package is an optional extra (``pip install 'fedcal[track]'``): asking for a tracker
whose package is missing fails at the run's start with one line naming it (:func:`check_tracker`).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import contextlib
import math
import shutil
import warnings
from pathlib import Path
from typing import Any, Mapping, Protocol

from fedcal import catalogue
from fedcal.config import ConfigError

#: the package each tracker needs (import name)
PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}
TENSORBOARD_DIR = "tensorboard"  # under the run directory
MLFLOW_DB = "mlruns.db"  # under the output folder, one for all its runs (unless MLFLOW_TRACKING_URI is set)
MLFLOW_ARTIFACTS = "mlartifacts"  # under the output folder: nothing lands in the working directory
MLFLOW_EXPERIMENT = "fedcal"
MLFLOW_RUN_FILE = "mlflow_run_id"  # the run directory's MLflow run, continued on resume

log = logging.getLogger("fedcal.tracking")


class TrackerUnavailable(ConfigError):
    """The tracker's package is not installed. The message names the extra to install."""


class Tracker(Protocol):
    """What the run store calls: the config once, metrics per round, close at the end."""

    def log_config(self, config: Mapping[str, Any]) -> None: ...

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


def check_tracker(name: str) -> None:
    """Raise :class:`TrackerUnavailable` (one line, naming the extra) when ``name``'s package is
    missing; a no-op for ``none``. Called before a run starts, so it fails before any training."""
    if name not in catalogue.names("tracker"):
        raise ConfigError(f"run-config key 'tracker': unknown tracker {name!r}; choose one of "
                          f"{', '.join(catalogue.names('tracker'))}")
    package = PACKAGES.get(name)
    if package is not None and importlib.util.find_spec(package) is None:
        raise TrackerUnavailable(f"run-config key 'tracker': {name} needs the {package!r} package: "
                                 f"pip install 'fedcal[track]' (or pip install {package})")


def open_tracker(name: str, run_dir: str | Path, run_id: str, *, resumed_from: int | None = None) -> Tracker | None:
    """The tracker ``name`` for the run in ``run_dir`` (None for ``none``). A fresh run
    (``resumed_from`` None) starts its tracker's files over; a resumed one continues them after
    round ``resumed_from``."""
    check_tracker(name)
    return catalogue.load("tracker", name)(Path(run_dir), run_id, resumed_from=resumed_from)


def no_tracker(run_dir: Path, run_id: str, *, resumed_from: int | None = None) -> None:
    """``tracker = none``: nothing tracks the run."""
    return None


def _finite(metrics: Mapping[str, float]) -> dict[str, float]:
    """The metrics as floats; a NaN/inf (a diverged model's loss) is kept for TensorBoard, which
    shows it, but MLflow rejects non-finite values, so its tracker filters with this."""
    return {k: float(v) for k, v in metrics.items() if math.isfinite(float(v))}


class TensorBoardTracker:
    """Event files under ``<run dir>/tensorboard``: one scalar series per metric (step = round)
    and the run config as a text summary (a JSON block)."""

    def __init__(self, run_dir: Path, run_id: str = "", *, resumed_from: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        log_dir = run_dir / TENSORBOARD_DIR
        if resumed_from is None:  # a fresh start: the events of an earlier attempt go with its metrics.csv
            shutil.rmtree(log_dir, ignore_errors=True)
        # purge_step: events at rounds > the checkpoint, logged by the attempt that was interrupted,
        # are dropped when read back, so a resumed run's curves equal an uninterrupted run's
        self.writer = SummaryWriter(log_dir=str(log_dir),
                                    purge_step=None if resumed_from is None else resumed_from + 1)

    def log_config(self, config: Mapping[str, Any]) -> None:
        text = "```\n" + json.dumps(dict(config), indent=1, default=str) + "\n```"
        self.writer.add_text("config", text, global_step=0)
        self.writer.flush()

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, float(value), global_step=step)
        self.writer.flush()  # streamed: a run watched in TensorBoard shows each round as it ends

    def close(self) -> None:
        self.writer.close()


class MlflowTracker:
    """One MLflow run (named after the run directory) in ``<output-dir>/mlruns.db`` (or
    ``MLFLOW_TRACKING_URI``): the config as params, each round's metrics as one ``log_batch``
    (step = round)."""

    def __init__(self, run_dir: Path, run_id: str, *, resumed_from: int | None = None):
        import os

        from mlflow import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)  # its "Creating initial MLflow database tables" lines
        logging.getLogger("alembic").setLevel(logging.WARNING)
        id_file = run_dir / MLFLOW_RUN_FILE
        uri = os.environ.get("MLFLOW_TRACKING_URI") or mlflow_uri(run_dir)
        with _quiet_mlflow():
            self.client = MlflowClient(tracking_uri=uri)
            if resumed_from is None and id_file.exists():  # a fresh start: the earlier attempt's MLflow run goes
                with contextlib.suppress(Exception):  # already gone, or in another store
                    self.client.delete_run(id_file.read_text().strip())
                id_file.unlink()
            experiment_id = self._experiment(run_dir.parent / MLFLOW_ARTIFACTS)
            if resumed_from is not None and id_file.exists():
                self.run_id = id_file.read_text().strip()
                self.client.update_run(self.run_id, status="RUNNING")
            else:
                self.run_id = self.client.create_run(experiment_id, run_name=run_id).info.run_id
                id_file.write_text(self.run_id + "\n")
        self._config_logged = resumed_from is not None and id_file.exists()

    def _experiment(self, artifacts: Path) -> str:
        """The id of the ``fedcal`` experiment of the store, created on first use; two runs of one
        output folder creating it at once (parallel sweep cells) end up with the same one."""
        experiment = self.client.get_experiment_by_name(MLFLOW_EXPERIMENT)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return self.client.create_experiment(MLFLOW_EXPERIMENT, artifact_location=artifacts.resolve().as_uri())
        except Exception:  # noqa: BLE001 - created meanwhile by another run of the folder
            experiment = self.client.get_experiment_by_name(MLFLOW_EXPERIMENT)
            if experiment is None:
                raise
            return experiment.experiment_id

    def log_config(self, config: Mapping[str, Any]) -> None:
        if self._config_logged:  # MLflow params are immutable: a resumed run logged them already
            return
        from mlflow.entities import Param

        # MLflow caps a param value's length; the run config's values are short (a few long
        # comma lists at most), cut at 6000 characters, MLflow's limit
        params = [Param(str(k), str(v)[:6000]) for k, v in config.items()]
        with _quiet_mlflow():
            for i in range(0, len(params), 100):  # MLflow's batch limit is 100 params
                self.client.log_batch(self.run_id, params=params[i:i + 100])
        self._config_logged = True

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, v, now, step) for k, v in _finite(metrics).items()]
        with _quiet_mlflow():
            for i in range(0, len(batch), 1000):  # MLflow's batch limit is 1000 metrics
                self.client.log_batch(self.run_id, metrics=batch[i:i + 1000])

    def close(self) -> None:
        with _quiet_mlflow():
            self.client.set_terminated(self.run_id)


def mlflow_uri(run_dir: str | Path) -> str:
    """The tracking URI of the MLflow store a run writes to (``MlflowClient(tracking_uri=...)``):
    ``<output-dir>/mlruns.db``, one store for every run of the output folder (a sweep's cells are
    runs of one experiment, compared side by side in ``mlflow ui``)."""
    return "sqlite:///" + str((Path(run_dir).parent / MLFLOW_DB).resolve())


@contextlib.contextmanager
def _quiet_mlflow():
    """MLflow's and SQLAlchemy's deprecation warnings (SQLAlchemy's ``noload`` one, raised when MLflow
    sets up its store) silenced: printed in the middle of a run they cut through its progress bar,
    and they are MLflow's to fix, not the user's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


class WandbTracker:
    """One W&B run per fedcal run (``id`` = the run directory's name, so a resumed run continues
    it), its files under the run directory."""

    def __init__(self, run_dir: Path, run_id: str, *, resumed_from: int | None = None):
        import os

        import wandb

        os.environ.setdefault("WANDB_MODE", "offline")  # no network unless the user asks for it
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "fedcal"), name=run_id, id=run_id,
                              dir=str(run_dir), resume="allow" if resumed_from is not None else None,
                              reinit="create_new")

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.run.config.update(dict(config), allow_val_change=True)

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log({k: float(v) for k, v in metrics.items()}, step=step)

    def close(self) -> None:
        self.run.finish()
