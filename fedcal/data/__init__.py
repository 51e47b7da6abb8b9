"""Datasets and client partitions (flwr-free)."""

from __future__ import annotations

import functools

import numpy as np
import torch

from fedcal.data.datasets import Dataset, PixelSpace, default_data_dir, load_dataset, pixel_space, synthetic_dataset
from fedcal.data.partition import dirichlet_partition, iid_partition, partition_indices, patient_partition

__all__ = [
    "Dataset", "PixelSpace", "pixel_space", "ClientData", "default_data_dir", "load_dataset", "synthetic_dataset",
    "dirichlet_partition", "iid_partition", "partition_indices", "patient_partition", "client_partitions",
    "client_data", "client_heldout", "heldout_indices", "temperature_fit_positions", "root_set",
]


class ClientData:
    """One client's training shard (views into the cached dataset tensors)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, num_classes: int):
        self.x, self.y, self.num_classes = x, y, num_classes

    def __len__(self) -> int:
        return len(self.y)


@functools.lru_cache(maxsize=8)
def client_partitions(
    dataset: str, data_dir: str, num_clients: int, scheme: str, alpha: float, seed: int
) -> tuple[np.ndarray, ...]:
    """Partition a dataset once per process and reuse it for every round."""
    ds = load_dataset(dataset, data_dir)
    groups = None if ds.groups_train is None else ds.groups_train.numpy()
    return tuple(partition_indices(ds.y_train.numpy(), num_clients, scheme, alpha, seed, groups=groups))


@functools.lru_cache(maxsize=512)
def client_data(
    dataset: str, data_dir: str, num_clients: int, scheme: str, alpha: float, seed: int,
    partition_id: int,
) -> ClientData:
    """The training shard of client ``partition_id`` (cached per process).

    The first shard a process asks for is gathered on its own (a SuperNode serves one
    partition). From the second partition of the same split on, the process serves many
    clients (a simulation actor, the plain loop): every shard is then gathered at once, as
    contiguous views into one copy of the training set ordered by client (:func:`_all_shards`)
    — one gather instead of one per client and message, the same memory as every shard cached
    on its own, the same values.
    """
    if not 0 <= partition_id < num_clients:
        raise ValueError(f"partition id {partition_id} outside [0, {num_clients})")
    split = (dataset, data_dir, num_clients, scheme, alpha, seed)
    served = _served.setdefault(split, partition_id)
    if served != partition_id:
        return _all_shards(*split)[partition_id]
    ds = load_dataset(dataset, data_dir)
    idx = torch.from_numpy(client_partitions(*split)[partition_id])
    return ClientData(ds.x_train[idx], ds.y_train[idx], ds.num_classes)


#: the first partition this process asked for, per split (see :func:`client_data`)
_served: dict[tuple, int] = {}


@functools.lru_cache(maxsize=2)
def _all_shards(
    dataset: str, data_dir: str, num_clients: int, scheme: str, alpha: float, seed: int
) -> tuple[ClientData, ...]:
    """Every client's shard: views into the training set reordered by client (one gather)."""
    ds = load_dataset(dataset, data_dir)
    parts = client_partitions(dataset, data_dir, num_clients, scheme, alpha, seed)
    order = torch.from_numpy(np.concatenate(parts))
    x, y = ds.x_train[order], ds.y_train[order]
    ends = np.cumsum([len(p) for p in parts]).tolist()
    return tuple(ClientData(x[a:b], y[a:b], ds.num_classes) for a, b in zip([0, *ends[:-1]], ends))


@functools.lru_cache(maxsize=512)
def client_heldout(
    dataset: str, data_dir: str, num_clients: int, scheme: str, alpha: float, seed: int, partition_id: int,
) -> ClientData:
    """Client ``partition_id``'s held-out data for federated evaluation: its share of the test set,
    split among the clients by the same scheme and seed as the training set (Dirichlet label skew
    with the same class proportions, since the draws follow the same seeded stream; ``patient``,
    whose test records have no patient groups here, splits IID). The shares are disjoint and
    cover the test set, so all clients' held-out data together are the central test set."""
    ds = load_dataset(dataset, data_dir)
    idx = torch.from_numpy(heldout_indices(ds.y_test.numpy(), num_clients, scheme, alpha, seed, partition_id))
    return ClientData(ds.x_test[idx], ds.y_test[idx], ds.num_classes)


def heldout_indices(y_test: np.ndarray, num_clients: int, scheme: str, alpha: float, seed: int,
                    partition_id: int) -> np.ndarray:
    """The test-set indices of client ``partition_id``'s held-out share (:func:`client_heldout`'s
    rows, in its order): the server computes the same share from the test labels alone."""
    if not 0 <= partition_id < num_clients:
        raise ValueError(f"partition id {partition_id} outside [0, {num_clients})")
    parts = partition_indices(y_test, num_clients, "iid" if scheme == "patient" else scheme, alpha, seed)
    return parts[partition_id]


def temperature_fit_positions(n: int, seed: int, partition_id: int) -> np.ndarray:
    """The positions (sorted, within a held-out share of ``n`` samples) of the share's fitting half:
    the first ``n // 2`` of a permutation seeded by the run's seed and the client's partition id.
    The client fits its temperature on these samples only; the server, drawing the same half,
    scores the federated temperature on the test samples outside every participant's fitting half
    (fedcal.tasks.federated_eval), so the temperature is never scored on what it was fitted on."""
    rng = np.random.default_rng([seed, partition_id, 0x7E3])
    return np.sort(rng.permutation(n)[: n // 2])


def root_set(ds: Dataset, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The server's clean root set (FLTrust, CalGuard, and the post-hoc baseline of
    docs/defense.md): ``size`` training samples (all of them if fewer) drawn without replacement
    with the run's ``seed`` — the same draw wherever it is made."""
    rng = np.random.default_rng([seed, 0xF17])
    idx = torch.from_numpy(rng.choice(len(ds.y_train), size=min(size, len(ds.y_train)), replace=False))
    return ds.x_train[idx], ds.y_train[idx]
