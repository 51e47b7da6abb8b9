"""Fang et al.'s local model poisoning attacks: the directed deviation attack against the
trimmed mean / coordinate median and against Krum (flwr-free).

Both push the aggregate against s = sign(μ), the direction in which the honest updates would
move each parameter (μ = the honest mean; the paper's s is the direction of the attack-free
aggregate, which the authors' and the NDSS'21 reference code estimate by the mean as here).
Fang et al. state the attack on local *models* w_i = w + Δ_i; fedcal's rules aggregate the
updates Δ_i, so the formulas are given here on updates, as the reference implementations
(NDSS'21, Blades) apply them.

**Against the trimmed mean and the median** (:func:`fang_trimmed_mean`), per coordinate j, with
x_max,j / x_min,j the largest / smallest honest value and b > 1 (the paper's b = 2), each
attacker samples independently

* s_j > 0 (honest push up, the attack pushes down, below the smallest honest value):
  U[x_min,j / b, x_min,j] if x_min,j > 0, else U[b · x_min,j, x_min,j];
* s_j < 0 (below → above the largest): U[x_max,j, b · x_max,j] if x_max,j > 0,
  else U[x_max,j, x_max,j / b];
* s_j = 0: 0 (the honest mean itself).

So every malicious value lies beyond the honest extremes on the side the trimmed mean or median
is then dragged to, while staying within a factor b of them.

**Against Krum** (:func:`fang_krum`): all f attackers send −λ·s (the model w − λs: moved by λ
against s in every coordinate), with λ the largest of λ_max, λ_max/2, λ_max/4, … for which
Krum selects it, starting from the paper's upper bound (n = n_h + f clients, d parameters,
D the Euclidean distance, Γ(i) the n − f − 2 honest updates nearest x_i):

    λ_max = 1 / ((n − 2f − 1)√d) · min_{i honest} Σ_{l ∈ Γ(i)} D(x_l, x_i) + 1/√d · max_{i honest} D(x_i, 0),

the last term being the largest distance of an honest model to the global one (Δ = 0). When
λ falls below 1e-5 without Krum selecting the attack, −λ·s with that tiny λ is sent (close to
no change, as in the paper). The NDSS'21 / Blades code measures the last term to the honest
mean instead of the global model.

Threat model: full knowledge (every honest update of the round, the literature's evaluation
setting; the Krum variant also knows the rule and f). On a real federation the "partial
knowledge" variant of the paper uses the colluders' own benign updates in place of the honest
ones.

Source: Fang, Cao, Jia & Gong, "Local Model Poisoning Attacks to Byzantine-Robust Federated
Learning" (USENIX Security 2020): the attacks on Krum and on the trimmed mean / median.
"""

from __future__ import annotations

import math

import torch

from fedcal.aggregate.multikrum import pairwise_sq_distances
from fedcal.aggregate.numerics import row_norms64
from fedcal.attacks._honest import check_honest, expanded_sq_distances, repeat_row

LAMBDA_THRESHOLD = 1e-5


def fang_trimmed_mean(honest: torch.Tensor, f: int, b: float = 2.0,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """The (f, d) Fang updates against the trimmed mean / median (module docstring), each
    attacker's values drawn independently from ``generator`` (one ``torch.rand((f, d))`` draw).

    >>> fang_trimmed_mean(torch.tensor([[1.0, -1.0, 2.0], [3.0, -3.0, -2.0]]), f=1,
    ...                   generator=torch.Generator().manual_seed(0)).shape
    torch.Size([1, 3])
    """
    honest, f = check_honest(honest, f, attack="Fang (trimmed mean)")
    b = float(b)
    if not (math.isfinite(b) and b > 1):
        raise ValueError(f"Fang's b must be a finite number > 1, got {b}")
    s = torch.sign(honest.mean(dim=0))
    top, bottom = honest.amax(dim=0), honest.amin(dim=0)
    # s > 0: [bottom / b, bottom] when bottom > 0, else [b · bottom, bottom]
    down_lo = torch.where(bottom > 0, bottom / b, bottom * b)
    # s < 0: [top, b · top] when top > 0, else [top, top / b]
    up_hi = torch.where(top > 0, top * b, top / b)
    lo = torch.where(s > 0, down_lo, torch.where(s < 0, top, torch.zeros_like(top)))
    hi = torch.where(s > 0, bottom, torch.where(s < 0, up_hi, torch.zeros_like(top)))
    u = torch.rand((f, honest.shape[1]), generator=generator, dtype=honest.dtype,
                   device=generator.device if generator is not None else honest.device).to(honest.device)
    return lo + u * (hi - lo)


def fang_krum_lambda_max(honest: torch.Tensor, f: int) -> float:
    """The paper's upper bound λ_max on λ (module docstring); needs n_h ≥ f + 2 honest updates
    (n − 2f − 1 > 0) and n_h ≥ 3 (Krum's n − f − 2 ≥ 1 neighbours among them)."""
    honest, f = check_honest(honest, f, min_honest=3, attack="Fang (Krum)")
    n_h, d = honest.shape
    n = n_h + f
    if n - 2 * f - 1 <= 0:
        raise ValueError(f"Fang's Krum attack needs n − 2f − 1 > 0, got n = {n} and f = {f}")
    dist = pairwise_sq_distances(honest).sqrt()
    dist.fill_diagonal_(float("inf"))  # a model is not its own neighbour
    k = n - f - 2  # = n_h − 2 nearest honest neighbours
    nearest = torch.sort(dist, dim=1).values[:, :k].sum(dim=1)
    norms = row_norms64(honest)
    return float(nearest.min() / ((n - 2 * f - 1) * math.sqrt(d)) + norms.max() / math.sqrt(d))


def _krum_picks_attack(honest_sq: torch.Tensor, to_attack: torch.Tensor, f: int) -> bool:
    """Whether Krum (assumed f) selects one of the f identical attack rows among n_h honest ones,
    from the honest squared distances and each honest row's squared distance to the attack:
    the same scores as :func:`fedcal.aggregate.krum_scores`, honest rows first (Krum's ties
    break to the lower index, so a tie goes to an honest row)."""
    n_h = honest_sq.shape[0]
    n = n_h + f
    full = torch.zeros(n, n, dtype=torch.float64, device=honest_sq.device)
    full[:n_h, :n_h] = honest_sq
    full[:n_h, n_h:] = to_attack[:, None]
    full[n_h:, :n_h] = to_attack[None, :]
    full.fill_diagonal_(float("inf"))
    scores = torch.sort(full, dim=1).values[:, : n - f - 2].sum(dim=1)
    return int(torch.sort(scores, stable=True).indices[0]) >= n_h


def fang_krum(honest: torch.Tensor, f: int) -> torch.Tensor:
    """The (f, d) Fang updates against Krum: f copies of −λ·sign(μ), λ halved from
    :func:`fang_krum_lambda_max` until Krum selects the attack (module docstring). Each λ is
    checked in O(n²) from distances expanded once (‖−λs − x_i‖² = ‖x_i‖² + 2λ⟨x_i, s⟩ + λ²‖s‖²),
    not by re-running Krum on (n, d) rows."""
    honest, f = check_honest(honest, f, min_honest=3, attack="Fang (Krum)")
    s = torch.sign(honest.mean(dim=0))
    if f == 0:
        return honest.new_zeros(0, honest.shape[1])
    lam = fang_krum_lambda_max(honest, f)
    sq, dot, ss = expanded_sq_distances(honest, torch.zeros_like(s), s)  # a_i = 0 − x_i
    honest_sq = pairwise_sq_distances(honest)
    while lam >= LAMBDA_THRESHOLD:
        if _krum_picks_attack(honest_sq, (sq - 2 * lam * dot + lam * lam * ss).clamp_min(0), f):
            break
        lam *= 0.5
    return repeat_row((-lam * s.double()).to(honest.dtype), f)
