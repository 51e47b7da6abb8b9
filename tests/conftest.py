import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """../shared/data (MNIST/CIFAR-10 npz) — skipped where it is absent, as for users."""
    path = Path(os.environ.get("FEDCAL_SHARED_DATA", SHARED_DATA))
    if not (path / "mnist_train.npz").exists():
        pytest.skip("../shared/data is not available")
    return path


def partly_trained_digits_mlp():
    """digits + an MLP after 30 SGD steps: a global model mid-federation, not at init."""
    import torch

    from fedcal.data import load_dataset
    from fedcal.models import build_model
    from fedcal.train import local_train

    ds = load_dataset("digits")
    base = build_model("mlp", ds.input_shape, ds.num_classes, seed=0)
    local_train(base, ds.x_train, ds.y_train, steps=30, batch_size=32, lr=0.05,
                generator=torch.Generator().manual_seed(1))
    return ds, base
