"""A Little Is Enough (ALIE), a model-poisoning attack of Byzantine-robust FL (flwr-free).

The f colluding attackers all send

    m = μ − z · σ,   μ = mean of the honest updates,  σ = their coordinate-wise standard deviation

(sample standard deviation, ddof = 1, as in ByzFL and the NDSS'21 reference code; the authors'
own code uses the population one, the same attack at z · √((n_h − 1)/n_h)). Every coordinate
stays within z standard deviations of the honest mean, where the median, the trimmed mean and
Krum still accept it; consistently shifted in one direction, f such updates steer the
aggregate. The paper picks the largest z for which the attackers can still count on enough
honest "supporters" on their side of the mean (:func:`alie_z`).

Threat model: the attackers need μ and σ of honest updates. Omniscient (all the round's honest
updates, the literature's evaluation setting) or, on a real federation, estimated from the
colluders' own benign updates (the authors' code does this: it computes μ and σ over the
malicious workers' own gradients).

Source: Baruch, Baruch & Goldberg, "A Little Is Enough: Circumventing Defenses for Distributed
Learning" (NeurIPS 2019).
"""

from __future__ import annotations

import math

import torch

from fedcal.aggregate._checks import _check_int
from fedcal.attacks._honest import check_honest, repeat_row


def alie_z(n: int, f: int) -> float:
    """The paper's z for n clients of which f are malicious:

        s = ⌊n/2 + 1⌋ − f   (honest supporters the attackers need for a majority),
        z = Φ⁻¹((n − s) / n)  (Φ the standard normal CDF).

    Requires 1 ≤ s, i.e. f ≤ ⌊n/2⌋ (with more attackers than that no supporter is needed and
    z would be infinite).

    >>> round(alie_z(50, 10), 4), round(alie_z(10, 3), 4), alie_z(10, 1)
    (0.4677, 0.5244, 0.0)
    """
    n = _check_int("n", n, 1)
    f = _check_int("f", f, 0)
    s = (n // 2 + 1) - f
    if s < 1:
        raise ValueError(f"ALIE's z needs f ≤ ⌊n/2⌋ (at least one supporter), got n = {n} and f = {f}")
    return float(torch.special.ndtri(torch.tensor((n - s) / n, dtype=torch.float64)))


def alie(honest: torch.Tensor, f: int, z: float | None = None) -> torch.Tensor:
    """The (f, d) ALIE updates: f copies of μ − z·σ over the (n_h, d) ``honest`` updates
    (σ with ddof = 1, so n_h ≥ 2). ``z`` defaults to :func:`alie_z` (n_h + f, f).

    With z ≤ 1/√n_h every coordinate of the attack lies within the honest range [min, max]
    (Bhatia–Davis: μ − min ≥ σ/√n_h for the sample σ), so no coordinate-wise filter can tell it
    from an honest value.

    >>> alie(torch.tensor([[0.0, 1.0], [2.0, 1.0], [4.0, 1.0]]), f=2, z=1.0)
    tensor([[0., 1.],
            [0., 1.]])
    """
    honest, f = check_honest(honest, f, min_honest=2, attack="ALIE (a standard deviation)")
    if z is None:
        z = alie_z(honest.shape[0] + f, f)
    z = float(z)
    if not math.isfinite(z):
        raise ValueError(f"ALIE's z must be finite, got {z}")
    std, mean = torch.std_mean(honest, dim=0, correction=1)
    return repeat_row(mean - z * std, f)
