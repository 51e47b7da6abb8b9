"""Inner-product manipulation (IPM), a model-poisoning attack of Byzantine-robust FL (flwr-free).

The f colluding attackers all send

    m = −ε · μ,   μ = mean of the honest updates,  ε > 0,

so that ⟨m, μ⟩ = −ε‖μ‖² < 0. A robust rule guarantees only that its output stays close to the
honest mean in *distance*; gradient descent needs a positive inner product with the true
gradient. A small ε keeps m near the honest cloud (short, centred updates that Krum picks,
which barely move the model); a large ε drags mean-like rules to the opposite direction.

Threat model: the attackers need μ. Omniscient (all the round's honest updates) in the
literature's evaluations; on a real federation the colluders estimate it from their own benign
updates.

Source: Xie, Koyejo & Gupta, "Fall of Empires: Breaking Byzantine-tolerant SGD by Inner Product
Manipulation" (UAI 2019 / PMLR 115, 2020); ByzFL's ``InnerProductManipulation`` (its τ is this ε).
"""

from __future__ import annotations

import math

import torch

from fedcal.attacks._honest import check_honest, repeat_row


def ipm(honest: torch.Tensor, f: int, epsilon: float = 0.1) -> torch.Tensor:
    """The (f, d) IPM updates: f copies of −ε · mean(``honest``), ε > 0 (default 0.1: the
    small-ε regime, updates that stay near the honest cloud).

    >>> ipm(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), f=1, epsilon=0.5)
    tensor([[-1.0000, -1.5000]])
    """
    honest, f = check_honest(honest, f, attack="IPM")
    epsilon = float(epsilon)
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"IPM's epsilon must be a finite number > 0, got {epsilon}")
    return repeat_row(-epsilon * honest.mean(dim=0), f)
