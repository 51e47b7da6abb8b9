"""Temperature scaling's fit, and a federated temperature learned from the clients' own held-out
data (flwr-free, and pandas-free: the ClientApp process fits its temperature with it), in the spirit of FedCal (Peng et al., ICML 2024: clients fit local scalers, the server
aggregates them), reduced to its simplest faithful form — one scalar scaler.

:func:`fit_temperature` is :class:`fedcal.calibrate.TemperatureScaling`'s fit (which calls it).
Each client fits its own temperature T_k on its held-out data with it (:func:`client_temperature`) and reports it with its sample count n_k; the server takes the
weighted median of the valid T_k, each weight the client's count capped at the median count of the
round's valid replies (:func:`federated_temperature`). The median, not a weighted mean and not a sum
of NLL curves: a client's report is untrusted, and one client reporting T = 1000 (or claiming 10⁹
samples) moves a median by at most one neighbour, a mean or a summed curve without bound. The cap
keeps a client that claims more samples than the others from becoming the median alone. A report
that is not a finite number within :class:`TemperatureScaling`'s bounds, or whose count is not a
positive integer, is left out with its reason (:func:`temperature_problem`).

The federated temperature divides the final model's logits (``softmax(z / T)``): the argmax, hence
accuracy, is unchanged; it is what a server without a root set can do post hoc, with data that
never leaves the clients (each reveals one scalar and its count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from scipy.optimize import minimize_scalar

from fedcal.aggregate.claims import cap_at_median

#: the bounds of a valid reported temperature (TemperatureScaling's default search interval)
T_MIN, T_MAX = 1e-3, 1e3


def fit_temperature(z: torch.Tensor, y: torch.Tensor, t_min: float = T_MIN, t_max: float = T_MAX,
                    xatol: float = 1e-6) -> tuple[float, float]:
    """(T*, its NLL): argmin over T in [t_min, t_max] of the mean NLL of softmax(z / T) on checked
    float64 logits (n, C) and int64 labels (n,), by scipy's bounded Brent search over u = log T (the
    NLL is convex in 1/T, so unimodal in u; an optimum beyond the bounds gives the nearest bound)."""

    def nll(u: float) -> float:
        return float(F.cross_entropy(z * math.exp(-u), y))

    res = minimize_scalar(nll, bounds=(math.log(t_min), math.log(t_max)), method="bounded",
                          options={"xatol": xatol})
    return float(math.exp(res.x)), float(res.fun)


def client_temperature(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """A client's own temperature: :func:`fit_temperature` on its held-out logits (n, C) and labels
    (n,); NaN with fewer than two samples (nothing to fit)."""
    if len(labels) < 2:
        return float("nan")
    return fit_temperature(logits.double(), labels.long())[0]


def temperature_problem(temperature: Any, count: Any) -> str | None:
    """Why a client's report (temperature, sample count) is not usable, or None: the temperature a
    finite number in [T_MIN, T_MAX], the count a positive integer."""
    if temperature is None:
        return "no temperature reported"
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        return f"temperature of type {type(temperature).__name__}, not a number"
    if not math.isfinite(temperature):
        return f"temperature {temperature} not finite"
    if not T_MIN <= temperature <= T_MAX:
        return f"temperature {temperature:.6g} outside [{T_MIN:g}, {T_MAX:g}]"
    if isinstance(count, bool) or not isinstance(count, (int, float)) or not math.isfinite(count) \
            or count != int(count) or count < 1:
        return f"sample count {count!r} not a positive integer"
    return None


def weighted_median(values: torch.Tensor, weights: torch.Tensor) -> float:
    """The lower weighted median: the smallest value whose cumulative weight (values sorted) reaches
    half the total. values, weights: (k,), k ≥ 1, weights ≥ 0 with a positive sum."""
    order = torch.argsort(values.double(), stable=True)
    v, w = values.double()[order], weights.double()[order]
    cum = torch.cumsum(w, 0)
    return float(v[int(torch.searchsorted(cum, cum[-1] / 2))])


@dataclass
class FederatedTemperature:
    """The server's result: the temperature (NaN when no report was valid), the clients it came
    from, and each left-out client's reason."""

    temperature: float
    clients: list = field(default_factory=list)
    left_out: dict = field(default_factory=dict)


def federated_temperature(reports: dict[Any, tuple[Any, Any]]) -> FederatedTemperature:
    """The weighted median of the valid reports {client: (temperature, count)}, each weight the
    client's count capped at the median count of the valid reports; invalid ones are left out with
    the reason of :func:`temperature_problem`."""
    valid, left_out = {}, {}
    for client, (t, n) in reports.items():
        problem = temperature_problem(t, n)
        if problem is None:
            valid[client] = (float(t), float(n))
        else:
            left_out[client] = problem
    if not valid:
        return FederatedTemperature(float("nan"), [], left_out)
    t = torch.tensor([v[0] for v in valid.values()], dtype=torch.float64)
    n = torch.tensor([v[1] for v in valid.values()], dtype=torch.float64)
    return FederatedTemperature(weighted_median(t, cap_at_median(n)), list(valid), left_out)
