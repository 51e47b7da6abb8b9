"""Robust federated inference (SPEC §7), flwr-free: aggregators of client probits
(:mod:`.aggregators`), DeepSet and DeepSet-TM (:mod:`.deepset`), probit-space attacks
(:mod:`.probit_attacks`), their evaluation (:mod:`.evaluate`) and the data plumbing of the
federated run (:mod:`.federated`)."""
from .aggregators import AGGREGATORS, CoordinateMedian, GeometricMedian, Mean, TrimmedMean, check_probits, renormalise
from .deepset import POOLINGS, DeepSet, DeepSetTM, accuracy, as_trimmed, train_deepset
from .logit_attacks import amplified_one_hot, attack_logits
from .probit_attacks import (adversary_mask, apply_attack, class_covariance, cpa, cw_margin, lma,
                             logit_flip, pgd_cw, sia_blackbox, sia_whitebox, sia_whitebox_raise, validate_probits)

__all__ = [
    "AGGREGATORS", "CoordinateMedian", "GeometricMedian", "Mean", "TrimmedMean", "check_probits", "renormalise",
    "POOLINGS", "DeepSet", "DeepSetTM", "accuracy", "as_trimmed", "train_deepset",
    "PROBIT_ATTACKS", "adversary_mask", "apply_attack", "class_covariance", "cpa", "cw_margin", "lma", "logit_flip",
    "pgd_cw", "sia_blackbox", "sia_whitebox", "sia_whitebox_raise", "validate_probits", "amplified_one_hot",
    "attack_logits",
]


def __getattr__(name: str):
    if name == "PROBIT_ATTACKS":  # read from the catalogue's inference attacks when asked
        from . import probit_attacks

        return probit_attacks.PROBIT_ATTACKS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
