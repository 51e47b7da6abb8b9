"""Noise injection, a poisoning baseline of SPEC §2 (flwr-free).

After normal local training the client adds Gaussian noise to its update::

    Δθ ← Δθ + ε,   ε ~ N(0, σ² I)   (σ ∈ {0.1, 0.05, 0.01} in the studies)

on the trained parameters only (not on buffers such as BatchNorm statistics). ε is drawn
per parameter tensor, in ``model.parameters()`` order, from the client's round stream
``round_generator(seed, server_round, client_id, "noise")``, so a round's noise is the same
wherever it runs. Run config: ``attack=noise``, ``noise-sigma``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from fedcal.attacks.behaviour import AttackSpec, Behaviour, BehaviourKind, round_generator


class NoiseInjection(BehaviourKind):
    """The noise-injection client: benign training, then Δθ ← Δθ + ε, ε ~ N(0, σ²)."""

    kind = "noise"
    attack = "noise"
    defaults = {"noise_sigma": 0.0}

    def from_spec(self, spec: AttackSpec) -> Behaviour:
        return Behaviour("noise", noise_sigma=spec.noise_sigma)

    def variants(self) -> dict[str, Behaviour]:
        """σ ∈ {0.1, 0.05, 0.01}."""
        return {f"noise_sigma{sigma:g}": Behaviour("noise", noise_sigma=sigma) for sigma in (0.1, 0.05, 0.01)}

    def check(self, behaviour: Behaviour) -> None:
        sigma = self.param(behaviour, "noise_sigma")
        if not (sigma >= 0 and math.isfinite(sigma)):
            raise ValueError(f"noise_sigma must be a finite number >= 0, got {sigma}")

    def after_training(self, behaviour: Behaviour, model: nn.Module, seed: int, server_round: int,
                       client_id: int) -> None:
        sigma = self.param(behaviour, "noise_sigma")
        if sigma > 0:
            noise_gen = round_generator(seed, server_round, client_id, "noise")
            with torch.no_grad():  # Δθ ← Δθ + ε on trained parameters only (not BN buffers)
                for p in model.parameters():
                    eps = torch.randn(p.shape, generator=noise_gen) * sigma
                    p.add_(eps.to(p.device))

    def stealth_update(self, behaviour: Behaviour, deltas: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
        """Δ(k) + σ·z for every step k, with one direction z ~ N(0, I) (float64) drawn from
        ``round_generator(seed, 0, 0, "noise")``: shared by all steps and all σ, so curves
        for different σ differ only in σ."""
        if not deltas:
            return deltas
        direction = torch.randn(deltas[0].numel(), generator=round_generator(seed, 0, 0, "noise"), dtype=torch.float64)
        return [d + self.param(behaviour, "noise_sigma") * direction for d in deltas]
