"""The RFD-LoRA server's student and the evaluation helpers.

**The student** (:func:`student_model`) is the global model: the same frozen backbone the clients
use, with a trainable part of its own — a LoRA adapter of a configurable rank (default 16, the
largest default client rank, so the student can represent any single client's adapter) on the same
target modules, plus a trainable classification head. Why this and not another choice:

* the server holds only the public anchors, no labels and no private data; a frozen backbone
  keeps the number of trained parameters small (the anchor set is small) and keeps the student
  in the clients' function class, so distilling their logits is well posed;
* the head must be trainable: the consensus teacher lives in logit space and the backbone's head
  is randomly initialised for the downstream task (see :mod:`fedcal.distill.clients`);
* the rank is free: clients' ranks differ and nothing is averaged across them, so the student's
  rank is a server-side capacity knob (``rank``), not tied to any client.

A server round: the clients' uploads → :func:`build_consensus` (clip, then
:func:`~fedcal.distill.consensus.aggregate_logits`: "mom", "median" or "mean", M groups) →
:func:`distill_step` (``steps`` optimiser steps of :func:`~fedcal.distill.loss.distillation_loss`
with its cat / mmd / dis switches).

**Metrics** (pure functions of predicted and true labels): CA, the clean accuracy; RA, the
accuracy on triggered (backdoored) inputs with respect to their true labels; ASR, the share of
triggered inputs whose true label is not the attack's target that are classified as the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence, Unpack

import torch

from fedcal.config.distill import PRIOR_TARGETS
from fedcal.progress import phase

from ._checks import check_int
from .clients import _check_batch, _device, _logits, _seeded, forward_logits, lora_model
from .consensus import Consensus, aggregate_logits, clip_logits
from .consensus import prior_correct as correct_priors
from .loss import LossOptions, distillation_loss

__all__ = [
    "DistillStats",
    "student_model",
    "build_consensus",
    "student_loss",
    "distill_step",
    "predict",
    "clean_accuracy",
    "robust_accuracy",
    "attack_success_rate",
]


def student_model(
    base_model: torch.nn.Module,
    rank: int = 16,
    *,
    alpha: float = 8.0,
    target_modules: Sequence[str] = ("query", "value"),
    seed: int = 0,
    head_modules: Sequence[str] = ("classifier",),
    dropout: float = 0.0,
    copy: bool = True,
):
    """The server's student: a deep copy (``copy=True``) of the frozen ``base_model`` with a LoRA
    adapter of ``rank`` (any rank >= 1: not bound to the clients' allowed set) and a trainable
    head; see the module docstring for why. Returns the ``peft.PeftModel``."""
    return lora_model(base_model, rank, alpha=alpha, target_modules=target_modules, seed=seed, allowed_ranks=None,
                      client="student", train_head=True, head_modules=head_modules, dropout=dropout, copy=copy)


def build_consensus(
    uploads,
    *,
    clip: float = 10.0,
    method: str = "mom",
    num_groups: int | None = None,
    generator: torch.Generator | None = None,
    prior_correct: bool = False,
    prior_target: str = "median",
) -> Consensus:
    """The teacher from one round's uploads: a list of n (A, C) logit tensors or one (n, A, C)
    tensor, clipped to [−clip, clip] on the server (a Byzantine client need not have clipped),
    with ``prior_correct`` shifted per client to the clients' median label prior on the anchors
    (:func:`~fedcal.distill.consensus.prior_correct`, fedcal's variant; ``prior_target="uniform"``:
    to the uniform prior instead, ``dst-prior-target``) and clipped again, then
    :func:`~fedcal.distill.consensus.aggregate_logits` with ``method`` ("mom": median of means over
    ``num_groups`` random groups drawn from ``generator``; "median"; "mean")."""
    if isinstance(uploads, (list, tuple)):
        if not uploads:
            raise ValueError("uploads is empty: no client uploaded logits")
        shapes = {tuple(torch.as_tensor(z).shape) for z in uploads}
        if len(shapes) != 1:
            raise ValueError(f"every client's logits must have one shape (A, C), got {sorted(shapes)}")
        uploads = torch.stack([torch.as_tensor(z) for z in uploads])
    Z = clip_logits(uploads, clip)
    if prior_target not in PRIOR_TARGETS:
        raise ValueError(f"unknown prior_target {prior_target!r}; allowed: {', '.join(PRIOR_TARGETS)}")
    if prior_correct:
        C = Z.shape[-1]
        prior = None if prior_target == "median" else torch.full((C,), 1.0 / C, dtype=torch.float64)
        Z = clip_logits(correct_priors(Z, prior=prior), clip)
    return aggregate_logits(Z, method, num_groups, generator)


def _subset(consensus: Consensus, idx: torch.Tensor) -> Consensus:
    """The consensus restricted to the anchors ``idx`` (for a mini-batch)."""
    return Consensus(logits=consensus.logits[idx], mu=consensus.mu[idx], var=consensus.var[idx],
                     dispersion=consensus.dispersion[idx])


def _check_anchors(anchor_ids, anchor_mask, consensus: Consensus):
    ids, mask = _check_batch(anchor_ids, anchor_mask)
    if not isinstance(consensus, Consensus):
        raise ValueError(f"consensus must be a Consensus, got {type(consensus).__name__}")
    if consensus.logits.ndim != 2 or consensus.logits.shape[0] != ids.shape[0]:
        raise ValueError(f"consensus has logits of shape {tuple(consensus.logits.shape)}, "
                         f"expected ({ids.shape[0]}, C): one row per anchor")
    return ids, mask


def student_loss(student, anchor_ids, anchor_mask, consensus: Consensus, *, batch_size: int = 256,
                 **loss_options: Unpack[LossOptions]) -> float:
    """The distillation loss of the student's eval-mode (no dropout) logits on all anchors — the
    quantity :func:`distill_step` lowers, measured without its randomness. ``loss_options`` are
    :func:`~fedcal.distill.loss.distillation_loss`'s keywords (cat, mmd, dis, t0, kappa, tau, lam,
    rho)."""
    ids, mask = _check_anchors(anchor_ids, anchor_mask, consensus)
    z = _logits(student, ids, mask, check_int("batch_size", batch_size, 1))
    cons = Consensus(*(t.detach().float().cpu() for t in
                       (consensus.logits, consensus.mu, consensus.var, consensus.dispersion)))
    return float(distillation_loss(z, cons, **loss_options))


@dataclass
class DistillStats:
    """What :func:`distill_step` did: ``losses`` (one per optimiser step, the mini-batch's loss
    before the step), ``steps`` and their mean ``mean_loss``."""

    losses: list[float] = field(default_factory=list)
    steps: int = 0
    mean_loss: float = math.nan


def distill_step(
    student,
    anchor_ids,
    anchor_mask,
    consensus: Consensus,
    optimizer: torch.optim.Optimizer,
    *,
    steps: int = 1,
    batch_size: int | None = None,
    generator: torch.Generator | None = None,
    **loss_options: Unpack[LossOptions],
) -> DistillStats:
    """``steps`` optimiser steps of the student on the anchors against the consensus.

    Each step takes a mini-batch of ``batch_size`` anchors (``None``: all of them) — drawn in
    shuffled passes over the anchors from ``generator`` — and minimises
    :func:`~fedcal.distill.loss.distillation_loss` of the student's logits against the
    consensus rows of those anchors, with ``loss_options`` (:class:`~fedcal.distill.loss.LossOptions`:
    the switches cat, mmd, dis and the parameters t0, kappa, tau, lam, rho). The student trains in train mode
    (dropout on, as for the clients' local training); the dropout is seeded from ``generator`` and
    torch's global RNG restored, so the step is deterministic from it. ``optimizer`` holds the
    student's trainable parameters (the caller keeps it across rounds so its moments persist — the
    student is never replaced, unlike a client's adapter). The steps are the phase "distillation"
    (:func:`fedcal.progress.phase`).
    """
    ids, mask = _check_anchors(anchor_ids, anchor_mask, consensus)
    steps = check_int("steps", steps, 1)
    n = ids.shape[0]
    batch_size = n if batch_size is None else min(check_int("batch_size", batch_size, 1), n)
    device = _device(student)
    cons = Consensus(*(t.detach().float().to(device) for t in
                       (consensus.logits, consensus.mu, consensus.var, consensus.dispersion)))
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    order = torch.empty(0, dtype=torch.long)
    losses = []
    student.train()
    with _seeded(seed, device), phase("distillation", steps, "steps") as bar:
        for _ in range(steps):
            if order.numel() < batch_size:  # a new shuffled pass when the current one runs out
                order = torch.cat([order, torch.randperm(n, generator=generator)])
            idx, order = order[:batch_size], order[batch_size:]
            z = forward_logits(student, ids[idx], mask[idx], device).float()
            loss = distillation_loss(z, _subset(cons, idx.to(device)), **loss_options)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
            bar.update(1, f"loss {losses[-1]:.4f}")
    optimizer.zero_grad(set_to_none=True)
    return DistillStats(losses=losses, steps=steps, mean_loss=sum(losses) / len(losses))


def predict(model, input_ids, attention_mask, *, batch_size: int = 256) -> torch.Tensor:
    """Predicted labels argmax_c z_c of the model's eval-mode logits, an int64 CPU tensor (N,).

    FloatingPointError when a logit is NaN or Inf: the argmax of such a row is an artefact of its
    position (class 0 for an all-NaN row), not a prediction, and accuracies computed from it would
    look like ordinary numbers."""
    ids, mask = _check_batch(input_ids, attention_mask)
    z = _logits(model, ids, mask, check_int("batch_size", batch_size, 1))
    if not bool(torch.isfinite(z).all()):
        raise FloatingPointError("the model's logits contain NaN or Inf: it predicts nothing")
    return z.argmax(dim=-1)


def _labels(pred, labels) -> tuple[torch.Tensor, torch.Tensor]:
    pred, labels = torch.as_tensor(pred).cpu(), torch.as_tensor(labels).cpu()
    if pred.ndim != 1 or pred.shape != labels.shape or pred.numel() == 0:
        raise ValueError(f"predictions and labels must be non-empty 1-D tensors of one length, "
                         f"got {tuple(pred.shape)} and {tuple(labels.shape)}")
    if pred.is_floating_point() or labels.is_floating_point():
        raise ValueError("predictions and labels must be integer class indices (take argmax of logits first)")
    return pred.long(), labels.long()


def clean_accuracy(pred, labels) -> float:
    """CA: the share of clean inputs whose prediction equals the true label."""
    pred, labels = _labels(pred, labels)
    return float((pred == labels).double().mean())


def robust_accuracy(pred_triggered, labels) -> float:
    """RA: the share of triggered inputs still classified as their true label (over all the
    triggered inputs given; pass only the non-target ones for the variant that excludes them)."""
    pred, labels = _labels(pred_triggered, labels)
    return float((pred == labels).double().mean())


def attack_success_rate(pred_triggered, labels, target: int) -> float:
    """ASR: among triggered inputs whose true label is not ``target``, the share classified as
    ``target``. Inputs of the target class are left out (for them "success" is the correct
    answer); ValueError if every input is of the target class."""
    pred, labels = _labels(pred_triggered, labels)
    target = check_int("target", target, 0)
    keep = labels != target
    if not bool(keep.any()):
        raise ValueError(f"every triggered input has the target label {target}: the ASR is undefined")
    return float((pred[keep] == target).double().mean())
