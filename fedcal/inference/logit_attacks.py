"""The attacks of :mod:`.probit_attacks` against aggregators that read the clients' *logits*.

CoPur and manifold projection can be run on the concatenated logits (``space="logits"`` of
:class:`~fedcal.inference.purify.ProbitFusion`), as the robust-federated-inference literature runs
CoPur (Dhasade et al., "Robust Federated Inference", ICLR 2026; code:
github.com/sacs-epfl/robust-federated-inference, Baselines/CoPur/Attacks). A logit vector has no
range, so an adversary facing such an aggregator may send any real vector. Each attack is mapped to
logits the way the authors' code maps it for CoPur:

* ``logit_flip``: ``-a · z_i``, the adversary's own raw logits flipped and amplified (dfl.py); its
  probit form is ``softmax(-a · z_i)``, whose scale is bounded, this one's is not;
* the one-hot attacks (``sia_blackbox``, ``sia_blackbox_colluding``, ``sia_whitebox``,
  ``sia_whitebox_raise``, ``lma``, ``cpa``): the target class the probit attack picks (the white-box
  ones query the logit aggregator on the clean logits), sent as sia.py's amplified one-hot logit
  vector :func:`amplified_one_hot` of scale ``a`` times the adversary's own logits. Both white-box
  SIA forms send that vector: the authors' CoPur attack has only this one;
* ``pgd_cw``: sign-gradient ascent on free logit rows (no softmax: logits are unconstrained), from the
  adversary's own logits or from U[0, 1)^C, the loop of :func:`~.probit_attacks.sign_ascent`.

Every function returns a NEW (B, n, C) logit tensor in which only the masked rows differ.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from fedcal import catalogue

from .probit_attacks import PGD_LOSSES, PGD_STARTS, _check, _check_labels, apply_attack, sign_ascent

__all__ = ["amplified_one_hot", "attack_logits", "ONE_HOT"]

#: probit attacks whose adversarial row is a one-hot of a target class (their logit form: :func:`amplified_one_hot`)
ONE_HOT = ("sia_blackbox", "sia_blackbox_colluding", "sia_whitebox", "sia_whitebox_raise", "lma", "cpa")


def amplified_one_hot(logits: torch.Tensor, target: torch.Tensor, amplification: float) -> torch.Tensor:
    """The authors' logit form of a one-hot vote for ``target`` (Baselines/CoPur/Attacks/sia.py):
    with ``m = max_j z_j`` of the adversary's own logits, every entry ``-a·m`` and the target's
    ``+a·m`` when ``m > 0``; otherwise every entry ``a·min_j z_j`` and the target's ``-a·min_j z_j``.

    ``logits`` (..., C), ``target`` (...) class indices; returns (..., C)."""
    a = float(amplification)
    hi = logits.amax(-1, keepdim=True)
    lo = logits.amin(-1, keepdim=True)
    pos = hi > 0
    fill = torch.where(pos, -a * hi, a * lo)
    peak = torch.where(pos, a * hi, -a * lo)
    out = fill.expand_as(logits).clone()
    return out.scatter(-1, target.long().unsqueeze(-1), peak)


def attack_logits(name: str, logits: torch.Tensor, probits: torch.Tensor, mask: torch.Tensor, *,
                  aggregator: Optional[Callable[[torch.Tensor], torch.Tensor]] = None, labels=None,
                  amplification: float = 2.0, class_cov: Optional[torch.Tensor] = None, steps: int = 50,
                  step_size: float = 0.1, start: str = "own", loss: str = "logit", kappa: float = 0.0,
                  generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Attack ``name`` on a (B, n, C) logit batch for an ``aggregator`` that reads logits.

    ``probits`` are the same answers' softmax (what the probit attacks pick their targets from);
    ``mask`` the (B, n) adversarial rows. The white-box attacks query ``aggregator`` (logits in,
    probabilities out). See the module docstring for each attack's logit form."""
    if name not in catalogue.names("inference-attack"):
        raise ValueError(f"unknown attack {name!r}; known: {sorted(catalogue.names('inference-attack'))}")
    _check(probits, mask)
    if logits.shape != probits.shape:
        raise ValueError(f"logits shape {tuple(logits.shape)} != probits shape {tuple(probits.shape)}")
    z = logits.detach().to(probits.dtype)
    m3 = mask.unsqueeze(-1)
    if name == "none":
        return z.clone()
    if name == "logit_flip":
        return torch.where(m3, -float(amplification) * z, z)
    if name == "pgd_cw":
        if aggregator is None or labels is None:
            raise ValueError("pgd_cw needs an aggregator and labels")
        if start not in PGD_STARTS or loss not in PGD_LOSSES:
            raise ValueError(f"start must be one of {PGD_STARTS} and loss one of {PGD_LOSSES}")
        labels = _check_labels(labels, z.shape[0], z.device)
        best = sign_ascent(z, mask, aggregator, labels, lambda u: u, z.clone() if start == "own" else None,
                           steps=steps, step_size=step_size, kappa=kappa, restarts=1, generator=generator,
                           noise_scale=0.0, loss=loss)
        return torch.where(m3, best, z)
    # the one-hot attacks: the probit attack's target, sent in sia.py's logit form
    probit_name = "sia_whitebox" if name == "sia_whitebox_raise" else name
    clean = None
    if aggregator is not None:
        with torch.no_grad():
            clean = aggregator(z)

    def on_clean(_probits: torch.Tensor) -> torch.Tensor:  # the white-box attacks ask the aggregator once, clean
        return clean

    attacked = apply_attack(probit_name, probits, mask, aggregator=on_clean if clean is not None else None,
                            labels=labels, class_cov=class_cov)
    target = attacked.argmax(-1)
    return torch.where(m3, amplified_one_hot(z, target, amplification), z)
