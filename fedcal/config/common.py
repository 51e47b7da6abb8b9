"""The ``common`` group: what every task reads — data, the clients' model and optimiser, seed, task."""

from __future__ import annotations

from fedcal.config.schema import RunConfig, check, group, task_names, setting

__all__ = ["DATASETS", "MODELS", "PARTITIONS", "OPTIMIZERS", "LEGACY_TASKS"]

DATASETS = ("digits", "mnist", "cifar10", "cifar100", "synthetic", "mitbih", "rt-sentiment")
MODELS = ("mlp", "cnn", "lenet", "resnet8", "resnet8-wide", "resnet18", "cnn1d", "linear")
PARTITIONS = ("dirichlet", "iid", "patient")
OPTIMIZERS = ("sgd", "adamw")
# Old names of tasks, accepted and normalised: run directories written before the rename say "tsa".
LEGACY_TASKS = {"tsa": "train"}


def _patient_partition(c: RunConfig) -> None:
    if c.partition == "patient":
        check("partition", c.dataset == "mitbih", c.partition,
              f"deals whole patients' records to clients: it needs dataset=mitbih, not {c.dataset!r}")


@group("common", "read by every task: data, the clients' model and optimiser, seed, task",
       rules=(_patient_partition,))
class Common:
    dataset: str = setting("mnist", "dataset; digits is scikit-learn's, offline", choices=DATASETS)
    model: str = setting("mlp", "model of the global model (and of inference clients)", choices=MODELS)
    num_clients: int = setting(50, "K, clients in the federation (n for inference)", ge=1)
    partition: str = setting("dirichlet", "how the training data is split over clients",
                             choices=PARTITIONS)
    dirichlet_alpha: float = setting(1.0, "alpha of the per-class Dirichlet label skew", gt=0,
                                     finite=True)
    lr: float = setting(0.01, "beta, the benign learning rate", gt=0, finite=True)
    momentum: float = setting(0.0, "SGD momentum, the same for every client", ge=0, lt=1)
    weight_decay: float = setting(0.0, "SGD weight decay, the same for every client", ge=0, finite=True)
    batch_size: int = setting(64, "B, the clients' batch size", ge=1)
    seed: int = setting(0, "seeds model init, partition, attacker choice, client sampling, batches",
                        ge=0)
    n_bins: int = setting(15, "calibration bins of the reported ECE/sECE", ge=1)
    task: str = setting("train", "train: federated training under attack (TSA and poisoning "
                                 "baselines); inference: robust federated inference", choices=task_names,
                        aliases=LEGACY_TASKS)
    optimizer: str = setting("sgd", "the clients' local optimiser (adamw: AdamW with weight-decay; the LM "
                                    "case study's)", choices=OPTIMIZERS, hash_when_set=True)
