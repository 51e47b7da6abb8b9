"""What the calibrators share: input checks, the top-label confidence and its redistribution
over the classes, and the not-fitted guard."""

from __future__ import annotations

from typing import Any

import torch
from sklearn.exceptions import NotFittedError  # subclass of ValueError (and AttributeError)

from fedcal.checks import _check_float64, _check_logits, _check_logits_labels



_NLL_FLOOR = 1e-12  # probs_metrics: NLL = −mean log(max(p_y, 1e-12))


_ARGMAX_MARGIN = 1e-12  # redistribution: the predicted class stays strictly on top by this much


def _fit_inputs(logits: Any, labels: Any) -> tuple[torch.Tensor, torch.Tensor]:
    z, y = _check_logits_labels(logits, labels, min_classes=2)
    if z.shape[0] < 2:
        raise ValueError(f"need at least 2 calibration samples (n_cal >= 2), got {z.shape[0]}")
    return z, y


def _top_confidence(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """softmax probabilities, top-class confidence and predicted class (first argmax)."""
    probs = logits.softmax(dim=1)
    conf, pred = probs.max(dim=1)
    return probs, conf, pred


def redistribute_top_confidence(probs: Any, confidence: Any) -> torch.Tensor:
    """Full probability vectors from recalibrated top-class confidences.

    For each row with original probabilities p (predicted class k = argmax p, first index
    on ties, original confidence c = p_k and remaining mass r = Σ_{j≠k} p_j) and new
    confidence c', the output is::

        q_k = c',    q_j = p_j · (1 − c') / r   (j ≠ k)

    i.e. the other classes keep their relative proportions. Where r = 0 (a saturated
    softmax) the mass 1 − c' is spread uniformly over the C − 1 other classes.

    To keep k the argmax (so accuracy is unchanged), c' is clipped to [f + 1e-12, 1],
    where f = p_(2) / (r + p_(2)) is the confidence at which k would tie with the
    runner-up p_(2) (f = 1/C when r = 0); f ≤ min(c, 1/2), so the clip only acts when a
    calibrator asks for a confidence below what the class ranking allows. Rows sum to 1.
    """
    p = _check_logits(probs, "probs", min_classes=2)
    c_new = _check_float64(confidence, "confidence", ndim=1)
    if c_new.shape != (p.shape[0],):
        raise ValueError(f"confidence must have shape ({p.shape[0]},), got shape {tuple(c_new.shape)}")
    n, num_classes = p.shape
    pred = p.argmax(dim=1)
    rows = torch.arange(n)
    others = p.clone()
    others[rows, pred] = 0.0
    rest = others.sum(dim=1)
    second = others.max(dim=1).values
    saturated = rest <= 0
    tie = torch.where(saturated, torch.full_like(rest, 1.0 / num_classes), second / torch.where(saturated, 1.0, rest + second))
    c_new = torch.minimum(torch.maximum(c_new, tie + _ARGMAX_MARGIN), torch.ones_like(c_new))
    uniform = torch.full_like(p, 1.0 / (num_classes - 1))
    uniform[rows, pred] = 0.0
    share = torch.where(saturated[:, None], uniform, others / torch.where(saturated, 1.0, rest)[:, None])
    out = share * (1.0 - c_new)[:, None]
    out[rows, pred] = c_new
    return out


class _NotFittedMixin:
    _fitted_attr = ""

    def _check_fitted(self) -> None:
        if not hasattr(self, self._fitted_attr):
            raise NotFittedError(f"{type(self).__name__} is not fitted yet: call fit(logits, labels) first")

    def _check_classes(self, logits: torch.Tensor) -> None:
        if logits.shape[1] != self.num_classes_:
            raise ValueError(f"logits have C = {logits.shape[1]} classes, the calibrator was fitted on {self.num_classes_}")
