"""Non-trained model state (BatchNorm statistics, counters): validation and aggregation.

A robust rule must not be defeated by the part of the model it does not look at: BatchNorm's
``running_var`` and ``running_mean`` go straight into every forward pass, so one client sending
``running_var < 0`` (or 1e30) turns a data-size weighted mean of the buffers — and with it the
global model's output — into NaN or garbage whatever rule aggregates the trained weights.

- :func:`buffer_problem` says why a reported buffer is invalid (the strategy rejects the reply);
- :func:`buffer_mean` is FedAvg's data-size weighted mean (what a non-robust rule uses);
- :func:`buffer_median` is the coordinate-wise true median (what robust rules use: one client
  cannot move it past the honest values, whatever it sends).
"""

from __future__ import annotations

import numpy as np
import torch

from ._checks import _check_updates, _check_weights
from .median import coordinate_median

#: array-name endings of variance statistics (BatchNorm's ``running_var``): must be ≥ 0
VARIANCE_MARKERS = ("running_var",)


COUNTER_MAX = 2**53  # largest counter a float64 mean represents exactly


def buffer_problem(name: str, values: np.ndarray) -> str | None:
    """Why the reported value of the non-trained array ``name`` is invalid, or None.

    Floating arrays must be finite, and a variance statistic (a name ending in
    ``running_var``) non-negative; integer arrays (counters such as ``num_batches_tracked``)
    must be non-negative and at most 2**53 (above it float64 averaging is no longer exact, and a
    value near 2**63 would wrap to a negative counter once merged).
    """
    values = np.asarray(values)
    if np.issubdtype(values.dtype, np.floating):
        if not np.isfinite(values).all():
            return f"buffer '{name}' contains NaN or Inf"
        if name.endswith(VARIANCE_MARKERS) and values.size and float(values.min()) < 0:
            return f"buffer '{name}' is a variance but has negative values (min {float(values.min()):.3g})"
    elif np.issubdtype(values.dtype, np.integer) and values.size:
        if int(values.min()) < 0:
            return f"buffer '{name}' is a counter but has negative values (min {int(values.min())})"
        if int(values.max()) > COUNTER_MAX:
            return f"buffer '{name}' is a counter above 2**53 (max {int(values.max())})"
    return None


def buffer_mean(values: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Data-size weighted mean of the (n, m) reported buffers: Σ_k p_k b_k, p_k = w_k / Σ_j w_j
    (equal p_k without weights). Not robust: one client moves it arbitrarily far."""
    values = _check_updates(values)
    weights = _check_weights(weights, values)
    if weights is None:
        return values.mean(dim=0)
    return torch.tensordot(weights / weights.sum(), values, dims=1)


def buffer_median(values: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise true median of the (n, m) reported buffers (unweighted: a client can
    report any data size). A minority of clients cannot move it outside the range of the
    others' values; non-negative statistics stay non-negative."""
    return coordinate_median(values)
