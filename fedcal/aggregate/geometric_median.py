"""Geometric median by smoothed Weiszfeld iterations: ONE batched, weighted implementation for
client updates (n, d) and for client probits (B, n, C)."""

from __future__ import annotations

import torch

from ._checks import _check_int, _check_points, _check_weight_values
from .numerics import may_overflow_squares, unit_scaled64


def _check_gm_weights(weights, points: torch.Tensor) -> torch.Tensor | None:
    """None, or finite non-negative weights of shape (n,) or points.shape[:-1] (one row per batch
    entry), with a positive sum in every row, on points' device and dtype."""
    if weights is None:
        return None
    n = points.shape[-2]
    weights = torch.as_tensor(weights, device=points.device).to(points.dtype)
    if weights.shape != (n,) and weights.shape != points.shape[:-1]:
        batched = "" if points.ndim == 2 else f" or {tuple(points.shape[:-1])}"
        raise ValueError(f"weights must have shape ({n},){batched} to match the points, got {tuple(weights.shape)}")
    return _check_weight_values(weights)


def geometric_median(
    points: torch.Tensor,
    weights: torch.Tensor | None = None,
    *,
    eps: float = 1e-8,
    max_iter: int = 100,
    tol: float = 1e-6,
) -> torch.Tensor:
    """Weighted geometric median argmin_z Σ_k w_k √(‖z − x_k‖² + eps) of the n points of every
    batch entry, by smoothed Weiszfeld iterations: ``points`` (..., n, d) → (..., d).

    z⁰ = mean of the x_k (the weighted mean Σ w_k x_k / Σ w_k when weights are given);
    d_k = √(‖x_k − z‖² + eps), β_k = w_k / d_k (w_k = 1 without weights),
    z ← Σ_k β_k x_k / Σ_k β_k; stop when max |z_new − z| over every coordinate of the whole
    batch is below ``tol``, or after ``max_iter`` iterations. The eps smoothing keeps a point
    that coincides with z from getting infinite weight. The result lies in the convex hull of
    the points (for probits: on the simplex, up to rounding).

    Points so large that ‖x_k − z‖² would overflow the dtype (a finite update of norm 1e30 in
    float32) are iterated rescaled by a power of two in float64 (eps and tol rescaled alike),
    so such a point stays one far outlier instead of turning every distance into inf; ordinary
    inputs take the plain path, unchanged.

    ``weights``: None, (n,) shared by the batch, or (..., n) one row per batch entry; finite,
    non-negative, positive sum (data sizes for updates). Same device and dtype as ``points``
    in and out; differentiable through the unrolled iterations (the white-box attacks on the
    probit aggregator use this). Without autograd, contiguous points are iterated in one reused
    (..., n, d) buffer (the same values as the out-of-place formulas, so both paths agree bit
    for bit); memory is one extra copy of ``points``, not one per step.

    Source: Weiszfeld (1937); Pillutla, Kakade & Harchaoui, "Robust Aggregation for Federated
    Learning" (RFA, IEEE TSP 2022), smoothed Weiszfeld; SPEC §3 geometric median and SPEC §7
    (probit aggregator).
    """
    points = _check_points(points)
    weights = _check_gm_weights(weights, points)
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    max_iter = _check_int("max_iter", max_iter, 0)
    if not tol >= 0:
        raise ValueError(f"tol must be ≥ 0, got {tol}")
    if may_overflow_squares(points):
        return _rescaled(points, weights, eps, max_iter, tol)
    z = _weiszfeld(points, weights, eps, max_iter, tol)
    if z.numel() and not bool(torch.isfinite(z).all()):  # overflowed on the way (huge weights × points)
        return _rescaled(points, weights, eps, max_iter, tol)
    return z


def _rescaled(points, weights, eps, max_iter, tol):
    """The same iterations on points / 2^e in float64 (max |x| < 1), with eps / 4^e and
    tol / 2^e, times 2^e: every distance scales by 2^-e exactly, so the iterates are the
    original ones scaled, without the overflow of ‖x_k − z‖² for points of norm ~1e30."""
    scaled, e = unit_scaled64(points)
    w = None
    if weights is not None:
        w = weights.double()
        w = w / w.amax(-1, keepdim=True)  # relative weights: a common factor cancels in z
    eps64 = max(eps * 4.0 ** -e, torch.finfo(torch.float64).tiny)
    z = _weiszfeld(scaled, w, eps64, max_iter, tol * 2.0 ** -e)
    return torch.ldexp(z, torch.tensor(e, dtype=torch.float64)).to(points.dtype)


def _weiszfeld(points, weights, eps, max_iter, tol):
    """The smoothed Weiszfeld iterations of :func:`geometric_median` on checked inputs."""
    if weights is None:
        z = points.mean(dim=-2)
    else:  # Σ_k w_k x_k through a matmul: no (..., n, d) temporary
        z = (weights.unsqueeze(-2) @ points).squeeze(-2) / weights.sum(-1, keepdim=True)
    if z.numel() == 0 or max_iter == 0:
        return z
    grad = torch.is_grad_enabled() and (points.requires_grad or (weights is not None and weights.requires_grad))
    # The buffer path only for contiguous points: there the out-of-place results are contiguous
    # too, so both paths reduce over the same layout and agree bit for bit.
    buf = None if grad or not points.is_contiguous() else torch.empty_like(points)
    for _ in range(max_iter):
        if buf is None:
            sq = ((points - z.unsqueeze(-2)) ** 2).sum(-1)
        else:
            sq = torch.sub(points, z.unsqueeze(-2), out=buf).square_().sum(-1)
        w = 1.0 / torch.sqrt(sq + eps)  # (..., n)
        if weights is not None:
            w = w * weights
        if buf is None:
            num = (w.unsqueeze(-1) * points).sum(-2)
        else:
            num = torch.mul(w.unsqueeze(-1), points, out=buf).sum(-2)
        z_new = num / w.sum(-1, keepdim=True)
        delta = (z_new - z).abs().max()
        z = z_new
        if delta.item() < tol:
            break
    return z
