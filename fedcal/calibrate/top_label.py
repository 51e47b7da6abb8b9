"""The top-label calibrators of SPEC §5: temperature scaling, Platt scaling, isotonic regression
and histogram binning of the predicted class's confidence."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from fedcal.calibrate.common import _NotFittedMixin, _fit_inputs, _top_confidence, redistribute_top_confidence
from fedcal.checks import _check_logits
from fedcal.temperature import fit_temperature
from fedcal.metrics import bin_index



class TemperatureScaling(_NotFittedMixin):
    """Temperature scaling (Guo et al., "On Calibration of Modern Neural Networks", 2017).

    Fits one scalar T > 0 minimising the calibration-set NLL of softmax(z / T)::

        T* = argmin_T  −(1/n) Σ_i log softmax(z_i / T)_{y_i}

    Predicts softmax(z / T*); dividing by T preserves the argmax, so accuracy is unchanged.

    Optimisation is over u = log T with scipy's bounded Brent search on
    [log t_min, log t_max]: the NLL is convex in β = 1/T (log-sum-exp of a linear function
    minus a linear function) and u ↦ β = e^{−u} is monotone, so the objective is unimodal
    in u and a 1-D bracketed search finds the global minimum. If the optimum lies outside
    the bounds (e.g. every calibration sample correct with a large margin → T → 0) the
    nearest bound is returned.

    Attributes after fit: ``temperature_`` (float), ``num_classes_``, ``nll_`` (fitted NLL).
    """

    _fitted_attr = "temperature_"

    def __init__(self, t_min: float = 1e-3, t_max: float = 1e3, xatol: float = 1e-6):
        if not (0 < t_min < t_max < math.inf):
            raise ValueError(f"need 0 < t_min < t_max < inf, got t_min={t_min}, t_max={t_max}")
        self.t_min, self.t_max, self.xatol = float(t_min), float(t_max), float(xatol)

    def fit(self, logits: Any, labels: Any) -> "TemperatureScaling":
        """Fit T on calibration logits (n, C) and integer labels (n,); returns self."""
        z, y = _fit_inputs(logits, labels)
        self.temperature_, self.nll_ = fit_temperature(z, y, self.t_min, self.t_max, self.xatol)
        self.num_classes_ = int(z.shape[1])
        return self

    def transform(self, logits: Any) -> torch.Tensor:
        """Calibrated logits z / T (float64); feed to ``fedcal.metrics.calibration_metrics``."""
        self._check_fitted()
        z = _check_logits(logits, min_classes=2)
        self._check_classes(z)
        return z / self.temperature_

    def predict_proba(self, logits: Any) -> torch.Tensor:
        """softmax(z / T), shape (n, C), float64."""
        return self.transform(logits).softmax(dim=1)

    def predict_confidence(self, logits: Any) -> torch.Tensor:
        """Calibrated top-class confidence max_k softmax(z / T)_k, shape (n,)."""
        return self.predict_proba(logits).max(dim=1).values


class _TopLabelCalibrator(_NotFittedMixin):
    """Re-estimates P(correct | score) of the predicted class; see module docstring."""

    _fitted_attr = "num_classes_"

    def _score(self, logits: torch.Tensor, conf: torch.Tensor) -> torch.Tensor:
        return conf

    def _fit_map(self, score: np.ndarray, correct: np.ndarray) -> None:  # pragma: no cover
        raise NotImplementedError

    def _map(self, score: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def fit(self, logits: Any, labels: Any):
        """Fit on calibration logits (n, C) and integer labels (n,); returns self."""
        z, y = _fit_inputs(logits, labels)
        _, conf, pred = _top_confidence(z)
        correct = (pred == y).double()
        self._fit_map(self._score(z, conf).numpy(), correct.numpy())
        self.num_classes_ = int(z.shape[1])
        self.n_cal_ = int(z.shape[0])
        self.cal_accuracy_ = float(correct.mean())
        return self

    def predict_confidence(self, logits: Any) -> torch.Tensor:
        """Recalibrated estimate of P(prediction correct), shape (n,), in [0, 1].

        This is the raw calibration map; :meth:`predict_proba` may clip it from below to
        keep the predicted class on top (see :func:`redistribute_top_confidence`).
        """
        self._check_fitted()
        z = _check_logits(logits, min_classes=2)
        self._check_classes(z)
        _, conf, _ = _top_confidence(z)
        mapped = self._map(self._score(z, conf).numpy())
        return torch.as_tensor(np.clip(mapped, 0.0, 1.0), dtype=torch.float64)

    def predict_proba(self, logits: Any) -> torch.Tensor:
        """Full (n, C) float64 probabilities: predicted class gets the recalibrated
        confidence, the rest is spread in proportion to the original probabilities."""
        z = _check_logits(logits, min_classes=2)
        c_new = self.predict_confidence(z)
        return redistribute_top_confidence(z.softmax(dim=1), c_new)


class PlattScaling(_TopLabelCalibrator):
    """Platt scaling (Platt, "Probabilistic Outputs for Support Vector Machines", 1999),
    multiclass through the top label.

    Score s per sample: ``feature="confidence"`` → top-class softmax probability;
    ``feature="margin"`` → top logit minus second logit. Fits

        P(correct | s) = σ(a·s + b)

    by maximum likelihood on correctness 1[argmax z = y], with scikit-learn's
    unregularised ``LogisticRegression`` (C = inf, lbfgs) on the 1-D score.

    Following Platt (1999, §2.2) the 0/1 targets are smoothed with a Laplace prior:
    correct samples get target t₊ = (N₊ + 1)/(N₊ + 2), wrong ones t₋ = 1/(N₋ + 2)
    (N₊/N₋ = number correct/wrong). The soft-target likelihood is fitted exactly by giving
    each sample twice to LogisticRegression, as label 1 with weight t and label 0 with
    weight 1 − t. This keeps the MLE finite on separable or tiny calibration sets, and in
    the degenerate cases (all correct / all wrong) gives a ≈ 0 and the constant
    confidence (n+1)/(n+2) resp. 1/(n+2), strictly inside (0, 1).

    Attributes after fit: ``coef_`` (a), ``intercept_`` (b), ``num_classes_``.
    """

    def __init__(self, feature: str = "confidence", max_iter: int = 1000):
        if feature not in ("confidence", "margin"):
            raise ValueError(f"feature must be 'confidence' or 'margin', got {feature!r}")
        self.feature = feature
        self.max_iter = int(max_iter)

    def _score(self, logits: torch.Tensor, conf: torch.Tensor) -> torch.Tensor:
        if self.feature == "confidence":
            return conf
        top2 = logits.topk(2, dim=1).values
        return top2[:, 0] - top2[:, 1]

    def _fit_map(self, score: np.ndarray, correct: np.ndarray) -> None:
        n_pos = correct.sum()
        n_neg = len(correct) - n_pos
        target = np.where(correct > 0, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
        x = np.concatenate([score, score])[:, None]
        y = np.concatenate([np.ones_like(score), np.zeros_like(score)]).astype(int)
        w = np.concatenate([target, 1 - target])
        lr = LogisticRegression(C=np.inf, solver="lbfgs", max_iter=self.max_iter, tol=1e-10)
        lr.fit(x, y, sample_weight=w)
        self.coef_ = float(lr.coef_[0, 0])
        self.intercept_ = float(lr.intercept_[0])

    def _map(self, score: np.ndarray) -> np.ndarray:
        t = self.coef_ * score + self.intercept_
        return 1.0 / (1.0 + np.exp(-t))


class IsotonicCalibration(_TopLabelCalibrator):
    """Isotonic-regression calibration (Zadrozny & Elkan, "Transforming Classifier Scores
    into Accurate Multiclass Probability Estimates", KDD 2002), through the top label.

    Fits a non-decreasing step function g minimising Σ_i (1[correct_i] − g(c_i))² over the
    top-class confidences c_i (pool-adjacent-violators), with scikit-learn's
    ``IsotonicRegression(increasing=True, y_min=0, y_max=1, out_of_bounds="clip")``;
    test confidences outside the calibration range take the end values. g is linearly
    interpolated between calibration points (scikit-learn's behaviour).

    Attributes after fit: ``isotonic_`` (the fitted IsotonicRegression), ``num_classes_``.
    """

    def _fit_map(self, score: np.ndarray, correct: np.ndarray) -> None:
        self.isotonic_ = IsotonicRegression(increasing=True, y_min=0.0, y_max=1.0, out_of_bounds="clip")
        self.isotonic_.fit(score, correct)

    def _map(self, score: np.ndarray) -> np.ndarray:
        return self.isotonic_.predict(score)


class HistogramBinning(_TopLabelCalibrator):
    """Histogram binning (Zadrozny & Elkan, "Obtaining calibrated probability estimates
    from decision trees and naive Bayesian classifiers", ICML 2001), through the top label.

    Top-class confidences are put in ``n_bins`` equal-width, right-closed bins over (0, 1]
    (:func:`fedcal.metrics.bin_index`, the ECE's bins). The calibrated confidence of bin b
    is the calibration-set accuracy in it::

        θ_b = (1/|B_b|) Σ_{i ∈ B_b} 1[correct_i]

    A bin with no calibration sample falls back to its midpoint (b + ½)/M — a
    fit-time constant, so the map does not depend on the test batch.

    Attributes after fit: ``bin_confidence_`` (θ, shape (n_bins,)), ``bin_count_``,
    ``bin_accuracy_`` (NaN for empty bins), ``num_classes_``.
    """

    def __init__(self, n_bins: int = 15):
        if int(n_bins) != n_bins or n_bins < 1:
            raise ValueError(f"n_bins must be a positive integer, got {n_bins}")
        self.n_bins = int(n_bins)

    def _fit_map(self, score: np.ndarray, correct: np.ndarray) -> None:
        b = bin_index(torch.as_tensor(score), self.n_bins).numpy()
        count = np.bincount(b, minlength=self.n_bins).astype(float)
        hits = np.bincount(b, weights=correct, minlength=self.n_bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = np.where(count > 0, hits / np.maximum(count, 1), np.nan)
        midpoint = (np.arange(self.n_bins) + 0.5) / self.n_bins
        self.bin_count_ = count
        self.bin_accuracy_ = acc
        self.bin_confidence_ = np.where(count > 0, acc, midpoint)

    def _map(self, score: np.ndarray) -> np.ndarray:
        return self.bin_confidence_[bin_index(torch.as_tensor(score), self.n_bins).numpy()]
