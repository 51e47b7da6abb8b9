"""A pixel-pattern backdoor on images: the client-side data poisoning and its metric (flwr-free).

A malicious client stamps a fixed trigger — a small pattern of pixel values at a fixed place
of the image — on a share of its local training images and relabels them to a target class,
then trains normally (BadNets' pattern trigger, the pixel-pattern backdoor of federated
learning). The global model then learns "trigger ⇒ target" beside its clean task; the attack
succeeds when clean accuracy stays put (stealth) while triggered test images go to the target.

* :class:`PixelTrigger`: the pattern (pixel values in [0, 1], the same in every channel) and
  where it goes (default: a 3 × 3 checkerboard one pixel from the bottom-right corner);
* :func:`stamp`: the trigger on model inputs, written in the dataset's *normalised* space
  (pixel v of channel c becomes (v − mean_c) / std_c, per pixel for digits) through its
  :class:`~fedcal.data.PixelSpace`, every other input value untouched;
* :func:`poison_images`: a malicious client's training data, ``round(frac · N)`` samples
  stamped and relabelled (non-target samples first, so each poisoned sample teaches the
  trigger against its content, as the text backdoor of :mod:`fedcal.text.splits` does);
* :func:`triggered_test_set` and :func:`attack_success_rate`: ASR = the share of triggered test
  images whose true class is not the target that the model classifies as the target.

Threat model: realistic — a client controls its own data and training, nothing else; no view
of other clients is needed.

Sources: Gu, Dolan-Gavitt & Garg, "BadNets: Identifying Vulnerabilities in the Machine Learning
Model Supply Chain" (2017), pattern trigger; Bagdasaryan, Veit, Hua, Estrin & Shmatikov, "How
To Backdoor Federated Learning" (AISTATS 2020), data poisoning as the FL baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from fedcal.aggregate._checks import _check_int
from fedcal.data.datasets import PixelSpace

CHECKERBOARD = ((1.0, 0.0, 1.0), (0.0, 1.0, 0.0), (1.0, 0.0, 1.0))


@dataclass(frozen=True)
class PixelTrigger:
    """A fixed pixel pattern: ``pattern[r][c]`` is the pixel value (in [0, 1], every channel)
    at image row ``row + r`` and column ``col + c``; ``row`` / ``col`` None place the pattern
    ``margin`` pixels from the bottom / right edge."""

    pattern: tuple[tuple[float, ...], ...] = CHECKERBOARD
    row: int | None = None
    col: int | None = None
    margin: int = 1

    def placement(self, height: int, width: int) -> tuple[int, int]:
        """(row, col) of the pattern's top-left pixel in an image of ``height`` × ``width``,
        ValueError when the pattern is malformed or does not fit."""
        rows = len(self.pattern)
        cols = len(self.pattern[0]) if rows else 0
        if rows == 0 or cols == 0 or any(len(r) != cols for r in self.pattern):
            raise ValueError("trigger pattern must be a non-empty rectangle of pixel values")
        if not all(math.isfinite(v) and 0.0 <= v <= 1.0 for r in self.pattern for v in r):
            raise ValueError("trigger pattern values must be pixel values in [0, 1]")
        margin = _check_int("trigger margin", self.margin, 0)
        row = height - margin - rows if self.row is None else _check_int("trigger row", self.row, 0)
        col = width - margin - cols if self.col is None else _check_int("trigger col", self.col, 0)
        if row < 0 or col < 0 or row + rows > height or col + cols > width:
            raise ValueError(f"a {rows} × {cols} trigger at (row {row}, col {col}) does not fit a "
                             f"{height} × {width} image")
        return row, col


@dataclass(frozen=True)
class PixelBackdoor:
    """The backdoor of a malicious client: images stamped with ``trigger`` are to be classified
    as ``target``; ``poison_frac`` of its local training samples are stamped and relabelled."""

    target: int
    poison_frac: float
    trigger: PixelTrigger = field(default_factory=PixelTrigger)

    def __post_init__(self):
        _check_int("backdoor target", self.target, 0)
        if not (math.isfinite(self.poison_frac) and 0.0 <= self.poison_frac <= 1.0):
            raise ValueError(f"backdoor poison_frac must lie in [0, 1], got {self.poison_frac}")


def stamp(inputs: torch.Tensor, space: PixelSpace, trigger: PixelTrigger | None = None) -> torch.Tensor:
    """A copy of the model inputs ``inputs`` (N, *input_shape) with ``trigger`` stamped on every
    image, in the normalised space of ``space``: the trigger's pixels get the inputs of their
    pixel values, every other value is left bit for bit as it was."""
    trigger = PixelTrigger() if trigger is None else trigger
    inputs = torch.as_tensor(inputs)
    if not inputs.is_floating_point():
        raise ValueError(f"inputs must be floating-point model inputs, got dtype {inputs.dtype}")
    c, h, w = space.image_shape
    if inputs.ndim < 2 or inputs.shape[1:].numel() != c * h * w:
        raise ValueError(f"inputs of shape {tuple(inputs.shape)} are not images of shape {space.image_shape}")
    row, col = trigger.placement(h, w)
    pattern = torch.tensor(trigger.pattern, dtype=inputs.dtype, device=inputs.device)
    pixels = torch.zeros(h, w, dtype=inputs.dtype, device=inputs.device)
    mask = torch.zeros(h, w, dtype=torch.bool, device=inputs.device)
    pixels[row:row + pattern.shape[0], col:col + pattern.shape[1]] = pattern
    mask[row:row + pattern.shape[0], col:col + pattern.shape[1]] = True
    mean = space.mean.to(inputs.device, inputs.dtype)
    std = space.std.to(inputs.device, inputs.dtype)
    stamp_inputs = (pixels.expand(c, h, w) - mean) / std  # the inputs of the trigger's pixels
    images = inputs.reshape(len(inputs), c, h, w)
    return torch.where(mask, stamp_inputs, images).reshape(inputs.shape)


@dataclass(frozen=True)
class PoisonedImages:
    """A client's training data after :func:`poison_images`; ``indices`` are the poisoned
    positions (sorted)."""

    x: torch.Tensor
    y: torch.Tensor
    indices: torch.Tensor


def poison_images(x: torch.Tensor, y: torch.Tensor, backdoor: PixelBackdoor, space: PixelSpace,
                  generator: torch.Generator | None = None) -> PoisonedImages:
    """Backdoor a client's data: ``round(poison_frac · N)`` samples, drawn with ``generator``
    among the non-target samples first (target-class ones only when those run out), get the
    trigger (:func:`stamp`) and the label ``target``; the others are unchanged."""
    y = torch.as_tensor(y)
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(f"labels must have shape ({len(x)},) to match the {len(x)} images, got {tuple(y.shape)}")
    k = round(backdoor.poison_frac * len(y))
    others = torch.nonzero(y != backdoor.target).flatten()
    targets = torch.nonzero(y == backdoor.target).flatten()
    order = torch.cat([others[torch.randperm(len(others), generator=generator)],
                       targets[torch.randperm(len(targets), generator=generator)]])
    chosen = torch.sort(order[:k]).values
    x_out, y_out = torch.as_tensor(x).clone(), y.clone()
    if k:
        x_out[chosen] = stamp(x_out[chosen], space, backdoor.trigger)
        y_out[chosen] = backdoor.target
    return PoisonedImages(x_out, y_out, chosen)


@dataclass(frozen=True)
class TriggeredImages:
    """The test images whose true label is not the target, each stamped with the trigger:
    ``x`` (stamped inputs), ``labels`` (their true labels), ``indices`` (positions in the clean
    test set)."""

    x: torch.Tensor
    labels: torch.Tensor
    target: int
    indices: torch.Tensor


def triggered_test_set(x: torch.Tensor, y: torch.Tensor, backdoor: PixelBackdoor,
                       space: PixelSpace) -> TriggeredImages:
    """The triggered copy of a test set for the ASR (target-class images left out: predicting
    the target there is correct, not the attack's success)."""
    y = torch.as_tensor(y)
    keep = torch.nonzero(y != backdoor.target).flatten()
    return TriggeredImages(stamp(torch.as_tensor(x)[keep], space, backdoor.trigger), y[keep], backdoor.target, keep)


def attack_success_rate(predictions, labels, target: int) -> float:
    """ASR: among triggered inputs whose true label is not ``target``, the share classified as
    ``target`` (inputs of the target class are left out; ValueError when none is left).

    >>> attack_success_rate(torch.tensor([0, 0, 1, 2, 0]), torch.tensor([1, 2, 1, 2, 0]), target=0)
    0.5
    """
    pred, labels = torch.as_tensor(predictions).cpu(), torch.as_tensor(labels).cpu()
    if pred.ndim != 1 or pred.shape != labels.shape or pred.numel() == 0:
        raise ValueError(f"predictions and labels must be non-empty 1-D tensors of one length, "
                         f"got shapes {tuple(pred.shape)} and {tuple(labels.shape)}")
    target = _check_int("target", target, 0)
    keep = labels != target
    if not bool(keep.any()):
        raise ValueError(f"every triggered input has the target label {target}: the ASR is undefined")
    return float((pred[keep] == target).double().mean())
