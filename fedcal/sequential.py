"""Per-client sequential tests: evidence about a client accumulated over the rounds it is sampled
in (flwr-free).

CalGuard's per-round test (:mod:`fedcal.aggregate.calguard`) compares one reply with the other replies of
its round. A TSA client at τ < 1 stays inside the benign spread in any one round — its robust
score sits a robust unit or so below the round's median (docs/defense.md) — and a single round
cannot tell it from a benign client with unusual data. What sets it apart is that it does so in
*every* round it is sampled in. A sequential test sums that evidence per client identity.

**The observations.** For client i, x_{i,1}, x_{i,2}, … are its per-reply scores in the rounds
it was sampled in (in CalGuard, the robust score ``z = (s − median) / σ`` of its logit-scale
shift, :func:`fedcal.aggregate.calguard.median_deviations`, :class:`fedcal.aggregate.calguard.DeviationScale`),
clipped to ``[−c, c]`` so that one reply moves the statistic by at most ``c + k``: a single
extreme reply is the per-round test's business, the sequential test is about persistence. A
client that is not sampled adds nothing: evidence accrues per observation, so a client seen in
few rounds accumulates little (sparse participation, M of K clients per round), and the false
positive rate is calibrated per reply (:func:`calibrate_threshold`).

**Page's CUSUM, one-sided in each direction** (Page, "Continuous inspection schemes",
Biometrika 1954)::

    L_t = max(0, L_{t−1} − x_t − k)      a persistent low shift   (τ < 1: under-confidence)
    H_t = max(0, H_{t−1} + x_t − k)      a persistent high shift  (τ > 1: over-confidence)

with L_0 = H_0 = 0; the client raises an alarm at the first t with ``L_t > h_low`` or
``H_t > h_high``, and the alarm stays (like CalGuard's strikes). The reference value k is half
the shift to be detected (in robust units): scores that sit k below (above) zero on average
leave L (H) near zero, scores that sit further out make it grow linearly.

**SPRT reading.** For x ~ N(μ, 1), the log-likelihood ratio of H1: μ = −δ against H0: μ = 0 of
one observation is ``λ = −δ·x − δ²/2 = δ·(−x − δ/2)``; with k = δ/2, L_t is that log-likelihood
ratio divided by δ and restarted at 0 whenever it would fall below 0 — Page's repeated Wald
SPRTs whose lower boundary is 0. Wald's boundaries for error rates (α, β) are
``log(β / (1 − α)) ≤ Λ ≤ log((1 − β) / α)`` (:func:`wald_thresholds`), i.e. ``h = log((1 − β) /
α) / δ`` on the CUSUM's scale. The scores are neither normal nor independent (a benign client's
data make its shift persistently high or low, docs/defense.md measures how much), so the
thresholds fedcal uses are calibrated on the benign clients' empirical null instead
(:func:`calibrate_threshold`); Wald's gives the nominal reference it is compared with.

Everything here is plain Python and tensors; the Flower strategy (:class:`fedcal.strategies.CalGuard`
with ``sequential``) only passes each round's client identities and scores.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch


def wald_thresholds(alpha: float, beta: float) -> tuple[float, float]:
    """Wald's SPRT boundaries (log-likelihood ratio) for error rates α = P(accept H1 | H0) and
    β = P(accept H0 | H1): ``(log(β / (1 − α)), log((1 − β) / α))`` — continue while the
    log-likelihood ratio lies strictly between them (Wald, "Sequential tests of statistical
    hypotheses", Ann. Math. Statist. 1945)."""
    if not (0 < alpha < 1 and 0 < beta < 1 and alpha + beta < 1):
        raise ValueError(f"error rates must satisfy 0 < alpha, beta and alpha + beta < 1, got alpha={alpha}, beta={beta}")
    return math.log(beta / (1 - alpha)), math.log((1 - beta) / alpha)


def cusum_threshold(alpha: float, beta: float, delta: float) -> float:
    """The CUSUM threshold h of Wald's upper boundary for a shift of δ robust units:
    ``log((1 − β) / α) / δ`` (module docstring: the CUSUM is the log-likelihood ratio / δ)."""
    if not delta > 0:
        raise ValueError(f"delta must be > 0, got {delta}")
    return wald_thresholds(alpha, beta)[1] / delta


def cusum_path(x: Sequence[float] | torch.Tensor, k: float, side: str = "low") -> np.ndarray:
    """The one-sided CUSUM after each observation of ``x`` (float64): ``low`` is
    ``L_t = max(0, L_{t−1} − x_t − k)``, ``high`` is ``H_t = max(0, H_{t−1} + x_t − k)``."""
    if side not in ("low", "high"):
        raise ValueError(f"side must be 'low' or 'high', got {side!r}")
    sign = -1.0 if side == "low" else 1.0
    out = np.empty(len(x), dtype=np.float64)
    s = 0.0
    for t, v in enumerate(np.asarray(x, dtype=np.float64)):
        s = max(0.0, s + sign * float(v) - k)
        out[t] = s
    return out


def running_max(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """``max(values[:t+1])`` for every t (float64)."""
    return np.maximum.accumulate(np.asarray(values, dtype=np.float64)) if len(values) else np.zeros(0)


def calibrate_threshold(null_running_max: Sequence[float] | np.ndarray, target: float) -> float:
    """The smallest threshold h whose share of flagged null replies is at most ``target``.

    ``null_running_max`` holds, for every benign reply, the running maximum of its client's
    statistic up to and including that reply (:func:`running_max` of the client's path): with
    sticky alarms, the reply is flagged at threshold h exactly when that maximum exceeds h. The
    share flagged at h is therefore the empirical survival function ``mean(M > h)``, and the
    smallest h with ``mean(M > h) ≤ target`` is the value of rank ``ceil((1 − target)·n)`` (1-based)
    of the sorted M — at most ``floor(target·n)`` values lie above it. ``target`` = 0 gives the
    largest M (nothing flagged)."""
    m = np.sort(np.asarray(null_running_max, dtype=np.float64))
    if len(m) == 0:
        raise ValueError("no null observations to calibrate the threshold on")
    if not 0 <= target < 1:
        raise ValueError(f"target must lie in [0, 1), got {target}")
    rank = max(1, math.ceil((1 - target) * len(m) - 1e-9))
    return float(m[rank - 1])


@dataclass
class ClientStatistic:
    """One client's two CUSUMs, its observation count and when it raised an alarm."""

    low: float = 0.0
    high: float = 0.0
    count: int = 0
    alarm: str = ""  # "", "low" or "high": the side that crossed its threshold first
    alarm_round: int = 0


class ClientCusum:
    """Two one-sided CUSUMs per client identity, alarms that stay (module docstring).

    Parameters
    ----------
    k : float (default 0.5)
        The reference value: half the persistent shift to detect, in robust units.
    h_low, h_high : float
        Thresholds of the low (τ < 1) and high (τ > 1) side; ``math.inf`` switches a side off.
    clip : float (default 3.0)
        Scores are clipped to ``[−clip, clip]`` before they enter (one reply moves a statistic by
        at most ``clip + k``; a non-finite score counts as ``±clip``).
    """

    def __init__(self, k: float = 0.5, h_low: float = 5.0, h_high: float = 5.0, clip: float = 3.0):
        if not (k >= 0 and math.isfinite(k)):
            raise ValueError(f"k must be a finite number >= 0, got {k}")
        for name, h in (("h_low", h_low), ("h_high", h_high)):
            if not h > 0:
                raise ValueError(f"{name} must be > 0, got {h}")
        if not clip > 0:
            raise ValueError(f"clip must be > 0, got {clip}")
        self.k, self.h_low, self.h_high, self.clip = float(k), float(h_low), float(h_high), float(clip)
        self.clients: dict[Hashable, ClientStatistic] = {}

    def alarmed(self, client: Hashable) -> bool:
        """Whether ``client`` has raised an alarm in an earlier (or this) update."""
        stat = self.clients.get(client)
        return stat is not None and bool(stat.alarm)

    def statistic(self, client: Hashable) -> ClientStatistic:
        return self.clients.get(client, ClientStatistic())

    def update(self, clients: Sequence[Hashable], scores: torch.Tensor | Sequence[float],
               server_round: int = 0) -> torch.Tensor:
        """Add one round's scores (one per client, in order) and return the boolean alarm mask of
        these clients after the update (alarms raised before included)."""
        x = torch.as_tensor(scores, dtype=torch.float64).reshape(-1)
        if len(x) != len(clients):
            raise ValueError(f"{len(clients)} clients but {len(x)} scores")
        if len(set(clients)) != len(clients):
            raise ValueError("a client appears twice in one round")
        x = torch.nan_to_num(x, nan=0.0, posinf=self.clip, neginf=-self.clip).clamp(-self.clip, self.clip)
        out = []
        for c, v in zip(clients, x.tolist()):
            stat = self.clients.setdefault(c, ClientStatistic())
            stat.low = max(0.0, stat.low - v - self.k)
            stat.high = max(0.0, stat.high + v - self.k)
            stat.count += 1
            if not stat.alarm:
                if stat.low > self.h_low:
                    stat.alarm, stat.alarm_round = "low", server_round
                elif stat.high > self.h_high:
                    stat.alarm, stat.alarm_round = "high", server_round
            out.append(bool(stat.alarm))
        return torch.tensor(out, dtype=torch.bool)

    def state_dict(self) -> dict[Hashable, dict[str, float | int | str]]:
        """Every client's statistics (for a run's checkpoint), keyed by its identity."""
        return {c: dict(vars(s)) for c, s in self.clients.items()}

    def load_state_dict(self, state: Mapping[Hashable, Mapping[str, float | int | str]]) -> None:
        self.clients = {c: ClientStatistic(low=float(s["low"]), high=float(s["high"]), count=int(s["count"]),
                                           alarm=str(s["alarm"]), alarm_round=int(s["alarm_round"]))
                        for c, s in state.items()}
