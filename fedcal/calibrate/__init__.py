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

from typing import Any

import numpy as np
import torch

from fedcal.calibrate.common import _NLL_FLOOR, redistribute_top_confidence
from fedcal.calibrate.one_vs_rest import IsotonicOneVsRest, OneVsRestCalibration, PlattOneVsRest
from fedcal.calibrate.top_label import HistogramBinning, IsotonicCalibration, PlattScaling, TemperatureScaling
from fedcal.checks import _check_labels, _check_probs
from fedcal.metrics import metrics_from_probs


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
