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

The model-poisoning attacks of Byzantine-robust FL craft a reply from the round's honest
updates instead of training one: functions (honest (n_h, d), f, parameters) → (f, d), found by
name in :data:`POISONING` (docs/attacks.md: formulas, papers, threat models). The image
backdoor is a client data transform.

=====================  ====================================================================
module                 contents
=====================  ====================================================================
``alie.py``            :func:`alie` (A Little Is Enough: μ − z·σ), :func:`alie_z`
``ipm.py``             :func:`ipm` (inner-product manipulation: −ε·μ)
``minmax.py``          :func:`min_max`, :func:`min_sum` (+ their γ searches, directions)
``fang.py``            :func:`fang_trimmed_mean`, :func:`fang_krum` (directed deviation)
``optimal.py``         ByzFL's line-search :func:`optimal_alie` (μ + τσ), :func:`optimal_ipm`
                       (−τμ), τ maximising the rule's distance from μ (:func:`line_search`)
``baselines.py``       ByzFL's baselines: :func:`sign_flipping` (−μ), :func:`mimic` (a copy of
                       one honest update), :func:`inf` (+∞ everywhere)
``poisoning.py``       :data:`POISONING` (name → :class:`ModelPoisoning`),
                       :func:`craft_malicious`
``backdoor.py``        :class:`PixelBackdoor`, :class:`PixelTrigger`, :func:`stamp`,
                       :func:`poison_images`, :func:`triggered_test_set`,
                       :func:`attack_success_rate`
=====================  ====================================================================
"""

from fedcal.attacks.behaviour import (
    BENIGN,
    AttackSpec,
    Behaviour,
    BehaviourKind,
    attackers_of,
    round_generator,
    select_attackers,
)
from fedcal.attacks.alie import alie, alie_z
from fedcal.attacks.backdoor import (
    PixelBackdoor,
    PixelTrigger,
    attack_success_rate,
    poison_images,
    stamp,
    triggered_test_set,
)
from fedcal.attacks.baselines import inf, mimic, sign_flipping
from fedcal.attacks.optimal import line_search, optimal_alie, optimal_ipm
from fedcal.attacks.fang import fang_krum, fang_trimmed_mean
from fedcal.attacks.ipm import ipm
from fedcal.attacks.labelflip import LabelFlipping, flip_labels
from fedcal.attacks.minmax import min_max, min_sum
from fedcal.attacks.noise import NoiseInjection
from fedcal.attacks.poisoning import ModelPoisoning, craft_malicious, model_poisoning
from fedcal.attacks.registry import (
    LocalRoundSpec,
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
    "ModelPoisoning",
    "NoiseInjection",
    "POISONING",
    "PixelBackdoor",
    "PixelTrigger",
    "TemperatureScalingAttack",
    "alie",
    "alie_z",
    "attack_success_rate",
    "AttackSpec",
    "LocalRoundSpec",
    "attackers_of",
    "behaviour_for",
    "behaviour_kind",
    "client_round",
    "craft_malicious",
    "fang_krum",
    "fang_trimmed_mean",
    "flip_labels",
    "inf",
    "ipm",
    "kind_for_attack",
    "line_search",
    "mimic",
    "min_max",
    "min_sum",
    "model_poisoning",
    "optimal_alie",
    "optimal_ipm",
    "poison_images",
    "stamp",
    "triggered_test_set",
    "round_generator",
    "select_attackers",
    "sign_flipping",
    "stealth_variants",
]


def __getattr__(name: str):
    # BEHAVIOURS and POISONING are read from the catalogue's attacks when asked
    if name == "BEHAVIOURS":
        from fedcal.attacks import registry

        return registry.BEHAVIOURS
    if name == "POISONING":
        from fedcal.attacks import poisoning

        return poisoning.POISONING
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
