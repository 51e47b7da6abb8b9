"""Post-hoc calibration of a (global) model (SPEC §5), flwr-free.

Each calibrator is fitted on a held-out calibration set (logits + labels; n_cal may be as
small as 10) and applied to test logits, scikit-learn style::

    cal = TemperatureScaling().fit(cal_logits, cal_labels)
    probs = cal.predict_proba(test_logits)          # (n, C) torch.float64, rows sum to 1
    probs_metrics(probs, test_labels)               # accuracy / ece / sece / brier / nll

Inputs may be torch tensors, numpy arrays or nested lists; they are validated and converted
to CPU ``torch.float64`` (labels to ``int64``) by the shared checks of :mod:`fedcal.checks`.
Outputs are CPU ``torch.float64`` tensors.

Calibrators:

- :class:`TemperatureScaling` — softmax(z / T), one scalar T (Guo et al., 2017).
- :class:`PlattScaling` — σ(a·s + b) on the top-class confidence or top-logit margin
  (Platt, 1999), fitted to correctness.
- :class:`IsotonicCalibration` — isotonic regression of correctness on top-class
  confidence (Zadrozny & Elkan, 2002).
- :class:`HistogramBinning` — per-bin accuracy of equal-width confidence bins
  (Zadrozny & Elkan, 2001).
- :class:`PlattOneVsRest`, :class:`IsotonicOneVsRest` — the one-vs-rest variants (as
  scikit-learn's ``CalibratedClassifierCV`` computes them): a calibrator per class, renormalised.

Platt, isotonic and histogram are *top-label* calibrators: they only re-estimate the confidence of the
predicted class. To return a full probability vector they keep the predicted class (the
argmax of the original softmax), give it the recalibrated confidence, and spread the
remaining mass 1 − c' over the other classes in proportion to their original
probabilities (see :func:`redistribute_top_confidence`). The argmax, hence accuracy, is
therefore unchanged.

Binning uses :func:`fedcal.metrics.bin_index` (equal-width, right-closed bins over
(0, 1]) so histogram binning and the ECE share the same bins.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import minimize, minimize_scalar
from sklearn.exceptions import NotFittedError  # subclass of ValueError (and AttributeError)
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from fedcal.checks import _check_float64, _check_labels, _check_logits, _check_logits_labels, _check_probs
from fedcal.metrics import bin_index, metrics_from_probs

__all__ = [
    "CALIBRATORS",
    "DEFAULT_CALIBRATORS",
    "IsotonicOneVsRest",
    "OneVsRestCalibration",
    "PlattOneVsRest",
    "HistogramBinning",
    "IsotonicCalibration",
    "PlattScaling",
    "TemperatureScaling",
    "calibrate",
    "probs_metrics",
    "redistribute_top_confidence",
    "split_calibration",
]

_NLL_FLOOR = 1e-12  # probs_metrics: NLL = −mean log(max(p_y, 1e-12))
_ARGMAX_MARGIN = 1e-12  # redistribution: the predicted class stays strictly on top by this much


# --------------------------------------------------------------------------------------
# Input validation (the shared checks of fedcal.checks; calibrators need C >= 2)
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# Shared pieces
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# Temperature scaling
# --------------------------------------------------------------------------------------


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

        def nll(u: float) -> float:
            return float(F.cross_entropy(z * math.exp(-u), y))

        res = minimize_scalar(
            nll, bounds=(math.log(self.t_min), math.log(self.t_max)), method="bounded",
            options={"xatol": self.xatol},
        )
        self.temperature_ = float(math.exp(res.x))
        self.nll_ = float(res.fun)
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


# --------------------------------------------------------------------------------------
# Top-label calibrators
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# Registry, one-shot helper, metrics on probabilities, calibration split
# --------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------
# One-vs-rest calibrators (scikit-learn's multiclass Platt / isotonic)
# --------------------------------------------------------------------------------------


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


CALIBRATORS: dict[str, type] = {
    "temperature": TemperatureScaling,
    "platt": PlattScaling,
    "isotonic": IsotonicCalibration,
    "histogram": HistogramBinning,
    "platt-ovr": PlattOneVsRest,
    "isotonic-ovr": IsotonicOneVsRest,
}
#: the calibrators of SPEC §5, which ``fedcal posthoc`` fits unless told otherwise
DEFAULT_CALIBRATORS = ("temperature", "platt", "isotonic", "histogram")


def calibrate(name: str, cal_logits: Any, cal_labels: Any, test_logits: Any, **kw: Any) -> torch.Tensor:
    """Fit ``CALIBRATORS[name](**kw)`` on (cal_logits, cal_labels) and return its
    ``predict_proba(test_logits)``: (n_test, C) float64 probabilities."""
    if name not in CALIBRATORS:
        raise ValueError(f"unknown calibrator {name!r}; choose from {sorted(CALIBRATORS)}")
    return CALIBRATORS[name](**kw).fit(cal_logits, cal_labels).predict_proba(test_logits)


def probs_metrics(probs: Any, labels: Any, n_bins: int = 15) -> dict[str, float]:
    """Accuracy, ECE, signed ECE, Brier score and NLL from probabilities (n, C).

    Same definitions and bins as :func:`fedcal.metrics.calibration_metrics` (which takes
    logits): confidence = max_k p_k, prediction = argmax_k p_k (first on ties),
    ECE = Σ_b (|B_b|/n)·|acc_b − conf_b|, sECE = Σ_b (|B_b|/n)·(acc_b − conf_b) (negative =
    over-confident), Brier = mean Σ_k (p_k − 1[k = y])². NLL = −mean log(max(p_y, 1e-12)),
    the floor keeping it finite when a calibrator puts zero mass on the true class.
    Rows must lie in [0, 1] and sum to 1 (tolerance 1e-6).
    """
    p = _check_probs(probs, "probs", min_classes=2, range_tol=1e-9, sum_atol=1e-6)
    y = _check_labels(labels, p.shape[0], p.shape[1])
    p_true = p.gather(1, y[:, None]).squeeze(1)
    return metrics_from_probs(p, y, n_bins, float(-torch.log(p_true.clamp(min=_NLL_FLOOR)).mean()))


def split_calibration(n: int, n_cal: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded held-out split of range(n): ``n_cal`` calibration indices and the rest.

    Draws a permutation with ``np.random.default_rng(seed)`` (as the client partitioners
    do); the first n_cal entries are the calibration set. Both index arrays are sorted
    int64 numpy arrays, disjoint, covering range(n). Requires 2 ≤ n_cal < n.
    """
    if int(n) != n or int(n_cal) != n_cal:
        raise ValueError(f"n and n_cal must be integers, got n={n}, n_cal={n_cal}")
    n, n_cal = int(n), int(n_cal)
    if n_cal < 2:
        raise ValueError(f"n_cal must be >= 2, got {n_cal}")
    if n_cal >= n:
        raise ValueError(f"n_cal must be < n (some samples must remain for testing), got n_cal={n_cal}, n={n}")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[:n_cal]), np.sort(perm[n_cal:])
