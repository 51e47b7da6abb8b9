"""Client behaviours (flwr-free): benign, Temperature Scaling Attack, noise injection,
label flipping, and the choice of which clients are malicious."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedcal.config import RunConfig
from fedcal.train import TrainStats, local_train


@dataclass(frozen=True)
class Behaviour:
    """What one client does in a round. ``kind`` ∈ {benign, tsa, noise, labelflip}."""

    kind: str = "benign"
    tau: float = 1.0
    coupled: bool = True
    noise_sigma: float = 0.0
    flip_shift: int = 0

    @property
    def malicious(self) -> bool:
        return self.kind != "benign"


BENIGN = Behaviour()


def select_attackers(num_clients: int, num_attackers: int, seed: int) -> frozenset[int]:
    """A fixed, seeded subset of client ids (chosen once per run)."""
    if not 0 <= num_attackers <= num_clients:
        raise ValueError(f"num_attackers must lie in [0, {num_clients}], got {num_attackers}")
    rng = np.random.default_rng([seed, 0xA77AC])  # own stream: independent of partitioning
    return frozenset(int(i) for i in rng.choice(num_clients, size=num_attackers, replace=False))


def attackers_of(cfg: RunConfig) -> frozenset[int]:
    """The malicious client ids of a run."""
    return select_attackers(cfg.num_clients, cfg.num_attackers, cfg.seed)


def behaviour_for(cfg: RunConfig, client_id: int) -> Behaviour:
    """Behaviour of client ``client_id`` under run config ``cfg``."""
    if cfg.attack == "none" or client_id not in attackers_of(cfg):
        return BENIGN
    if cfg.attack == "tsa":
        return Behaviour("tsa", tau=cfg.tau, coupled=cfg.coupled)
    if cfg.attack == "noise":
        return Behaviour("noise", noise_sigma=cfg.noise_sigma)
    if cfg.attack == "labelflip":
        return Behaviour("labelflip", flip_shift=cfg.flip_shift)
    raise ValueError(f"unknown attack {cfg.attack!r}")


def flip_labels(y: torch.Tensor, shift: int, num_classes: int) -> torch.Tensor:
    """Label flipping: y ← (y + k) mod C."""
    return (y + shift) % num_classes


def round_generator(seed: int, server_round: int, client_id: int, stream: str = "train") -> torch.Generator:
    """Generator for one client's round, identical wherever that round is executed."""
    digest = hashlib.sha256(f"{seed}/{server_round}/{client_id}/{stream}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


def client_round(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    num_classes: int,
    behaviour: Behaviour,
    cfg: RunConfig,
    server_round: int,
    client_id: int,
    device: torch.device | str = "cpu",
) -> TrainStats:
    """One client's local round, in place on ``model`` (which holds the global weights).

    Benign and attacking clients share the protocol (same E, B, optimiser); they differ
    only in τ/η (TSA), labels (label flipping) or an additive Gaussian on Δθ (noise).
    """
    gen = round_generator(cfg.seed, server_round, client_id)
    if behaviour.kind == "labelflip":
        y = flip_labels(y, behaviour.flip_shift, num_classes)
    tau = behaviour.tau if behaviour.kind == "tsa" else 1.0
    coupled = behaviour.coupled if behaviour.kind == "tsa" else True
    stats = local_train(
        model, x, y, steps=cfg.local_steps, batch_size=cfg.batch_size, lr=cfg.lr, tau=tau,
        coupled=coupled, momentum=cfg.momentum, weight_decay=cfg.weight_decay, generator=gen,
        device=device,
    )
    if behaviour.kind == "noise" and behaviour.noise_sigma > 0:
        noise_gen = round_generator(cfg.seed, server_round, client_id, "noise")
        with torch.no_grad():  # Δθ ← Δθ + ε on trained parameters only (not BN buffers)
            for p in model.parameters():
                eps = torch.randn(p.shape, generator=noise_gen) * behaviour.noise_sigma
                p.add_(eps.to(p.device))
    return stats
