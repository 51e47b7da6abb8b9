"""A calibration state that merges: federated calibration without seeing a sample (flwr-free).

The split of torchmetrics' metrics — ``update`` (a batch into sums), ``merge`` (sums of two
parties into one), ``compute`` (the metric from the sums) — for the binned calibration metrics:
per equal-width bin (fedcal.metrics' right-closed bins) the prediction count, the sum of the
top-class confidences and the number correct. Each client evaluates the global model on its own
held-out data and sends its state; the server adds the states and computes the federation's
reliability diagram, ECE, sECE, MCE and RMS CE exactly as on the union of the clients' data,
without one prediction leaving a client (the state reveals per-bin counts and accuracies — the
client's reliability diagram — and nothing finer).

A client's state is untrusted input: :func:`state_problem` names what is wrong with one
(shapes, non-finite values, negative or fractional counts, sums outside what the bin's samples
could give) so the server leaves it out with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedcal.calibration_metrics import errors_from_sums
from fedcal.metrics import binned_sums

#: the state's fields, in the order a reply carries them
STATE_FIELDS = ("count", "conf_sum", "acc_sum")
#: slack of the sums' bounds (float64 sums of up to millions of values in [0, 1])
_SLACK = 1e-6


@dataclass(frozen=True)
class CalibrationState:
    """Per-bin count, confidence sum and correct count, (n_bins,) float64 each."""

    count: torch.Tensor
    conf_sum: torch.Tensor
    acc_sum: torch.Tensor

    @classmethod
    def empty(cls, n_bins: int) -> "CalibrationState":
        zero = torch.zeros(n_bins, dtype=torch.float64)
        return cls(zero, zero.clone(), zero.clone())

    @property
    def n_bins(self) -> int:
        return self.count.shape[0]

    @property
    def n(self) -> int:
        return int(self.count.sum())

    def update(self, conf: torch.Tensor, correct: torch.Tensor) -> "CalibrationState":
        """This state with a batch of top-class confidences and correctness (n,) added."""
        count, conf_sum, acc_sum = binned_sums(conf.reshape(1, -1), correct.reshape(1, -1), self.n_bins)
        return CalibrationState(self.count + count[0], self.conf_sum + conf_sum[0], self.acc_sum + acc_sum[0])

    def update_probs(self, probs: torch.Tensor, labels: torch.Tensor) -> "CalibrationState":
        """:meth:`update` from probability rows (n, C) and labels (n,)."""
        conf, pred = probs.double().max(dim=-1)
        return self.update(conf, (pred == labels).double())

    def merge(self, other: "CalibrationState") -> "CalibrationState":
        """The state of both parties' predictions together."""
        if other.n_bins != self.n_bins:
            raise ValueError(f"cannot merge states of {self.n_bins} and {other.n_bins} bins")
        return CalibrationState(self.count + other.count, self.conf_sum + other.conf_sum, self.acc_sum + other.acc_sum)

    def compute(self) -> dict[str, float]:
        """n, accuracy, ECE, sECE, MCE, signed MCE and RMS CE of the predictions summed here (NaN
        for an empty state)."""
        if self.n == 0:
            return {"n": 0.0, **{k: float("nan") for k in ("accuracy", "ece", "sece", "mce", "smce", "rmsce")}}
        errors = errors_from_sums(self.count[None], self.conf_sum[None], self.acc_sum[None])
        return {"n": float(self.n), "accuracy": float(self.acc_sum.sum() / self.n),
                **{k: float(v[0]) for k, v in errors.items()}}

    def reliability(self) -> dict[str, torch.Tensor]:
        """The reliability diagram of :func:`fedcal.metrics.confidence_bins` (NaN in empty bins)."""
        edges = torch.linspace(0, 1, self.n_bins + 1, dtype=torch.float64)
        nan = torch.full_like(self.count, float("nan"))
        return {"lower": edges[:-1], "upper": edges[1:], "count": self.count,
                "confidence": torch.where(self.count > 0, self.conf_sum / self.count.clamp(min=1), nan),
                "accuracy": torch.where(self.count > 0, self.acc_sum / self.count.clamp(min=1), nan)}

    def to_arrays(self) -> dict[str, torch.Tensor]:
        """The fields as named tensors (what a client's reply carries)."""
        return {k: getattr(self, k) for k in STATE_FIELDS}


def merged(states: list[CalibrationState], n_bins: int) -> CalibrationState:
    """The sum of ``states`` (an empty state of ``n_bins`` when there is none)."""
    out = CalibrationState.empty(n_bins)
    for s in states:
        out = out.merge(s)
    return out


def state_problem(arrays: dict[str, torch.Tensor], n_bins: int) -> str | None:
    """Why ``arrays`` (a client's reply) is no valid state of ``n_bins`` bins, or None: every field
    present, (n_bins,) and finite; counts non-negative integers; the correct count an integer within
    [0, count]; the confidence sum within what the bin's samples could give, [count·lower,
    count·upper] (confidences lie in the bin)."""
    missing = [k for k in STATE_FIELDS if k not in arrays]
    if missing:
        return f"calibration state without {', '.join(missing)}"
    values = {k: torch.as_tensor(arrays[k]) for k in STATE_FIELDS}
    for k, v in values.items():
        if tuple(v.shape) != (n_bins,):
            return f"calibration state {k} of shape {tuple(v.shape)}, not ({n_bins},)"
        if not v.is_floating_point() and v.dtype not in (torch.int32, torch.int64):
            return f"calibration state {k} of dtype {v.dtype}"
        if not torch.isfinite(v.double()).all():
            return f"calibration state {k} not finite"
    count, conf_sum, acc_sum = (values[k].double() for k in STATE_FIELDS)
    if (count < 0).any() or (count != count.round()).any():
        return "calibration state count not a non-negative integer in every bin"
    if (acc_sum != acc_sum.round()).any() or (acc_sum < 0).any() or (acc_sum > count).any():
        return "calibration state acc_sum outside [0, count] or fractional"
    edges = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64)
    if (conf_sum < count * edges[:-1] - _SLACK).any() or (conf_sum > count * edges[1:] + _SLACK).any():
        return "calibration state conf_sum outside [count·lower, count·upper] of its bin"
    return None


def from_arrays(arrays: dict[str, torch.Tensor]) -> CalibrationState:
    """The state of validated arrays (:func:`state_problem` returned None), as float64."""
    return CalibrationState(*(torch.as_tensor(arrays[k]).double().clone() for k in STATE_FIELDS))
