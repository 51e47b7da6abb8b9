"""Bucketing: the means of random buckets of s updates, before any robust rule."""

from __future__ import annotations

import torch

from ._checks import _check_int, _check_updates
from .numerics import overflow_free_mean


def _permutation(n: int, generator: torch.Generator | None, permutation: torch.Tensor | None) -> torch.Tensor:
    """π: ``permutation`` checked to be one of 0 … n − 1, else ``torch.randperm(n, generator)``."""
    if permutation is None:
        device = generator.device if generator is not None else "cpu"
        return torch.randperm(n, generator=generator, device=device).cpu()
    perm = torch.as_tensor(permutation).cpu()
    if perm.shape != (n,) or perm.is_floating_point() or perm.dtype == torch.bool \
            or not torch.equal(torch.sort(perm.long()).values, torch.arange(n)):
        raise ValueError(f"permutation must be an (n,) = ({n},) permutation of 0 … {n - 1}")
    return perm.long()


def bucket_labels(n: int, s: int, generator: torch.Generator | None = None,
                  permutation: torch.Tensor | None = None) -> torch.Tensor:
    """(n,) bucket of every row: the row at position p of the permutation π joins bucket ⌊p / s⌋
    (buckets 0 … ⌈n/s⌉ − 1; the last one holds the n mod s leftover rows when s does not divide
    n). π is ``permutation`` when given (an (n,) permutation of 0 … n − 1), else
    ``torch.randperm(n, generator=generator)`` — the draw ByzFL makes from torch's global
    generator, so a generator seeded like ``torch.manual_seed`` gives ByzFL's buckets."""
    n = _check_int("n", n, 1)
    s = _check_int("bucket size s", s, 1)
    perm = _permutation(n, generator, permutation)
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
    ``permutation`` fixes π instead (:func:`bucket_labels`). The rows are gathered in π's order
    once and the full buckets averaged as one (⌊n/s⌋, s, d) view (a mean that would overflow is
    taken rescaled, :func:`~fedcal.aggregate.numerics.overflow_free_mean`).

    Source: Karimireddy, He & Jaggi, "Byzantine-Robust Learning on Heterogeneous Datasets via
    Bucketing" (ICLR 2022); ByzFL's ``Bucketing``.

    >>> bucketing(torch.tensor([[0.0], [1.0], [2.0], [3.0], [10.0]]), s=2, permutation=torch.tensor([4, 0, 3, 1, 2]))
    tensor([[5.],
            [2.],
            [2.]])
    """
    updates = _check_updates(updates)
    n, d = updates.shape
    s = _check_int("bucket size s", s, 1)
    shuffled = updates[_permutation(n, generator, permutation).to(updates.device)]
    full = n // s
    parts = [overflow_free_mean(shuffled[: full * s].reshape(full, s, d), dim=1)] if full else []
    if n % s:
        parts.append(overflow_free_mean(shuffled[full * s:], dim=0).unsqueeze(0))
    return torch.cat(parts) if len(parts) > 1 else parts[0]
