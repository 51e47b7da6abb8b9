"""The quantities of the robust-inference literature's analysis of averaging aggregators, per query.

Dhasade et al. ("Robust Federated Inference", ICLR 2026) show that the error of a robust averaging
aggregator is small when the honest answers are similar, and that its prediction cannot change
when the top-2 margin of the honest mean is large. With the (f, κ)-robust-averaging property of
that line of work (Allouah et al., "Fixing by Mixing", AISTATS 2023) — for every set H of n − f
honest answers, ‖F(z_1..z_n) − z̄_H‖² ≤ κ · σ²_H with σ²_H = (1/|H|) Σ_{i∈H} ‖z_i − z̄_H‖² — the
two meet in one sufficient condition, checked here per query on measured probits:

* aggregation error e = ‖F(Z) − z̄_H‖₂ (Z the attacked answers, z̄_H the mean of the honest ones);
* honest dissimilarity σ_H (the root of σ²_H above);
* top-2 margin m = z̄_H,(1) − z̄_H,(2) of the honest mean.

If e < m / √2 the aggregate's argmax is the honest mean's: for every class j ≠ t (t the honest
mean's top class), F_t − F_j ≥ (z̄_t − z̄_j) − |e_t| − |e_j| ≥ m − √2 · e > 0. So a query whose
prediction the adversaries changed has e ≥ m/√2, and with e ≤ √κ · σ_H that needs σ_H / m ≥
1 / √(2κ): large dissimilarity relative to the margin. :func:`theorem_quantities` computes the
three numbers; the invariant "changed ⇒ e ≥ m/√2" holds for any aggregator (it is arithmetic);
κ_eff = e² / σ²_H is the κ the data shows (the trimmed means, medians and the geometric median
keep it bounded, the plain mean does not).
"""
from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

import pandas as pd
import torch

from .evaluate import ProbitData
from .probit_attacks import adversary_mask, apply_attack, class_covariance

__all__ = ["theorem_quantities", "theorem_frame"]


def theorem_quantities(attacked: torch.Tensor, honest: torch.Tensor, aggregate: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per query: ``error`` ‖F − z̄_H‖₂, ``dissimilarity`` σ_H, ``margin`` m, ``changed`` (argmax F ≠
    argmax z̄_H) and ``bound_holds`` (changed ⇒ error ≥ m/√2; True on unchanged queries).

    ``attacked`` (B, n, C) the answers the aggregator saw, ``honest`` (B, n) bool the honest rows
    (at least one per query), ``aggregate`` (B, C) the aggregator's output on ``attacked``."""
    if attacked.dim() != 3 or honest.shape != attacked.shape[:2] or aggregate.shape != (attacked.shape[0],
                                                                                         attacked.shape[2]):
        raise ValueError(f"need attacked (B, n, C), honest (B, n), aggregate (B, C); got {tuple(attacked.shape)}, "
                         f"{tuple(honest.shape)}, {tuple(aggregate.shape)}")
    count = honest.sum(1)
    if (count < 1).any():
        raise ValueError("every query needs at least one honest answer")
    z = attacked.double()
    w = honest.double().unsqueeze(-1)
    mean = (z * w).sum(1) / count.double().unsqueeze(-1)
    spread = (((z - mean.unsqueeze(1)) ** 2).sum(-1) * honest.double()).sum(1) / count.double()
    top2 = mean.topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    error = (aggregate.double() - mean).norm(dim=-1)
    changed = aggregate.argmax(-1) != mean.argmax(-1)
    bound = ~changed | (error >= margin / math.sqrt(2) - 1e-12)
    return {"error": error, "dissimilarity": spread.sqrt(), "margin": margin, "changed": changed,
            "bound_holds": bound}


@torch.no_grad()
def theorem_frame(data: ProbitData, aggregators: Mapping[str, Callable], f_adv: int,
                  attacks: Sequence[str] = ("none", "sia_whitebox"), *, seed: int = 0, batch: int = 1000,
                  queries: int = 0) -> pd.DataFrame:
    """:func:`theorem_quantities` of every (aggregator, attack, test query) answered by every client:
    ``f_adv`` adversaries per query drawn as :func:`~fedcal.inference.evaluate.attack_accuracy` draws
    them (the same seeds, so the same adversaries), the white-box attacks querying each aggregator.
    ``queries``: the first k test queries (0 = all). Columns: aggregator, attack, query, error,
    dissimilarity, margin, changed, wrong (aggregate's argmax ≠ label), bound_holds, kappa_eff."""
    full = data.test_valid.all(dim=1)
    idx_all = torch.nonzero(full).flatten()
    if queries:
        idx_all = idx_all[:queries]
    class_cov = class_covariance(data.server_probits)
    rows = []
    for start in range(0, len(idx_all), batch):
        idx = idx_all[start:start + batch]
        p, y = data.test_probits[idx], data.test_labels[idx]
        mask = adversary_mask(len(idx), p.shape[1], f_adv,
                              generator=torch.Generator().manual_seed(int(seed) * 1_000_003 + int(idx[0])))
        for attack in attacks:
            for name, agg in aggregators.items():
                attacked = apply_attack(attack, p, mask, aggregator=agg, labels=y, class_cov=class_cov)
                out = agg(attacked)
                q = theorem_quantities(attacked, ~mask, out)
                frame = pd.DataFrame({k: v.numpy() for k, v in q.items()})
                frame.insert(0, "query", idx.numpy())
                frame.insert(0, "attack", attack)
                frame.insert(0, "aggregator", name)
                frame["wrong"] = (out.argmax(-1) != y).numpy()
                rows.append(frame)
    df = pd.concat(rows, ignore_index=True)
    df["kappa_eff"] = df["error"] ** 2 / df["dissimilarity"].clip(lower=1e-12) ** 2
    return df


#: the aggregators a run's Theorem-1 analysis covers: the averaging ones (no learned weights)
AVERAGING = ("mean", "median", "geometric_median", "trimmed_mean")


def averaging_frame(probits_path, f_adv: int, attacks: Sequence[str], *, seed: int, queries: int = 0) -> pd.DataFrame:
    """:func:`theorem_frame` of a finished inference run's saved probits (``probits.pt``) under the
    :data:`AVERAGING` aggregators (trimmed mean trimming ``f_adv``), ``f_adv`` adversaries per query."""
    from .aggregators import averaging_aggregator

    data = ProbitData.load(probits_path)
    aggs = {name: averaging_aggregator(name, f_adv) for name in AVERAGING}
    return theorem_frame(data, aggs, f_adv, attacks, seed=seed, queries=queries)
