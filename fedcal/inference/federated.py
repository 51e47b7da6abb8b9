"""Federated inference data plumbing (flwr-free): the server's held-out split, local
classifiers, and assembling validated client probits into (B, n, C) tensors."""

from __future__ import annotations

import math

import numpy as np
import torch

from fedcal.data import dirichlet_partition
from fedcal.inference.probit_attacks import validate_probits
from fedcal.train import local_train


def server_split(labels: np.ndarray, frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(server's aggregator-training indices, indices left for the clients): a seeded
    ``frac`` of the training data that no client ever sees (SPEC §7: 10%)."""
    if not 0 < frac < 1:
        raise ValueError(f"frac must lie in (0, 1), got {frac}")
    perm = np.random.default_rng([seed, 0x5E7]).permutation(len(labels))
    k = int(round(frac * len(labels)))
    return np.sort(perm[:k]), np.sort(perm[k:])


def client_indices(labels: np.ndarray, num_clients: int, alpha: float, frac: float, seed: int) -> list[np.ndarray]:
    """Each client's training indices: a Dirichlet(α) split of what the server did not keep."""
    _, pool = server_split(labels, frac, seed)
    parts = dirichlet_partition(labels[pool], num_clients, alpha, seed)
    return [pool[p] for p in parts]


def train_local_classifier(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, lr: float,
                           batch_size: int, seed: int, device: torch.device | str = "cpu") -> float:
    """Train a client's own classifier on its own data only (SGD, ``epochs`` passes)."""
    steps = max(1, epochs * math.ceil(len(y) / batch_size))
    return local_train(model, x, y, steps=steps, batch_size=batch_size, lr=lr,
                       generator=torch.Generator().manual_seed(seed), device=device).loss


def assemble(replies: dict[int, torch.Tensor], batch: int, num_classes: int) -> tuple[torch.Tensor, list[int], dict]:
    """Stack valid client replies into (B, n', C), clients in id order.

    A reply that is not a (B, C) probit matrix (wrong size, NaN, negative, rows not summing
    to 1) counts as that client being absent for this batch. Returns the tensor, the client ids
    used, and {client id: reason} for the dropped ones.
    """
    used, rows, dropped = [], [], {}
    for cid in sorted(replies):
        p = replies[cid]
        if p is None:
            dropped[cid] = "no reply"
        elif tuple(p.shape) != (batch, num_classes):
            dropped[cid] = f"shape {tuple(p.shape)}, expected {(batch, num_classes)}"
        elif not bool(validate_probits(p[:, None, :].double(), num_classes=num_classes).all()):
            dropped[cid] = "not a probit vector (NaN, negative or not summing to 1)"
        else:
            used.append(cid)
            rows.append(p.float())
    if not rows:
        return torch.empty(batch, 0, num_classes), used, dropped
    return torch.stack(rows, dim=1), used, dropped
