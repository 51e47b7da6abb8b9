"""Input checks shared by the model-poisoning attacks (flwr-free): the honest updates an attack
sees and the number of malicious rows it crafts, validated as the aggregation rules validate
their inputs (:mod:`fedcal.aggregate._checks`)."""

from __future__ import annotations

import torch

from fedcal.aggregate._checks import _check_int, _check_updates


def check_honest(honest, f, min_honest: int = 1, attack: str = "attack") -> tuple[torch.Tensor, int]:
    """(honest as an (n_h, d) finite floating tensor, f as an int ≥ 0), else ValueError naming
    ``attack`` when fewer than ``min_honest`` honest updates are given."""
    honest = _check_updates(honest)
    f = _check_int("f", f, 0)
    if honest.shape[0] < min_honest:
        raise ValueError(f"{attack} needs at least {min_honest} honest updates, got {honest.shape[0]}")
    return honest, f


def repeat_row(row: torch.Tensor, f: int) -> torch.Tensor:
    """The (f, d) matrix of f copies of ``row`` (the colluding attackers all send one update)."""
    return row.unsqueeze(0).expand(f, -1).clone()


def expanded_sq_distances(x: torch.Tensor, center: torch.Tensor, p: torch.Tensor,
                          chunk: int = 1 << 16) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(‖a_i‖², ⟨a_i, p⟩, ‖p‖²) with a_i = center − x_i, in float64, so that the squared distance
    of every row x_i to the candidate ``center − γ·p`` is ‖a_i‖² − 2γ⟨a_i, p⟩ + γ²‖p‖² for any γ
    at O(n) cost: the attacks that search a scale γ expand once instead of touching the (n, d)
    rows for every candidate. Computed a column chunk at a time (no float64 copy of ``x``)."""
    n, d = x.shape
    sq = torch.zeros(n, dtype=torch.float64, device=x.device)
    dot = torch.zeros(n, dtype=torch.float64, device=x.device)
    pp = torch.zeros((), dtype=torch.float64, device=x.device)
    for start in range(0, d, chunk):
        a = center[start:start + chunk].double() - x[:, start:start + chunk].double()
        pc = p[start:start + chunk].double()
        sq += (a * a).sum(dim=1)
        dot += a @ pc
        pp += pc @ pc
    return sq, dot, float(pp)
