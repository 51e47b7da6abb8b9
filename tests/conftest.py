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
