"""Centred clipping (CC): clip every update around a centre that iterates towards the robust
mean; as a pre-aggregator it returns the last iteration's clipped updates."""

from __future__ import annotations

import math

import torch

from ._checks import _check_finite, _check_int, _check_updates
from .numerics import overflow_free_mean, row_norms64


def centered_clip(updates: torch.Tensor, tau: float, iterations: int = 1,
                  center: torch.Tensor | None = None) -> torch.Tensor:
    """Centred clipping, L = ``iterations`` steps from v₀ = ``center`` (zeros when None):

        v_{l+1} = v_l + (1/n) Σ_i clip_τ(x_i − v_l),   clip_τ(z) = z · min(1, τ / ‖z‖₂),

    returned as the (n, d) clipped updates of the last step, y_i = v_{L−1} + clip_τ(x_i − v_{L−1}),
    whose mean is CC's aggregate v_L (up to rounding): composed with :func:`~fedcal.aggregate.fedavg` it
    *is* centred clipping, and composed with another rule it hands that rule updates that lie
    within τ of a robust centre. Each Byzantine update moves v by at most τ / n per step.

    The authors' code keeps v across rounds (the previous aggregate, of momentum vectors; the
    first round starts from zero) and defaults to L = 1; this function is stateless —
    the caller passes the previous round's aggregate as ``center`` for that variant. In fedcal's
    update space zero is "no change to the global model", a centre every honest update is near
    when the learning rate is small.

    Source: Karimireddy, He & Jaggi, "Learning from History for Byzantine Robust Optimization"
    (ICML 2021), the centred clipping rule.

    >>> centered_clip(torch.tensor([[1.0, 0.0], [0.0, 1.0], [30.0, 40.0]]), tau=5.0)
    tensor([[1., 0.],
            [0., 1.],
            [3., 4.]])
    """
    updates = _check_updates(updates)
    n, d = updates.shape
    tau = float(tau)
    if not (math.isfinite(tau) and tau > 0):
        raise ValueError(f"centred clipping radius tau must be a finite number > 0, got {tau}")
    iterations = _check_int("iterations", iterations, 1)
    if center is None:
        v = torch.zeros(d, dtype=updates.dtype, device=updates.device)
    else:
        v = torch.as_tensor(center, device=updates.device)
        if v.shape != (d,):
            raise ValueError(f"center must have shape (d,) = ({d},) to match updates, got {tuple(v.shape)}")
        v = v.to(updates.dtype)
        _check_finite(v, "center")
    for _ in range(iterations):
        diff = updates - v
        if not bool(torch.isfinite(diff.sum())) and not bool(torch.isfinite(diff).all()):
            # x_i − v overflowed the dtype (two finite values of opposite sign near its limit):
            # the differences in float64, where they fit; clipped, they fit the dtype again
            diff = updates.double() - v.double()
        norms = row_norms64(diff)
        factor = torch.where(norms > tau, tau / norms, torch.ones_like(norms))
        clipped = (diff * factor.to(diff.dtype)[:, None]).to(updates.dtype)
        previous, v = v, v + overflow_free_mean(clipped, dim=0)
    return previous + clipped
