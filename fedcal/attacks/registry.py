"""The one registry of client behaviours, and the client round that dispatches through it.

:data:`BEHAVIOURS` maps each ``Behaviour.kind`` to its :class:`BehaviourKind`, built from the attacks of
:mod:`fedcal.catalogue`: every ``attack`` value the run config accepts selects exactly one of them
(``none`` → benign).
The training round (:func:`client_round`), the choice of a client's behaviour
(:func:`behaviour_for`) and the stealth analysis (:func:`fedcal.analysis.update_cosine_curves`,
whose default variants are :func:`stealth_variants`) all look kinds up here. To add a
behaviour: subclass :class:`BehaviourKind` in its own module and declare it as an ``attack`` component
(fedcal/catalogue/attacks.py, or a package's entry point).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fedcal import catalogue
from fedcal.attacks.behaviour import BENIGN, AttackSpec, Behaviour, BehaviourKind, attackers_of, round_generator
from fedcal.attacks.crafted import ModelPoisoningClient
from fedcal.config import ConfigSpec
from fedcal.local_training import TrainStats, crop_flip_augmenter, epoch_schedule, local_train


@functools.cache
def kind_for_attack(attack: str) -> BehaviourKind:
    """The kind selected by the run config's ``attack`` value (its catalogue component's class; a
    model-poisoning client for the attacks the omniscient colluders craft; ``none`` → benign)."""
    component = catalogue.get("attack", attack)
    if "omniscient" in component.needs:
        return ModelPoisoningClient(attack)
    return component.load()()


def __getattr__(name: str) -> Any:
    # BEHAVIOURS: every attack's kind by Behaviour.kind, read from the catalogue when asked
    if name == "BEHAVIOURS":
        return _behaviours()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _behaviours() -> dict[str, BehaviourKind]:
    return {k.kind: k for k in map(kind_for_attack, catalogue.names("attack"))}


def behaviour_kind(kind: str) -> BehaviourKind:
    """The registered kind ``kind`` (ValueError naming the choices otherwise)."""
    kinds = _behaviours()
    try:
        return kinds[kind]
    except KeyError:
        raise ValueError(f"unknown kind {kind!r}; choose one of {', '.join(kinds)}") from None


def stealth_variants() -> dict[str, Behaviour]:
    """Every kind's stealth-analysis variants, in registry order: TSA coupled/uncoupled at
    τ ∈ {0.2, 5}; noise injection σ ∈ {0.1, 0.05, 0.01}; label flipping k ∈ {1, …, 5}."""
    return {name: b for kind in _behaviours().values() for name, b in kind.variants().items()}


def behaviour_for(spec: AttackSpec, client_id: int) -> Behaviour:
    """Behaviour of client ``client_id`` in a run with attack settings ``spec``."""
    if client_id not in attackers_of(spec):  # (every client of attack = none: it has no attackers)
        return BENIGN
    return kind_for_attack(spec.attack).from_spec(spec)


@dataclass(frozen=True)
class LocalRoundSpec(ConfigSpec):
    """The protocol every client's local round shares (E or epochs, B, η, the optimiser, the
    augmentation, the seed of its streams): the run-config keys :func:`client_round` reads. Built
    by the tasks with ``LocalRoundSpec.from_config(cfg)``."""

    seed: int
    dataset: str
    local_steps: int
    local_epochs: int
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    optimizer: str
    augment: str


def local_batches(spec: LocalRoundSpec, n: int, server_round: int,
                  client_id: int) -> tuple[list[torch.Tensor] | None, int]:
    """(batches, steps) of one client's round over its ``n`` samples: with ``local-epochs`` the
    epochs' batches (:func:`fedcal.local_training.epoch_schedule`, from the round's generator) and their
    count; else (None, ``local-steps``) — :func:`fedcal.local_training.local_train` draws the same
    generator's schedule itself."""
    if not spec.local_epochs:
        return None, spec.local_steps
    batches = epoch_schedule(n, spec.local_epochs, spec.batch_size, round_generator(spec.seed, server_round, client_id))
    return batches, len(batches)


def augmenter(spec: LocalRoundSpec, server_round: int, client_id: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The batch augmentation of one client's round (``augment``), or None: crop-flip draws from
    the round's own ``augment`` stream and pads with the model input of a black pixel."""
    if spec.augment == "none":
        return None
    return crop_flip_augmenter(spec.dataset, round_generator(spec.seed, server_round, client_id, stream="augment"))


def client_round(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    num_classes: int,
    behaviour: Behaviour,
    spec: LocalRoundSpec,
    server_round: int,
    client_id: int,
    device: torch.device | str = "cpu",
) -> TrainStats:
    """One client's local round, in place on ``model`` (which holds the global weights).

    Benign and attacking clients share the protocol (same E, B, optimiser, and the batch
    schedule of ``round_generator(seed, server_round, client_id)``); they differ only where
    their kind says: τ/η (TSA), labels (label flipping) or an additive Gaussian on Δθ (noise).
    """
    kind = behaviour_kind(behaviour.kind)
    if not kind.attacks_in_round(behaviour, spec.seed, server_round, client_id):  # tsa-duty: a benign round
        behaviour, kind = BENIGN, behaviour_kind(BENIGN.kind)
    x, y = kind.train_data(behaviour, x, y, spec.dataset, spec.seed, client_id)
    y = kind.train_labels(behaviour, y, num_classes)
    tau, coupled = kind.loss_temperature(behaviour)
    blend = kind.blend(behaviour)

    batches, steps = local_batches(spec, len(y), server_round, client_id)

    def train(tau: float, coupled: bool, tau_steps: int | None) -> TrainStats:
        # a fresh augmentation stream per call: both trainings of the blend see the same images
        return local_train(
            model, x, y, steps=steps, batch_size=spec.batch_size, lr=spec.lr, tau=tau,
            coupled=coupled, momentum=spec.momentum, weight_decay=spec.weight_decay,
            generator=round_generator(spec.seed, server_round, client_id), device=device, tau_steps=tau_steps,
            batches=batches, augment=augmenter(spec, server_round, client_id), optimizer=spec.optimizer,
        )

    tau_steps = kind.temperature_steps(behaviour, steps)
    if blend == 1.0:
        stats = train(tau, coupled, tau_steps)
    else:  # the adaptive attacker: benign + λ·(attacked − benign), both on the same batches
        start = {k: v.detach().clone() for k, v in model.state_dict().items()}
        train(1.0, True, None)
        benign = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict(start)
        stats = train(tau, coupled, tau_steps)
        model.load_state_dict({k: (benign[k].double() + blend * (v.detach().double() - benign[k].double())).to(v.dtype)
                               if v.is_floating_point() else v for k, v in model.state_dict().items()})
    kind.after_training(behaviour, model, spec.seed, server_round, client_id)
    return stats
