"""The one-vs-rest calibrators (scikit-learn's multiclass Platt / isotonic): one binary map per
class, the results renormalised."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from scipy.optimize import minimize
from sklearn.isotonic import IsotonicRegression

from fedcal.calibrate.common import _NotFittedMixin, _fit_inputs
from fedcal.checks import _check_logits



def _platt_fit(score: np.ndarray, positive: np.ndarray) -> tuple[float, float]:
    """Platt's fit of P(positive | s) = σ(a·s + b): the log-loss against Platt's smoothed targets
    ((N₊ + 1)/(N₊ + 2) for positives, 1/(N₋ + 2) for negatives, which keep a and b finite on
    separable data), minimised by L-BFGS from a = 0, b = log((N₊ + 1)/(N₋ + 1))."""
    n_pos = float(positive.sum())
    n_neg = float(len(positive) - n_pos)
    t = np.where(positive, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))

    def loss(ab: np.ndarray) -> tuple[float, np.ndarray]:
        u = ab[0] * score + ab[1]
        # −[t log σ(u) + (1 − t) log σ(−u)] = softplus(u) − t·u, evaluated without overflow
        value = float(np.sum(np.logaddexp(0.0, u) - t * u))
        g = 1.0 / (1.0 + np.exp(-u)) - t
        return value, np.array([float(np.sum(g * score)), float(np.sum(g))])

    res = minimize(loss, np.array([0.0, math.log((n_pos + 1.0) / (n_neg + 1.0))]), jac=True, method="L-BFGS-B")
    return float(res.x[0]), float(res.x[1])


class OneVsRestCalibration(_NotFittedMixin):
    """Multiclass calibration one class at a time, as scikit-learn's ``CalibratedClassifierCV``
    does it: per class k a binary calibrator of the logit z_k against 1[y = k] — Platt's sigmoid
    (``method="sigmoid"``, Platt 1999, with his smoothed targets) or isotonic regression
    (``method="isotonic"``; Zadrozny & Elkan, KDD 2002, who introduced this one-vs-rest
    reduction) — and the K calibrated scores renormalised to sum to 1 (uniform where all are 0).

    Unlike the top-label calibrators above, nothing here fits the predicted class's confidence
    to its accuracy directly: the confidence is a ratio of K separately fitted maps, and the
    argmax (hence accuracy) may change. This is what most libraries and papers mean by
    "Platt scaling" or "isotonic regression" for a multiclass model; fedcal keeps it beside the
    top-label variants to compare both readings (docs/results.md).

    Written on scikit-learn's IsotonicRegression and scipy's L-BFGS rather than through
    ``CalibratedClassifierCV`` itself: for a fixed model (``FrozenEstimator``) it still
    cross-validates with ``StratifiedKFold(5)``, which refuses a calibration set holding fewer
    than 5 samples of a class — and calibration sets of 10 samples are part of the study.
    The per-class fits and the normalisation are the ones it performs.

    Attributes after fit: ``maps_`` (per class: (a, b) or the fitted IsotonicRegression),
    ``num_classes_``.
    """

    _fitted_attr = "num_classes_"

    def __init__(self, method: str = "sigmoid"):
        if method not in ("sigmoid", "isotonic"):
            raise ValueError(f"method must be 'sigmoid' or 'isotonic', got {method!r}")
        self.method = method

    def fit(self, logits: Any, labels: Any):
        """Fit on calibration logits (n, C) and integer labels (n,); returns self."""
        z, y = _fit_inputs(logits, labels)
        z, y = z.numpy(), y.numpy()
        self.maps_ = []
        for k in range(z.shape[1]):
            positive = y == k
            if self.method == "sigmoid":
                self.maps_.append(_platt_fit(z[:, k], positive))
            else:
                self.maps_.append(IsotonicRegression(out_of_bounds="clip").fit(z[:, k], positive.astype(float)))
        self.num_classes_ = int(z.shape[1])
        return self

    def predict_proba(self, logits: Any) -> torch.Tensor:
        """Full (n, C) float64 probabilities (rows sum to 1)."""
        self._check_fitted()
        z = _check_logits(logits, min_classes=2)
        self._check_classes(z)
        z = z.numpy()
        if self.method == "sigmoid":
            scores = np.stack([0.5 * (1.0 + np.tanh(0.5 * (a * z[:, k] + b)))  # σ without overflow
                               for k, (a, b) in enumerate(self.maps_)], axis=1)
        else:
            scores = np.stack([iso.predict(z[:, k]) for k, iso in enumerate(self.maps_)], axis=1)
        total = scores.sum(1, keepdims=True)
        probs = np.where(total > 0, scores / np.where(total > 0, total, 1.0), 1.0 / self.num_classes_)
        return torch.as_tensor(probs, dtype=torch.float64)


class PlattOneVsRest(OneVsRestCalibration):
    """:class:`OneVsRestCalibration` with Platt's sigmoid per class."""

    def __init__(self):
        super().__init__("sigmoid")


class IsotonicOneVsRest(OneVsRestCalibration):
    """:class:`OneVsRestCalibration` with isotonic regression per class."""

    def __init__(self):
        super().__init__("isotonic")
