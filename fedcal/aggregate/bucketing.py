"""Bucketing: the means of random buckets of s updates, before any robust rule."""

from __future__ import annotations

import torch

from ._checks import _check_int, _check_updates
from .numerics import unit_scaled64


def bucket_labels(n: int, s: int, generator: torch.Generator | None = None,
                  permutation: torch.Tensor | None = None) -> torch.Tensor:
    """(n,) bucket of every row: the row at position p of the permutation π joins bucket ⌊p / s⌋
    (buckets 0 … ⌈n/s⌉ − 1; the last one holds the n mod s leftover rows when s does not divide
    n). π is ``permutation`` when given (an (n,) permutation of 0 … n − 1), else
    ``torch.randperm(n, generator=generator)`` — the draw ByzFL makes from torch's global
    generator, so a generator seeded like ``torch.manual_seed`` gives ByzFL's buckets."""
    n = _check_int("n", n, 1)
    s = _check_int("bucket size s", s, 1)
    if permutation is None:
        device = generator.device if generator is not None else "cpu"
        perm = torch.randperm(n, generator=generator, device=device).cpu()
    else:
        perm = torch.as_tensor(permutation).cpu()
        if perm.shape != (n,) or perm.is_floating_point() or perm.dtype == torch.bool \
                or not torch.equal(torch.sort(perm.long()).values, torch.arange(n)):
            raise ValueError(f"permutation must be an (n,) = ({n},) permutation of 0 … {n - 1}")
        perm = perm.long()
    labels = torch.empty(n, dtype=torch.long)
    labels[perm] = torch.arange(n) // s
    return labels


def bucketing(updates: torch.Tensor, s: int, generator: torch.Generator | None = None,
              permutation: torch.Tensor | None = None) -> torch.Tensor:
    """Bucketing: shuffle the n updates with a random permutation π, cut them into ⌈n/s⌉
    consecutive buckets of s, and return the (⌈n/s⌉, d) bucket means,

        y_b = (1 / |B_b|) Σ_{i ∈ B_b} x_i,   B_b = {π(bs), …, π(min(n, (b + 1)s) − 1)},

    the last bucket holding the n mod s leftover updates when s does not divide n (averaged over
    its own size, as in the authors' code and ByzFL). Averaging s random updates divides the
    honest spread by about √s, so a rule that needs homogeneous inputs works on non-IID clients;
    f Byzantine updates spoil at most f buckets, so the rule after it must tolerate f of the
    ⌈n/s⌉ rows (a majority rule needs ⌈n/s⌉ > 2f).

    ``generator`` seeds π (``torch.randperm``), so a run's buckets are reproducible;
    ``permutation`` fixes π instead (:func:`bucket_labels`).

    Source: Karimireddy, He & Jaggi, "Byzantine-Robust Learning on Heterogeneous Datasets via
    Bucketing" (ICLR 2022, Algorithm 1); ByzFL's ``Bucketing``.

    >>> bucketing(torch.tensor([[0.0], [1.0], [2.0], [3.0], [10.0]]), s=2, permutation=torch.tensor([4, 0, 3, 1, 2]))
    tensor([[5.],
            [2.],
            [2.]])
    """
    updates = _check_updates(updates)
    n = updates.shape[0]
    labels = bucket_labels(n, s, generator, permutation).to(updates.device)
    buckets = -(-n // s)
    counts = torch.bincount(labels, minlength=buckets).to(updates.dtype)[:, None]
    sums = torch.zeros(buckets, updates.shape[1], dtype=updates.dtype, device=updates.device)
    sums.index_add_(0, labels, updates)
    means = sums / counts
    if not bool(torch.isfinite(means).all()):  # a bucket sum overflowed: the same sums, rescaled
        scaled, e = unit_scaled64(updates)
        sums = torch.zeros(buckets, updates.shape[1], dtype=torch.float64, device=updates.device)
        sums.index_add_(0, labels, scaled)
        means = torch.ldexp(sums / counts.double(), torch.tensor(e, dtype=torch.float64)).to(updates.dtype)
    return means
