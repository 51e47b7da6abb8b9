"""Training-time client behaviours (flwr-free), each findable by name.

=====================  ====================================================================
module                 contents
=====================  ====================================================================
``behaviour.py``       :class:`Behaviour` (+ :data:`BENIGN`), the :class:`BehaviourKind`
                       interface (= the benign client), attacker choice, round generators
``tsa.py``             :class:`TemperatureScalingAttack`: CE(softmax(z/τ), y) with η = β·τ
``noise.py``           :class:`NoiseInjection`: Δθ ← Δθ + ε, ε ~ N(0, σ²)
``labelflip.py``       :class:`LabelFlipping`: y ← (y + k) mod C (:func:`flip_labels`)
``registry.py``        :data:`BEHAVIOURS` (kind → behaviour), :func:`behaviour_for`,
                       :func:`client_round`, :func:`stealth_variants`
=====================  ====================================================================
"""

from fedcal.attacks.behaviour import (
    BENIGN,
    Behaviour,
    BehaviourKind,
    attackers_of,
    round_generator,
    select_attackers,
)
from fedcal.attacks.labelflip import LabelFlipping, flip_labels
from fedcal.attacks.noise import NoiseInjection
from fedcal.attacks.registry import (
    BEHAVIOURS,
    behaviour_for,
    behaviour_kind,
    client_round,
    kind_for_attack,
    stealth_variants,
)
from fedcal.attacks.tsa import TemperatureScalingAttack

__all__ = [
    "BEHAVIOURS",
    "BENIGN",
    "Behaviour",
    "BehaviourKind",
    "LabelFlipping",
    "NoiseInjection",
    "TemperatureScalingAttack",
    "attackers_of",
    "behaviour_for",
    "behaviour_kind",
    "client_round",
    "flip_labels",
    "kind_for_attack",
    "round_generator",
    "select_attackers",
    "stealth_variants",
]
