"""Server-side replays of RFD-LoRA: the ablation without re-training a single client.

Under RFD-LoRA the server sends the clients nothing but the run config: each client trains its own
adapter on its own data and uploads its anchor logits, whatever the server does with them. The
server's rules — the consensus (``dst-aggregator``, ``dst-groups``), the loss switches (``dst-cat``,
``dst-mmd``, ``dst-dis``) and their parameters, fedcal's label-prior correction (``dst-prior-correct``, ``dst-prior-target``),
the student (``dst-student-rank``, ``dst-distill-*``)
— therefore change the student and nothing the clients upload. So a run records every round's
valid uploads (:class:`UploadLog`, ``uploads.npz`` in its directory), and :func:`replay` re-runs
only the server on those uploads for any other setting of :data:`SERVER_KEYS`, through the same
:func:`fedcal.distill.run_data.server_round` the live server calls — the result is the run that
setting would have produced (a test replays a run with its own config and gets its metrics back).

A replayed run is an ordinary run directory of its own config (``config.json``, ``metrics.csv``
with the server's metrics and CA / RA / ASR, ``model.pt``, ``DONE``) plus ``replay.json`` naming
the run it was replayed from; the clients' per-round metrics (replies, upload bytes) belong to the
source run and are not repeated. ``fedcal distill --replay`` uses it for the ablation grid.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

from fedcal.config import RunConfig

from .methods import lora_method

__all__ = ["SERVER_KEYS", "UPLOADS_FILE", "REPLAY_FILE", "UploadLog", "load_uploads", "client_side",
           "source_index", "find_source", "replay"]

UPLOADS_FILE = "uploads.npz"
REPLAY_FILE = "replay.json"
#: The run-config fields only RFD-LoRA's server reads: a replay may change these and nothing else.
SERVER_KEYS = ("dst_aggregator", "dst_groups", "dst_cat", "dst_mmd", "dst_dis", "dst_t0", "dst_kappa", "dst_tau",
               "dst_lambda", "dst_rho", "dst_student_rank", "dst_distill_steps", "dst_distill_lr",
               "dst_distill_batch", "dst_min_replies", "dst_eval_every", "dst_prior_correct",
               "dst_prior_target")


class UploadLog:
    """The valid uploads of each round of a live run, written to ``<run_dir>/uploads.npz`` once,
    by :meth:`save` before the run is marked finished (only finished runs are replayed):
    ``r<k>`` holds round k's (clients × anchors × classes) float32 logits, ``r<k>_clients`` the
    partition ids they came from. Starting one removes what an earlier attempt of the run left
    (its uploads, a replay's provenance), so a live run never carries either."""

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.path = Path(run_dir) / UPLOADS_FILE
        self.path.unlink(missing_ok=True)
        (self.path.parent / REPLAY_FILE).unlink(missing_ok=True)
        self.arrays: dict[str, np.ndarray] = {}

    def add(self, server_round: int, clients: list[int], uploads: list[torch.Tensor]) -> None:
        if uploads:
            self.arrays[f"r{server_round}"] = torch.stack([u.float().cpu() for u in uploads]).numpy()
        else:
            self.arrays[f"r{server_round}"] = np.zeros((0, 0, 0), np.float32)
        self.arrays[f"r{server_round}_clients"] = np.asarray(clients, np.int64)

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp.npz")
        np.savez(tmp, **self.arrays)
        os.replace(tmp, self.path)


def load_uploads(run_dir: str | os.PathLike[str]) -> dict[int, list[torch.Tensor]]:
    """``{round: [one (anchors × classes) tensor per valid upload]}`` of a run's ``uploads.npz``."""
    path = Path(run_dir) / UPLOADS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: no recorded uploads (only RFD-LoRA runs record them)")
    with np.load(path) as z:
        rounds = sorted(int(k[1:]) for k in z.files if not k.endswith("_clients"))
        return {r: [torch.from_numpy(np.array(a)) for a in z[f"r{r}"]] for r in rounds}


def client_side(cfg: RunConfig) -> RunConfig:
    """``cfg`` with every :data:`SERVER_KEYS` field at its default: two RFD-LoRA configs whose
    client sides are equal get the same uploads."""
    default = RunConfig()
    return cfg.replace(**{k: getattr(default, k) for k in SERVER_KEYS})


def source_index(candidates) -> dict[str, Path]:
    """``{hash of the client side: run directory}`` of the finished RFD-LoRA runs with recorded
    uploads among ``candidates`` (the first one of each client side), each read once."""
    from fedcal.results import config_hash, is_finished, load_config

    index: dict[str, Path] = {}
    for run_dir in map(Path, candidates):
        if not (run_dir / UPLOADS_FILE).exists() or not is_finished(run_dir):
            continue
        src = load_config(run_dir)
        if src.task == "distill" and lora_method(src.dst_method).uploads_logits:
            index.setdefault(config_hash(client_side(src)), run_dir)
    return index


def find_source(cfg: RunConfig, candidates) -> Path | None:
    """The first finished RFD-LoRA run among ``candidates`` (run directories) with recorded
    uploads and ``cfg``'s client side, else None."""
    from fedcal.results import config_hash

    return source_index(candidates).get(config_hash(client_side(cfg)))


def replay(source_dir: str | os.PathLike[str], cfg: RunConfig, device: str = "cpu") -> Path:
    """Re-run RFD-LoRA's server of ``cfg`` on the uploads recorded by the finished run in
    ``source_dir`` (same client side: ValueError otherwise) and store the result as ``cfg``'s run
    directory (:func:`fedcal.results.run_dir_for`); returns it."""
    from fedcal.results import RunFailed, RunStore, config_hash, hashed_keys, is_finished, load_config, run_dir_for

    from .clients import adapter_state
    from .run_data import (DistillRunSpec, base_classifier, distill_data, evaluate_backdoor, is_eval_round,
                           is_finite_evaluation, server_round, student_and_optimizer)

    source_dir = Path(source_dir)
    if not is_finished(source_dir):
        raise ValueError(f"{source_dir}: not a finished run (no DONE matching its config)")
    src = load_config(source_dir)
    if cfg.task != "distill" or not lora_method(cfg.dst_method).uploads_logits:
        raise ValueError("only RFD-LoRA runs (task=distill, dst-method=rfd) can be replayed")
    if config_hash(client_side(src)) != config_hash(client_side(cfg)):
        semantic = hashed_keys("distill") - set(SERVER_KEYS)
        differ = sorted(k.replace("_", "-") for k in semantic if getattr(src, k) != getattr(cfg, k))
        raise ValueError(f"{source_dir.name}: differs from the replayed config in client-side keys {differ}; "
                         f"only {', '.join(k.replace('_', '-') for k in SERVER_KEYS)} may change")
    uploads = load_uploads(source_dir)
    spec = DistillRunSpec.from_config(cfg)
    data = distill_data(spec)
    base = base_classifier(data.backbone, data.num_classes, device, data.lora_layers)
    model, optimizer = student_and_optimizer(base, spec)
    store = RunStore(run_dir_for(cfg), cfg)
    with store.session(rounds=cfg.dst_rounds, resume=False):  # a replay is cheap: it starts over, never resumes
        (store.dir / UPLOADS_FILE).unlink(missing_ok=True)  # an earlier live attempt's: not this run's
        evaluate = lambda: evaluate_backdoor(model, data, cfg.eval_batch_size)  # noqa: E731
        store.log_round(0, evaluate())
        for rnd in range(1, cfg.dst_rounds + 1):
            if rnd not in uploads:
                raise ValueError(f"{source_dir.name}: no uploads recorded for round {rnd}")
            step = server_round(model, optimizer, uploads[rnd], data, spec, rnd)
            metrics = {"round_kept": int(step is None), **(step or {})}
            if is_eval_round(spec, rnd):
                metrics.update(evaluate())
            store.log_round(rnd, metrics)
        if not is_finite_evaluation(metrics):  # the live run's rule: a NaN model is no result
            raise RunFailed(f"run {store.dir.name}: the final model's logits are not finite (CA, RA and ASR are NaN "
                            "in metrics.csv); the run is not marked DONE")
        (store.dir / REPLAY_FILE).write_text(json.dumps({"replayed_from": source_dir.name,
                                                         "source_config_hash": config_hash(src)}, indent=1))
        store.save_model(adapter_state(model))
        store.finish()
    return store.dir
