"""The student's distillation loss against the robust consensus (RFD-LoRA steps 4–6).

Per anchor x, with the teacher (:class:`~fedcal.distill.consensus.Consensus`) z̃(x), μ̂(x), σ̂²(x),
v(x) and the student's logits z_W(x) ∈ R^C:

    ℓ(x) = w(x) · ( CE(softmax(z̃/T(x)), softmax(z_W/T(x)))
                    + λ (‖z_W − μ̂‖² + ‖(z_W − μ̂)² − σ̂²‖²) ),
    loss = (1/A) Σ_x ℓ(x),

with CE(p, q) = −Σ_i p_i log q_i (p the teacher's distribution, q the student's) and

* **DIS** (dispersion-informed sample weights, :func:`dis_weights`): w(x) = 1 / (1 + ρ v(x)), so
  anchors on which the client groups disagree count less;
* **CAT** (confidence-adaptive temperature, :func:`cat_temperature`):
  T(x) = T0 (1 + κ [max_i softmax(z̃(x))_i − τ]₊), so confidently-taught anchors are softened more;
* **MMD** (moment matching, the λ term): the student is pulled to the robust first moment μ̂ and
  its squared deviation to the robust second central moment σ̂² (a matching of the first two
  moments, the mean-embedding view of MMD with a polynomial kernel of degree 2).

Each switch of :func:`distillation_loss` turns one part off: ``cat=False`` uses the constant
T = T0, ``mmd=False`` drops the λ term, ``dis=False`` sets w ≡ 1. The teacher side (z̃, T, w, μ̂,
σ̂²) is detached: gradients flow only into the student's logits. No T² factor is applied to the CE
term (the formula above is used as written).

Sources: temperature-softened distillation — Hinton, Vinyals & Dean, "Distilling the Knowledge in a
Neural Network" (2015); moment matching / MMD — Gretton et al., "A Kernel Two-Sample Test" (JMLR
2012). The CAT, DIS and moment terms and their defaults (T0 = 2, κ = 2, τ = 0.7, λ = 0.1, ρ = 1)
are the RFD-LoRA design this package implements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict, Unpack

import torch

from ._checks import as_float_tensor, check_finite, check_real
from .consensus import Consensus

__all__ = ["DistillationTerms", "dis_weights", "cat_temperature", "distillation_terms", "distillation_loss"]


def dis_weights(dispersion, rho: float = 1.0) -> torch.Tensor:
    """DIS weights w(x) = 1 / (1 + ρ·v(x)) of the per-anchor dispersions v(x) >= 0.

    ``rho`` >= 0 and finite (ρ = 0 gives w ≡ 1). The dispersion must be finite and >= 0; the
    weights then lie in (0, 1], with w = 1 exactly where v = 0 (all groups agree).
    """
    rho = check_real("rho", rho, low=0.0)
    v = as_float_tensor(dispersion, "dispersion")
    check_finite(v, "dispersion")
    if bool((v < 0).any()):
        raise ValueError("dispersion must be >= 0 (it is a sum of variances)")
    return 1.0 / (1.0 + rho * v)


def cat_temperature(consensus_logits, t0: float = 2.0, kappa: float = 2.0, tau: float = 0.7) -> torch.Tensor:
    """CAT temperature T(x) = T0 · (1 + κ · [max_i q̃_i(x) − τ]₊) with q̃(x) = softmax(z̃(x)).

    ``consensus_logits`` is (..., C) (classes last); returns (...). T0 > 0, κ >= 0, τ ∈ [0, 1]
    (all finite). T(x) = T0 whenever max_i q̃_i(x) <= τ, and T0 <= T(x) <= T0 (1 + κ (1 − τ)).
    """
    t0 = check_real("t0", t0, low=0.0, strict_low=True)
    kappa = check_real("kappa", kappa, low=0.0)
    tau = check_real("tau", tau, low=0.0, high=1.0)
    z = as_float_tensor(consensus_logits, "consensus_logits")
    if z.ndim < 1 or z.shape[-1] < 1:
        raise ValueError(f"consensus_logits must be (..., C) with C >= 1 classes, got shape {tuple(z.shape)}")
    check_finite(z, "consensus_logits")
    confidence = torch.softmax(z, dim=-1).amax(dim=-1)
    return t0 * (1.0 + kappa * (confidence - tau).clamp_min(0.0))


@dataclass(frozen=True, eq=False)  # eq=False: tensors have no single truth value
class DistillationTerms:
    """The per-anchor pieces of the distillation loss (all (A,); only ``ce``, ``moment`` and
    ``per_anchor`` carry gradients to the student).

    Attributes:
        weight: w(x) (ones when DIS is off).
        temperature: T(x) (T0 everywhere when CAT is off).
        ce: CE(softmax(z̃/T), softmax(z_W/T)).
        moment: ‖z_W − μ̂‖² + ‖(z_W − μ̂)² − σ̂²‖² (zeros when MMD is off).
        per_anchor: ℓ(x) = w · (ce + λ · moment); the loss is its mean.
    """

    weight: torch.Tensor
    temperature: torch.Tensor
    ce: torch.Tensor
    moment: torch.Tensor
    per_anchor: torch.Tensor


def distillation_terms(
    student_logits,
    consensus: Consensus,
    *,
    cat: bool = True,
    mmd: bool = True,
    dis: bool = True,
    t0: float = 2.0,
    kappa: float = 2.0,
    tau: float = 0.7,
    lam: float = 0.1,
    rho: float = 1.0,
) -> DistillationTerms:
    """Per-anchor terms of :func:`distillation_loss` (same arguments); see the module docstring
    for the formula ℓ(x) = w(x)·(CE + λ·moment)."""
    lam = check_real("lam", lam, low=0.0)
    if not isinstance(consensus, Consensus):
        raise ValueError(f"consensus must be a Consensus, got {type(consensus).__name__}")
    student = as_float_tensor(student_logits, "student_logits")
    teacher = consensus.logits.detach()
    if teacher.ndim != 2:
        raise ValueError(f"consensus.logits must be (A, C), got shape {tuple(teacher.shape)}")
    if student.shape != teacher.shape:
        raise ValueError(f"student_logits must have the consensus' shape (A, C) = {tuple(teacher.shape)}, "
                         f"got {tuple(student.shape)}")
    check_finite(student, "student_logits")
    mu, var = consensus.mu.detach(), consensus.var.detach()
    if mu.shape != teacher.shape or var.shape != teacher.shape:
        raise ValueError("consensus.mu and consensus.var must have the shape of consensus.logits")
    if tuple(consensus.dispersion.shape) != (teacher.shape[0],):
        raise ValueError(f"consensus.dispersion must be (A,) = ({teacher.shape[0]},), "
                         f"got {tuple(consensus.dispersion.shape)}")
    dtype = torch.promote_types(student.dtype, teacher.dtype)
    student, teacher, mu, var = (t.to(dtype) for t in (student, teacher, mu, var))
    A = teacher.shape[0]

    # Every parameter is validated whatever the switches, so a bad value never hides behind one.
    t0 = check_real("t0", t0, low=0.0, strict_low=True)
    check_real("kappa", kappa, low=0.0)
    check_real("tau", tau, low=0.0, high=1.0)
    check_real("rho", rho, low=0.0)
    if cat:
        T = cat_temperature(teacher, t0, kappa, tau)
    else:
        T = torch.full((A,), t0, dtype=dtype, device=teacher.device)
    if dis:
        w = dis_weights(consensus.dispersion.detach(), rho).to(dtype)
    else:
        w = torch.ones(A, dtype=dtype, device=teacher.device)

    p = torch.softmax(teacher / T[:, None], dim=-1)
    log_q = torch.log_softmax(student / T[:, None], dim=-1)
    ce = -(p * log_q).sum(dim=-1)
    if mmd:
        d = student - mu
        moment = d.square().sum(dim=-1) + (d.square() - var).square().sum(dim=-1)
    else:
        moment = torch.zeros_like(ce)
    per_anchor = w * (ce + lam * moment)
    return DistillationTerms(weight=w, temperature=T, ce=ce, moment=moment, per_anchor=per_anchor)


class LossOptions(TypedDict, total=False):
    """The switches and parameters of :func:`distillation_terms`, as keywords other functions
    pass through unchanged (:func:`distillation_loss`, :func:`fedcal.distill.student.distill_step`,
    :func:`fedcal.distill.student.student_loss`); defaults are :func:`distillation_terms`'."""

    cat: bool
    mmd: bool
    dis: bool
    t0: float
    kappa: float
    tau: float
    lam: float
    rho: float


def distillation_loss(student_logits, consensus: Consensus, **options: Unpack[LossOptions]) -> torch.Tensor:
    """Scalar RFD-LoRA distillation loss (1/A) Σ_x w(x)·( CE(softmax(z̃/T), softmax(z_W/T))
    + λ(‖z_W − μ̂‖² + ‖(z_W − μ̂)² − σ̂²‖²) ).

    ``student_logits`` (A, C): the student's logits z_W on the anchors (gradients flow into them);
    ``consensus``: the teacher from :func:`~fedcal.distill.consensus.aggregate_logits` (detached).
    Switches: ``cat`` (else T ≡ t0), ``mmd`` (else no λ term), ``dis`` (else w ≡ 1).
    Parameters: t0 > 0, kappa >= 0, tau ∈ [0, 1] (CAT), lam >= 0 (moment weight), rho >= 0 (DIS).
    """
    return distillation_terms(student_logits, consensus, **options).per_anchor.mean()
