"""What one client does in a round, who attacks, and each round's random stream (flwr-free).

- :class:`Behaviour`: one client's behaviour (``kind`` plus that kind's own parameters: τ and
  coupling for TSA, σ for noise, k for label flipping); :data:`BENIGN` is the honest client.
- :class:`BehaviourKind`: the interface every kind of behaviour implements (how it is built
  from the run config, the variants the stealth analysis compares, and where it changes a
  benign local round). The base class *is* the benign client. The kinds live in
  :mod:`fedcal.attacks.tsa`, :mod:`fedcal.attacks.noise` and :mod:`fedcal.attacks.labelflip`,
  and are found by name in :data:`fedcal.attacks.registry.BEHAVIOURS`.
- :func:`select_attackers` / :func:`attackers_of`: the fixed, seeded set of malicious clients.
- :func:`round_generator`: the torch generator of one client's round, the same wherever that
  round runs (simulation, deployment, the plain reference loop).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from fedcal import catalogue
from fedcal.config import ConfigSpec


@dataclass(frozen=True, init=False)
class Behaviour:
    """What one client does in a round: ``Behaviour(kind, **params)``. ``kind`` names an entry of
    :data:`fedcal.attacks.BEHAVIOURS` (benign, tsa, noise, labelflip, a plug-in's); ``params`` are that
    kind's own parameters (TSA's ``tau``, noise's ``noise_sigma``), which its :class:`BehaviourKind` reads
    with its own defaults (:meth:`BehaviourKind.param`); no kind's parameters are fields of every
    behaviour."""

    kind: str = "benign"
    params: tuple[tuple[str, Any], ...] = ()  # (name, value), sorted by name

    def __init__(self, kind: str = "benign", **params: Any) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "params", tuple(sorted(params.items())))

    def get(self, name: str, default: Any = None) -> Any:
        """The parameter ``name``, or ``default`` when the behaviour does not set it."""
        return dict(self.params).get(name, default)

    def __getattr__(self, name: str) -> Any:
        # a parameter the behaviour sets, as an attribute (only called for a name that is no field)
        return _own_param(self, name, lambda: f"behaviour {self.kind!r} sets no parameter {name!r}")

    @property
    def malicious(self) -> bool:
        return self.kind != "benign"


def _own_param(obj: Any, name: str, missing: Callable[[], str]) -> Any:
    """``name``'s value among ``obj.params`` ((name, value) pairs), for ``__getattr__``; AttributeError with
    ``missing()`` when it has none (and plainly while ``obj`` is being unpickled or for a dunder)."""
    params = obj.__dict__.get("params")
    if params is None or name.startswith("__"):
        raise AttributeError(name)
    for key, value in params:
        if key == name:
            return value
    raise AttributeError(missing())


BENIGN = Behaviour()


@dataclass(frozen=True)
class AttackSpec(ConfigSpec):
    """Who attacks in a run and with what parameters: the ``attack``, the seed of the attacker choice,
    K and ``num-attackers`` (round-half-up(ratio · K)), and ``params``, the chosen attack's own run-config
    keys (those its catalogue component declares, :attr:`fedcal.catalogue.Component.keys`) by field name.
    Built by the tasks with ``AttackSpec.from_config(cfg)``; an attack reads its own keys as attributes
    (``spec.tau``, ``spec.alie_z``): another attack's key is no attribute of it."""

    OWN = ("params",)

    attack: str
    seed: int
    num_clients: int
    num_attackers: int
    params: tuple[tuple[str, Any], ...] = ()  # (field name, value) of the chosen attack's own keys

    @classmethod
    def from_config(cls, cfg: Any, **given: Any) -> AttackSpec:
        spec = super().from_config(cfg, **given)
        own = dict(cfg.params) if isinstance(cfg, AttackSpec) else \
            {k: getattr(cfg, k) for k in catalogue.get("attack", spec.attack).keys}
        return dataclasses.replace(spec, params=tuple(own.items()))

    def __getattr__(self, name: str) -> Any:
        # the chosen attack's own keys (only called for a name that is no field)
        return _own_param(self, name, lambda: f"attack {self.attack!r} has no key {name!r} (its own: "
                                              f"{', '.join(k for k, _ in self.params) or 'none'})")


class BehaviourKind:
    """One kind of client behaviour; this base class is the benign client.

    A client round (:func:`fedcal.attacks.client_round`) is plain local SGD on
    CE(softmax(z/τ), y) (:func:`fedcal.local_training.local_train`). A kind may change it in three
    places, each a method here: the labels trained on (:meth:`train_labels`), the loss
    temperature and learning-rate coupling (:meth:`loss_temperature`), and the trained
    parameters afterwards (:meth:`after_training`). The stealth analysis
    (:func:`fedcal.analysis.update_cosine_curves`) uses the first two and
    :meth:`stealth_update`.
    """

    kind = "benign"  # the key in BEHAVIOURS and Behaviour.kind
    attack = "none"  # the run config's ``attack`` value that selects this kind
    #: this kind's parameters with their values where a behaviour does not set them (:meth:`param`)
    defaults: dict[str, Any] = {}

    def param(self, behaviour: Behaviour, name: str) -> Any:
        """Parameter ``name`` of ``behaviour``: its own value, else this kind's default."""
        return behaviour.get(name, self.defaults[name])

    def from_spec(self, spec: AttackSpec) -> Behaviour:
        """The behaviour of an attacking client of a run with attack settings ``spec``."""
        return BENIGN

    def variants(self) -> dict[str, Behaviour]:
        """Named variants compared in the stealth analysis (SPEC §4); none for benign."""
        return {}

    def check(self, behaviour: Behaviour) -> None:
        """Raise ValueError (naming the field) if ``behaviour``'s parameters are impossible."""

    def train_data(self, behaviour: Behaviour, x: torch.Tensor, y: torch.Tensor, dataset: str, seed: int,
                   client_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The (inputs, labels) the client trains on before :meth:`train_labels` (unchanged by
        default; the pixel backdoor stamps and relabels some images)."""
        return x, y

    def train_labels(self, behaviour: Behaviour, y: torch.Tensor, num_classes: int) -> torch.Tensor:
        """The labels the client trains on (``y`` itself when unchanged)."""
        return y

    def loss_temperature(self, behaviour: Behaviour) -> tuple[float, bool]:
        """(τ, coupled) of the local loss CE(softmax(z/τ), y); benign: (1, True)."""
        return 1.0, True

    def temperature_steps(self, behaviour: Behaviour, steps: int) -> int:
        """How many of the ``steps`` local steps (the first ones) use :meth:`loss_temperature`'s
        τ; the rest are benign. Default: all."""
        return steps

    def blend(self, behaviour: Behaviour) -> float:
        """λ of the reply ``benign + λ · (trained − benign)``, both trained from the global model
        on the same batches; 1 (the default) sends the trained model itself."""
        return 1.0

    def attacks_in_round(self, behaviour: Behaviour, seed: int, server_round: int, client_id: int) -> bool:
        """Whether the client behaves as ``behaviour`` in this round (False: a benign round).
        Default: every round."""
        return True

    def after_training(self, behaviour: Behaviour, model: nn.Module, seed: int, server_round: int,
                       client_id: int) -> None:
        """Change the trained ``model`` in place after the local steps (benign: nothing)."""

    def stealth_update(self, behaviour: Behaviour, deltas: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
        """The stealth analysis' attacked update after each local step, from the updates
        ``deltas`` (flat float64) of training with :meth:`train_labels` and
        :meth:`loss_temperature` (benign: unchanged)."""
        return deltas


def select_attackers(num_clients: int, num_attackers: int, seed: int) -> frozenset[int]:
    """A fixed, seeded subset of client ids (chosen once per run)."""
    if not 0 <= num_attackers <= num_clients:
        raise ValueError(f"num_attackers must lie in [0, {num_clients}], got {num_attackers}")
    rng = np.random.default_rng([seed, 0xA77AC])  # own stream: independent of partitioning
    return frozenset(int(i) for i in rng.choice(num_clients, size=num_attackers, replace=False))


def attackers_of(spec: AttackSpec) -> frozenset[int]:
    """The malicious client ids of a run."""
    return select_attackers(spec.num_clients, spec.num_attackers, spec.seed)


def round_generator(seed: int, server_round: int, client_id: int, stream: str = "train") -> torch.Generator:
    """Generator for one client's round, identical wherever that round is executed.

    Seeded by the first 8 bytes (little-endian, 63 bits) of SHA-256 of
    ``"{seed}/{server_round}/{client_id}/{stream}"``; streams in use: ``train`` (the batch
    schedule), ``noise`` (noise injection) and ``augment`` (crop-flip augmentation).
    """
    digest = hashlib.sha256(f"{seed}/{server_round}/{client_id}/{stream}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
