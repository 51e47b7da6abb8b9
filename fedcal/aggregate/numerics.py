"""Overflow-free arithmetic shared by the rules (flwr-free).

Every rule keeps its ordinary formula (so ordinary inputs give the very same bits as before);
these helpers are the fallback that is taken only where that formula would overflow — a finite
update of norm 1e30 squares to 1e60, above float32's 3.4e38 — and the check that decides it.
Powers of two rescale exactly (no rounding), so a rescaled computation is the same computation.
"""

from __future__ import annotations

import math

import torch


def may_overflow_squares(x: torch.Tensor) -> bool:
    """True when a sum of squared differences over the last axis of ``x`` could overflow its
    dtype: 4 · d · max|x|² ≥ max / 16 (distances, norms and Gram entries are all bounded by
    that). Never true for updates or probits of ordinary size."""
    if x.numel() == 0:
        return False
    amax = float(x.detach().abs().max())
    limit = math.sqrt(torch.finfo(x.dtype).max / (64.0 * max(1, x.shape[-1])))
    return not amax < limit


def pow2_exponent(value: float) -> int:
    """The e with 2^(e−1) ≤ value < 2^e (0 for value 0): dividing by 2^e brings value below 1."""
    return math.frexp(value)[1] if value > 0 else 0


def unit_scaled64(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(x / 2^e in float64, e) with max |x / 2^e| < 1: exact (a power of two), no overflow."""
    e = pow2_exponent(float(x.detach().abs().max())) if x.numel() else 0
    return torch.ldexp(x.double(), torch.tensor(-e, dtype=torch.float64)), e


def rows_unit_scaled64(x: torch.Tensor) -> torch.Tensor:
    """Each row of the (n, d) ``x`` divided by its own max |value| (zero rows stay zero), in
    float64: cosines and directions survive, magnitudes of any finite size are harmless."""
    x = x.double()
    top = x.abs().amax(dim=1, keepdim=True)
    return x / torch.where(top > 0, top, torch.ones_like(top))


def overflow_free_mean(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """``x.mean(dim)``; where that overflows (a sum of finite values above the dtype's range),
    the mean of x / 2^e in float64, times 2^e, in x's dtype (a mean of finite values is within
    their range, so it fits)."""
    out = x.mean(dim=dim)
    # a finite sum of ``out`` proves every entry finite in one reduction (an element-wise
    # isfinite costs tens of times the mean on CPU); only a non-finite sum needs the full check
    if (not x.is_floating_point() or bool(torch.isfinite(out.sum())) or bool(torch.isfinite(out).all())
            or not bool(torch.isfinite(x).all())):
        return out
    scaled, e = unit_scaled64(x)
    return torch.ldexp(scaled.mean(dim=dim), torch.tensor(e, dtype=torch.float64)).to(x.dtype)


def fit_weights(weights: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Positive finite (float64) weights as ``dtype``, rescaled by a power of two when their
    largest value lies outside [2^-60, 2^60] (e.g. a reply claiming 1e39 examples, above
    float32's range): weights are relative, and a power of two changes none of the ratios.
    Ordinary data sizes are returned unscaled, so their arithmetic is unchanged."""
    w = torch.as_tensor(weights, dtype=torch.float64)
    if w.numel():
        top = float(w.max())
        if top > 2.0 ** 60 or 0 < top < 2.0 ** -60:
            w = torch.ldexp(w, torch.tensor(-pow2_exponent(top), dtype=torch.float64))
    return w.to(dtype)


def row_norms64(x: torch.Tensor) -> torch.Tensor:
    """Euclidean norm of every row of the (n, d) ``x``, as float64: finite for every finite
    float32 ``x`` (and every float64 row whose norm float64 can hold).

    ``torch.linalg.vector_norm`` squares in the input's dtype, so a float32 row of 1e30 values
    has norm inf; the clipping pre-aggregators divide by these norms, and an inf would silently
    clip such a row to zero instead of to the bound. The plain norm is taken (no copy of ``x``);
    only where it is not finite are the rows divided by their own max |value| and measured in
    float64 (a row of max m has norm m · ‖x / m‖)."""
    norms = torch.linalg.vector_norm(x, dim=1).double()
    if bool(torch.isfinite(norms).all()) or not bool(torch.isfinite(x).all()):
        return norms
    top = x.abs().amax(dim=1).double()
    scale = torch.where(top > 0, top, torch.ones_like(top))
    return torch.linalg.vector_norm(x.double() / scale[:, None], dim=1) * scale
