"""Seeded client partitioners: IID and per-class Dirichlet(α) label skew."""

from __future__ import annotations

import numpy as np


def iid_partition(num_samples: int, num_clients: int, seed: int) -> list[np.ndarray]:
    """Shuffle and split into ``num_clients`` near-equal shards (sizes differ by ≤ 1)."""
    if num_clients < 1 or num_clients > num_samples:
        raise ValueError(f"num_clients must lie in [1, {num_samples}], got {num_clients}")
    perm = np.random.default_rng(seed).permutation(num_samples)
    return [np.sort(p) for p in np.array_split(perm, num_clients)]


def dirichlet_partition(
    labels: np.ndarray, num_clients: int, alpha: float, seed: int, min_size: int = 1,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Label-skewed split (SPEC §2): for each class c draw π_c ~ Dir(α·1_K) and give
    client k the fraction π_c[k] of that class's samples.

    Small α concentrates each class on few clients. Draws are repeated (same seeded
    stream) until every client holds at least ``min_size`` samples, so no client is empty.
    Every sample is assigned to exactly one client.
    """
    labels = np.asarray(labels)
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    if num_clients < 1 or num_clients * min_size > len(labels):
        raise ValueError(f"cannot give {num_clients} clients {min_size}+ samples out of {len(labels)}")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    by_class = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    for _ in range(max_tries):
        shards: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for idx in by_class:
            pi = rng.dirichlet(np.full(num_clients, alpha))
            cuts = np.round(np.cumsum(pi)[:-1] * len(idx)).astype(int)
            for k, part in enumerate(np.split(idx, cuts)):
                shards[k].append(part)
        out = [np.sort(np.concatenate(s)) for s in shards]
        if min(len(o) for o in out) >= min_size:
            return out
    raise ValueError(
        f"Dirichlet(alpha={alpha}) left a client with fewer than {min_size} samples in "
        f"{max_tries} draws; use a larger alpha or fewer clients"
    )


def partition_indices(
    labels: np.ndarray, num_clients: int, scheme: str, alpha: float, seed: int
) -> list[np.ndarray]:
    """Dispatch on the run-config ``partition`` scheme."""
    if scheme == "iid":
        return iid_partition(len(labels), num_clients, seed)
    if scheme == "dirichlet":
        return dirichlet_partition(labels, num_clients, alpha, seed)
    raise ValueError(f"unknown partition scheme {scheme!r}")
