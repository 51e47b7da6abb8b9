"""FLTrust: trust each update by its cosine with the server's own update on clean root data."""

from __future__ import annotations

import torch

from ._checks import _check_updates


def fltrust(
    updates: torch.Tensor, server_update: torch.Tensor, eps: float = 1e-12
) -> tuple[torch.Tensor, torch.Tensor]:
    """FLTrust: TS_k = ReLU(cos(Δ_k, g₀)), Δ'_k = Δ_k · ‖g₀‖ / ‖Δ_k‖,
    aggregate = Σ TS_k Δ'_k / Σ TS_k (the zero update when every TS_k = 0).

    Every norm is floored at ``eps``, so a zero update (or zero g₀) gets trust 0, never NaN.
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
