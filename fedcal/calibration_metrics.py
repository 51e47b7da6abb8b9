"""The field's calibration estimators beyond ECE/sECE, and their bootstrap intervals.

Functional and flwr-free, like :mod:`fedcal.metrics` (whose equal-width, right-closed bins every
binned estimator here shares). Every estimator is batched: it takes R prediction sets at once —
top-class confidence ``conf`` (R, n) and correctness ``correct`` (R, n) of 0/1, or the probability
rows ``probs`` (R, n, C) with labels (R, n) for the class-wise one — and returns (R,) values. A
percentile bootstrap is then one call on R = B resampled index sets (:func:`bootstrap_intervals`).

Estimators (``calibration-metrics`` names; the sign convention of fedcal's signed ECE throughout:
accuracy − confidence, negative = over-confident):

* ``mce`` / ``smce`` — maximum calibration error: the largest |accuracy − confidence| over the
  non-empty bins (Naeini et al. 2015), and that bin's signed gap;
* ``rmsce`` — root-mean-square calibration error, sqrt(Σ_b w_b (acc_b − conf_b)²);
* ``ace`` — ECE over adaptive (equal-mass) bins: the predictions sorted by confidence, split into
  ``n_bins`` runs whose sizes differ by at most one (Nixon et al. 2019);
* ``cwece`` — class-wise ECE (Kull et al. 2019): the mean over classes k of the ECE of p_k against
  1[y = k], each class binned equal-width on its own probability;
* ``ksce`` / ``sksce`` — the Kolmogorov–Smirnov calibration error (Gupta et al. 2021): predictions
  sorted by confidence, h_i = (1/n) Σ_{j ≤ i} (correct_j − conf_j), KS = max_i |h_i| (h_0 = 0), and
  the signed h at that maximum;
* ``smece`` — smooth ECE (Błasiok & Nakkiran 2023): ∫_0^1 |(1/n) Σ_i K_σ(t, f_i)(y_i − f_i)| dt with
  the reflected Gaussian kernel on [0, 1], at the paper's automatic bandwidth σ* (the fixed point
  smECE_σ* = σ*), reported beside it as ``smece_sigma``.

A signed version of the binned ECE over any binning, adaptive included, equals accuracy − mean
confidence (Σ_b (n_b/n)(acc_b − conf_b) = (1/n) Σ_i (correct_i − conf_i)): that is ``sece``, so no
other signed ECE is listed; likewise the signed smooth ECE (the reflected kernel integrates to one).
"""

from __future__ import annotations

import math

import torch

from fedcal.config.train import CALIBRATION_ESTIMATORS as ESTIMATORS, calibration_estimators
from fedcal.metrics import binned_sums

__all__ = ["ESTIMATORS", "calibration_estimators", "estimates", "estimator_metrics", "recorded_columns", "smooth_ece",
           "smooth_ece_at", "ks_error", "adaptive_ece", "classwise_ece", "errors_from_sums",
           "bootstrap_intervals", "INTERVALS_FILE"]

#: the base metrics every run records, for which intervals are drawn too
BASE_CALIBRATION = ("ece", "sece", "brier", "nll")
#: grid of the smooth ECE: sample positions linearly split over its nodes, |h| integrated on it
SMOOTH_GRID = 1001
#: reflections of the kernel counted on either side (images beyond 7σ at σ ≤ 1 weigh < 1e-10)
_REFLECTIONS = 3


# ---------------------------------------------------------------------- binned (equal width)
def errors_from_sums(count: torch.Tensor, conf_sum: torch.Tensor, acc_sum: torch.Tensor) -> dict[str, torch.Tensor]:
    """ECE, sECE, MCE, signed MCE and RMS CE of R sets from their per-bin sums (R, M): empty bins
    weigh nothing and never hold the maximum."""
    n = count.sum(-1, keepdim=True)
    gap = (acc_sum - conf_sum) / count.clamp(min=1)  # 0 in an empty bin
    weight = count / n
    worst = torch.where(count > 0, gap.abs(), torch.full_like(gap, -1.0)).argmax(-1, keepdim=True)
    return {"ece": (weight * gap.abs()).sum(-1), "sece": (weight * gap).sum(-1),
            "mce": gap.gather(-1, worst).abs().squeeze(-1), "smce": gap.gather(-1, worst).squeeze(-1),
            "rmsce": (weight * gap ** 2).sum(-1).sqrt()}


def adaptive_ece(conf: torch.Tensor, correct: torch.Tensor, n_bins: int) -> torch.Tensor:
    """ECE over equal-mass bins: each set sorted by confidence (ties in their given order) and cut
    into ``min(n_bins, n)`` consecutive runs, position j of n in run ⌊j·M/n⌋."""
    runs, n = conf.shape
    m = min(n_bins, n)
    order = conf.argsort(dim=-1, stable=True)
    c, a = conf.double().gather(-1, order), correct.double().gather(-1, order)
    b = (torch.arange(n) * m // n) + m * torch.arange(runs).unsqueeze(1)
    gap_sum = torch.bincount(b.reshape(-1), weights=(a - c).reshape(-1), minlength=runs * m).view(runs, m)
    return (gap_sum.abs() / n).sum(-1)  # Σ_b (n_b/n)|acc_b − conf_b| = Σ_b |Σ_{i∈b}(a_i − c_i)| / n


def classwise_ece(probs: torch.Tensor, labels: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Class-wise ECE of R sets: probs (R, n, C), labels (R, n) → the mean over the C classes of
    the equal-width ECE of p_k against 1[y = k]."""
    runs, n, classes = probs.shape
    p = probs.double().permute(0, 2, 1).contiguous().view(runs * classes, n)  # (R·C, n): one class per row
    hit = torch.nn.functional.one_hot(labels, classes).double().permute(0, 2, 1).reshape(runs * classes, n)
    count, conf_sum, acc_sum = binned_sums(p, hit, n_bins)
    return errors_from_sums(count, conf_sum, acc_sum)["ece"].view(runs, classes).mean(-1)


def ks_error(conf: torch.Tensor, correct: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(KS, signed KS) of R sets: the largest |h_i| of the cumulative gap h_i = (1/n) Σ_{j ≤ i}
    (correct_j − conf_j) in confidence order, and h there."""
    n = conf.shape[-1]
    order = conf.argsort(dim=-1, stable=True)
    h = (correct.double().gather(-1, order) - conf.double().gather(-1, order)).cumsum(-1) / n
    at = h.abs().argmax(-1, keepdim=True)
    return h.gather(-1, at).abs().squeeze(-1), h.gather(-1, at).squeeze(-1)


# ---------------------------------------------------------------------- smooth ECE
def _reflected_phi(sigma: float, grid: int = SMOOTH_GRID) -> torch.Tensor:
    """The reflected kernel's profile on the grid's integer offsets m = −2(G−1) … 2(G−1):
    Σ_j φ_σ(m/(G−1) − 2j), so that K_σ(t_a, t_b) = phi[a − b + 2(G−1)] + phi[a + b + 2(G−1)]
    (K(t, u) = Σ_j φ_σ(t − u − 2j) + φ_σ(t + u − 2j), the Gaussian reflected at 0 and 1)."""
    m = torch.arange(-2 * (grid - 1), 2 * (grid - 1) + 1, dtype=torch.float64) / (grid - 1)
    phi = sum(torch.exp(-0.5 * ((m - 2 * j) / sigma) ** 2) for j in range(-_REFLECTIONS, _REFLECTIONS + 1))
    return phi / (sigma * math.sqrt(2 * math.pi))


def _smoothed(residuals: torch.Tensor, sigma: float) -> torch.Tensor:
    """h(t_a) = Σ_b residuals[b] K_σ(t_a, t_b) of R grid residual rows (R, G): both terms of the
    kernel are one convolution of the profile with the rows (by FFT): for the first term with the
    rows themselves, for the second with the rows reversed."""
    runs, grid = residuals.shape
    phi = _reflected_phi(sigma, grid)
    size = 1 << (phi.shape[0] + grid - 2).bit_length()  # ≥ the full convolution's length
    rows = torch.cat([residuals, residuals.flip(-1)])  # (2R, G)
    full = torch.fft.irfft(torch.fft.rfft(phi, size) * torch.fft.rfft(rows, size), size)
    # full[r, k] = Σ_b rows[r, b] phi[k − b]: the first term at k = a + 2(G−1); the second (rows
    # reversed, b → G−1−b) at k = a + 3(G−1)
    return full[:runs, 2 * (grid - 1):3 * grid - 2] + full[runs:, 3 * (grid - 1):4 * grid - 3]


def _grid_residuals(conf: torch.Tensor, correct: torch.Tensor, grid: int = SMOOTH_GRID) -> torch.Tensor:
    """The residuals (correct − conf)/n of R sets split linearly over the grid nodes either side of
    each confidence: (R, G)."""
    runs, n = conf.shape
    pos = conf.double().clamp(0, 1) * (grid - 1)
    lo = pos.floor().clamp(max=grid - 2)
    frac = pos - lo
    r = (correct.double() - conf.double()) / n
    offset = grid * torch.arange(runs).unsqueeze(1)
    idx = torch.cat([(lo.long() + offset).reshape(-1), (lo.long() + 1 + offset).reshape(-1)])
    w = torch.cat([((1 - frac) * r).reshape(-1), (frac * r).reshape(-1)])
    return torch.bincount(idx, weights=w, minlength=runs * grid).view(runs, grid)


def _integral(residuals: torch.Tensor, sigma: float) -> torch.Tensor:
    """∫_0^1 |h| of grid residuals (R, G) smoothed at ``sigma``, by the trapezoid rule: (R,)."""
    a = _smoothed(residuals, sigma).abs()
    return (a.sum(-1) - 0.5 * (a[:, 0] + a[:, -1])) / (SMOOTH_GRID - 1)


def smooth_ece_at(conf: torch.Tensor, correct: torch.Tensor, sigma: float) -> torch.Tensor:
    """Smooth ECE of R sets (R, n) at a fixed bandwidth ``sigma``: ∫_0^1 |h(t)| dt with
    h(t) = (1/n) Σ_i K_σ(t, f_i)(y_i − f_i)."""
    return _integral(_grid_residuals(conf, correct), sigma)


def smooth_ece(conf: torch.Tensor, correct: torch.Tensor, *, tol: float = 1e-4) -> tuple[float, float]:
    """(smooth ECE, σ*) of one prediction set (n,) at the automatic bandwidth: smECE_σ falls as σ
    grows, so σ* with smECE_σ* = σ* is found by bisection on [tol, 1] (σ* = tol when smECE stays
    below it, 1 when above)."""
    residuals = _grid_residuals(conf.reshape(1, -1), correct.reshape(1, -1))
    value = lambda s: float(_integral(residuals, s)[0])  # noqa: E731
    lo, hi = tol, 1.0
    if value(hi) >= hi:
        return value(hi), hi
    if value(lo) <= lo:
        return value(lo), lo
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if value(mid) > mid else (lo, mid)
    return value(hi), hi


# ---------------------------------------------------------------------- all of them
def estimates(conf: torch.Tensor, correct: torch.Tensor, names: tuple[str, ...], n_bins: int, *,
              probs: torch.Tensor | None = None, labels: torch.Tensor | None = None,
              sigma: float | None = None) -> dict[str, torch.Tensor]:
    """The estimators ``names`` of R sets, (R,) each (``ece``/``sece`` always). ``probs``/``labels``
    (R, n, C)/(R, n) are needed for ``cwece``; ``sigma`` fixes the smooth ECE's bandwidth (else
    each set's own σ*, with ``smece_sigma``)."""
    out = {k: v for k, v in errors_from_sums(*binned_sums(conf, correct, n_bins)).items()
           if k in ("ece", "sece", *names)}
    if "ace" in names:
        out["ace"] = adaptive_ece(conf, correct, n_bins)
    if "cwece" in names:
        if probs is None:
            raise ValueError("class-wise ECE (cwece) needs the probability rows, not only the confidences")
        out["cwece"] = classwise_ece(probs, labels, n_bins)
    if "ksce" in names or "sksce" in names:
        ks, sks = ks_error(conf, correct)
        out.update({k: v for k, v in (("ksce", ks), ("sksce", sks)) if k in names})
    if "smece" in names:
        if sigma is not None:
            out["smece"] = smooth_ece_at(conf, correct, sigma)
        else:
            pairs = [smooth_ece(conf[r], correct[r]) for r in range(conf.shape[0])]
            out["smece"] = torch.tensor([p[0] for p in pairs], dtype=torch.float64)
            out["smece_sigma"] = torch.tensor([p[1] for p in pairs], dtype=torch.float64)
    return out


def recorded_columns(names: tuple[str, ...]) -> tuple[str, ...]:
    """The metric columns the estimators ``names`` record (the smooth ECE's bandwidth beside it)."""
    return (*names, *(("smece_sigma",) if "smece" in names else ()))


def estimator_metrics(probs: torch.Tensor, labels: torch.Tensor, names: tuple[str, ...], n_bins: int) -> dict[str, float]:
    """The estimators ``names`` of one classifier's probabilities (n, C) on ``labels`` (n,), as
    floats (the metrics a run records beside accuracy, ECE, sECE, Brier and NLL)."""
    if not names:
        return {}
    conf, pred = probs.double().max(dim=-1)
    correct = (pred == labels).double()
    values = estimates(conf[None], correct[None], names, n_bins, probs=probs[None], labels=labels[None])
    return {k: float(v[0]) for k, v in values.items() if k in recorded_columns(names)}


# ---------------------------------------------------------------------- bootstrap intervals
#: the intervals' coverage
LEVEL = 0.95
#: the run-store table of a run's intervals (final round; run-config key ``calibration-bootstrap``)
INTERVALS_FILE = "calibration_intervals.csv"
#: resampled sets evaluated at once (memory: chunk × n × C float64 for the class-wise ECE)
_CHUNK = 50


def _per_sample(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """What each test prediction contributes: confidence, correctness, squared error, NLL (n,)."""
    logits = logits.double()
    probs = logits.softmax(-1)
    conf, pred = probs.max(-1)
    onehot = torch.nn.functional.one_hot(labels, probs.shape[-1]).double()
    return {"probs": probs, "conf": conf, "correct": (pred == labels).double(),
            "brier": ((probs - onehot) ** 2).sum(-1),
            "nll": torch.nn.functional.cross_entropy(logits, labels, reduction="none")}


def _resampled(parts: dict[str, torch.Tensor], idx: torch.Tensor, labels: torch.Tensor, names: tuple[str, ...],
               n_bins: int, sigma: float | None) -> dict[str, torch.Tensor]:
    """Every metric of the resampled sets ``idx`` (R, n): (R,) each."""
    conf, correct = parts["conf"][idx], parts["correct"][idx]
    needs_probs = "cwece" in names
    out = estimates(conf, correct, names, n_bins, probs=parts["probs"][idx] if needs_probs else None,
                    labels=labels[idx] if needs_probs else None, sigma=sigma)
    out.update(accuracy=correct.mean(-1), brier=parts["brier"][idx].mean(-1), nll=parts["nll"][idx].mean(-1))
    return out


def bootstrap_intervals(logits: torch.Tensor, labels: torch.Tensor, names: tuple[str, ...], n_bins: int,
                        resamples: int, seed: int, level: float = LEVEL) -> list[dict]:
    """Percentile-bootstrap intervals over the test set of accuracy, ECE, sECE, Brier, NLL and the
    estimators ``names``: ``resamples`` index sets of n drawn with replacement (a generator seeded
    by ``seed``), every metric computed on each (vectorised, :data:`_CHUNK` sets at a time), and the
    (1 − level)/2 and (1 + level)/2 quantiles of each metric's B values. The smooth ECE is resampled
    at the full set's bandwidth σ*. Rows: metric, estimate (on the full set), lo, hi, level,
    resamples."""
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    parts = _per_sample(logits, labels)
    n = len(labels)
    full = _resampled(parts, torch.arange(n)[None], labels, tuple(k for k in names if k != "smece"), n_bins, None)
    sigma = None
    if "smece" in names:
        value, sigma = smooth_ece(parts["conf"], parts["correct"])
        full["smece"] = torch.tensor([value], dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    draws: dict[str, list[torch.Tensor]] = {k: [] for k in full}
    for start in range(0, resamples, _CHUNK):
        idx = torch.randint(n, (min(_CHUNK, resamples - start), n), generator=g)
        for k, v in _resampled(parts, idx, labels, names, n_bins, sigma).items():
            if k in draws:
                draws[k].append(v)
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    rows = []
    for k, v in full.items():
        lo, hi = torch.quantile(torch.cat(draws[k]), q).tolist()
        rows.append({"metric": k, "estimate": float(v[0]), "lo": lo, "hi": hi, "level": level,
                     "resamples": resamples})
    return rows
