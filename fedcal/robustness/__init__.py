"""Temperature as a benign robustness knob (SPEC §9), flwr-free: L∞ evasion attacks in pixel
space (:mod:`~fedcal.robustness.attacks`, through the Adversarial Robustness Toolbox), common
corruptions at CIFAR-10-C's parameters (:mod:`~fedcal.robustness.corruptions`), the
negative-prototype geometry (:mod:`~fedcal.robustness.geometry`) and one evaluation of a trained
model at τ = 1 (:mod:`~fedcal.robustness.evaluate`), and a finished run's final model evaluated once per
spec, cached in its run directory (:mod:`~fedcal.robustness.runs`, not imported here: it reads the run
store). The τ-trained models themselves come from
the ``train`` task: temperature training is the TSA client code path at every client."""

from fedcal.robustness.attacks import (ATTACKS, AttackBudget, MarginLoss, PixelModel, adversarial_examples,
                                       predict_pixels, random_targets)
from fedcal.robustness.corruptions import CORRUPTIONS, DEFAULT_CORRUPTIONS, corrupt
from fedcal.robustness.evaluate import (DEFAULT_EPS, RobustnessSpec, evaluate_robustness, spec_for,
                                        zero_gradient_fraction)
from fedcal.robustness.geometry import negative_prototype_spread, prototype_distances

__all__ = ["ATTACKS", "AttackBudget", "MarginLoss", "PixelModel", "adversarial_examples", "predict_pixels",
           "random_targets", "CORRUPTIONS", "DEFAULT_CORRUPTIONS", "corrupt", "DEFAULT_EPS", "RobustnessSpec",
           "evaluate_robustness", "spec_for", "zero_gradient_fraction", "negative_prototype_spread", "prototype_distances"]
