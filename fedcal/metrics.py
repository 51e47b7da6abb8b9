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
    bins = _confidence_bins_batch(probs.unsqueeze(0), labels, n_bins)
    return {k: v[0] if k in ("count", "confidence", "accuracy") else v for k, v in bins.items()}


def confidence_calibration(confidence: torch.Tensor, correct: torch.Tensor, n_bins: int = 15) -> dict:
    """ECE and signed ECE from each prediction's top-class ``confidence`` (n,) and whether it was
    ``correct`` (n,: 0/1), with the reliability bins: ``{"ece", "sece", "bins"}``. The same bins and
    definitions as :func:`calibration_metrics`, for predictions too many to hold as probability
    rows at once (a language model's next-token distributions)."""
    confidence, correct = torch.as_tensor(confidence).double(), torch.as_tensor(correct).double()
    if confidence.ndim != 1 or confidence.shape != correct.shape or not len(confidence):
        raise ValueError(f"confidence and correct must be non-empty (n,) tensors of one shape, got "
                         f"{tuple(confidence.shape)} and {tuple(correct.shape)}")
    bins = _bins_from_confidence(confidence[None], correct[None], n_bins)
    ece, sece = _ece_sece(bins, len(confidence))
    return {"ece": float(ece[0]), "sece": float(sece[0]),
            "bins": {k: v[0] if k in ("count", "confidence", "accuracy") else v for k, v in bins.items()}}


def _ece_sece(bins: dict[str, torch.Tensor], n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ECE, signed ECE) of R prediction sets of ``n`` predictions from their bins: (R,) each."""
    weight = bins["count"] / n
    gap = torch.nan_to_num(bins["accuracy"] - bins["confidence"])  # empty bins weigh 0
    return (weight * gap.abs()).sum(-1), (weight * gap).sum(-1)


def _confidence_bins_batch(probs: torch.Tensor, labels: torch.Tensor, n_bins: int) -> dict[str, torch.Tensor]:
    """:func:`confidence_bins` of R classifiers at once: probs (R, n, C) → count, confidence and
    accuracy of shape (R, n_bins) (edges (n_bins,)); each run's bins are its own bincount range."""
    conf, pred = probs.max(dim=-1)
    return _bins_from_confidence(conf, (pred == labels).double(), n_bins)


def binned_sums(conf: torch.Tensor, correct: torch.Tensor, n_bins: int) -> tuple[torch.Tensor, ...]:
    """Per-bin count, confidence sum and correct sum of R prediction sets: (R, n_bins) each."""
    runs = conf.shape[0]
    b = (bin_index(conf, n_bins) + n_bins * torch.arange(runs).unsqueeze(1)).reshape(-1)
    size = runs * n_bins
    count = torch.bincount(b, minlength=size).double().view(runs, n_bins)
    conf_sum = torch.bincount(b, weights=conf.double().reshape(-1), minlength=size).view(runs, n_bins)
    acc_sum = torch.bincount(b, weights=correct.double().reshape(-1), minlength=size).view(runs, n_bins)
    return count, conf_sum, acc_sum


def _bins_from_confidence(conf: torch.Tensor, correct: torch.Tensor, n_bins: int) -> dict[str, torch.Tensor]:
    """Reliability bins of R prediction sets: confidence and correctness (R, n)."""
    count, conf_sum, acc_sum = binned_sums(conf, correct, n_bins)
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


def calibration_metrics_batch(logits: torch.Tensor, labels: torch.Tensor, n_bins: int = 15) -> list[dict[str, float]]:
    """:func:`calibration_metrics` of R classifiers on one labelled set, in one pass: logits
    (R, n, C) → R dicts (the batched engine evaluates every run of a batch this way)."""
    logits = torch.as_tensor(logits)
    if logits.ndim != 3:
        raise ValueError(f"logits must be (R, n, C), got shape {tuple(logits.shape)}")
    runs, n, classes = logits.shape
    flat, labels = _check_logits_labels(logits.reshape(runs * n, classes), torch.as_tensor(labels).repeat(runs))
    z, labels = flat.view(runs, n, classes), labels[:n]
    nll = F.cross_entropy(z.transpose(1, 2), labels.expand(runs, n), reduction="none").mean(dim=1)
    return _metrics_batch(z.softmax(dim=-1), labels, n_bins, nll)


def metrics_from_probs(probs: torch.Tensor, labels: torch.Tensor, n_bins: int, nll: float) -> dict[str, float]:
    """Accuracy, ECE, sECE and Brier of (validated) probabilities, with a given NLL.

    Shared by :func:`calibration_metrics` (logits) and the post-hoc calibrators (which output
    probabilities), so both use exactly the same bins and definitions.
    """
    return _metrics_batch(probs.unsqueeze(0), labels, n_bins, torch.tensor([float(nll)], dtype=torch.float64))[0]


def _metrics_batch(probs: torch.Tensor, labels: torch.Tensor, n_bins: int, nll: torch.Tensor) -> list[dict[str, float]]:
    """:func:`metrics_from_probs` of R classifiers: probs (R, n, C), their (R,) NLLs."""
    n = labels.shape[0]
    bins = _confidence_bins_batch(probs, labels, n_bins)
    ece, sece = _ece_sece(bins, n)
    onehot = F.one_hot(labels, probs.shape[-1]).double()
    accuracy = (probs.argmax(-1) == labels).double().mean(-1)
    brier = ((probs.double() - onehot) ** 2).sum(-1).mean(-1)
    return [{"accuracy": float(accuracy[r]), "ece": float(ece[r]), "sece": float(sece[r]), "brier": float(brier[r]),
             "nll": float(nll[r])} for r in range(probs.shape[0])]
