"""Federated inference data plumbing (flwr-free): the server's held-out split, local
classifiers, and assembling validated client probits into (B, n, C) tensors."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from fedcal.config import ConfigSpec
from fedcal.data import Dataset, dirichlet_partition
from fedcal.inference.probit_attacks import validate_probits
from fedcal.models import build_model
from fedcal.local_training import cosine_epochs, crop_flip_augmenter, local_train


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
                           batch_size: int, seed: int, device: torch.device | str = "cpu", *,
                           momentum: float = 0.0, weight_decay: float = 0.0,
                           augment: Callable[[torch.Tensor], torch.Tensor] | None = None,
                           on_step: Callable[[int, torch.nn.Module], None] | None = None,
                           lr_schedule: str = "constant") -> float:
    """Train a client's own classifier on its own data only (SGD with ``momentum`` and
    ``weight_decay``, ``epochs`` × ⌈n / B⌉ steps, each batch mapped by ``augment`` if given;
    ``on_step(k, model)`` after step k). The first e × ⌈n / B⌉ steps are those of an ``epochs = e``
    run: the seeded batch schedule of a longer run starts with the shorter one's (with
    ``lr_schedule="cosine"`` only the batches: the rate anneals over ``epochs`` epochs of ⌈n / B⌉ steps,
    :func:`~fedcal.local_training.cosine_epochs`)."""
    per_epoch = math.ceil(len(y) / batch_size)
    steps = max(1, epochs * per_epoch)
    if lr_schedule not in ("constant", "cosine"):
        raise ValueError(f"lr_schedule must be constant or cosine, got {lr_schedule!r}")
    lr_at = cosine_epochs(lr, epochs, per_epoch) if lr_schedule == "cosine" else None
    return local_train(model, x, y, steps=steps, batch_size=batch_size, lr=lr, momentum=momentum,
                       weight_decay=weight_decay, generator=torch.Generator().manual_seed(seed), device=device,
                       augment=augment, on_step=on_step, lr_at=lr_at).loss


@dataclass(frozen=True)
class InferenceClientSpec(ConfigSpec):
    """What an inference client's own training reads of the run config (:func:`train_client`);
    the task builds it with ``InferenceClientSpec.from_config(cfg)``."""

    seed: int
    dataset: str
    model: str
    num_clients: int
    dirichlet_alpha: float
    inf_server_frac: float
    inf_local_epochs: int
    inf_augment: str
    lr: float
    batch_size: int
    momentum: float
    weight_decay: float
    inf_lr_schedule: str


def train_client(cfg: InferenceClientSpec, ds: Dataset, cid: int, *, device: torch.device | str = "cpu",
                 on_step: Callable[[int, torch.nn.Module], None] | None = None) -> tuple[torch.nn.Module, float, int]:
    """Client ``cid``'s own classifier as an inference run trains it (``train.local``): ``model`` built
    from seed ``seed · 1000 + cid`` (each client its own initialisation and batches), trained on the
    client's Dirichlet share for ``inf-local-epochs`` at ``lr`` (annealed per ``inf-lr-schedule``), ``momentum``,
    ``weight-decay``, with
    crop-flip from its own stream when ``inf-augment`` asks (so the batches are an unaugmented
    client's). Returns (model, mean training loss, number of training samples)."""
    idx = client_indices(ds.y_train.numpy(), cfg.num_clients, cfg.dirichlet_alpha, cfg.inf_server_frac,
                         cfg.seed)[cid]
    seed = cfg.seed * 1000 + cid
    model = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=seed)
    augment = (crop_flip_augmenter(cfg.dataset, torch.Generator().manual_seed(seed + (1 << 40)))
               if cfg.inf_augment == "crop-flip" else None)
    loss = train_local_classifier(model, ds.x_train[idx], ds.y_train[idx], cfg.inf_local_epochs, cfg.lr,
                                  cfg.batch_size, seed=seed, device=device, momentum=cfg.momentum,
                                  weight_decay=cfg.weight_decay, augment=augment, on_step=on_step,
                                  lr_schedule=cfg.inf_lr_schedule)
    return model, loss, len(idx)


def assemble_logits(replies: dict[int, torch.Tensor], batch: int, num_classes: int
                    ) -> tuple[torch.Tensor, torch.Tensor, list[int], dict]:
    """Stack valid client *logit* replies (``inf-client-output=logits``): (probits, logits, client ids
    used, {client id: reason}), both tensors (B, n', C), clients in id order, probits the softmax of
    the logits taken here (in float32, as a client's own softmax would be).

    A reply that is not a finite (B, C) matrix counts as that client being absent for this batch.
    Logits have no range to check beyond finiteness: any real vector is a valid logit vector, which
    is exactly why an aggregator reading them is exposed to scale (docs/inference.md).
    """
    used, rows, dropped = [], [], {}
    for cid in sorted(replies):
        z = replies[cid]
        if z is None:
            dropped[cid] = "no reply"
        elif tuple(z.shape) != (batch, num_classes):
            dropped[cid] = f"shape {tuple(z.shape)}, expected {(batch, num_classes)}"
        elif not bool(torch.isfinite(z).all()):
            dropped[cid] = "not a logit vector (NaN or infinite entries)"
        else:
            used.append(cid)
            rows.append(z.float())
    if not rows:
        empty = torch.empty(batch, 0, num_classes)
        return empty, empty.clone(), used, dropped
    logits = torch.stack(rows, dim=1)
    return torch.softmax(logits, dim=-1), logits, used, dropped


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
