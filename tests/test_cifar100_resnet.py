"""CIFAR-100 + ResNet-18 runs end to end (no CIFAR-100 copy exists offline: a tiny stand-in in
the same npz format goes through the real loader)."""

import numpy as np

from fedcal.config import RunConfig
from fedcal.data.datasets import _load_cached
from fedcal.results import load_metrics
from fedcal.app.engine import simulate


def test_cifar100_resnet18_federated_round(tmp_path):
    rng = np.random.default_rng(0)
    for split, n in (("train", 160), ("test", 40)):
        np.savez(tmp_path / f"cifar100_{split}.npz", x=rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
                 y=rng.integers(0, 100, n).astype(np.int64))
    _load_cached.cache_clear()
    cfg = RunConfig.from_flower(dict(
        dataset="cifar100", model="resnet18", data_dir=str(tmp_path), num_clients=2, clients_per_round=2,
        num_rounds=1, batch_size=8, local_steps=1, lr=0.05, eval_batch_size=40, engine="inprocess",
        attack="tsa", tau=5.0, attacker_ratio=0.5, output_dir=str(tmp_path / "runs")))
    df = load_metrics(simulate(cfg, progress=False))
    assert sorted(df["round"].unique()) == [0, 1]
    acc = df[df.metric == "accuracy"]["value"]
    assert acc.between(0, 1).all()
    _load_cached.cache_clear()
