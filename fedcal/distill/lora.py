"""Server-side LoRA adapter aggregation of the baselines RFD-LoRA is compared with.

A client k's adapter for one weight matrix W ∈ R^{d_out×d_in} is a pair A_k ∈ R^{r_k×d_in},
B_k ∈ R^{d_out×r_k} of rank r_k.

**Scaling convention** (LoRA's, Hu et al. 2022): the update an adapter stands for is

    ΔW_k = (α / r_k) · B_k A_k,

with one α shared by all clients. The rules that only average factors of one common rank
(:func:`fedit_average`, :func:`ffa_average`) return factors that are used with that same α/r, so
they need no α. The rules that mix ranks take α and return factors whose product is already the
update: :func:`flora_stack` folds α/r_k into the stacked B (ΔW = B_stacked A_stacked, scale 1);
:func:`flexlora_redistribute` returns, per target rank r, factors used with the scaling α/r
(ΔW = (α/r) B A), like any rank-r LoRA adapter.

The aggregation weights are p_k = w_k / Σ_j w_j of the given non-negative weights w_k (typically
sample counts); ``None`` means p_k = 1/n.

Sources:

* FedIT — Zhang et al., "Towards Building the Federated GPT: Federated Instruction Tuning"
  (ICASSP 2024): FedAvg of A and of B separately.
* FFA-LoRA — Sun et al., "Improving LoRA in Privacy-preserving Federated Learning" (ICLR 2024):
  A frozen at its shared random initialisation, only B trained and averaged.
* FLoRA — Wang et al., "FLoRA: Federated Fine-Tuning Large Language Models with Heterogeneous
  Low-Rank Adaptations" (NeurIPS 2024): stacking, so that the product is exactly Σ_k p_k ΔW_k.
* FlexLoRA — Bai et al., "Federated Fine-tuning of Large Language Models under Heterogeneous Tasks
  and Client Resources" (NeurIPS 2024): average the full updates, then give every client the
  truncated SVD at its own rank (the best rank-r approximation by Eckart–Young–Mirsky).
* LoRA-FAIR — Bian, Wang, Zhang & Xu, "LoRA-FAIR: Federated LoRA Fine-Tuning with Aggregation and
  Initialization Refinement" (ICCV 2025, arXiv:2411.14961): FedIT's averages, with a server-side
  residual ΔB that brings (B̄ + ΔB) Ā towards the ideal Σ_k p_k B_k A_k; every client starts the
  next round from (Ā, B̄ + ΔB).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch

from ._checks import check_int, check_real, normalized_weights

__all__ = ["lora_delta", "fedit_average", "ffa_average", "flora_stack", "flexlora_redistribute", "lora_fair_refine"]


def _as_matrix(x, what: str) -> torch.Tensor:
    x = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    if x.ndim != 2:
        raise ValueError(f"{what} must be a 2-D matrix, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{what} contains NaN or Inf values")
    return x


def _common(mats: list[torch.Tensor]) -> list[torch.Tensor]:
    """All matrices in one dtype (the promoted one) on the first one's device."""
    dtype = mats[0].dtype
    for m in mats[1:]:
        dtype = torch.promote_types(dtype, m.dtype)
    return [m.to(dtype=dtype, device=mats[0].device) for m in mats]


def _check_list(xs, name: str) -> list:
    if isinstance(xs, torch.Tensor) or not isinstance(xs, Sequence) or len(xs) == 0:
        raise ValueError(f"{name} must be a non-empty list of matrices, one per client")
    return list(xs)


def _check_adapters(As, Bs) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Validate adapter pairs: A_k (r_k, d_in), B_k (d_out, r_k), r_k >= 1, one d_in and one
    d_out for all clients, finite entries. ValueErrors name the client index."""
    As, Bs = _check_list(As, "As"), _check_list(Bs, "Bs")
    if len(As) != len(Bs):
        raise ValueError(f"As and Bs must have one matrix per client each, got {len(As)} and {len(Bs)}")
    As = [_as_matrix(a, f"A of client {k}") for k, a in enumerate(As)]
    Bs = [_as_matrix(b, f"B of client {k}") for k, b in enumerate(Bs)]
    d_in, d_out = As[0].shape[1], Bs[0].shape[0]
    for k, (a, b) in enumerate(zip(As, Bs)):
        if a.shape[0] < 1 or a.shape[1] < 1 or b.shape[0] < 1:
            raise ValueError(f"client {k}: adapter dimensions must be >= 1, got A {tuple(a.shape)}, B {tuple(b.shape)}")
        if b.shape[1] != a.shape[0]:
            raise ValueError(f"client {k}: B has {b.shape[1]} columns but A has {a.shape[0]} rows (the rank r_k "
                             "must match: A is (r_k, d_in), B is (d_out, r_k))")
        if a.shape[1] != d_in:
            raise ValueError(f"client {k}: A has d_in = {a.shape[1]} columns, client 0 has {d_in}")
        if b.shape[0] != d_out:
            raise ValueError(f"client {k}: B has d_out = {b.shape[0]} rows, client 0 has {d_out}")
    mats = _common(As + Bs)
    return mats[: len(As)], mats[len(As):]


def _check_equal_shapes(mats: list[torch.Tensor], name: str) -> None:
    for k, m in enumerate(mats):
        if m.shape != mats[0].shape:
            raise ValueError(f"client {k}: {name} has shape {tuple(m.shape)}, client 0 has {tuple(mats[0].shape)} "
                             "(this rule needs one common rank)")


def _weighted_sum(mats: list[torch.Tensor], p: torch.Tensor) -> torch.Tensor:
    return sum(pk * m for pk, m in zip(p, mats))


def lora_delta(A, B, alpha: float) -> torch.Tensor:
    """The update of one adapter: ΔW = (α / r) · B A with r = A's number of rows (α > 0)."""
    alpha = check_real("alpha", alpha, low=0.0, strict_low=True)
    (A,), (B,) = _check_adapters([A], [B])
    return (alpha / A.shape[0]) * (B @ A)


def fedit_average(As, Bs, weights) -> tuple[torch.Tensor, torch.Tensor]:
    """FedIT: Ā = Σ_k p_k A_k and B̄ = Σ_k p_k B_k, averaged separately (p_k = w_k / Σ w).

    All clients must share one rank r (ValueError naming the first client that does not). The
    result is an adapter of rank r used with the same α/r; note (α/r) B̄ Ā ≠ Σ_k p_k ΔW_k in
    general (the average of products is not the product of averages). Returns ``(Ā, B̄)``.
    """
    As, Bs = _check_adapters(As, Bs)
    _check_equal_shapes(As, "A")
    p = normalized_weights(weights, len(As), dtype=As[0].dtype, device=As[0].device)
    return _weighted_sum(As, p), _weighted_sum(Bs, p)


def ffa_average(Bs, weights) -> torch.Tensor:
    """FFA-LoRA: B̄ = Σ_k p_k B_k (p_k = w_k / Σ w); A stays frozen at its shared initialisation,
    so it is not aggregated and (α/r) B̄ A = Σ_k p_k ΔW_k exactly. All B_k must have one shape
    (d_out, r). Returns B̄."""
    Bs = _check_list(Bs, "Bs")
    Bs = _common([_as_matrix(b, f"B of client {k}") for k, b in enumerate(Bs)])
    _check_equal_shapes(Bs, "B")
    p = normalized_weights(weights, len(Bs), dtype=Bs[0].dtype, device=Bs[0].device)
    return _weighted_sum(Bs, p)


def flora_stack(As, Bs, weights, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """FLoRA: stack heterogeneous-rank adapters into one of rank R = Σ_k r_k.

    A_s = [A_1; A_2; …; A_n] (rows concatenated, (R, d_in)) and
    B_s = [c_1 B_1, c_2 B_2, …, c_n B_n] (columns concatenated, (d_out, R)) with
    c_k = p_k · α / r_k, so that

        B_s A_s = Σ_k c_k B_k A_k = Σ_k p_k (α/r_k) B_k A_k = Σ_k p_k ΔW_k

    exactly: the scaling α/r_k is folded into B_s, and the stacked pair is applied with scale 1
    (ΔW = B_s A_s, not (α/R) B_s A_s). Returns ``(A_s, B_s)``.
    """
    alpha = check_real("alpha", alpha, low=0.0, strict_low=True)
    As, Bs = _check_adapters(As, Bs)
    p = normalized_weights(weights, len(As), dtype=As[0].dtype, device=As[0].device)
    A_s = torch.cat(As, dim=0)
    B_s = torch.cat([(pk * alpha / a.shape[0]) * b for pk, a, b in zip(p, As, Bs)], dim=1)
    return A_s, B_s


def flexlora_redistribute(As, Bs, weights, ranks: int | Iterable[int], alpha: float) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """FlexLoRA: average the full updates, then hand out truncated SVDs at each target rank.

    W̄ = Σ_k p_k ΔW_k = Σ_k p_k (α/r_k) B_k A_k (d_out × d_in). With the thin SVD W̄ = U S Vᵀ and
    U_r, S_r, V_r its r leading singular vectors/values, rank r gets

        A = S_r^{1/2} V_rᵀ  (r, d_in),   B = (r/α) · U_r S_r^{1/2}  (d_out, r),

    so that the adapter's update (α/r)·B A = U_r S_r V_rᵀ is the best rank-r approximation of W̄
    in the Frobenius and spectral norms (Eckart–Young–Mirsky); at r = min(d_out, d_in) it is W̄
    itself. A rank above min(d_out, d_in) (a client whose allowed rank exceeds a small layer) gets
    W̄ itself, its factors padded with zero rows of A and zero columns of B: still the best rank-r
    approximation, in the shapes that client's adapter has. ``ranks``: one int or several, each
    >= 1. Returns ``{r: (A, B)}``. The SVD is computed once, in the adapters' dtype; it raises
    ``torch.linalg.LinAlgError`` when LAPACK does not converge (the caller decides what a round
    does then).
    """
    alpha = check_real("alpha", alpha, low=0.0, strict_low=True)
    As, Bs = _check_adapters(As, Bs)
    d_out, d_in = Bs[0].shape[0], As[0].shape[1]
    full = min(d_out, d_in)
    if isinstance(ranks, bool) or not isinstance(ranks, Iterable):
        ranks = [ranks]
    ranks = [check_int("each target rank", r, 1) for r in ranks]
    if not ranks:
        raise ValueError("ranks is empty: give at least one target rank")
    p = normalized_weights(weights, len(As), dtype=As[0].dtype, device=As[0].device)
    W = sum(pk * (alpha / a.shape[0]) * (b @ a) for pk, a, b in zip(p, As, Bs))
    U, S, Vh = torch.linalg.svd(W, full_matrices=False)
    root = S.sqrt()
    out = {}
    for r in ranks:
        k = min(r, full)
        A = root[:k, None] * Vh[:k]
        B = (r / alpha) * (U[:, :k] * root[None, :k])
        if r > full:  # zero components beyond the update's own rank
            A = torch.cat([A, A.new_zeros(r - full, d_in)], dim=0)
            B = torch.cat([B, B.new_zeros(d_out, r - full)], dim=1)
        out[r] = (A, B)
    return out


def lora_fair_refine(As, Bs, weights, *, lam: float = 1e-2, steps: int = 1000,
                     lr: float = 1e-2) -> tuple[torch.Tensor, torch.Tensor]:
    """LoRA-FAIR: FedIT's averages with a residual correction ΔB of the averaged B.

    With p_k = w_k / Σ w, Ā = Σ_k p_k A_k, B̄ = Σ_k p_k B_k and the ideal update
    ΔW = Σ_k p_k B_k A_k (all clients of one rank r, so the common scale α/r cancels), the server
    solves

        ΔB* = argmin_ΔB  S(ΔW, (B̄ + ΔB) Ā) + λ ‖ΔB‖²_F,
        S(X, Y) = 1 − ⟨X, Y⟩_F / (‖X‖_F ‖Y‖_F)          (one minus the cosine similarity),

    by ``steps`` steps of plain gradient descent with step ``lr`` from ΔB = 0, and every client
    starts the next round from (Ā, B̄ + ΔB*) — the paper's "aggregation refinement" (the residual
    on the server) and "initialisation refinement" (clients start from the refined global adapter
    instead of re-initialising it). Ā is kept: only B is corrected, so the refined adapter has
    rank r and shares Ā's row space; the part of ΔW outside that row space cannot be reached.
    The penalty keeps ΔB small, so the refined adapter stays close to FedIT's.

    Why these choices: the paper writes a similarity S and a norm penalty on ΔB; its cosine form
    with the squared penalty, λ = 10⁻², 1000 steps of step 10⁻² from ΔB = 0, is what two public
    re-implementations of the method use (the paper's own code is not released). The squared
    penalty is smooth at ΔB = 0, so when B̄ Ā already points along ΔW (one client, or identical
    clients) the gradient is zero and the result is exactly FedIT's. Computed in float64 on the
    CPU (the matrices are d_out × r and r × d_in: the thousand steps take milliseconds per layer).
    A ΔW or B̄ Ā of zero norm has no direction to match: ΔB = 0 then. Returns ``(Ā, B̄ + ΔB*)``
    in the adapters' dtype.
    """
    lam = check_real("lam", lam, low=0.0)
    steps = check_int("steps", steps, 0)
    lr = check_real("lr", lr, low=0.0, strict_low=True)
    As, Bs = _check_adapters(As, Bs)
    _check_equal_shapes(As, "A")
    dtype, device = As[0].dtype, As[0].device
    p = normalized_weights(weights, len(As), dtype=torch.float64, device="cpu")
    A64 = [a.detach().to("cpu", torch.float64) for a in As]
    B64 = [b.detach().to("cpu", torch.float64) for b in Bs]
    A_bar, B_bar = _weighted_sum(A64, p), _weighted_sum(B64, p)
    target = sum(pk * (b @ a) for pk, a, b in zip(p, A64, B64))
    delta = torch.zeros_like(B_bar)
    t_norm = target.norm()
    if t_norm > 0 and steps:
        t_unit = target / t_norm
        with torch.enable_grad():
            delta.requires_grad_(True)
            for _ in range(steps):
                pred = (B_bar + delta) @ A_bar
                p_norm = pred.norm()
                if not p_norm > 0:
                    break
                loss = 1.0 - (pred * t_unit).sum() / p_norm + lam * delta.square().sum()
                (grad,) = torch.autograd.grad(loss, delta)
                with torch.no_grad():
                    delta -= lr * grad
        delta = delta.detach()
    return A_bar.to(device, dtype), (B_bar + delta).to(device, dtype)
