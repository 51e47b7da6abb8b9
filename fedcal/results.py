"""Run identity and the run store: which directory a config's results live in, and what is in it.

Run identity (:func:`config_hash`, :func:`collection_hash`, :func:`default_run_name`,
:func:`run_dir_for`): a run is named after the keys that change what it computes, so a finished
run is recognised (and skipped) whichever machine or folder produced it. Committed results are
identified by these names: the hashes below must never change for an existing task.

A run directory holds

* ``config.json`` — the resolved run config and its hash;
* ``metrics.csv`` — tidy rows ``run_id, round, metric, value, config_hash``, appended and
  flushed after every round, so an interrupted run keeps every finished round;
* ``reliability.csv`` — reliability-diagram bins of the final global model;
* ``model.pt`` — the final global model's state dict (for post-hoc calibration, triage, CKA);
* ``DONE`` — written last; a run with a ``DONE`` matching its config hash is finished.

Tables and plots are built from these files only (:func:`load_metrics`; the final metrics of runs:
:func:`fedcal.reports.final_metrics`).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from fedcal.config import TASK_GROUPS, RunConfig, fields_of, setting_of

METRICS_FILE = "metrics.csv"
MODEL_FILE = "model.pt"
COLUMNS = ("run_id", "round", "metric", "value", "config_hash")


class RunStore:
    """Append-only store of one run's per-round results."""

    def __init__(self, run_dir: str | os.PathLike[str], cfg: RunConfig):
        self.dir = Path(run_dir)
        self.cfg = cfg
        self.run_id = self.dir.name
        self.config_hash = config_hash(cfg)

    # ------------------------------------------------------------------ lifecycle
    def is_done(self) -> bool:
        done = self.dir / "DONE"
        return done.exists() and done.read_text().strip() == self.config_hash

    def start(self) -> None:
        """Begin a fresh run: clear partial results of an earlier attempt, write config."""
        if self.dir.exists():
            for name in (METRICS_FILE, "reliability.csv", "DONE", "config.json", MODEL_FILE):
                (self.dir / name).unlink(missing_ok=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(self.dir / "config.json", json.dumps(
            {"run_id": self.run_id, "config_hash": self.config_hash, "config": self.cfg.to_flower(),
             "started": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=2))
        with open(self.dir / METRICS_FILE, "w", newline="") as f:
            csv.writer(f).writerow(COLUMNS)

    def log_round(self, server_round: int, metrics: Mapping[str, float]) -> None:
        """Append one round's metrics and flush them to disk."""
        with open(self.dir / METRICS_FILE, "a", newline="") as f:
            w = csv.writer(f)
            for name, value in metrics.items():
                w.writerow((self.run_id, server_round, name, repr(float(value)), self.config_hash))
            f.flush()
            os.fsync(f.fileno())

    def write_table(self, name: str, frame: pd.DataFrame) -> Path:
        path = self.dir / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        frame.to_csv(tmp, index=False)
        os.replace(tmp, path)
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
        _atomic_write(self.dir / "DONE", self.config_hash)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------- run identity
# Keys that describe where and how a run executes, not what it computes (the "execution" group
# and the fields declared hashed=False): left out of every hash, so the same experiment on CPU or
# GPU, or in another output folder, is recognised as the same.
_NON_SEMANTIC = frozenset(f.name for f in dataclasses.fields(RunConfig) if not setting_of(f.name).hashed)
# What the clients' probits of an inference run depend on (their local training and the queries):
# runs that differ only in aggregator or attack settings reuse each other's probits. A subset of
# groups, so named one by one.
_COLLECTION_KEYS = ("dataset", "model", "num_clients", "dirichlet_alpha", "lr", "momentum", "weight_decay",
                    "batch_size", "seed", "inf_server_frac", "inf_local_epochs", "inf_test_queries")


def hashed_keys(task: str) -> frozenset[str]:
    """Field names whose values make up the hash of a run of ``task``.

    * ``train``: the common, train and defense groups, without ``task`` — exactly the keys hashed
      before the inference task (and the task key) existed, so old run directories keep their names.
    * ``inference``: the common, train, defense and inference groups with ``task``. Inference reads
      few train/defense keys, but its hashes have always covered them; dropping them now would
      rename every committed inference run directory and orphan its probit cache.
    * any later task: the common group (``task`` included) and the task's own groups
      (:data:`fedcal.config.TASK_GROUPS`), so adding a task or a group never changes another
      task's hashes.
    """
    if task == "train":
        groups: tuple[str, ...] = ("common", "train", "defense")
    elif task == "inference":
        groups = ("common", "train", "defense", "inference")
    else:
        groups = ("common", *TASK_GROUPS[task])
    keys = frozenset(fields_of(*groups)) - _NON_SEMANTIC
    return keys - {"task"} if task == "train" else keys


def config_hash(cfg: RunConfig) -> str:
    """Stable 12-hex hash of the keys that change what a run computes (not where it runs)."""
    keys = hashed_keys(cfg.task)
    semantic = {k: v for k, v in dataclasses.asdict(cfg).items() if k in keys}
    blob = json.dumps(semantic, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def collection_hash(cfg: RunConfig) -> str:
    """Hash of what an inference run's collected client probits depend on."""
    blob = json.dumps({k: getattr(cfg, k) for k in _COLLECTION_KEYS}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def default_run_name(cfg: RunConfig) -> str:
    """Readable, unique-per-config directory name."""
    if cfg.task == "inference":
        return (f"{cfg.dataset}-{cfg.model}-inference-n{cfg.num_clients}-f{cfg.inf_f}-s{cfg.seed}-"
                f"{config_hash(cfg)[:8]}")
    if cfg.task == "train":
        what = cfg.attack if cfg.attack != "tsa" else f"tsa{cfg.tau:g}" + ("" if cfg.coupled else "u")
        return f"{cfg.dataset}-{cfg.model}-{cfg.strategy}-{what}-s{cfg.seed}-{config_hash(cfg)[:8]}"
    return f"{cfg.dataset}-{cfg.model}-{cfg.task}-s{cfg.seed}-{config_hash(cfg)[:8]}"  # a later task's default


def run_dir_for(cfg: RunConfig) -> Path:
    """``<output-dir>/<run-name or default run name>``."""
    return Path(cfg.output_dir) / (cfg.run_name or default_run_name(cfg))


def load_run_config(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "config.json").read_text())


def load_config(run_dir: str | os.PathLike[str]) -> RunConfig:
    """The validated run config a run directory was produced with."""
    return RunConfig.from_flower(load_run_config(run_dir)["config"])


def load_metrics(run_dirs: list[str | os.PathLike[str]] | str | os.PathLike[str]) -> pd.DataFrame:
    """Tidy per-round metrics of one or many runs, with their config columns joined."""
    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    frames = []
    for d in run_dirs:
        path = Path(d) / METRICS_FILE
        if not path.exists():
            continue
        df = pd.read_csv(path)
        cfg = load_run_config(d)["config"]
        for k, v in cfg.items():
            df[k] = v
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=list(COLUMNS))
    return pd.concat(frames, ignore_index=True)


def load_model(run_dir: str | os.PathLike[str]):
    """(RunConfig, model with the run's final global weights, dataset) of a finished run."""
    import torch

    from fedcal.data import load_dataset
    from fedcal.models import build_model

    cfg = load_config(run_dir)
    path = Path(run_dir) / MODEL_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: the run is unfinished or predates model saving")
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    model = build_model(cfg.model, ds.input_shape, ds.num_classes)
    model.load_state_dict(torch.load(path, weights_only=True))
    return cfg, model, ds
