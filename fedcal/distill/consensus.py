"""The server's robust consensus of the clients' anchor logits (RFD-LoRA steps 1–4).

In a round every client k = 1..n uploads its logits z_k(x) ∈ R^C on the A shared anchors x, so
the uploads are one tensor ``Z`` of shape (n, A, C). The server

1. clips every logit to [−c, c] (:func:`clip_logits`), bounding what one client can move;
2. partitions the clients at random into M groups (:func:`random_groups`), averages within each
   group (:func:`group_moments`) and takes the coordinate-wise median of the group means
   (:func:`median_of_means`) — the consensus teacher logits z̃(x) — together with robust first and
   second moments μ̂(x), σ̂²(x);
3. measures the disagreement v(x) of the group means (the DIS dispersion), which
   :func:`fedcal.distill.loss.dis_weights` turns into per-anchor weights.

:func:`aggregate_logits` runs step 2–3 for the ablation's three aggregators: ``"mom"`` (median of
means), ``"median"`` (coordinate-wise median over clients) and ``"mean"`` (plain average).

Conventions:

* **median**: always the *true* median — for an even count the average of the two middle order
  statistics — never ``torch.median``'s lower median; it makes the median symmetric (median of
  −z = −median of z) and M = n with even n equal to the textbook coordinate median.
* **variance**: population variance (divide by the number of values, M for group means), so that
  a single group (M = 1) has dispersion 0 instead of an undefined 0/0; it is the variance of the
  empirical distribution of the group means.

Sources: median of means — Nemirovsky & Yudin (1983), Minsker, "Geometric median and robust
estimation in Banach spaces" (Bernoulli 2015), Lugosi & Mendelson, "Mean estimation and regression
under heavy-tailed distributions: a survey" (FoCM 2019). The clipping, the robust moments and the
dispersion weights are the RFD-LoRA design (robust federated distillation of heterogeneous-rank
LoRA clients) this package implements; the formulas are stated in each docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from fedcal.config.distill import DISTILL_AGGREGATORS

from ._checks import as_float_tensor, check_int, check_real, check_uploads

__all__ = [
    "METHODS",
    "Consensus",
    "clip_logits",
    "true_median",
    "random_groups",
    "check_groups",
    "group_moments",
    "group_dispersion",
    "median_of_means",
    "aggregate_logits",
    "prior_correct",
]

METHODS = DISTILL_AGGREGATORS  # the consensus rules: the config's dst-aggregator choices, declared there once


@dataclass(frozen=True, eq=False)  # eq=False: tensors have no single truth value
class Consensus:
    """The server's teacher on the A anchors.

    Attributes:
        logits: (A, C) consensus logits z̃(x).
        mu: (A, C) robust first moment μ̂(x) (equal to ``logits`` for every method).
        var: (A, C) robust second central moment σ̂²(x) >= 0.
        dispersion: (A,) DIS dispersion v(x) = Σ_i Var_m(z̄_{m,i}(x)) >= 0.
    """

    logits: torch.Tensor
    mu: torch.Tensor
    var: torch.Tensor
    dispersion: torch.Tensor


def clip_logits(z, c: float = 10.0) -> torch.Tensor:
    """Clip logits coordinate-wise: clip(z) = min(max(z, −c), c).

    ``c`` must be finite and > 0. ±Inf entries become ±c; NaN entries are refused (ValueError),
    since no value of the clip range is a faithful stand-in for them.
    """
    c = check_real("c", c, low=0.0, strict_low=True)
    z = as_float_tensor(z, "z")
    if bool(torch.isnan(z).any()):
        raise ValueError("z contains NaN values")
    return z.clamp(-c, c)


def true_median(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Median along ``dim``: x_((m+1)/2) for an odd count m, ½(x_(m/2) + x_(m/2+1)) for an even
    one (x_(j) the j-th smallest), i.e. the average of the two middle values — not
    ``torch.median``, which returns the lower of the two."""
    m = x.shape[dim]
    s = torch.sort(x, dim=dim).values
    # Odd m: both indices are the middle one. Even m: the two middle ones.
    return 0.5 * (s.select(dim, (m - 1) // 2) + s.select(dim, m // 2))


def random_groups(n: int, M: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
    """A uniformly random partition of the clients {0, …, n−1} into M groups of sizes ⌈n/M⌉ or
    ⌊n/M⌋ (sizes differ by at most 1; the first n mod M groups are the larger ones).

    Draws one random permutation π of the clients (with ``generator``, on its device) and cuts it
    into M consecutive chunks. Returns M sorted 1-D int64 CPU tensors of client indices.
    M must lie in [1, n]: M = 1 is one group (median of means = mean), M = n is singletons
    (median of means = coordinate median).
    """
    n = check_int("n", n, 1)
    M = check_int("M (the number of groups)", M, 1, n)
    device = generator.device if generator is not None else "cpu"
    perm = torch.randperm(n, generator=generator, device=device).cpu()
    return tuple(torch.sort(chunk).values for chunk in torch.tensor_split(perm, M))


def check_groups(groups: Sequence, n: int) -> tuple[torch.Tensor, ...]:
    """``groups`` as a tuple of 1-D int64 tensors that partition {0, …, n−1}: every group
    non-empty, every client in exactly one group. ValueError otherwise."""
    if isinstance(groups, torch.Tensor) or len(groups) == 0:
        raise ValueError("groups must be a non-empty sequence of index lists (one per group)")
    out = []
    seen = torch.zeros(n, dtype=torch.long)
    for m, g in enumerate(groups):
        g = torch.as_tensor(g).cpu()
        if g.ndim != 1 or g.numel() == 0 or g.is_floating_point() or g.dtype == torch.bool:
            raise ValueError(f"group {m} must be a non-empty 1-D list of integer client indices")
        g = g.long()
        if bool(((g < 0) | (g >= n)).any()):
            raise ValueError(f"group {m} has a client index outside [0, {n})")
        seen += torch.bincount(g, minlength=n)
        out.append(g)
    if bool((seen != 1).any()):
        k = int(torch.nonzero(seen != 1)[0, 0])
        raise ValueError(f"groups must partition the {n} clients: client {k} appears {int(seen[k])} times")
    return tuple(out)


def group_moments(Z, groups: Sequence) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-group first and second moments of the uploads.

    z̄_m(x) = (1/|G_m|) Σ_{k∈G_m} z_k(x) and z̄²_m(x) = (1/|G_m|) Σ_{k∈G_m} z_k(x)² (element-wise
    square), for ``Z`` of shape (n, A, C) and M groups G_m partitioning the clients. Returns
    ``(means, second_moments)``, each (M, A, C).
    """
    Z = check_uploads(Z)
    groups = check_groups(groups, Z.shape[0])
    idx = [g.to(Z.device) for g in groups]
    means = torch.stack([Z[g].mean(dim=0) for g in idx])
    second = torch.stack([Z[g].square().mean(dim=0) for g in idx])
    return means, second


def group_dispersion(means: torch.Tensor) -> torch.Tensor:
    """DIS dispersion v(x) = Σ_i Var_m(z̄_{m,i}(x)) of (M, A, C) group means, with the population
    variance Var_m(a) = (1/M) Σ_m (a_m − ā)² (so one group gives 0). Returns (A,)."""
    return means.var(dim=0, correction=0).sum(dim=-1)


def _robust_var(second: torch.Tensor, mu: torch.Tensor, aggregate) -> torch.Tensor:
    """σ̂² = aggregate(second moments) − μ̂², clamped at 0.

    The clamp only guards rounding: in exact arithmetic the difference is >= 0 for all three
    aggregators — for the mean it is the population variance; for a (true) median, each group's
    second moment is >= its squared mean (Jensen), and more than half of the values on μ̂'s side of
    zero have squares >= μ̂², so the median of the second moments is >= μ̂². In floating point,
    though, identical or nearly identical uploads give mean(z²) and mean(z)² that differ in the last
    bits, and a slightly negative "variance" would make the moment target σ̂² meaningless.
    """
    return (aggregate(second) - mu.square()).clamp_min(0.0)


def median_of_means(Z, groups: Sequence) -> Consensus:
    """Median of means over the given groups, with robust moments and dispersion.

    Consensus z̃(x) = med_m z̄_m(x) (coordinate-wise true median over the M group means),
    μ̂(x) = z̃(x), σ̂²(x) = max(med_m z̄²_m(x) − μ̂(x)², 0), and dispersion
    v(x) = Σ_i Var_m(z̄_{m,i}(x)) (population variance over the M group means), where z̄_m and z̄²_m
    are :func:`group_moments`. One group (M = 1) gives the mean and v = 0; singletons (M = n) give
    the coordinate-wise median over clients and the variance over clients.

    ``Z`` is (n, A, C) (clip it first with :func:`clip_logits`); ``groups`` a partition of the
    clients, e.g. from :func:`random_groups`. Unweighted: a Byzantine client could lie about its
    data size.

    The estimator is :func:`fedcal.aggregate.median_of_means`'s (unweighted group means, their
    coordinate-wise true median); it stays a function of its own because it also returns the
    robust moments and the dispersion RFD-LoRA's loss needs, on (n, A, C) uploads, and because its
    groups are :func:`random_groups`' consecutive chunks of one permutation with the larger groups
    first, where the update rule's labels ⌊p·G/n⌋ interleave the sizes (n = 10, G = 4: 3, 3, 2, 2
    against 3, 2, 3, 2): one layout for both would change every committed distill run.
    """
    means, second = group_moments(Z, groups)
    mu = true_median(means, dim=0)
    var = _robust_var(second, mu, lambda s: true_median(s, dim=0))
    return Consensus(logits=mu, mu=mu, var=var, dispersion=group_dispersion(means))


def aggregate_logits(
    Z,
    method: str = "mom",
    num_groups: int | None = None,
    generator: torch.Generator | None = None,
) -> Consensus:
    """Consensus of the uploads ``Z`` (n, A, C) by one of the ablation's aggregators.

    * ``"mom"``: :func:`median_of_means` over ``random_groups(n, num_groups, generator)``
      (``num_groups`` required, in [1, n]);
    * ``"median"``: z̃ = med_k z_k (coordinate-wise true median over clients),
      σ̂² = max(med_k z_k² − z̃², 0);
    * ``"mean"``: z̃ = (1/n) Σ_k z_k, σ̂² = max((1/n) Σ_k z_k² − z̃², 0) (the population variance).

    For all three μ̂ = z̃. The dispersion of ``"median"`` and ``"mean"`` takes the clients as
    singleton groups: v(x) = Σ_i Var_k(z_{k,i}(x)) (population variance over the n clients).
    ``num_groups`` and ``generator`` are ignored by ``"median"`` and ``"mean"``. The uploads are
    not clipped here: call :func:`clip_logits` first.
    """
    if method not in METHODS:
        raise ValueError(f"unknown aggregation method {method!r}; allowed: {', '.join(METHODS)}")
    Z = check_uploads(Z)
    n = Z.shape[0]
    if method == "mom":
        if num_groups is None:
            raise ValueError("method 'mom' needs num_groups (the number of groups M, in [1, n])")
        return median_of_means(Z, random_groups(n, num_groups, generator))
    if method == "median":
        return median_of_means(Z, tuple(torch.arange(n).split(1)))
    mu = Z.mean(dim=0)
    var = _robust_var(Z.square(), mu, lambda s: s.mean(dim=0))
    return Consensus(logits=mu, mu=mu, var=var, dispersion=group_dispersion(Z))


def prior_correct(Z, *, prior=None, iters: int = 100, tol: float = 1e-6, max_shift: float = 20.0) -> torch.Tensor:
    """Label-prior correction of each client's anchor logits (fedcal's variant of RFD-LoRA's
    server, ``dst-prior-correct``; not part of the method as specified).

    Under label skew client k's model is trained on its own class prior π_k. Under the label-shift
    model (p(x | y) shared, the priors differing) its logits are z_k(x) = log p(x | y) + log π_k(y)
    + const, so on the same anchors two honest clients disagree by a per-class bias log π_k −
    log π_j, and the consensus of a majority of clients skewed the same way inherits their prior.
    Adjusting a classifier's outputs to another prior is a per-class shift of its logits (Saerens,
    Latinne & Decaestecker, "Adjusting the outputs of a classifier to new a priori probabilities",
    Neural Computation 2002; logit adjustment, Menon et al., ICLR 2021). The server knows no π_k —
    the clients upload logits only — but it knows what each client predicts on the shared anchors:
    with q̄_k = (1/A) Σ_x softmax(z_k(x)) (client k's mean predicted distribution on the anchors),
    the target prior π̄ = the coordinate-wise true median of q̄_1 … q̄_n, renormalised (robust to a
    minority of clients), and each client's logits shifted by the bias b_k ∈ R^C that makes its
    mean prediction on the anchors equal π̄:

        (1/A) Σ_x softmax(z_k(x) + b_k) = π̄,

    found by the fixed-point iteration b ← b + log π̄ − log (1/A) Σ_x softmax(z_k(x) + b) from
    b = 0 (Saerens et al.'s EM step for the prior, here solved for the bias), ``iters`` steps at
    most or until the mean prediction is within ``tol`` of π̄; b is centred (Σ_c b_c = 0: softmax
    ignores a common shift) and kept within [−``max_shift``, ``max_shift``]. A client whose mean
    prediction already is π̄ gets b = 0; clients that differ only by a per-class bias become equal.
    Returns Z + b (n, A, C); clip it again before aggregating.

    ``prior`` replaces the median π̄ by a given class distribution (C,) — ``torch.full((C,), 1 / C)``
    is ``dst-prior-target=uniform``. Why: the median is robust to a *minority* of skewed clients,
    but when more than half of them lean one way (honest clients skewed to a class together with
    backdoor clients whose poisoned labels add to it) the median is that bloc's prior, and every
    client is shifted towards it (measured: docs/distill.md, "Label skew: the diagnosis and a
    prior-corrected variant"). The uniform target is the balanced logit adjustment (Menon et al.,
    2021): no client's prior is trusted, each client's mean prediction on the anchors is made
    uniform, so what is left of its logits is how it ranks the anchors — right when the anchors are
    near balanced, a bias towards the minority class when they are not.
    """
    Z = check_uploads(Z)
    iters = check_int("iters", iters, 1)
    tol = check_real("tol", tol, low=0.0, strict_low=True)
    max_shift = check_real("max_shift", max_shift, low=0.0, strict_low=True)
    Z64 = Z.double()
    tiny = torch.finfo(torch.float64).tiny
    if prior is None:
        q = torch.softmax(Z64, dim=-1).mean(dim=1)  # (n, C)
        target = true_median(q, dim=0)
    else:
        target = as_float_tensor(prior, "prior").double().to(Z.device)
        if target.shape != (Z.shape[2],) or bool((target <= 0).any()) or not bool(torch.isfinite(target).all()):
            raise ValueError(f"prior must be {Z.shape[2]} positive finite class weights, got {prior!r}")
    target = target.clamp_min(tiny)
    target = target / target.sum()
    b = torch.zeros(Z.shape[0], Z.shape[2], dtype=torch.float64, device=Z.device)
    for _ in range(iters):
        mean = torch.softmax(Z64 + b[:, None, :], dim=-1).mean(dim=1).clamp_min(tiny)
        if float((mean - target).abs().max()) <= tol:
            break
        b = b + target.log() - mean.log()
        b = (b - b.mean(dim=-1, keepdim=True)).clamp(-max_shift, max_shift)
    return (Z64 + b[:, None, :]).to(Z.dtype)
