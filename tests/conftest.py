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


@pytest.fixture(scope="module")
def one_thread_and_tmp_cache(tmp_path_factory):
    """One torch thread (tiny models gain nothing from more, and a busy machine makes spinning
    threads slow) and the model cache ($FEDCAL_CACHE_DIR) in a temporary folder, for a module of
    tests that build small pretrained transformers; both restored afterwards."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    old = os.environ.get("FEDCAL_CACHE_DIR")
    os.environ["FEDCAL_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield
    torch.set_num_threads(threads)
    if old is None:
        os.environ.pop("FEDCAL_CACHE_DIR", None)
    else:
        os.environ["FEDCAL_CACHE_DIR"] = old


def partly_trained_digits_mlp():
    """digits + an MLP after 30 SGD steps: a global model mid-federation, not at init."""
    import torch

    from fedcal.data import load_dataset
    from fedcal.models import build_model
    from fedcal.local_training import local_train

    ds = load_dataset("digits")
    base = build_model("mlp", ds.input_shape, ds.num_classes, seed=0)
    local_train(base, ds.x_train, ds.y_train, steps=30, batch_size=32, lr=0.05,
                generator=torch.Generator().manual_seed(1))
    return ds, base
