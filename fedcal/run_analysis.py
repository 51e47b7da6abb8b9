"""A finished run's models at work (flwr-free): what the analyses of :mod:`fedcal.reports.studies`
compute from a run directory — the final model's test logits, the run's global model after any round
(replayed by :func:`fedcal.reference.global_state` where the run stored only its final one), and the
update-cosine curves of the stealth analysis (SPEC §4) on the run's own client shards
(:func:`fedcal.analysis.update_cosine_curves`). The reports read what these return.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import torch

from fedcal.analysis import update_cosine_curves
from fedcal.attacks import BENIGN, AttackSpec, Behaviour, behaviour_for
from fedcal.data import client_data
from fedcal.local_training import predict_logits
from fedcal.metrics import calibration_metrics
from fedcal.results import load_config, load_metrics, load_model


def test_logits(run_dir: str | Path) -> tuple[object, torch.Tensor, torch.Tensor]:
    """(config, logits of the final global model on the test set, labels)."""
    cfg, model, ds = load_model(run_dir)
    return cfg, predict_logits(model, ds.x_test, cfg.eval_batch_size), ds.y_test


test_logits.__test__ = False  # a function of the package, not a pytest test


@functools.lru_cache(maxsize=8)
def _replayed(run_dir: str, server_round: int) -> dict[str, torch.Tensor]:
    """The run's global state after ``server_round`` rounds, recomputed once per process (a CLI call
    measuring several protocols from one round replays it once)."""
    from fedcal.reference import ReferenceSpec, global_state

    return global_state(ReferenceSpec.from_config(load_config(run_dir)), server_round)


def model_at_round(run_dir: str | Path, start_round: int | None):
    """(cfg, model, dataset, round, accuracy the run logged at that round or NaN) — the run's global
    model after ``start_round`` rounds: None or num-rounds = its final model (model.pt), otherwise
    recomputed by :func:`fedcal.reference.global_state` (0 = the initial model)."""
    cfg, model, ds = load_model(run_dir)
    rnd = cfg.num_rounds if start_round is None else int(start_round)
    if not 0 <= rnd <= cfg.num_rounds:
        raise ValueError(f"start round must lie in [0, num-rounds = {cfg.num_rounds}] of {run_dir}, got {rnd}")
    if rnd != cfg.num_rounds:
        model.load_state_dict(_replayed(str(Path(run_dir).resolve()), rnd))
    logged = load_metrics([run_dir])
    logged = logged[(logged["metric"] == "accuracy") & (logged["round"] == rnd)]["value"]
    return cfg, model, ds, rnd, float(logged.iloc[0]) if len(logged) else float("nan")


def _benign_others(run_dir, cfg, client_id: int, others: int) -> list[int]:
    """The next ``others`` benign client ids after ``client_id`` (cyclically)."""
    if others < 1:
        raise ValueError(f"others must be >= 1, got {others}")
    ids = [j % cfg.num_clients for j in range(client_id + 1, client_id + cfg.num_clients)]
    ids = [j for j in ids if not behaviour_for(AttackSpec.from_config(cfg), j).malicious][:others]
    if len(ids) < others:
        raise ValueError(f"{run_dir} has {len(ids)} benign clients besides client {client_id}, fewer than "
                         f"others = {others}")
    return ids


def stealth_curves(run_dir: str | Path, variants: Mapping[str, Behaviour], *, client_id: int, steps: int, seed: int,
                   start_round: int | None, reference: str, others: int, compare: str) -> pd.DataFrame:
    """The update-cosine curves of ``variants`` (and the benign one) on client ``client_id``'s shard of the
    run (the run's partition, B, β and momentum), from its global model after ``start_round`` rounds, against
    the benign update of the same client (``reference = "same"``) or the mean benign update of ``others``
    other benign clients (``"others"``); with the protocol's columns (see
    :func:`fedcal.reports.studies.stealth_table`)."""
    cfg, model, ds, rnd, logged = model_at_round(run_dir, start_round)
    if not 0 <= client_id < cfg.num_clients:
        raise ValueError(f"client must lie in [0, num-clients = {cfg.num_clients}), got {client_id}")

    def shard(cid: int):
        return client_data(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.partition, cfg.dirichlet_alpha, cfg.seed,
                           cid)

    data = shard(client_id)
    reference_data = None
    if reference == "others":
        reference_data = [(d.x, d.y) for d in map(shard, _benign_others(run_dir, cfg, client_id, others))]
    table = update_cosine_curves(model, data.x, data.y, data.num_classes, {"benign": BENIGN, **variants}, steps=steps,
                                 batch_size=cfg.batch_size, lr=cfg.lr, seed=seed, momentum=cfg.momentum,
                                 reference_data=reference_data, compare=compare)
    accuracy = calibration_metrics(predict_logits(model, ds.x_test, cfg.eval_batch_size), ds.y_test)["accuracy"]
    return table.assign(run=Path(run_dir).name, seed=cfg.seed, client=client_id, start_round=rnd,
                        reference=reference, compare=compare, start_accuracy=accuracy, logged_accuracy=logged)
