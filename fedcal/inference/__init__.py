"""Robust federated inference (SPEC §7): aggregators of client probits and DeepSet."""
from .aggregators import (AGGREGATORS, CoordinateMedian, GeometricMedian, Mean, TrimmedMean,
                          check_probits, renormalise, trimmed_mean_dim)
from .deepset import POOLINGS, DeepSet, accuracy, as_trimmed, train_deepset

__all__ = [
    "AGGREGATORS", "CoordinateMedian", "GeometricMedian", "Mean", "TrimmedMean",
    "check_probits", "renormalise", "trimmed_mean_dim",
    "POOLINGS", "DeepSet", "accuracy", "as_trimmed", "train_deepset",
]

from fedcal.inference.attacks import (  # noqa: E402
    ATTACKS, adversary_mask, apply_attack, class_covariance, cpa, cw_margin, lma, logit_flip, pgd_cw,
    sia_blackbox, sia_whitebox, validate_probits,
)

__all__ = [*__all__, "ATTACKS", "adversary_mask", "apply_attack", "class_covariance", "cpa", "cw_margin", "lma",
           "logit_flip", "pgd_cw", "sia_blackbox", "sia_whitebox", "validate_probits"]
