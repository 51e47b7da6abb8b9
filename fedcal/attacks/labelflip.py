"""Label flipping, a poisoning baseline of SPEC §2 (flwr-free).

The client trains normally, but on shifted labels::

    y ← (y + k) mod C   (k ∈ {1, …, 5} in the studies)

Run config: ``attack=labelflip``, ``flip-shift``.
"""

from __future__ import annotations

import torch

from fedcal.attacks.behaviour import AttackSpec, Behaviour, BehaviourKind


def flip_labels(y: torch.Tensor, shift: int, num_classes: int) -> torch.Tensor:
    """Label flipping: y ← (y + k) mod C."""
    return (y + shift) % num_classes


class LabelFlipping(BehaviourKind):
    """The label-flipping client: benign training on (y + k) mod C."""

    kind = "labelflip"
    attack = "labelflip"
    defaults = {"flip_shift": 0}

    def from_spec(self, spec: AttackSpec) -> Behaviour:
        return Behaviour("labelflip", flip_shift=spec.flip_shift)

    def variants(self) -> dict[str, Behaviour]:
        """k ∈ {1, …, 5}."""
        return {f"labelflip_k{k}": Behaviour("labelflip", flip_shift=k) for k in range(1, 6)}

    def train_labels(self, behaviour: Behaviour, y: torch.Tensor, num_classes: int) -> torch.Tensor:
        return flip_labels(y, self.param(behaviour, "flip_shift"), num_classes)
