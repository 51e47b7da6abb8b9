"""Calibration metrics (SPEC §1), always evaluated at temperature 1.

Functional, torch in / floats out. Bins are equal-width over (0, 1], right-closed:
bin b holds confidences in (b/M, (b+1)/M]; a confidence of exactly 0 joins the first bin.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedcal.checks import _check_logits_labels

METRIC_KEYS = ("accuracy", "ece", "sece", "brier", "nll")


def bin_index(confidence: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Equal-width, right-closed bin of each confidence in [0, 1] (0 → first, 1 → last)."""
    inner = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64)[1:-1]
    return torch.bucketize(confidence.double(), inner, right=False)


def reliability_bins(logits: torch.Tensor, labels: torch.Tensor, n_bins: int = 15) -> dict[str, torch.Tensor]:
    """Reliability-diagram data per bin: edges, count, mean confidence, accuracy.

    Empty bins have count 0 and NaN confidence/accuracy.
    """
    logits, labels = _check_logits_labels(logits, labels)
    return confidence_bins(logits.softmax(dim=1), labels, n_bins)


def confidence_bins(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = 15) -> dict[str, torch.Tensor]:
    """:func:`reliability_bins` from probabilities (rows on the simplex, float64 advised)."""
    conf, pred = probs.max(dim=1)
    correct = (pred == labels).double()
    b = bin_index(conf, n_bins)
    count = torch.bincount(b, minlength=n_bins).double()
    conf_sum = torch.bincount(b, weights=conf.double(), minlength=n_bins)
    acc_sum = torch.bincount(b, weights=correct, minlength=n_bins)
    nan = torch.full_like(count, float("nan"))
    edges = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64)
    return {
        "lower": edges[:-1],
        "upper": edges[1:],
        "count": count,
        "confidence": torch.where(count > 0, conf_sum / count.clamp(min=1), nan),
        "accuracy": torch.where(count > 0, acc_sum / count.clamp(min=1), nan),
    }


def calibration_metrics(logits: torch.Tensor, labels: torch.Tensor, n_bins: int = 15) -> dict[str, float]:
    """Accuracy, ECE, signed ECE, Brier score and NLL of a classifier's logits.

    ``accuracy``/``ece`` are fractions in [0, 1] and ``sece`` in [−1, 1] (negative means
    over-confident). ``brier`` sums the squared error over classes; ``nll`` comes from
    ``log_softmax``, never ``log(softmax)``.
    """
    logits, labels = _check_logits_labels(logits, labels)
    return metrics_from_probs(logits.softmax(dim=1), labels, n_bins, float(F.cross_entropy(logits, labels)))


def metrics_from_probs(probs: torch.Tensor, labels: torch.Tensor, n_bins: int, nll: float) -> dict[str, float]:
    """Accuracy, ECE, sECE and Brier of (validated) probabilities, with a given NLL.

    Shared by :func:`calibration_metrics` (logits) and the post-hoc calibrators (which output
    probabilities), so both use exactly the same bins and definitions.
    """
    n = labels.shape[0]
    bins = confidence_bins(probs, labels, n_bins)
    weight = bins["count"] / n
    gap = torch.nan_to_num(bins["accuracy"] - bins["confidence"])  # empty bins weigh 0
    onehot = F.one_hot(labels, probs.shape[1]).double()
    return {
        "accuracy": float((probs.argmax(1) == labels).double().mean()),
        "ece": float((weight * gap.abs()).sum()),
        "sece": float((weight * gap).sum()),
        "brier": float(((probs.double() - onehot) ** 2).sum(1).mean()),
        "nll": float(nll),
    }
