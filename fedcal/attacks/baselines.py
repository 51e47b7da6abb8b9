"""ByzFL's baseline model-poisoning attacks: sign flipping, Mimic and Inf (flwr-free).

The f colluding attackers all send one update, a function of the round's (n_h, d) honest ones:

- **sign flipping**: m = −μ, the negative of the honest mean (ByzFL's ``SignFlipping``; IPM at
  ε = 1, :func:`fedcal.attacks.ipm`, registered under its own name as ByzFL lists it);
- **Mimic**: m = x_t, a copy of the honest update of index t (``mimic-target``; ByzFL's ``Mimic``
  with its ε = t). Harmless under IID data; under heterogeneous data it over-weights one
  client's distribution, and no distance- or coordinate-based rule can tell a copy from an honest
  update (Karimireddy, He & Jaggi, ICLR 2022);
- **Inf**: m = (+∞, …, +∞) (ByzFL's ``Inf``). A test of the server's input validation, not of
  the rule: fedcal's strategies drop every reply whose update is not finite, with a logged reason
  naming the client (docs/defense.md), so under every strategy this attack only removes the f
  attackers from the round. A rule that aggregated it would output ∞ or NaN.

Threat model: sign flipping needs μ, Mimic one honest update (omniscient, as in the literature's
evaluations; on a real federation, a colluder's own benign update or an estimate of μ); Inf needs
nothing.

Sources: Allen-Zhu, Ebrahimianghazani, Li & Alistarh, "Byzantine-resilient non-convex stochastic
gradient descent" (ICLR 2021) for sign flipping;
Karimireddy, He & Jaggi, "Byzantine-robust learning on heterogeneous datasets via bucketing"
(ICLR 2022) for Mimic; ByzFL (Gonzalez et al., 2025, ``byzfl.attacks``) for all three as
implemented here.
"""

from __future__ import annotations

import torch

from fedcal.aggregate._checks import _check_int
from fedcal.attacks._honest import check_honest, repeat_row


def sign_flipping(honest: torch.Tensor, f: int) -> torch.Tensor:
    """The (f, d) sign-flipping updates: f copies of −mean(``honest``).

    >>> sign_flipping(torch.tensor([[1.0, 2.0], [3.0, -4.0]]), f=2)
    tensor([[-2.,  1.],
            [-2.,  1.]])
    """
    honest, f = check_honest(honest, f, attack="sign flipping")
    return repeat_row(-honest.mean(dim=0), f)


def mimic(honest: torch.Tensor, f: int, target: int = 0) -> torch.Tensor:
    """The (f, d) Mimic updates: f copies of ``honest[target]`` (0 ≤ target < n_h).

    >>> mimic(torch.tensor([[1.0, 2.0], [3.0, -4.0]]), f=1, target=1)
    tensor([[ 3., -4.]])
    """
    honest, f = check_honest(honest, f, attack="Mimic")
    target = _check_int("mimic-target", target, 0)
    if target >= honest.shape[0]:
        raise ValueError(f"Mimic's target {target} is not one of the round's {honest.shape[0]} honest updates")
    return repeat_row(honest[target], f)


def inf(honest: torch.Tensor, f: int) -> torch.Tensor:
    """The (f, d) Inf updates: every coordinate +∞, in the honest updates' dtype.

    >>> inf(torch.tensor([[1.0, 2.0], [3.0, -4.0]]), f=1)
    tensor([[inf, inf]])
    """
    honest, f = check_honest(honest, f, attack="Inf")
    return torch.full((f, honest.shape[1]), float("inf"), dtype=honest.dtype, device=honest.device)
