"""Anchor-set poisoning: malicious RFD-LoRA clients that know the public anchors.

RFD-LoRA's anchors are public — every client computes its logits on them — so an adversary knows
exactly which inputs the server will distil on. Two threat models from the literature on poisoning
collaborative learning through a shared public set (Cronus, Chang et al. 2019, whose malicious
parties send crafted predictions on the public data; and the poisoning of a learner's *unlabelled*
set, Carlini, "Poisoning the Unlabeled Dataset of Semi-Supervised Learning", USENIX Security 2021,
where the adversary slips a few inputs of its own into the unlabelled pool):

* **trigger** — the public pool the anchors are drawn from is poisoned: ⌈f·A⌉ of the A anchors
  (:func:`trigger_anchor_rows`, drawn among the anchors whose true label is not the target, so
  each teaches the trigger against its content) carry the trigger word. Honest clients upload their
  models' logits on those texts like on any other; the backdoor clients upload, there, the most
  confident target-class logits the clip allows (:func:`crafted_logits`). The question is whether
  the backdoor travels through the distillation when the adversary controls both the anchors'
  content and its own uploads on them.
* **target** — the anchors are clean; each backdoor client picks the ⌈f·A⌉ anchors its own model
  is most confident are *not* the target (:func:`chosen_anchor_rows`) and uploads the target there:
  the logit-energy attack (``dst-logit-attack``) restricted to the anchors the adversary chooses,
  at the clip's full strength, aimed at the student's clean accuracy on the non-target class.

Both keep every other anchor's upload honest (the adversary's own model's logits), which keeps its
upload close to the others' where it does not attack, so dispersion weights (DIS) and
median-of-means see a disagreement only on the attacked anchors.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._checks import as_float_tensor, check_int, check_real

__all__ = ["attacked_count", "trigger_anchor_rows", "chosen_anchor_rows", "crafted_logits"]


def attacked_count(num_anchors: int, frac: float) -> int:
    """⌈frac · A⌉ anchors (at least one, at most A) for a share ``frac`` in (0, 1]."""
    num_anchors = check_int("num_anchors", num_anchors, 1)
    frac = check_real("frac", frac, low=0.0, high=1.0, strict_low=True)
    return min(num_anchors, max(1, math.ceil(frac * num_anchors - 1e-9)))


def trigger_anchor_rows(labels, frac: float, target: int, seed: int) -> np.ndarray:
    """Positions (sorted) of the anchors that carry the trigger under the ``trigger`` attack:
    :func:`attacked_count` of them, drawn with ``seed`` among the anchors whose true label
    (``labels``, one per anchor) is not ``target`` first, target-class ones only when too few."""
    labels = np.asarray(labels)
    k = attacked_count(len(labels), frac)
    rng = np.random.default_rng([int(seed), 0xA7C])
    order = np.concatenate([rng.permutation(np.flatnonzero(labels != target)),
                            rng.permutation(np.flatnonzero(labels == target))])
    return np.sort(order[:k])


def chosen_anchor_rows(z, frac: float, target: int) -> torch.Tensor:
    """The anchors an adversary with logits ``z`` (A, C) attacks under the ``target`` attack: the
    :func:`attacked_count` ones with the largest margin max_{c ≠ target} z_c − z_target (those its
    model is most sure are not the target), sorted; ties broken by position."""
    z = as_float_tensor(z, "z")
    if z.ndim != 2 or z.shape[1] < 2:
        raise ValueError(f"z must be (anchors, classes >= 2), got shape {tuple(z.shape)}")
    target = check_int("target", target, 0, z.shape[1] - 1)
    others = torch.cat([z[:, :target], z[:, target + 1:]], dim=1)
    margin = others.amax(dim=1) - z[:, target]
    k = attacked_count(z.shape[0], frac)
    order = sorted(range(z.shape[0]), key=lambda i: (-float(margin[i]), i))
    return torch.tensor(sorted(order[:k]), dtype=torch.long)


def crafted_logits(z, rows, target: int, clip: float) -> torch.Tensor:
    """``z`` (A, C) with the rows ``rows`` replaced by the most confident target-class logits the
    clip allows: +c for ``target``, −c for every other class (softmax probability of the target
    1 / (1 + (C − 1) e^{−2c})); the other rows are returned unchanged (a copy)."""
    z = as_float_tensor(z, "z")
    if z.ndim != 2:
        raise ValueError(f"z must be (anchors, classes), got shape {tuple(z.shape)}")
    clip = check_real("clip", clip, low=0.0, strict_low=True)
    target = check_int("target", target, 0, z.shape[1] - 1)
    rows = torch.as_tensor(rows, dtype=torch.long)
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= z.shape[0]):
        raise ValueError(f"rows must be anchor positions in [0, {z.shape[0]})")
    out = z.clone()
    out[rows] = -clip
    out[rows, target] = clip
    return out
