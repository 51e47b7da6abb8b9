"""DeepSet aggregator of client probits and its (adversarial) training (SPEC §7).

phi(Z) = softmax(mu(pool_i rho(z_i))) for Z = (z_1..z_n), z_i on the simplex Delta^C.

* rho: R^C -> R^h is a two-layer MLP Linear(C,h)-ReLU-Linear(h,h), followed by a ReLU
  (so the pooled client embeddings are non-negative features);
* mu: R^h -> R^C is a two-layer MLP Linear(h,h)-ReLU-Linear(h,C) producing logits;
* pool is the mean over clients ("mean") or the coordinate-wise trimmed mean over the
  n hidden vectors dropping f per side ("trimmed"). Both are exactly permutation
  invariant over the client axis.

DeepSet-TM (:class:`DeepSetTM`) = a DeepSet trained with mean pooling and evaluated with
trimmed pooling (same weights): ``DeepSetTM.from_deepset(model, f)``, ``model.as_trimmed(f)`` or
``as_trimmed(model, f)``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from fedcal.aggregate import trimmed_mean_along
from fedcal.config.inference import ADV_ATTACKS

from ._fit import adam_epochs
from .aggregators import check_probits, straight_through

__all__ = ["DeepSet", "DeepSetTM", "as_trimmed", "train_deepset", "write_trained", "accuracy", "POOLINGS", "ADV_ATTACKS",
           "literature_corruption_mask"]

POOLINGS = ("mean", "trimmed")
# Logit of the chosen class at a vertex start: softmax puts ~0.94 on it for C = 10.
VERTEX_LOGIT = 5.0


def _check_f(f) -> int:
    if int(f) != f or f < 0:
        raise ValueError(f"f must be a non-negative integer; got {f}")
    return int(f)


class DeepSet(nn.Module):
    """DeepSet aggregator phi(Z) = softmax(mu(pool_i rho(z_i))) of (B, n, C) client probits.

    ``pooling`` "mean" (the default, how it is trained) or "trimmed" (coordinate-wise trimmed
    mean of the n hidden vectors, ``f`` per side; see :class:`DeepSetTM`). ``seed`` makes the
    initial weights reproducible without touching the global RNG stream.

    Source: Zaheer et al., "Deep Sets" (NeurIPS 2017); SPEC §7 (DeepSet / DeepSet-TM aggregator).
    """

    def __init__(self, num_classes: int, hidden: int = 224, pooling: str = "mean", f: int = 0,
                 seed: int | None = None):
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2; got {num_classes}")
        if hidden < 1:
            raise ValueError(f"hidden must be >= 1; got {hidden}")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}; got {pooling!r}")
        self.num_classes, self.hidden, self.pooling, self.f = num_classes, hidden, pooling, _check_f(f)
        with torch.random.fork_rng(devices=[], enabled=seed is not None):  # a seeded init leaves the caller's RNG
            if seed is not None:
                torch.manual_seed(seed)
            self.rho = nn.Sequential(nn.Linear(num_classes, hidden), nn.ReLU(),
                                     nn.Linear(hidden, hidden), nn.ReLU())
            self.mu = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(),
                                    nn.Linear(hidden, num_classes))

    def pool(self, h: torch.Tensor) -> torch.Tensor:
        """(B, n, h) -> (B, h); a BPDA view (:meth:`DeepSetTM.as_bpda`) trims in value and
        differentiates as the mean."""
        if self.pooling == "mean":
            return h.mean(dim=1)
        tm = trimmed_mean_along(h, self.f, dim=1)
        return straight_through(tm, h.mean(dim=1)) if getattr(self, "bpda", False) else tm

    def logits(self, probits: torch.Tensor) -> torch.Tensor:
        probits = check_probits(probits)
        if probits.shape[2] != self.num_classes:
            raise ValueError(f"expected C={self.num_classes} classes; got {probits.shape[2]}")
        if self.pooling == "trimmed" and probits.shape[1] <= 2 * self.f:
            raise ValueError(f"trimmed pooling needs n > 2f; got n={probits.shape[1]}, f={self.f}")
        return self.mu(self.pool(self.rho(probits)))

    def forward(self, probits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(probits), dim=-1)

    def as_trimmed(self, f: int) -> "DeepSetTM":
        """DeepSet-TM: a :class:`DeepSetTM` sharing these weights (same rho/mu modules) with
        trimmed pooling of f per side."""
        return DeepSetTM.from_deepset(self, f)

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, hidden={self.hidden}, pooling={self.pooling!r}, f={self.f}"


class DeepSetTM(DeepSet):
    """DeepSet-TM: a DeepSet whose pooling is the coordinate-wise trimmed mean of the n hidden
    vectors, dropping the ``f`` largest and ``f`` smallest per coordinate (needs n > 2f).

    pool(H) = TM_f(rho(z_1), …, rho(z_n)); phi(Z) = softmax(mu(pool(H))). Usually built from a
    DeepSet trained with mean pooling (adversarially), sharing its weights:
    :meth:`from_deepset` (or ``model.as_trimmed(f)``); f = 0 is the mean-pooled DeepSet itself.

    Source: SPEC §7 (DeepSet-TM: mean-trained DeepSet evaluated with trimmed pooling);
    Zaheer et al., "Deep Sets" (NeurIPS 2017) for the architecture.
    """

    def __init__(self, num_classes: int, hidden: int = 224, f: int = 0, seed: int | None = None):
        super().__init__(num_classes, hidden=hidden, pooling="trimmed", f=f, seed=seed)

    @classmethod
    def from_deepset(cls, model: DeepSet, f: int) -> "DeepSetTM":
        """A DeepSetTM sharing ``model``'s rho and mu modules (the same weights, not a copy), with
        trimmed pooling of f per side and ``model``'s train/eval mode."""
        f = _check_f(f)
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.num_classes, new.hidden, new.pooling, new.f = model.num_classes, model.hidden, "trimmed", f
        new.rho, new.mu = model.rho, model.mu
        new.train(model.training)
        return new

    def as_bpda(self) -> "DeepSetTM":
        """The same aggregator (shared weights, the same outputs) whose trimmed pooling is
        differentiated as the mean (:func:`~fedcal.inference.aggregators.straight_through`): what
        the robust-inference authors' white-box attacks differentiate (``BPDATrimmedMean`` in their
        DeepSet_TM2). The exact subgradient gives a row that is trimmed in every hidden
        coordinate no gradient at all, so sign-gradient ascent cannot move it."""
        view = DeepSetTM.from_deepset(self, self.f)
        view.bpda = True
        return view


def as_trimmed(model: DeepSet, f: int) -> DeepSetTM:
    """DeepSet-TM: same weights as ``model``, coordinate-wise trimmed pooling (f per side)."""
    return DeepSetTM.from_deepset(model, f)


def _corruption_mask(b: int, n: int, f: int, m: int | None, generator) -> torch.Tensor:
    """(b, n) bool: per sample m (or m_s ~ U{1..f}) random client positions."""
    if m is None:
        ms = torch.randint(1, f + 1, (b,), generator=generator)
    else:
        ms = torch.full((b,), int(m))
    ranks = torch.argsort(torch.rand(b, n, generator=generator), dim=1)  # random permutation per row
    return ranks < ms[:, None]




def literature_corruption_mask(b: int, n: int, f: int, generator) -> torch.Tensor:
    """(b, n) bool: the clients the authors' adversarial training corrupts per sample. Their
    ``generate_subsets_with_masks`` keeps a random subset of k ∈ [n − f, n] clients, k drawn with
    probability 0.7 · C(n, k) / Σ_k' C(n, k') + 0.3 / (f + 1), and their in-place PGD corrupts the
    n − k clients outside it: m = n − k ∈ {0..f}, mostly f (58 % for n = 17, f = 4)."""
    sizes = torch.arange(n - f, n + 1)
    binom = torch.tensor([math.comb(n, int(k)) for k in sizes], dtype=torch.float64)
    prob = 0.7 * binom / binom.sum() + 0.3 / len(sizes)
    k = sizes[torch.multinomial(prob, b, replacement=True, generator=generator)]
    ranks = torch.argsort(torch.rand(b, n, generator=generator), dim=1)
    return ranks < (n - k)[:, None]


def _literature_inputs(model: DeepSet, x: torch.Tensor, y: torch.Tensor, f: int, attack_steps: int,
                       attack_lr: float, generator) -> torch.Tensor:
    """The authors' adversarial-training attack (``adversarial_attack_batch_inplace`` with their
    ``Carlini_Wagner_loss``, github.com/sacs-epfl/robust-federated-inference, Utils/adversarial.py):
    corrupted positions from :func:`literature_corruption_mask`, free logits u ~ U[0, 1)^C,
    ``attack_steps`` sign steps of ``attack_lr`` ascending −max(p_y − max_{j≠y} p_j + 0.1, 0) of the
    mean-pooled model's softmax, the last iterate sent as softmax(u)."""
    b, n, c = x.shape
    mask = literature_corruption_mask(b, n, f, generator)[..., None]
    params = list(model.parameters())
    flags = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    try:
        u = torch.rand(b, n, c, generator=generator).requires_grad_(True)
        onehot = F.one_hot(y, c).bool()
        for _ in range(attack_steps):
            z = torch.where(mask, torch.softmax(u, dim=-1), x)
            _cw_sign_step(u, model.logits(z), onehot, attack_lr)
        with torch.no_grad():
            return torch.where(mask, torch.softmax(u, dim=-1), x).detach()
    finally:
        for p, fl in zip(params, flags):
            p.requires_grad_(fl)


def _cw_sign_step(u: torch.Tensor, logits: torch.Tensor, onehot: torch.Tensor, attack_lr: float) -> None:
    """One ascent step of the authors' colluding attack, in place on ``u``: a signed gradient step on the CW
    probability margin (κ = 0.1) of ``logits``, computed from ``u``."""
    prob = torch.softmax(logits, dim=-1)
    true = prob[onehot]
    other = prob.masked_fill(onehot, float("-inf")).amax(-1)
    objective = -(true - other + 0.1).clamp_min(0.0).sum()
    (g,) = torch.autograd.grad(objective, u)
    with torch.no_grad():
        u += attack_lr * g.sign()


def _literature_inputs_batched(model: DeepSet, x: torch.Tensor, y: torch.Tensor, f: int, attack_steps: int,
                               attack_lr: float, generator) -> torch.Tensor:
    """:func:`_literature_inputs`, the same draws and the same ascent, computed where it changes: the
    honest rows' embeddings ρ(z_i) do not move during the attack, so their sum is taken once and each
    of the ``attack_steps`` passes embeds only the ≤ f corrupted rows of every sample (packed into f
    slots), then pools (honest sum + corrupted sum) / n. For n = 17, f = 4 a pass embeds 4 rows
    instead of 17; the result equals the unbatched attack's up to floating-point summation order.
    Needs the mean-pooled DeepSet (what adversarial training trains)."""
    if model.pooling != "mean":
        raise ValueError("the batched attack needs the mean-pooled DeepSet")
    b, n, c = x.shape
    mask = literature_corruption_mask(b, n, f, generator)  # the same draws, in the same order, as the reference
    u_all = torch.rand(b, n, c, generator=generator)
    slots = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)[:, :f]  # corrupted positions first
    live = torch.gather(mask, 1, slots)  # (b, f): which slots hold a corrupted position
    u = torch.gather(u_all, 1, slots[..., None].expand(-1, -1, c)).requires_grad_(True)
    params = list(model.parameters())
    flags = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    try:
        with torch.no_grad():
            honest = (model.rho(x) * (~mask)[..., None].to(x.dtype)).sum(dim=1)  # (b, h), once
        onehot = F.one_hot(y, c).bool()
        weight = live[..., None].to(x.dtype)
        for _ in range(attack_steps):
            pooled = (honest + (model.rho(torch.softmax(u, dim=-1).to(x.dtype)) * weight).sum(dim=1)) / n
            _cw_sign_step(u, model.mu(pooled), onehot, attack_lr)
        with torch.no_grad():
            rows = torch.softmax(u, dim=-1).to(x.dtype)
            out = x.clone()
            bi, si = torch.nonzero(live, as_tuple=True)
            out[bi, slots[bi, si]] = rows[bi, si]
            return out
    finally:
        for p, fl in zip(params, flags):
            p.requires_grad_(fl)


def _worst_case_inputs(model: DeepSet, x: torch.Tensor, y: torch.Tensor, f: int, m: int | None,
                       n_restarts: int, attack_steps: int, attack_lr: float, generator) -> torch.Tensor:
    """Sign-gradient ascent on the training loss over the corrupted rows; worst of n_restarts."""
    b, n, c = x.shape
    best_x = x.clone()
    best_loss = torch.full((b,), -float("inf"))
    params = list(model.parameters())
    flags = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    try:
        for r in range(n_restarts):
            mask = _corruption_mask(b, n, f, m, generator)[..., None]  # (b, n, 1)
            noise = 0.1 * torch.randn(b, n, c, generator=generator)
            if r % 2 == 0:
                start = torch.log(x.clamp_min(1e-6))
            else:  # a vertex of the simplex: a random class's near-one-hot (see train_deepset)
                start = VERTEX_LOGIT * F.one_hot(torch.randint(0, c, (b, n), generator=generator), c).to(x.dtype)
            u = (start + noise).requires_grad_(True)
            for _ in range(attack_steps):
                z = torch.where(mask, torch.softmax(u, dim=-1), x)
                loss = F.cross_entropy(model.logits(z), y, reduction="sum")
                (g,) = torch.autograd.grad(loss, u)
                with torch.no_grad():
                    u += attack_lr * g.sign()
            with torch.no_grad():
                z = torch.where(mask, torch.softmax(u, dim=-1), x)
                per = F.cross_entropy(model.logits(z), y, reduction="none")
                better = per > best_loss
                best_x[better] = z[better]
                best_loss = torch.where(better, per, best_loss)
    finally:
        for p, fl in zip(params, flags):
            p.requires_grad_(fl)
    return best_x.detach()


def train_deepset(model: DeepSet, probits: torch.Tensor, labels: torch.Tensor, epochs: int,
                  lr: float = 1e-3, batch_size: int = 256, adversarial: bool = False, f: int = 0,
                  m: int | None = None, n_restarts: int = 1, attack_steps: int = 10,
                  attack_lr: float = 0.1, generator: torch.Generator | None = None,
                  adv_attack: str = "fedcal", progress: str = "DeepSet training", subsets: int = 1) -> list[float]:
    """Train ``model`` with Adam on CE(model.logits(probits), labels); returns per-epoch mean losses
    (each epoch a step of the phase ``progress``, :func:`fedcal.progress.phase`).

    With ``adversarial=True`` each minibatch is first replaced by worst-case inputs: per
    sample m (or m ~ U{1..f}) random client rows are set to softmax(u), u found by
    ``attack_steps`` sign-gradient ascent steps of size ``attack_lr`` on the loss, from
    log(probits) + N(0, 0.1^2) noise; the worst of ``n_restarts`` restarts per sample is kept.
    Odd restarts start instead from a vertex of the simplex (``VERTEX_LOGIT`` on a random class,
    plus the same noise): that is where the known attacks (SIA, LMA, CPA) put their rows, and a
    step-0.1 ascent from log(probits) moves u by at most 0.1 per step, too little to get there
    from a diffuse client probit in 10–50 steps.
    The model's parameters are frozen during the attack.

    ``adv_attack="literature"``: the robust-inference authors' attack instead
    (:func:`_literature_inputs`: their corrupted-position distribution, a uniform start, their
    probability-margin CW loss, the last iterate; ``m`` and ``n_restarts`` are not used). Their
    training runs it on 300 random subsets of every server sample for 10 epochs (lr 5e-5) — a
    volume out of a CPU's reach, which this option alone does not copy: it changes the attack, not the
    epochs. ``subsets`` = 300 copies their volume: every epoch visits each server sample ``subsets``
    times (shuffled together), each visit with its own corrupted positions; the literature attack then
    runs batched (:func:`_literature_inputs_batched`, equal to the unbatched one up to rounding).
    (Their 300 subsets per sample are drawn once, before the first epoch; here each epoch draws anew.)
    """
    if int(subsets) != subsets or subsets < 1:
        raise ValueError(f"subsets must be an integer >= 1; got {subsets}")
    probits = check_probits(probits)
    n = probits.shape[1]
    if adversarial:
        if f < 1:
            raise ValueError("adversarial training needs f >= 1")
        if 2 * f >= n:
            raise ValueError(f"adversarial training needs f < n/2; got n={n}, f={f}")
        if m is not None and not 1 <= m <= f:
            raise ValueError(f"m must be in 1..f; got m={m}, f={f}")
        if n_restarts < 1 or attack_steps < 0:
            raise ValueError("n_restarts must be >= 1 and attack_steps >= 0")
        if adv_attack not in ADV_ATTACKS:
            raise ValueError(f"adv_attack must be one of {ADV_ATTACKS}; got {adv_attack!r}")
    if generator is None:  # one generator for the shuffles and the attack's draws
        generator = torch.Generator().manual_seed(0)

    literature = _literature_inputs if subsets == 1 else _literature_inputs_batched  # runs before: as they were

    def batch_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if adversarial:
            if adv_attack == "literature":
                x = literature(model, x, y, f, attack_steps, attack_lr, generator)
            else:
                x = _worst_case_inputs(model, x, y, f, m, n_restarts, attack_steps, attack_lr, generator)
        return F.cross_entropy(model.logits(x), y)

    if subsets == 1:
        return adam_epochs(model, probits, labels, epochs, lr, batch_size, generator, batch_loss, progress)
    # each sample `subsets` times an epoch: minibatches of (sample index) drawn from the repeated list
    index = torch.arange(probits.shape[0]).repeat(int(subsets))
    return adam_epochs(model, index, torch.as_tensor(labels).long().repeat(int(subsets)), epochs, lr, batch_size,
                       generator, lambda i, y: batch_loss(probits[i], y), progress)


@torch.no_grad()
def write_trained(aggs: Mapping[str, Callable], history: Sequence[float], store) -> None:
    """Into run store ``store``: the trained DeepSet's weights (``deepset.pt``) and its per-epoch training
    losses ``history`` (``deepset_loss.csv``), when ``aggs`` (a built set of aggregators) has it."""
    if "deepset" in aggs:
        import pandas as pd

        torch.save(aggs["deepset"].state_dict(), store.dir / "deepset.pt")
        store.write_table("deepset_loss.csv", pd.DataFrame({"epoch": range(1, len(history) + 1), "loss": history}))


def accuracy(agg: Callable[[torch.Tensor], torch.Tensor], probits: torch.Tensor, labels: torch.Tensor) -> float:
    """Top-1 accuracy of ``agg(probits)`` (B, C) against ``labels`` (B,)."""
    labels = torch.as_tensor(labels).long()
    out = agg(check_probits(probits))
    return (out.argmax(dim=-1) == labels).float().mean().item()
