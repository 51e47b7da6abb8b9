"""Robustness of one trained classifier, always evaluated at τ = 1 (flwr-free).

:func:`evaluate_robustness` measures, on the first ``n_test`` test images: accuracy under FGSM,
untargeted PGD-k, CW-margin PGD-k, the success rate of targeted PGD-k towards a random wrong
class, accuracy under each common corruption (:mod:`fedcal.robustness.corruptions`) and the
negative-prototype spread of the features (:mod:`fedcal.robustness.geometry`); and on the whole
test set: clean accuracy and the calibration metrics of SPEC §1.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedcal.data import Dataset, pixel_space
from fedcal.metrics import calibration_metrics
from fedcal.robustness.attacks import (ATTACKS, AttackBudget, PixelModel, adversarial_examples, predict_pixels,
                                       random_targets)
from fedcal.robustness.corruptions import CORRUPTIONS, DEFAULT_CORRUPTIONS, SEVERITIES, corrupt
from fedcal.robustness.geometry import negative_prototype_spread
from fedcal.local_training import predict_logits

#: ε (pixel units) by dataset when none is given: CIFAR's standard 8/255; MNIST 0.1, the low end
#: of its usual 0.1–0.3 — at 0.3 the CW attack takes an MLP to ≤ 0.2 % whatever its training
#: (docs/robustness-results.md, last table), which hides any difference between temperatures; digits
#: (8×8, 17 grey levels) as MNIST.
DEFAULT_EPS = {"cifar10": 8 / 255, "cifar100": 8 / 255, "mnist": 0.1, "digits": 0.1}


@dataclass(frozen=True)
class RobustnessSpec:
    """What :func:`evaluate_robustness` measures. ``step`` 0 = ε/4 (CIFAR: 2/255 at ε = 8/255)."""

    eps: float
    step: float = 0.0
    steps: int = 20
    n_test: int = 1000
    attacks: tuple[str, ...] = ATTACKS
    corruptions: tuple[str, ...] = DEFAULT_CORRUPTIONS
    severity: int = 3
    seed: int = 0
    n_bins: int = 15

    def __post_init__(self) -> None:
        unknown = [a for a in self.attacks if a not in ATTACKS]
        if unknown:
            raise ValueError(f"unknown attack {unknown[0]!r}; choose from {', '.join(ATTACKS)}")
        unknown = [c for c in self.corruptions if c not in CORRUPTIONS]
        if unknown:
            raise ValueError(f"unknown corruption {unknown[0]!r}; choose from {', '.join(CORRUPTIONS)}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"corruption severity must be one of 1..5, got {self.severity!r}")
        if not (isinstance(self.n_test, int) and self.n_test >= 1):
            raise ValueError(f"n_test (test images attacked) must be an integer >= 1, got {self.n_test!r}")
        if self.step == 0.0 and math.isfinite(self.eps):
            object.__setattr__(self, "step", self.eps / 4)
        self.budget  # validates ε, step and steps

    @property
    def budget(self) -> AttackBudget:
        return AttackBudget(self.eps, self.step, self.steps)

    def as_record(self) -> dict:
        """The spec as plain JSON data (tuples as lists): what a cached evaluation stores."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def key(self) -> str:
        """12-hex hash of the spec: the name of its cached results in a run directory."""
        return hashlib.sha256(json.dumps(self.as_record(), sort_keys=True).encode()).hexdigest()[:12]


def spec_for(dataset: str, **changes) -> RobustnessSpec:
    """The default spec of ``dataset`` (its :data:`DEFAULT_EPS`), with ``changes``; ``eps=None``
    (or absent) takes the default."""
    if changes.get("eps") is None:
        if dataset not in DEFAULT_EPS:
            raise ValueError(f"no default epsilon for dataset {dataset!r}; give one")
        changes["eps"] = DEFAULT_EPS[dataset]
    return RobustnessSpec(**changes)


def _features(model: nn.Module, x: torch.Tensor, batch_size: int, device: torch.device) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([model.features(x[i:i + batch_size].to(device)).double().cpu()
                          for i in range(0, len(x), batch_size)])


def zero_gradient_fraction(model: nn.Module, pixels: torch.Tensor, labels: torch.Tensor, space,
                           device: torch.device | str = "cpu", batch_size: int = 250) -> float:
    """Fraction of images whose float32 gradient of the τ = 1 cross-entropy with respect to the
    pixels is exactly zero: the softmax has saturated (p_y rounds to 1), so every attack that
    follows this gradient (FGSM, PGD on the cross-entropy) cannot move — gradient masking, not
    robustness. The CW margin attack does not go through the softmax and is immune to it."""
    device = torch.device(device)
    net = PixelModel(model, space).to(device).eval()
    zero = 0
    for i in range(0, len(pixels), batch_size):
        x = pixels[i:i + batch_size].to(device).requires_grad_(True)
        loss = nn.functional.cross_entropy(net(x), labels[i:i + batch_size].to(device), reduction="sum")
        (grad,) = torch.autograd.grad(loss, x)
        zero += int((grad.flatten(1) == 0).all(dim=1).sum())
    return zero / max(len(pixels), 1)


def evaluate_robustness(model: nn.Module, ds: Dataset, spec: RobustnessSpec, device: torch.device | str = "cpu",
                        batch_size: int = 250) -> dict[str, float]:
    """Every measurement of ``spec`` on ``model`` (trained on ``ds``): one flat dict of floats.

    Keys: ``accuracy``, ``ece``, ``sece``, ``brier``, ``nll`` (whole test set, τ = 1);
    ``n_attacked``, ``clean_acc`` (the first ``n_test`` images); ``zero_grad_frac``
    (:func:`zero_gradient_fraction`); ``<attack>_acc`` for fgsm, pgd,
    cw and ``pgd_targeted_success`` (fraction classified as their random target);
    ``<corruption>_acc`` per corruption and ``corruption_acc`` (their mean); ``proto_var``,
    ``proto_cv2`` (:func:`fedcal.robustness.geometry.negative_prototype_spread`).
    """
    device = torch.device(device)
    model = model.to(device).eval()
    space = pixel_space(ds.name)
    out: dict[str, float] = {}
    logits = predict_logits(model, ds.x_test, 1000, device)
    if not torch.isfinite(logits).all():
        raise ValueError("the model produces non-finite logits on the test set: nothing to attack")
    out.update(calibration_metrics(logits, ds.y_test, spec.n_bins))
    n = min(spec.n_test, len(ds.y_test))
    x, y = ds.x_test[:n], ds.y_test[:n]
    pixels = space.to_pixels(x)
    out["n_attacked"] = float(n)
    out["clean_acc"] = float((predict_pixels(model, pixels, space, device=device) == y).float().mean())
    out["zero_grad_frac"] = zero_gradient_fraction(model, pixels, y, space, device)
    for attack in spec.attacks:
        targets = random_targets(y, ds.num_classes, spec.seed) if attack == "pgd_targeted" else None
        adv = adversarial_examples(model, pixels, y, space, ds.num_classes, attack, spec.budget, targets=targets,
                                   seed=spec.seed, batch_size=batch_size, device=device)
        pred = predict_pixels(model, adv, space, device=device)
        if attack == "pgd_targeted":
            out["pgd_targeted_success"] = float((pred == targets).float().mean())
        else:
            out[f"{attack}_acc"] = float((pred == y).float().mean())
    if spec.corruptions:
        images = (pixels.permute(0, 2, 3, 1) * 255.0).round().to(torch.uint8).numpy()
        accs = []
        for name in spec.corruptions:
            bad = corrupt(images, name, spec.severity, spec.seed)
            bad_pixels = torch.from_numpy(bad).permute(0, 3, 1, 2).float() / 255.0
            acc = float((predict_pixels(model, bad_pixels, space, device=device) == y).float().mean())
            out[f"{name}_acc"] = acc
            accs.append(acc)
        out["corruption_acc"] = float(np.mean(accs))
    if hasattr(model, "features") and hasattr(model, "head"):
        feats = _features(model, x, 1000, device)
        out.update(negative_prototype_spread(feats, model.head.weight.detach().cpu(), y))
    return out
