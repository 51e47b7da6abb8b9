"""A plain-PyTorch federated loop, without Flower (flwr-free).

It performs exactly the computation of a fedcal simulation — same seeded client sample per
round, same client rounds (:func:`fedcal.attacks.client_round`), data-size weighted FedAvg,
central evaluation after every round — in one process. Three uses:

* the *compute limit* in benchmarks (what a round costs with no framework at all);
* an independent second implementation: tests check that the Flower apps give the same
  metrics for the same seed;
* a run's global model after any round (:func:`global_state`), which the run store does not keep
  (it keeps the final model): the stealth analysis starts local training from it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from fedcal.attacks import AttackSpec, LocalRoundSpec, behaviour_for, client_round
from fedcal import catalogue
from fedcal.config import ConfigSpec
from fedcal.data import client_data, load_dataset
from fedcal.metrics import calibration_metrics
from fedcal.models import build_model
from fedcal.local_training import predict_logits, resolve_device


@dataclass(frozen=True)
class ReferenceSpec(ConfigSpec):
    """What the plain loop reads of a train run's config: the federation (data, partition, model,
    K, M, rounds, evaluation, device) and the clients' attack settings and round protocol."""

    dataset: str
    data_dir: str
    device: str
    model: str
    seed: int
    num_clients: int
    clients_per_round: int
    num_rounds: int
    partition: str
    dirichlet_alpha: float
    eval_batch_size: int
    n_bins: int
    attack: AttackSpec
    local: LocalRoundSpec


def sampled_clients(server_round: int, *, seed: int, num_clients: int, clients_per_round: int) -> list[int]:
    """The clients trained in ``server_round`` (same rule as fedcal's seeded FedAvg)."""
    return random.Random(f"{seed}/{server_round}").sample(range(num_clients), clients_per_round)


def _states(cfg: ReferenceSpec, num_rounds: int) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
    """(round, global state dict) for rounds 0 (the initial model) .. ``num_rounds``."""
    if "omniscient" in catalogue.get("attack", cfg.attack.attack).needs:  # the simulation's colluders craft its replies; they are not trained
        raise ValueError(f"attack {cfg.attack.attack!r}: the reference loop has no server-side crafting of replies "
                         "(fedcal.tasks.poisoning); it runs the training-time attacks only")
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    device = resolve_device(cfg.device)
    worker = build_model(cfg.model, ds.input_shape, ds.num_classes)
    state = {k: v.detach().clone() for k, v in
             build_model(cfg.model, ds.input_shape, ds.num_classes, seed=cfg.seed).state_dict().items()}
    yield 0, state
    for rnd in range(1, num_rounds + 1):
        acc: dict[str, torch.Tensor] = {}
        total = 0
        for cid in sampled_clients(rnd, seed=cfg.seed, num_clients=cfg.num_clients,
                                   clients_per_round=cfg.clients_per_round):
            data = client_data(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.partition, cfg.dirichlet_alpha,
                               cfg.seed, cid)
            worker.load_state_dict(state)
            stats = client_round(worker, data.x, data.y, data.num_classes, behaviour_for(cfg.attack, cid), cfg.local,
                                 rnd, cid, device)
            n = stats.num_examples
            total += n
            for k, v in worker.state_dict().items():
                v = v.detach().to("cpu", torch.float64) * n
                acc[k] = acc[k] + v if k in acc else v
        state = {k: (acc[k] / total).to(state[k].dtype) for k in state}
        yield rnd, state


def global_state(cfg: ReferenceSpec, server_round: int) -> dict[str, torch.Tensor]:
    """The global model's state dict after ``server_round`` rounds of ``cfg`` (0 = the initial model),
    recomputed from round 1 — the Flower run's state up to float rounding (summation order)."""
    if not 0 <= server_round <= cfg.num_rounds:
        raise ValueError(f"server_round must lie in [0, num-rounds = {cfg.num_rounds}], got {server_round}")
    for rnd, state in _states(cfg, server_round):
        if rnd == server_round:
            return state
    raise AssertionError("unreachable")  # pragma: no cover - _states yields every round up to server_round


def run_plain(cfg: ReferenceSpec, on_round: Callable[[int, dict[str, float]], None] | None = None
              ) -> list[dict[str, float]]:
    """Run ``cfg`` without Flower; returns one metrics dict per round (round 0 = initial)."""
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    device = resolve_device(cfg.device)
    global_model = build_model(cfg.model, ds.input_shape, ds.num_classes)
    rows: list[dict[str, float]] = []
    clock = time.perf_counter()
    for server_round, state in _states(cfg, cfg.num_rounds):
        global_model.load_state_dict(state)
        logits = predict_logits(global_model, ds.x_test, cfg.eval_batch_size, device)
        m = calibration_metrics(logits, ds.y_test, cfg.n_bins)
        now = time.perf_counter()
        m["round_seconds"] = now - clock
        clock = now
        rows.append({"round": server_round, **m})
        if on_round:
            on_round(server_round, m)
    return rows
