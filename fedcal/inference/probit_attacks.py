"""Probit-space attacks on robust federated *inference* (SPEC §7); each is an ``inference-attack`` component of
:mod:`fedcal.catalogue` (:data:`PROBIT_ATTACKS`: name → function, read from it).

(Training-time client behaviours — TSA, noise, label flipping — are :mod:`fedcal.attacks`.)

Setting: ``n`` clients each return a probit vector (a point of the simplex
Δ^C) for every query; a batch is a tensor ``probits`` of shape ``(B, n, C)``.
An adversary controls ``f`` of the ``n`` rows of every query, with identities
redrawn per query (:func:`adversary_mask`).

Every attack has the signature ``attack(probits, mask, **kw) -> probits'`` and
returns a NEW tensor in which only the masked (adversarial) rows differ; honest
rows are copied bit-identically (``torch.where``) and every returned row is a
valid probit vector — except :func:`sia_whitebox_raise`'s (:data:`OFF_SIMPLEX`),
the robust-inference authors' code's white-box SIA, kept to measure their protocol.

An *aggregator* is any callable ``agg(probits (B, n, C)) -> (B, C)``; the
white-box attacks (:func:`sia_whitebox`, :func:`pgd_cw`) query it, and
:func:`pgd_cw` differentiates through it w.r.t. the adversarial rows only.
"""
from __future__ import annotations

import inspect
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from fedcal import catalogue
from fedcal.config.inference import PGD_LOSSES, PGD_STARTS

__all__ = [
    "adversary_mask",
    "logit_flip",
    "sia_blackbox",
    "sia_whitebox",
    "sia_whitebox_raise",
    "lma",
    "class_covariance",
    "cpa",
    "cw_margin",
    "pgd_cw",
    "no_attack",
    "OFF_SIMPLEX",
    "PGD_STARTS",
    "PGD_LOSSES",
    "apply_attack",
    "validate_probits",
]

_EPS = 1e-12


# --------------------------------------------------------------------------- helpers
def _check(probits: torch.Tensor, mask: torch.Tensor) -> None:
    if not isinstance(probits, torch.Tensor) or probits.dim() != 3:
        raise ValueError(
            f"probits must be a (B, n, C) tensor, got shape "
            f"{tuple(getattr(probits, 'shape', ()))}"
        )
    if probits.shape[-1] < 2:
        raise ValueError(f"need at least 2 classes, got C={probits.shape[-1]}")
    if not isinstance(mask, torch.Tensor) or mask.shape != probits.shape[:2]:
        raise ValueError(
            f"mask shape {tuple(getattr(mask, 'shape', ()))} does not match "
            f"probits (B, n) = {tuple(probits.shape[:2])}"
        )
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got {mask.dtype}")


def _replace(probits: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    """New tensor: ``adv`` on masked rows, ``probits`` (bit-identical) elsewhere."""
    adv = adv.to(dtype=probits.dtype, device=probits.device).expand_as(probits)
    return torch.where(mask.unsqueeze(-1), adv, probits)


def _one_hot(idx: torch.Tensor, C: int, like: torch.Tensor) -> torch.Tensor:
    return F.one_hot(idx.long(), C).to(dtype=like.dtype, device=like.device)


def _masked_mean(probits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Mean over the selected rows of each query, (B, C). Queries with no
    selected row fall back to the mean over all rows."""
    w = rows.to(probits.dtype).unsqueeze(-1)
    cnt = w.sum(1)
    sel = (probits * w).sum(1) / cnt.clamp_min(1.0)
    return torch.where(cnt > 0, sel, probits.mean(1))


def _check_labels(labels, B: int, device) -> torch.Tensor:
    labels = torch.as_tensor(labels, device=device).long()
    if labels.shape != (B,):
        raise ValueError(f"labels must have shape ({B},), got {tuple(labels.shape)}")
    return labels


# --------------------------------------------------------------------------- mask
def adversary_mask(batch: int, n: int, f: int,
                   generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Bool mask (batch, n) with exactly ``f`` True per row, positions drawn
    uniformly at random per query from ``generator`` (seeded => reproducible).

    Requires ``0 <= f < n/2`` (honest majority)."""
    if batch < 0 or n <= 0:
        raise ValueError(f"invalid batch={batch}, n={n}")
    if f < 0 or 2 * f >= n:
        raise ValueError(f"need 0 <= f < n/2, got f={f}, n={n}")
    scores = torch.rand(batch, n, generator=generator)
    idx = scores.argsort(dim=1)[:, :f]
    mask = torch.zeros(batch, n, dtype=torch.bool)
    mask.scatter_(1, idx, True)
    return mask


# --------------------------------------------------------------------------- attacks
def no_attack(probits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Identity (returns a copy)."""
    _check(probits, mask)
    return probits.clone()


def logit_flip(probits: torch.Tensor, mask: torch.Tensor,
               logits: Optional[torch.Tensor] = None,
               amplification: float = 2.0) -> torch.Tensor:
    """Adversary i sends ``softmax(-a * z_i)`` of its own logits ``z_i``;
    without logits, ``z_i = log(clamp(p_i))``."""
    _check(probits, mask)
    if logits is None:
        z = probits.clamp_min(_EPS).log()
    else:
        if logits.shape != probits.shape:
            raise ValueError(f"logits shape {tuple(logits.shape)} != probits shape "
                             f"{tuple(probits.shape)}")
        z = logits.to(probits.dtype)
    adv = torch.softmax(-float(amplification) * z, dim=-1)
    return _replace(probits, mask, adv)


def sia_blackbox(probits: torch.Tensor, mask: torch.Tensor,
                 colluding: bool = False) -> torch.Tensor:
    """Second-most-probable-class attack, black box.

    Each adversary sends the one-hot of the runner-up class of its OWN
    prediction; ``colluding=True``: of the adversaries' mean prediction (all
    adversaries of a query then send the same vector)."""
    _check(probits, mask)
    C = probits.shape[-1]
    if colluding:
        mean_adv = _masked_mean(probits, mask)                 # (B, C)
        target = mean_adv.topk(2, dim=-1).indices[:, 1]        # (B,)
        adv = _one_hot(target, C, probits).unsqueeze(1)        # (B, 1, C)
    else:
        target = probits.topk(2, dim=-1).indices[..., 1]       # (B, n)
        adv = _one_hot(target, C, probits)
    return _replace(probits, mask, adv)


def sia_whitebox(probits: torch.Tensor, mask: torch.Tensor,
                 aggregator: Callable[[torch.Tensor], torch.Tensor],
                 labels) -> torch.Tensor:
    """White-box SIA: with the aggregator's clean output on the unmodified
    probits, every adversary sends the one-hot of its most probable class
    other than the true label."""
    _check(probits, mask)
    B, _, C = probits.shape
    labels = _check_labels(labels, B, probits.device)
    with torch.no_grad():
        clean = aggregator(probits)
    if clean.shape != (B, C):
        raise ValueError(f"aggregator returned {tuple(clean.shape)}, expected {(B, C)}")
    scores = clean.detach().clone().float()
    scores[torch.arange(B), labels] = float("-inf")
    target = scores.argmax(-1)
    return _replace(probits, mask, _one_hot(target, C, probits).unsqueeze(1))


def sia_whitebox_raise(probits: torch.Tensor, mask: torch.Tensor,
                       aggregator: Callable[[torch.Tensor], torch.Tensor], labels) -> torch.Tensor:
    """White-box SIA as the robust-inference authors' code writes it: the target class is
    :func:`sia_whitebox`'s (the aggregator's most probable wrong class on the clean probits), but
    each adversary sends its OWN probit row with the target's entry raised to 1, the other entries
    kept and nothing renormalised (``x.scatter(-1, target, 1)`` in ``sia_attack`` of
    Utils/adversarial.py, github.com/sacs-epfl/robust-federated-inference).

    The row sums to 2 − p_t: it is no probit vector, and fedcal's server would drop such a reply
    (:func:`validate_probits`). It keeps the adversary's honest mass (often on the true class), so
    it is much weaker than SPEC §7's one-hot row (:func:`sia_whitebox`); it is here because it is
    what the literature's white-box SIA numbers measured.
    """
    _check(probits, mask)
    B, _, C = probits.shape
    labels = _check_labels(labels, B, probits.device)
    with torch.no_grad():
        clean = aggregator(probits)
    if clean.shape != (B, C):
        raise ValueError(f"aggregator returned {tuple(clean.shape)}, expected {(B, C)}")
    scores = clean.detach().clone().float()
    scores[torch.arange(B), labels] = float("-inf")
    target = scores.argmax(-1)
    raised = probits.scatter(-1, target[:, None, None].expand(B, probits.shape[1], 1), 1.0)
    return _replace(probits, mask, raised)


def lma(probits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Least-likely-class attack: one-hot of the least likely class of the
    honest mean prediction."""
    _check(probits, mask)
    C = probits.shape[-1]
    target = _masked_mean(probits, ~mask).argmin(-1)
    return _replace(probits, mask, _one_hot(target, C, probits).unsqueeze(1))


def class_covariance(probits_heldout: torch.Tensor,
                     honest: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(C, C) covariance between classes of honest predicted probability
    vectors: samples = all (query, client) pairs, variables = classes.

    ``probits_heldout``: (N, n, C) or (M, C). ``honest``: optional bool mask
    (N, n) selecting the honest rows (default: all rows)."""
    p = torch.as_tensor(probits_heldout)
    if p.dim() == 3:
        if honest is not None:
            if honest.shape != p.shape[:2]:
                raise ValueError(f"honest mask shape {tuple(honest.shape)} != "
                                 f"{tuple(p.shape[:2])}")
            p = p[honest]
        else:
            p = p.reshape(-1, p.shape[-1])
    elif p.dim() != 2 or honest is not None:
        raise ValueError(f"probits_heldout must be (N, n, C) or (M, C), got "
                         f"{tuple(p.shape)}")
    if p.shape[0] < 2:
        raise ValueError("need at least 2 held-out prediction vectors")
    return torch.cov(p.T.to(torch.float64)).to(p.dtype if p.is_floating_point()
                                               else torch.float32)


def cpa(probits: torch.Tensor, mask: torch.Tensor,
        class_cov: torch.Tensor) -> torch.Tensor:
    """Class-prior (covariance) attack: for the predicted class ``c`` of the
    honest mean, send the one-hot of ``argmin_j S[c, j]`` (the class least
    correlated with ``c`` in honest held-out predictions)."""
    _check(probits, mask)
    C = probits.shape[-1]
    S = torch.as_tensor(class_cov, device=probits.device)
    if S.shape != (C, C):
        raise ValueError(f"class_cov must be ({C}, {C}), got {tuple(S.shape)}")
    c = _masked_mean(probits, ~mask).argmax(-1)
    target = S[c].argmin(-1)
    return _replace(probits, mask, _one_hot(target, C, probits).unsqueeze(1))




def cw_margin(agg_probs: torch.Tensor, labels, kappa: Optional[float] = None, space: str = "logit"
              ) -> torch.Tensor:
    """Carlini–Wagner margin of an aggregate (B, C) per query:
    ``max_{j != y} log p_j - log p_y`` (positive <=> misclassified); with
    ``space="prob"`` on the probabilities themselves, ``max_{j != y} p_j - p_y`` (the
    robust-inference authors' ``Carlini_Wagner_loss``; its gradient vanishes where the
    aggregate's softmax saturates, the log margin's does not).

    With ``kappa`` the attacker's objective is capped at ``kappa``:
    ``min(margin, kappa)``, i.e. the CW loss ``max(log p_y - max_j log p_j,
    -kappa)`` to be minimised."""
    if space not in PGD_LOSSES:
        raise ValueError(f"space must be one of {PGD_LOSSES}, got {space!r}")
    B, C = agg_probs.shape
    labels = _check_labels(labels, B, agg_probs.device)
    logp = agg_probs.clamp_min(_EPS).log() if space == "logit" else agg_probs
    true = logp.gather(1, labels[:, None]).squeeze(1)
    other = logp.masked_fill(F.one_hot(labels, C).bool(), float("-inf")).amax(1)
    m = other - true
    if kappa is not None:
        m = m.clamp_max(float(kappa))
    return m


def pgd_cw(probits: torch.Tensor, mask: torch.Tensor,
           aggregator: Callable[[torch.Tensor], torch.Tensor], labels,
           steps: int = 50, step_size: float = 0.1, kappa: float = 0.0,
           restarts: int = 1, generator: Optional[torch.Generator] = None,
           noise_scale: float = 0.5, start: str = "own", loss: str = "logit") -> torch.Tensor:
    """White-box PGD (sign-gradient ascent) on the CW margin of the aggregate.

    Free variables ``u`` for the adversarial rows, adversarial probits
    ``softmax(u)`` (always valid). Objective per query:
    ``min(max_{j!=y} log p_j - log p_y, kappa)`` of the aggregator output
    (the CW loss ``max(log p_y - max_j log p_j, -kappa)`` minimised; ``loss="prob"``:
    the same margin on probabilities, :func:`cw_margin`). ``u`` starts at ``log`` of
    the current adversarial rows (``start="own"``) or at ``U[0, 1)^C``, a random
    near-uniform row (``start="uniform"``, the robust-inference authors' code), plus
    Gaussian noise of scale ``noise_scale`` for restarts >= 1. The best
    (highest-objective) iterate per query over all steps and restarts is
    returned; the initial (unattacked) rows are always a candidate, so the
    objective never decreases. Gradients are taken w.r.t. ``u`` only
    (``torch.autograd.grad``), never the aggregator's parameters.

    Why the start matters: each step moves every logit by ``step_size``, so
    ``steps`` steps reach only logits within ``steps · step_size`` of the start.
    From a client's confident row (true class ahead by ~10 in log-probability)
    20 steps of 0.1 cannot even leave the true class, 50 barely can: the budget,
    not the threat model (any probit vector), then limits the adversary. From a
    near-uniform row every vertex region is within reach of 50 steps.
    """
    _check(probits, mask)
    if steps < 0 or restarts < 1:
        raise ValueError(f"need steps >= 0 and restarts >= 1, got {steps}, {restarts}")
    if start not in PGD_STARTS:
        raise ValueError(f"start must be one of {PGD_STARTS}, got {start!r}")
    if loss not in PGD_LOSSES:
        raise ValueError(f"loss must be one of {PGD_LOSSES}, got {loss!r}")
    B, n, C = probits.shape
    labels = _check_labels(labels, B, probits.device)
    base = probits.detach()
    start_u = base.clamp_min(_EPS).log() if start == "own" else None
    best = sign_ascent(base, mask, aggregator, labels, lambda u: torch.softmax(u, dim=-1), start_u,
                       steps=steps, step_size=step_size, kappa=kappa, restarts=restarts, generator=generator,
                       noise_scale=noise_scale, loss=loss)
    return _replace(probits, mask, best)


def sign_ascent(base: torch.Tensor, mask: torch.Tensor, aggregator: Callable[[torch.Tensor], torch.Tensor],
                labels: torch.Tensor, to_rows: Callable[[torch.Tensor], torch.Tensor],
                start_u: Optional[torch.Tensor], *, steps: int, step_size: float, kappa: float, restarts: int,
                generator: Optional[torch.Generator], noise_scale: float, loss: str) -> torch.Tensor:
    """PGD-CW's loop, shared by the probit and the logit attacks (:mod:`.logit_attacks`): free
    variables ``u`` (B, n, C), adversarial rows ``to_rows(u)`` on the masked positions, sign-gradient
    ascent on :func:`cw_margin` of ``aggregator``'s output, the best iterate per query over steps and
    restarts (the unattacked ``base`` included). ``u`` starts at ``start_u`` or, when None, at
    U[0, 1)^C; restarts >= 1 add N(0, noise_scale²) to that start. Returns the (B, n, C) rows of the
    best iterate (``base`` on queries no iterate improved)."""
    B, _, C = base.shape
    m3 = mask.unsqueeze(-1)

    def objective(adv_rows: torch.Tensor) -> torch.Tensor:
        agg = aggregator(torch.where(m3, adv_rows, base))
        if agg.shape != (B, C):
            raise ValueError(f"aggregator returned {tuple(agg.shape)}, expected {(B, C)}")
        return cw_margin(agg, labels, kappa, space=loss)

    best_rows = base.clone()
    with torch.no_grad():
        best_loss = objective(base)

    for r in range(restarts):
        if start_u is not None:
            u = start_u.clone()
        else:
            u = torch.rand(base.shape, generator=generator, dtype=base.dtype).to(base.device)
        if r > 0:
            noise = torch.randn(u.shape, generator=generator, dtype=u.dtype)
            u = u + noise_scale * noise.to(u.device)
        for t in range(steps + 1):
            u = u.detach().requires_grad_(True)
            rows = to_rows(u)
            value = objective(rows)
            with torch.no_grad():
                better = value.detach() > best_loss
                best_loss = torch.where(better, value.detach(), best_loss)
                best_rows = torch.where(better[:, None, None], rows.detach(), best_rows)
            if t == steps:
                break
            (g,) = torch.autograd.grad(value.sum(), u)
            with torch.no_grad():
                u = u + step_size * torch.where(m3, g.sign(), torch.zeros_like(g))
    return best_rows


# --------------------------------------------------------------------------- registry
def _sia_colluding(probits, mask):
    return sia_blackbox(probits, mask, colluding=True)


def __getattr__(name: str):
    # PROBIT_ATTACKS: name → attack function of every inference attack of fedcal.catalogue, read when asked
    if name == "PROBIT_ATTACKS":
        return {n: c.load() for n, c in catalogue.components("inference-attack").items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: attacks whose adversarial rows are not probit vectors (kept to measure the literature's protocol)
OFF_SIMPLEX = frozenset({"sia_whitebox_raise"})


def apply_attack(name: str, probits: torch.Tensor, mask: torch.Tensor,
                 **context) -> torch.Tensor:
    """Run attack ``name`` passing only the context entries its signature
    accepts (e.g. ``aggregator``, ``labels``, ``class_cov``, ``logits``,
    ``amplification``, ``steps``, ``generator``). ``None`` values are dropped;
    missing required arguments raise ``ValueError``."""
    known = catalogue.names("inference-attack")
    if name not in known:
        raise ValueError(f"unknown attack {name!r}; known: {sorted(known)}")
    fn = catalogue.load("inference-attack", name)
    params = inspect.signature(fn).parameters
    kw = {k: v for k, v in context.items()
          if k in params and k not in ("probits", "mask") and v is not None}
    missing = [k for k, p in params.items()
               if k not in ("probits", "mask") and p.default is inspect.Parameter.empty
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and k not in kw]
    if missing:
        raise ValueError(f"attack {name!r} needs {missing} in context")
    return fn(probits, mask, **kw)


# --------------------------------------------------------------------------- validation
def validate_probits(probits: torch.Tensor, atol: float = 1e-4,
                     num_classes: Optional[int] = None) -> torch.Tensor:
    """Bool (B, n): True where a row is a valid probit vector — finite,
    non-negative, summing to 1 within ``atol`` and (if ``num_classes`` is
    given) of length ``num_classes`` (a wrong size marks all rows invalid)."""
    if not isinstance(probits, torch.Tensor) or probits.dim() != 3:
        raise ValueError(f"probits must be a (B, n, C) tensor, got shape "
                         f"{tuple(getattr(probits, 'shape', ()))}")
    B, n, C = probits.shape
    if num_classes is not None and C != num_classes:
        return torch.zeros(B, n, dtype=torch.bool, device=probits.device)
    p = probits.to(torch.float64)
    finite = torch.isfinite(p).all(-1)
    nonneg = (p >= 0).all(-1)
    sums = torch.where(torch.isfinite(p), p, torch.zeros_like(p)).sum(-1)
    return finite & nonneg & ((sums - 1.0).abs() <= atol) & (C >= 1)
