"""Run store: results as data, written as they are produced.

A run directory holds

* ``config.json`` — the resolved run config and its hash;
* ``metrics.csv`` — tidy rows ``run_id, round, metric, value, config_hash``, appended and
  flushed after every round, so an interrupted run keeps every finished round;
* ``reliability.csv`` — reliability-diagram bins of the final global model;
* ``model.pt`` — the final global model's state dict (for post-hoc calibration, triage, CKA);
* ``DONE`` — written last; a run with a ``DONE`` matching its config hash is finished.

Tables and plots are built from these files only (:func:`load_metrics`, :func:`final_table`).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from fedcal.config import RunConfig

METRICS_FILE = "metrics.csv"
MODEL_FILE = "model.pt"
COLUMNS = ("run_id", "round", "metric", "value", "config_hash")


class RunStore:
    """Append-only store of one run's per-round results."""

    def __init__(self, run_dir: str | os.PathLike[str], cfg: RunConfig):
        self.dir = Path(run_dir)
        self.cfg = cfg
        self.run_id = self.dir.name
        self.config_hash = cfg.config_hash()

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


def run_dir_for(cfg: RunConfig) -> Path:
    """``<output-dir>/<run-name or default run name>``."""
    return Path(cfg.output_dir) / (cfg.run_name or cfg.default_run_name())


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


def final_table(metrics: pd.DataFrame, by: list[str], round_: int | None = None) -> pd.DataFrame:
    """One row per ``by`` group: the metrics of each run's last (or given) round, wide."""
    df = metrics
    if round_ is None:
        last = df.groupby("run_id")["round"].transform("max")
        df = df[df["round"] == last]
    else:
        df = df[df["round"] == round_]
    wide = df.pivot_table(index=["run_id", *by], columns="metric", values="value").reset_index()
    return wide


def remove_run(run_dir: str | os.PathLike[str]) -> None:
    shutil.rmtree(run_dir, ignore_errors=True)


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
