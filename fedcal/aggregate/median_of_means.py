"""Median of means: coordinate-wise median of the means of random groups of updates."""

from __future__ import annotations

import torch

from ._checks import _check_int, _check_updates
from .median import true_median
from .numerics import unit_scaled64


def _group_labels(n: int, num_groups: int, generator: torch.Generator | None) -> torch.Tensor:
    """Random partition into num_groups groups whose sizes differ by at most one."""
    device = generator.device if generator is not None else "cpu"
    perm = torch.randperm(n, generator=generator, device=device).cpu()
    labels = torch.empty(n, dtype=torch.long)
    # The row at position p of the permutation joins group ⌊p·G/n⌋ (sizes ⌊n/G⌋ or ⌈n/G⌉).
    labels[perm] = torch.arange(n) * num_groups // n
    return labels


def median_of_means(
    updates: torch.Tensor,
    num_groups: int,
    generator: torch.Generator | None = None,
    groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """Median of means: partition the n rows at random into G groups (sizes ⌊n/G⌋ or ⌈n/G⌉),
    average each group, and take the coordinate-wise (true) median of the G group means.
    G = n gives the coordinate median, G = 1 the mean. Unweighted.

    ``groups`` (optional, (n,) integer labels in [0, G), every group non-empty) fixes the
    partition instead of drawing it with ``generator``.

    Source: Minsker, "Geometric median and robust estimation in Banach spaces" (Bernoulli 2015)
    / Chen, Su & Xu, "Distributed Statistical Machine Learning in Adversarial Settings:
    Byzantine Gradient Descent" (2017); SPEC §3 median of means.
    """
    updates = _check_updates(updates)
    n = updates.shape[0]
    num_groups = _check_int("num_groups", num_groups, 1)
    if num_groups > n:
        raise ValueError(f"num_groups must be in [1, n] = [1, {n}], got {num_groups}")
    if groups is None:
        labels = _group_labels(n, num_groups, generator)
    else:
        labels = torch.as_tensor(groups).cpu()
        if labels.shape != (n,) or labels.is_floating_point():
            raise ValueError(f"groups must be an (n,) = ({n},) integer tensor of group labels")
        labels = labels.long()
        if bool((labels < 0).any()) or bool((labels >= num_groups).any()):
            raise ValueError(f"group labels must lie in [0, {num_groups})")
    counts = torch.bincount(labels, minlength=num_groups)
    if bool((counts == 0).any()):
        raise ValueError("every group must contain at least one update")
    labels = labels.to(updates.device)
    sums = torch.zeros(num_groups, updates.shape[1], dtype=updates.dtype, device=updates.device)
    sums.index_add_(0, labels, updates)
    means = sums / counts.to(device=updates.device, dtype=updates.dtype).unsqueeze(1)
    if not bool(torch.isfinite(means).all()):  # a group sum overflowed: the same sums, rescaled
        scaled, e = unit_scaled64(updates)
        sums = torch.zeros(num_groups, updates.shape[1], dtype=torch.float64, device=updates.device)
        sums.index_add_(0, labels, scaled)
        means = torch.ldexp(sums / counts.to(device=updates.device, dtype=torch.float64).unsqueeze(1),
                            torch.tensor(e, dtype=torch.float64)).to(updates.dtype)
    return true_median(means, dim=0)
