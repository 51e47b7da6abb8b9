"""CalGuard: a calibration-aware defense against the Temperature Scaling Attack (flwr-free core).

The server holds a small clean, labelled *root set* (as FLTrust does). Each round, for every
valid reply k it applies the update to the current global model θ and measures what the reply
would do to the model's *confidence* on the root set — its calibration signature:

* **logit-scale shift** (the signature the decision uses)::

      S(θ) = (1/n) Σ_i [ logsumexp_c z_ic(θ) − (1/C) Σ_c z_ic(θ) ]        s_k = S(θ + Δ_k) − S(θ)

  S is the mean log-partition of the root logits above their mean; it grows with the logits'
  scale (∂S/∂a of S(a·z) is E_softmax(az)[z] − mean(z) ≥ 0) and is label-free. A TSA client
  trains softmax(z/τ) at η = β·τ: at τ > 1 its update inflates the logit scale beyond what a
  benign update does, at τ < 1 it stops growing it early (the sharpened targets are met), so
  s_k sits above or below the benign replies' values (docs/defense.md measures how far);
* recorded for the audit only: the shift of the mean top-label confidence, of the root NLL, and
  the candidate's root accuracy.

**Decision.** The reply's deviation is ``d_k = s_k − median(s)`` over the round's replies
(those of clients not struck out, see below); its
robust score is ``z_k = d_k / σ`` where ``σ = 1.4826 · median |d|`` pooled over the deviations
of the last ``window`` rounds (a round of M = 5 replies alone gives too noisy a scale, and the
pool follows the model as its signatures shrink or grow over training). A reply with
``|z_k| > κ`` is flagged, and a client flagged ``strikes`` times is flagged in every later round
(:class:`Strikes`). In ``filter`` mode a flagged reply gets weight 0 and the others are averaged
with their data sizes (FedAvg); in ``audit`` mode every reply is averaged and the flags are only
recorded.

**Without a root set** (``signal = "clients"``): each client reports, with its train reply, two
calibration states (:class:`fedcal.calibration_state.CalibrationState`) on its own held-out data —
of the global model it received and of its candidate (the model it returns) — and the reply's
signal is the candidate's *mean-confidence shift* on that data, ``s_k = conf(candidate) −
conf(global)`` (:func:`client_drift`; label-free, as the root set's logit-scale shift is: a τ > 1
candidate gains more confidence than a benign one, a τ < 1 one less). The calibration drift
sECE(candidate) − sECE(global) = Δaccuracy − Δconfidence is audited beside it, not scored: on a few
dozen held-out samples its accuracy term swings by tens of points between benign clients and drowns
the confidence term. The decision above is unchanged. The states are self-reported: an attacker who
lies about them is not caught (docs/defense.md).

Everything here is tensors and ``nn.Module`` forward passes: the Flower strategy
(:class:`fedcal.strategies.CalGuard`) only translates messages.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedcal.aggregate.median import true_median
from fedcal.calibration_state import STATE_FIELDS, CalibrationState, from_arrays, state_problem
from fedcal.config.defense import CALGUARD_MIN_ROOT as MIN_ROOT_SIZE, CALGUARD_MODES, CALGUARD_SOURCES
from fedcal.local_training import predict_logits

#: the signature columns of the audit table, in order
SIGNATURE_COLUMNS = ("scale_shift", "conf_shift", "nll_shift", "root_accuracy")
#: the signature columns with the clients' own calibration drift (``signal = "clients"``)
DRIFT_COLUMNS = ("sece_drift", "conf_shift", "accuracy_shift", "held_out")
#: the prefixes of the two states in a reply's drift record
DRIFT_PARTS = ("global", "candidate")
_MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution × 1.4826 = its standard deviation


def logit_scale(logits: torch.Tensor) -> torch.Tensor:
    """Per-sample logit scale ``logsumexp(z) − mean(z)`` of an (n, C) logit matrix (≥ log C,
    = log C exactly for constant logits); computed in float64."""
    if logits.dim() != 2 or logits.shape[1] < 2:
        raise ValueError(f"logits must be (n, C) with C >= 2, got shape {tuple(logits.shape)}")
    z = logits.double()
    return torch.logsumexp(z, dim=1) - z.mean(dim=1)


def check_root_set(x: torch.Tensor, y: torch.Tensor, num_classes: int | None = None,
                   min_size: int = MIN_ROOT_SIZE) -> None:
    """Raise ValueError unless (x, y) is a usable root set: at least ``min_size`` samples, labels
    of at least two classes (in ``[0, num_classes)`` when given), finite inputs, one label per
    sample."""
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise ValueError("the root set must be tensors (x, y)")
    if y.dim() != 1 or x.shape[0] != y.shape[0]:
        raise ValueError(f"root set: {x.shape[0]} inputs but labels of shape {tuple(y.shape)}")
    if len(y) < min_size:
        raise ValueError(f"root set too small: {len(y)} samples, CalGuard needs at least {min_size} "
                         "(root-size)")
    if y.dtype.is_floating_point or y.dtype == torch.bool:
        raise ValueError(f"root labels must be integer class ids, got dtype {y.dtype}")
    classes = torch.unique(y)
    if len(classes) < 2:
        raise ValueError(f"root set has one class only ({int(classes[0])}): confidence on it says nothing "
                         "about calibration; draw a root set with several classes")
    if num_classes is not None and (int(classes.min()) < 0 or int(classes.max()) >= num_classes):
        raise ValueError(f"root labels must lie in [0, {num_classes}), got {int(classes.min())}..{int(classes.max())}")
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise ValueError("root inputs contain NaN or Inf")


@dataclass(frozen=True)
class RootStats:
    """What the signature needs of one model's root logits: mean logit scale, mean top-label
    confidence, NLL and accuracy."""

    scale: float
    confidence: float
    nll: float
    accuracy: float

    @classmethod
    def of(cls, logits: torch.Tensor, y: torch.Tensor) -> RootStats:
        """The statistics of (n, C) logits with labels ``y``; all NaN when a logit is not finite
        (a reply that overflows the model)."""
        z = logits.double()
        if not bool(torch.isfinite(z).all()):
            return cls(math.nan, math.nan, math.nan, math.nan)
        return cls(scale=float(logit_scale(z).mean()),
                   confidence=float(z.softmax(dim=1).max(dim=1).values.mean()),
                   nll=float(F.cross_entropy(z, y)),
                   accuracy=float((z.argmax(dim=1) == y).double().mean()))


def signature(candidate: RootStats, current: RootStats) -> dict[str, float]:
    """The audit's signature of a reply: its candidate model's shifts against the current global
    model (scale, confidence, NLL) and the candidate's root accuracy."""
    return {"scale_shift": candidate.scale - current.scale,
            "conf_shift": candidate.confidence - current.confidence,
            "nll_shift": candidate.nll - current.nll,
            "root_accuracy": candidate.accuracy}


def median_deviations(values: torch.Tensor, trusted: torch.Tensor | None = None) -> torch.Tensor:
    """``d_k = v_k − median(v[trusted])`` for a 1-D tensor (the true median: the mean of the two
    middle values for an even count; ``trusted``, a boolean mask, defaults to all values and is
    ignored when it selects none); float64. With a benign majority the median is a benign
    reply's value, so benign deviations stay small even in a round with two attackers of five (a
    leave-one-out median of four others would be the mean of an attacker and a benign reply);
    leaving the replies of struck-out clients out of the median keeps it benign in the rounds
    where attackers are the majority."""
    v = values.double().reshape(-1)
    if len(v) == 0:
        return v
    pool = v[trusted] if trusted is not None and bool(trusted.any()) else v
    return v - true_median(pool)


class DeviationScale:
    """The robust scale σ of the signature deviations, pooled over the last ``window`` rounds.

    :meth:`score` returns ``z = d / σ`` for a round's deviations with σ = 1.4826 · median |d|
    over the pool *including* this round (the low median — the lower middle value of an even
    count, ``torch.median``'s — a standard choice for a robust scale); :meth:`push` then adds the round to the pool (the
    oldest round leaves once ``window`` rounds are held). Deviations that are exactly 0 — the
    median reply's own, one per round of an odd count — are kept out of the pool: they are not
    spread, and would pull σ down by a fifth at M = 5. A pool with no spread (identical replies)
    gives z = 0 for zero deviations and ±inf for any other.
    """

    def __init__(self, window: int = 10):
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = int(window)
        self._rounds: deque[torch.Tensor] = deque(maxlen=self.window)

    @staticmethod
    def _spread(deviations: torch.Tensor) -> torch.Tensor:
        d = deviations.double().reshape(-1)
        return d[d != 0]

    def sigma(self, deviations: torch.Tensor) -> float:
        """σ of the pool with ``deviations`` added (0 when nothing in it is non-zero)."""
        pool = torch.cat([*self._rounds, self._spread(deviations)])
        return _MAD_TO_SIGMA * float(pool.abs().median()) if len(pool) else 0.0

    def score(self, deviations: torch.Tensor, pooled: torch.Tensor | None = None) -> tuple[torch.Tensor, float]:
        """(z, σ) of this round's deviations, σ from the pool plus ``pooled`` (default: the
        deviations themselves; CalGuard leaves struck-out clients' replies out of it)."""
        d = deviations.double().reshape(-1)
        sigma = self.sigma(d if pooled is None else pooled)
        if sigma > 0:
            return d / sigma, sigma
        return torch.where(d == 0, torch.zeros_like(d), torch.sign(d) * math.inf), sigma

    def push(self, deviations: torch.Tensor) -> None:
        self._rounds.append(self._spread(deviations).clone())

    def state_dict(self) -> list[torch.Tensor]:
        """The pooled rounds' deviations, oldest first (for a run's checkpoint)."""
        return [d.clone() for d in self._rounds]

    def load_state_dict(self, rounds: list[torch.Tensor]) -> None:
        self._rounds = deque((torch.as_tensor(d, dtype=torch.float64) for d in rounds), maxlen=self.window)

    def __len__(self) -> int:
        return sum(len(r) for r in self._rounds)


class Strikes:
    """Clients flagged ``limit`` times are excluded from then on (``limit`` = 0: never). A TSA
    client attacks in every round it is sampled, a benign client is flagged only by chance
    (a few % of its replies at κ = 5, docs/defense.md), so three strikes separate them far
    better than one round can."""

    def __init__(self, limit: int = 3):
        if limit < 0:
            raise ValueError(f"strike limit must be >= 0, got {limit}")
        self.limit = int(limit)
        self.count: dict[object, int] = {}

    def banned(self, client: object) -> bool:
        return self.limit > 0 and self.count.get(client, 0) >= self.limit

    def record(self, client: object, flagged: bool) -> None:
        if flagged:
            self.count[client] = self.count.get(client, 0) + 1

    def state_dict(self) -> dict[object, int]:
        """Every client's flag count (for a run's checkpoint)."""
        return dict(self.count)

    def load_state_dict(self, count: Mapping[object, int]) -> None:
        self.count = {client: int(n) for client, n in count.items()}


def flag_outliers(scores: torch.Tensor, kappa: float) -> torch.Tensor:
    """Boolean mask of ``|z| > κ``."""
    if not kappa > 0:
        raise ValueError(f"kappa must be > 0, got {kappa}")
    return scores.abs() > kappa


@torch.no_grad()
def root_logits(model: nn.Module, state: Mapping[str, torch.Tensor], x: torch.Tensor,
                batch_size: int = 1000) -> torch.Tensor:
    """Logits of ``model`` loaded with ``state`` on ``x`` (eval mode, float32 on the CPU), on the
    model's device."""
    model.load_state_dict(state)
    return predict_logits(model, x, batch_size, next(model.parameters()).device)


@dataclass(frozen=True)
class RoundDecision:
    """CalGuard's decision on one round's replies (one entry per reply, in order)."""

    deviation: torch.Tensor  # d = s − median(s of the trusted replies)
    score: torch.Tensor  # z = d / σ (+inf for a non-finite signature)
    sigma: float
    outlier: torch.Tensor  # |z| > κ
    struck_out: torch.Tensor  # flagged `strikes` times before this round
    sequential_score: torch.Tensor  # what the sequential test was fed (z, or the robust score of its own signal)
    sequential: torch.Tensor  # the per-client sequential test's alarm (this round's or earlier), False without one
    flagged: torch.Tensor  # outlier | struck_out | sequential


def decide(shifts: torch.Tensor, clients: list, *, scale: DeviationScale, strikes: Strikes, kappa: float,
           sequential=None, server_round: int = 0, signal: torch.Tensor | None = None,
           signal_scale: DeviationScale | None = None) -> RoundDecision:
    """One round of CalGuard's rule on the replies' logit-scale shifts ``shifts`` from ``clients``
    (identities: partition ids), updating ``scale``, ``strikes`` and the optional per-client
    sequential test ``sequential`` (:class:`fedcal.sequential.ClientCusum`) in place.

    Replies of clients struck out, or alarmed by the sequential test, in an earlier round leave
    the median and the pooled scale; a reply is flagged when ``|z| > κ``, when its client is
    struck out, or when the sequential test alarms on its client. The sequential test is fed the
    round's z, or — given ``signal`` (one value per reply, e.g. the shift per unit of update norm)
    and its own ``signal_scale`` — that signal's robust score, computed as z is (deviation from the
    trusted replies' median over the pooled robust scale; a non-finite value scores 0 and stays out
    of the median). The strategy and the offline replay (:func:`replay`) both decide through here."""
    shifts = shifts.double().reshape(-1)
    banned = torch.tensor([strikes.banned(c) for c in clients], dtype=torch.bool)
    earlier = torch.tensor([sequential is not None and sequential.alarmed(c) for c in clients], dtype=torch.bool)
    finite = torch.isfinite(shifts)  # a valid reply can still overflow the model's logits
    trusted = ~banned & ~earlier & finite
    dev = median_deviations(shifts, trusted=trusted)
    z, sigma = scale.score(dev, pooled=dev[trusted])
    z = torch.where(finite, z, torch.full_like(z, math.inf))
    outlier = flag_outliers(z, kappa)
    scale.push(dev[trusted])
    for c, f in zip(clients, outlier):
        strikes.record(c, bool(f))
    fed = z
    if signal is not None:
        if signal_scale is None:
            raise ValueError("a sequential signal needs its own signal_scale (a DeviationScale)")
        v = signal.double().reshape(-1)
        ok = torch.isfinite(v)
        v = torch.where(ok, v, torch.zeros_like(v))
        dev_s = median_deviations(v, trusted=trusted & ok)
        fed, _ = signal_scale.score(dev_s, pooled=dev_s[trusted & ok])
        fed = torch.where(ok, fed, torch.zeros_like(fed))
        signal_scale.push(dev_s[trusted & ok])
    alarm = (sequential.update(clients, fed, server_round) if sequential is not None
             else torch.zeros(len(clients), dtype=torch.bool))
    return RoundDecision(deviation=dev, score=z, sigma=sigma, outlier=outlier, struck_out=banned,
                         sequential_score=fed, sequential=alarm, flagged=outlier | banned | alarm)


def replay(rounds, *, kappa: float = 5.0, window: int = 10, strikes: int = 3, sequential=None) -> list[dict]:
    """CalGuard's decisions (:func:`decide`) on recorded signatures, without the models: ``rounds``
    yields ``(server_round, clients, shifts)`` in round order (e.g. from a run's aggregation.csv),
    or ``(server_round, clients, shifts, signal)`` to feed the sequential test the robust score of
    ``signal`` instead of z. Returns one dict per reply: round, client, deviation, score, sigma,
    outlier, struck_out, sequential_score, sequential (alarm), the sequential test's ``low`` /
    ``high`` statistics after the reply, and flagged. A *what-if*: the replies were made by the
    recorded run's global models, which a rule that dropped replies would have changed."""
    scale, strike, signal_scale = DeviationScale(window), Strikes(strikes), DeviationScale(window)
    rows = []
    for server_round, clients, shifts, *signal in rounds:
        clients = list(clients)
        sig = torch.tensor(np.asarray(signal[0], dtype=np.float64)) if signal else None
        d = decide(torch.tensor(np.asarray(shifts, dtype=np.float64)), clients, scale=scale, strikes=strike,
                   kappa=kappa, sequential=sequential, server_round=server_round, signal=sig,
                   signal_scale=signal_scale if signal else None)
        for i, c in enumerate(clients):
            stat = sequential.statistic(c) if sequential is not None else None
            rows.append({"round": server_round, "client": c, "deviation": float(d.deviation[i]),
                         "score": float(d.score[i]), "sigma": d.sigma, "outlier": bool(d.outlier[i]),
                         "struck_out": bool(d.struck_out[i]), "sequential_score": float(d.sequential_score[i]),
                         "sequential": bool(d.sequential[i]), "low": stat.low if stat else 0.0,
                         "high": stat.high if stat else 0.0, "flagged": bool(d.flagged[i])})
    return rows


def drift_arrays(current: CalibrationState, candidate: CalibrationState) -> dict[str, torch.Tensor]:
    """A client's drift record: the states of the global model it received (``global.<field>``)
    and of its candidate (``candidate.<field>``) on its held-out data."""
    return {f"{part}.{k}": v for part, state in zip(DRIFT_PARTS, (current, candidate))
            for k, v in state.to_arrays().items()}


def client_drift(arrays: Mapping[str, torch.Tensor]) -> tuple[dict[str, float] | None, str]:
    """(signature, "") of a client's drift record (:func:`drift_arrays`), or (None, why it is not
    one): both states valid (:func:`fedcal.calibration_state.state_problem`, bins read from the
    global state's count), over the same number of samples (the same held-out data), at least one.
    The signature: ``sece_drift`` = sECE(candidate) − sECE(global), the shifts of mean confidence
    and accuracy, and the held-out count."""
    expected = {f"{p}.{k}" for p in DRIFT_PARTS for k in STATE_FIELDS}
    if set(arrays) != expected:
        return None, f"drift record with fields {sorted(arrays)[:4]}, not {sorted(expected)[:2]}…"
    n_bins = int(torch.as_tensor(arrays["global.count"]).reshape(-1).shape[0])
    states = []
    for part in DRIFT_PARTS:
        state = {k: torch.as_tensor(arrays[f"{part}.{k}"]) for k in STATE_FIELDS}
        problem = state_problem(state, n_bins) if n_bins else "calibration state of 0 bins"
        if problem:
            return None, f"{part} {problem}"
        states.append(from_arrays(state))
    current, candidate = states
    if current.n != candidate.n or current.n < 1:
        return None, f"global and candidate states over {current.n} and {candidate.n} samples (need the same, >= 1)"
    a, b = current.compute(), candidate.compute()
    conf = lambda s: float(s.conf_sum.sum() / s.n)  # noqa: E731
    return {"sece_drift": b["sece"] - a["sece"], "conf_shift": conf(candidate) - conf(current),
            "accuracy_shift": b["accuracy"] - a["accuracy"], "held_out": float(current.n)}, ""
