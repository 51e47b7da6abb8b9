"""FLTrust: trust each update by its cosine with the server's own update on clean root data."""

from __future__ import annotations

import torch

from ._checks import _check_updates
from .numerics import may_overflow_squares, rows_unit_scaled64, unit_scaled64


def fltrust(
    updates: torch.Tensor, server_update: torch.Tensor, eps: float = 1e-12
) -> tuple[torch.Tensor, torch.Tensor]:
    """FLTrust: TS_k = ReLU(cos(Δ_k, g₀)), Δ'_k = Δ_k · ‖g₀‖ / ‖Δ_k‖,
    aggregate = Σ TS_k Δ'_k / Σ TS_k (the zero update when every TS_k = 0).

    Every norm is floored at ``eps``, so a zero update (or zero g₀) gets trust 0, never NaN.
    Updates whose squared norms would overflow the dtype are handled scale-free in float64
    (each update enters only through its direction), so a huge update's influence stays ‖g₀‖.
    Returns ``(aggregate, trust_scores)``.

    Source: Cao et al., "FLTrust: Byzantine-robust Federated Learning via Trust
    Bootstrapping" (NDSS 2021); SPEC §3 FLTrust.
    """
    updates = _check_updates(updates)
    g0 = torch.as_tensor(server_update, device=updates.device).to(updates.dtype)
    if g0.shape != (updates.shape[1],):
        raise ValueError(f"server_update must have shape ({updates.shape[1]},), got {tuple(g0.shape)}")
    if not bool(torch.isfinite(g0).all()):
        raise ValueError("server_update contains NaN or Inf values")
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    if may_overflow_squares(updates) or may_overflow_squares(g0.unsqueeze(0)):
        return _fltrust_rescaled(updates, g0, eps)
    g0_norm = torch.linalg.vector_norm(g0)
    norms = torch.linalg.vector_norm(updates, dim=1).clamp_min(eps)
    cos = (updates @ g0) / (norms * g0_norm.clamp_min(eps))
    trust = torch.relu(cos)
    total = trust.sum()
    if not bool(total > 0):
        return torch.zeros_like(g0), trust
    # Σ TS_k (‖g₀‖/‖Δ_k‖) Δ_k / Σ TS_k, with the rescaling folded into the coefficients.
    coef = trust * (g0_norm / norms) / total
    return coef @ updates, trust


def _fltrust_rescaled(updates: torch.Tensor, g0: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fltrust` for updates so large that their squared norms overflow (a finite update
    of norm 1e30): cosines from each row divided by its own max |value| (a cosine does not see
    the scale), in float64. Each trusted update is rescaled to ‖g₀‖ as always, so a huge update
    has exactly the influence of an ordinary one of norm ‖g₀‖: bounded."""
    rows = rows_unit_scaled64(updates)
    g0s, e0 = unit_scaled64(g0)
    row_norms = torch.linalg.vector_norm(rows, dim=1)
    g0s_norm = torch.linalg.vector_norm(g0s)
    g0_norm = torch.ldexp(g0s_norm, torch.tensor(e0, dtype=torch.float64))
    # A zero row or a zero g₀ (norm below eps in the original units) gets trust 0, as above.
    zero = (updates.abs().amax(dim=1) == 0) | bool(g0_norm < eps)
    cos = (rows @ g0s) / (row_norms.clamp_min(torch.finfo(torch.float64).tiny) * g0s_norm.clamp_min(
        torch.finfo(torch.float64).tiny))
    trust = torch.where(zero, 0.0, torch.relu(cos))
    total = trust.sum()
    if not bool(total > 0):
        return torch.zeros_like(g0), trust.to(updates.dtype)
    # Σ TS_k ‖g₀‖ Δ_k/‖Δ_k‖ / Σ TS_k, with Δ_k/‖Δ_k‖ = rows_k/‖rows_k‖ (scale-free).
    coef = trust * g0_norm / row_norms.clamp_min(torch.finfo(torch.float64).tiny) / total
    return (coef @ rows).to(updates.dtype), trust.to(updates.dtype)
