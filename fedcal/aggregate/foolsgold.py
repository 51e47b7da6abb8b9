"""FoolsGold: down-weight clients whose update histories look alike (sybils). Stateful: the
per-client history lives in a :class:`FoolsGoldHistory` kept across rounds."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch

from ._checks import _check_updates, _check_weights
from .median import true_median
from .numerics import may_overflow_squares, rows_unit_scaled64


def foolsgold_weights(hist: torch.Tensor, kappa: float = 1.0, eps: float = 1e-12,
                      tol: float | None = None) -> torch.Tensor:
    """FoolsGold weights (steps 2–5 of :class:`FoolsGoldHistory`) of the rows of the summed
    update histories ``hist`` (n, d): cosine similarities (diagonal excluded), pardoning,
    w_i = clip(1 − max_j cs_ij, 0, 1) normalised by max(w) (1 → 0.99), then the logit
    clip(κ (ln(w / (1 − w)) + 0.5), 0, 1). A single client gets w = 1; when every w_i is 0
    (below ``tol``, default 100 · machine epsilon) all weights are 0.

    Source: Fung, Yoon & Beschastnikh, "The Limitations of Federated Learning in Sybil
    Settings" (RAID 2020), Algorithm 1; SPEC §3 FoolsGold.
    """
    n = hist.shape[0]
    if n == 1:
        return torch.ones(1, dtype=hist.dtype, device=hist.device)
    if may_overflow_squares(hist):
        # Histories so large that their squared norms overflow (a finite update of norm 1e30):
        # cosines of the rows scaled to max |value| 1, in float64 (a cosine does not see scale).
        rows = rows_unit_scaled64(hist)
        norms = torch.linalg.vector_norm(rows, dim=1)
        norms = torch.where(hist.abs().amax(dim=1) > 0, norms, eps)
        cs = (rows @ rows.T) / (norms[:, None] * norms[None, :])
    else:
        norms = torch.linalg.vector_norm(hist, dim=1).clamp_min(eps)
        # The n×n bookkeeping is tiny: do it in float64 so rounding cannot flip a weight.
        cs = ((hist @ hist.T) / (norms[:, None] * norms[None, :])).double()
    cs.fill_diagonal_(float("-inf"))
    v = cs.max(dim=1).values
    # Pardoning: honest clients that merely resemble a sybil-like (higher-v) client are
    # forgiven in proportion v_i / v_j. Only for v_j > 0: the published code divides by v_j.
    pardon = (v[:, None] < v[None, :]) & (v[None, :] > 0)
    ratio = torch.where(pardon, v[:, None] / torch.where(pardon, v[None, :], 1.0), 1.0)
    cs = cs * ratio  # diagonal stays −inf (ratio is 1 there)
    w = (1.0 - cs.max(dim=1).values).clamp(0.0, 1.0)
    tol = tol if tol is not None else 100 * torch.finfo(hist.dtype).eps
    w = torch.where(w <= tol, 0.0, w)
    top = w.max()
    if not bool(top > 0):
        return torch.zeros(n, dtype=hist.dtype, device=hist.device)
    w = w / top
    w = torch.where(w == 1.0, 0.99, w)
    w = kappa * (torch.log(w / (1.0 - w)) + 0.5)
    w = torch.nan_to_num(w, nan=0.0, posinf=1.0, neginf=0.0).clamp(0.0, 1.0)
    return w.to(hist.dtype)


class FoolsGoldHistory:
    """FoolsGold (stateful): down-weights clients whose update histories look alike (sybils).

    Per call, for the clients of this round (Fung et al.'s published step order):

    1. history H_k ← H_k + Δ_k (kept across calls in :attr:`history`, keyed by client id);
    2. cs_ij = cos(H_i, H_j) for i ≠ j (diagonal excluded); v_i = max_j cs_ij;
    3. pardoning: if v_i < v_j then cs_ij ← cs_ij · v_i / v_j;
    4. w_i = clip(1 − max_j cs_ij, 0, 1); w ← w / max(w); w_i = 0.99 where w_i = 1;
    5. logit: w ← clip(κ (ln(w / (1 − w)) + 0.5), 0, 1) (+inf → 1, −inf/NaN → 0);

    aggregate = Σ w_k Δ_k / Σ w_k (× data-size weights when given), the zero update when every
    w_k = 0. One client gets w = 1.

    Bounded influence (``norm_bound`` B, optional): FoolsGold weighs by similarity only, so a
    lone client unlike the others keeps w ≈ 1 however large its update. With B set, an update
    whose norm exceeds B × the round's median update norm enters the aggregate scaled down to
    that norm (its history keeps the raw update). Norms and cosines are computed without
    overflow (float64, rows scaled to max |value| 1, where squared norms would overflow).

    Guards (where the published code divides by zero): pardoning is applied only when v_j > 0;
    a 1 − max cs below ``tol`` (default 100 · machine epsilon of the dtype) counts as 0, so
    numerically identical histories are sybils rather than rounding noise rescaled by
    step 4; when every w_i = 0 (e.g. all histories parallel) the aggregate is zero.

    Source: Fung, Yoon & Beschastnikh, "The Limitations of Federated Learning in Sybil
    Settings" (RAID 2020), Algorithm 1; SPEC §3 FoolsGold.
    """

    def __init__(self, kappa: float = 1.0, eps: float = 1e-12, tol: float | None = None,
                 norm_bound: float | None = None):
        if kappa <= 0:
            raise ValueError(f"kappa must be > 0, got {kappa}")
        if norm_bound is not None and not (norm_bound > 0 and math.isfinite(norm_bound)):
            raise ValueError(f"norm_bound must be a finite number > 0 (or None), got {norm_bound}")
        self.norm_bound = None if norm_bound is None else float(norm_bound)
        self.kappa = float(kappa)
        self.eps = float(eps)
        self.tol = tol
        self.history: dict[Hashable, torch.Tensor] = {}
        #: the clip factors the last call applied (None: nothing was clipped), for logging
        self.last_clip: torch.Tensor | None = None

    def reset(self) -> None:
        """Forget every client's history."""
        self.history.clear()

    def _update_history(self, client_ids: list, updates: torch.Tensor) -> torch.Tensor:
        d = updates.shape[1]
        rows = []
        for cid, delta in zip(client_ids, updates):
            old = self.history.get(cid)
            if old is None:
                new = delta.detach().clone()
            else:
                if old.shape != (d,):
                    raise ValueError(f"client {cid!r} sent {d} parameters, its history has {old.numel()}")
                new = old.to(device=updates.device, dtype=updates.dtype) + delta.detach()
                if not bool(torch.isfinite(new).all()):  # the sum overflowed the dtype: keep it in float64
                    new = old.to(device=updates.device, dtype=torch.float64) + delta.detach().double()
            self.history[cid] = new
            rows.append(new)
        dtype = torch.float64 if any(r.dtype == torch.float64 for r in rows) else updates.dtype
        return torch.stack([r.to(dtype) for r in rows])

    def weights(self, hist: torch.Tensor) -> torch.Tensor:
        """FoolsGold weights (steps 2–5) of the rows of ``hist`` (n, d): :func:`foolsgold_weights`
        with this history's κ, eps and tol."""
        return foolsgold_weights(hist, self.kappa, self.eps, self.tol)

    def __call__(
        self, client_ids: Sequence[Hashable], updates: torch.Tensor, weights: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Aggregate this round's updates; returns ``(aggregate, w)`` with w the FoolsGold
        weights in client_ids order. ``weights`` (data sizes) multiply w when given."""
        updates = _check_updates(updates)
        weights = _check_weights(weights, updates)
        client_ids = list(client_ids)
        if len(client_ids) != updates.shape[0]:
            raise ValueError(f"got {len(client_ids)} client ids for {updates.shape[0]} updates")
        if len(set(client_ids)) != len(client_ids):
            raise ValueError("client ids must be unique within a round")
        self.last_clip = None
        w = self.weights(self._update_history(client_ids, updates)).to(updates.dtype)
        coef = w if weights is None else w * weights
        total = coef.sum()
        if not bool(total > 0):
            return torch.zeros(updates.shape[1], dtype=updates.dtype, device=updates.device), w
        clip = self.last_clip = self.clip_factors(updates)
        if clip is None:
            return (coef / total) @ updates, w
        # Σ w_k c_k Δ_k / Σ w_k with c_k = min(1, B / ‖Δ_k‖), in float64 (c_k can be ~1e-30).
        p = coef.double() / total.double() * clip
        return (p @ updates.double()).to(updates.dtype), w

    def clip_factors(self, updates: torch.Tensor) -> torch.Tensor | None:
        """c_k = min(1, B / ‖Δ_k‖) with B = ``norm_bound`` × the (true) median update norm of the
        round (float64, overflow-free norms), or None when no update exceeds B, no bound is set,
        fewer than 3 updates arrived or the median norm is 0: a median of two, or of mostly zero
        updates, says nothing about a typical update, and clipping against it would let one
        client shrink the honest ones. Then nothing is clipped (the plain weighted sum)."""
        if self.norm_bound is None or updates.shape[0] < 3:
            return None
        top = updates.detach().abs().amax(dim=1).double()
        norms = torch.linalg.vector_norm(rows_unit_scaled64(updates.detach()), dim=1) * top
        typical = float(true_median(norms, dim=0))
        if not typical > 0:
            return None
        bound = self.norm_bound * typical
        if not bool((norms > bound).any()):
            return None
        return torch.where(norms > bound, bound / norms, 1.0)
