"""The minibatch Adam loop the server's learned aggregators share (DeepSet, the purifiers' autoencoder)."""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from fedcal.progress import phase


def adam_epochs(model: nn.Module, probits: torch.Tensor, labels: torch.Tensor, epochs: int, lr: float,
                batch_size: int, generator: torch.Generator | None,
                batch_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                progress: str = "training") -> list[float]:
    """``epochs`` passes of Adam over shuffled minibatches of (``probits``, ``labels``), each
    minimising ``batch_loss(x, y)``; returns the per-epoch mean loss and leaves ``model`` in eval
    mode. The shuffles come from ``generator`` (seed 0 when None). Each epoch is a step of the
    phase ``progress`` (:func:`fedcal.progress.phase`)."""
    labels = torch.as_tensor(labels).long()
    if labels.shape != (probits.shape[0],):
        raise ValueError(f"labels must have shape ({probits.shape[0]},); got {tuple(labels.shape)}")
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history: list[float] = []
    N = probits.shape[0]
    with phase(progress, epochs, "epochs") as bar:
        for _ in range(epochs):
            model.train()
            perm = torch.randperm(N, generator=generator)
            total = 0.0
            for start in range(0, N, batch_size):
                idx = perm[start:start + batch_size]
                loss = batch_loss(probits[idx], labels[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item() * len(idx)
            history.append(total / N)
            bar.update(1, f"loss {history[-1]:.4f}")
    model.eval()
    return history
