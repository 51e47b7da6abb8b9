"""White-box L∞ evasion attacks on a classifier, in pixel space (flwr-free).

The attacks come from the Adversarial Robustness Toolbox (ART, ``adversarial-robustness-toolbox``;
LF AI & Data), whose PyTorch PGD runs on this torch. torchattacks, the other maintained library,
pins ``requests~=2.25.1``, which cannot be installed next to Flower (``requests>=2.33``), so it
is not used.

All attacks see the model at temperature 1 (its plain logits), in eval mode, through
:class:`PixelModel`: inputs are pixels in [0, 1], the model's own normalisation happens inside,
so the budget ε and the clipping to [0, 1] are in pixel units, as the literature states them.

* ``fgsm``: one signed-gradient step of size ε on the cross-entropy (Goodfellow et al., 2015);
* ``pgd``: untargeted PGD-k on the cross-entropy, random start in the ε-ball (Madry et al., 2018);
* ``pgd_targeted``: PGD-k descending the cross-entropy towards a random target class ≠ label;
* ``cw``: PGD-k on the Carlini–Wagner margin max_{j≠y} z_j − z_y (untargeted, L∞).

ART draws PGD's random start from NumPy's global generator; :func:`adversarial_examples` seeds
it for the call and restores the caller's state afterwards, so results are reproducible and no
one else's stream moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedcal.data import PixelSpace
from fedcal.extras import require

ATTACKS = ("fgsm", "pgd", "pgd_targeted", "cw")


class PixelModel(nn.Module):
    """``model`` seen from pixel space: ``forward(pixels) = model(space.to_inputs(pixels))``."""

    def __init__(self, model: nn.Module, space: PixelSpace):
        super().__init__()
        self.model, self.space = model, space

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.model(self.space.to_inputs(pixels))


class MarginLoss(nn.Module):
    """Carlini–Wagner margin summed over the batch: Σ (max_{j≠y} z_j − z_y).

    Positive exactly when a sample is misclassified; PGD ascends it. Accepts integer labels or
    one-hot rows (ART passes either, depending on the loss it wraps).
    """

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if labels.ndim == 2:
            labels = labels.argmax(dim=1)
        labels = labels.long()
        true = logits.gather(1, labels[:, None]).squeeze(1)
        others = logits.masked_fill(nn.functional.one_hot(labels, logits.shape[1]).bool(), float("-inf"))
        return (others.max(dim=1).values - true).sum()


@dataclass(frozen=True)
class AttackBudget:
    """L∞ budget of the attacks: ε, PGD step size and PGD steps (pixel units)."""

    eps: float
    step: float
    steps: int = 20

    def __post_init__(self) -> None:
        if not (math.isfinite(self.eps) and 0 < self.eps <= 1):
            raise ValueError(f"attack epsilon must lie in (0, 1] (pixel units), got {self.eps!r}")
        if not (math.isfinite(self.step) and self.step > 0):
            raise ValueError(f"attack step size must be a finite number > 0, got {self.step!r}")
        if int(self.steps) != self.steps or self.steps < 1:
            raise ValueError(f"attack steps must be an integer >= 1, got {self.steps!r}")


def random_targets(labels: torch.Tensor, num_classes: int, seed: int) -> torch.Tensor:
    """A uniformly random target class ≠ the label, per sample, seeded."""
    rng = np.random.default_rng([seed, 0x7A6])
    shift = torch.from_numpy(rng.integers(1, num_classes, size=len(labels)))
    return (labels.cpu() + shift) % num_classes


def _classifier(model: nn.Module, space: PixelSpace, num_classes: int, loss: nn.Module, device: torch.device):
    require("art", "robustness", "the PGD/FGSM robustness evaluation")
    from art.estimators.classification import PyTorchClassifier

    return PyTorchClassifier(
        model=PixelModel(model, space), loss=loss, input_shape=space.image_shape, nb_classes=num_classes,
        clip_values=(0.0, 1.0), device_type="gpu" if device.type == "cuda" else "cpu")


def adversarial_examples(model: nn.Module, pixels: torch.Tensor, labels: torch.Tensor, space: PixelSpace,
                         num_classes: int, attack: str, budget: AttackBudget, *, targets: torch.Tensor | None = None,
                         seed: int = 0, batch_size: int = 250, device: torch.device | str = "cpu") -> torch.Tensor:
    """Adversarial pixel images for ``attack`` (one of :data:`ATTACKS`) within ``budget``.

    ``pixels``: (N, *image_shape) in [0, 1]; ``labels``: the true classes; ``targets``: the target
    classes of ``pgd_targeted`` (required there, ignored otherwise). The model is put in eval
    mode. Returns float32 pixels on the CPU, within ε of ``pixels`` in L∞ and inside [0, 1].
    """
    require("art", "robustness", "the PGD/FGSM robustness evaluation")
    from art.attacks.evasion import FastGradientMethod, ProjectedGradientDescentPyTorch

    if attack not in ATTACKS:
        raise ValueError(f"unknown attack {attack!r}; choose from {', '.join(ATTACKS)}")
    if attack == "pgd_targeted" and targets is None:
        raise ValueError("attack 'pgd_targeted' needs target classes")
    device = torch.device(device)
    model.to(device).eval()
    loss = MarginLoss() if attack == "cw" else nn.CrossEntropyLoss()
    clf = _classifier(model, space, num_classes, loss, device)
    if attack == "fgsm":
        art_attack = FastGradientMethod(clf, norm=np.inf, eps=budget.eps, batch_size=batch_size)
    else:
        art_attack = ProjectedGradientDescentPyTorch(
            clf, norm=np.inf, eps=budget.eps, eps_step=budget.step, max_iter=budget.steps,
            targeted=attack == "pgd_targeted", num_random_init=1, batch_size=batch_size, verbose=False)
    y = (targets if attack == "pgd_targeted" else labels).cpu().numpy()
    state = np.random.get_state()
    np.random.seed(seed % (1 << 32))
    try:
        adv = art_attack.generate(pixels.cpu().numpy().astype(np.float32), y=y)
    finally:
        np.random.set_state(state)
    return torch.from_numpy(adv).float()


@torch.no_grad()
def predict_pixels(model: nn.Module, pixels: torch.Tensor, space: PixelSpace, batch_size: int = 1000,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """Predicted classes (at τ = 1) of pixel images, in eval mode."""
    device = torch.device(device)
    net = PixelModel(model, space).to(device).eval()
    out = [net(pixels[i:i + batch_size].to(device)).argmax(dim=1).cpu() for i in range(0, len(pixels), batch_size)]
    return torch.cat(out) if out else torch.empty(0, dtype=torch.int64)
