"""Seeded client partitioners: IID, per-class Dirichlet(α) label skew, and patient-wise (whole
groups, e.g. the records of MIT-BIH, on one client)."""

from __future__ import annotations

import numpy as np

from fedcal.config import ConfigError


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


def patient_partition(groups: np.ndarray, num_clients: int, seed: int) -> list[np.ndarray]:
    """Whole groups (patients: the records of an ECG database) per client: the distinct group
    ids, sorted, are shuffled with ``seed`` and dealt out in ``num_clients`` near-equal runs
    (counts of groups differ by ≤ 1); client k gets every sample of its groups (sorted indices).
    No group is split across clients. Raises :class:`fedcal.config.ConfigError` when there are
    fewer groups than clients."""
    groups = np.asarray(groups)
    ids = np.unique(groups)
    if num_clients < 1 or num_clients > len(ids):
        raise ConfigError(f"run-config key 'num-clients': partition 'patient' gives each client whole "
                          f"patients, and the training set has {len(ids)}: num-clients must lie in "
                          f"[1, {len(ids)}], got {num_clients}")
    perm = np.random.default_rng(seed).permutation(ids)
    return [np.flatnonzero(np.isin(groups, part)) for part in np.array_split(perm, num_clients)]


def partition_indices(
    labels: np.ndarray, num_clients: int, scheme: str, alpha: float, seed: int,
    groups: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Dispatch on the run-config ``partition`` scheme; ``groups`` (per sample, e.g. the patient)
    is read by ``patient`` only."""
    if scheme == "iid":
        return iid_partition(len(labels), num_clients, seed)
    if scheme == "dirichlet":
        return dirichlet_partition(labels, num_clients, alpha, seed)
    if scheme == "patient":
        if groups is None:
            raise ConfigError("run-config key 'partition': 'patient' needs the patient of every sample, "
                              "which only dataset 'mitbih' has")
        return patient_partition(groups, num_clients, seed)
    raise ValueError(f"unknown partition scheme {scheme!r}")
