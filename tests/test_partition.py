import numpy as np
import pytest

from fedcal.data import dirichlet_partition, iid_partition


def labels(n=3000, c=10, seed=0):
    return np.random.default_rng(seed).integers(0, c, n)


@pytest.mark.parametrize("alpha", [0.1, 1.0, 100.0])
def test_dirichlet_assigns_every_sample_exactly_once(alpha):
    y = labels()
    parts = dirichlet_partition(y, 20, alpha, seed=3)
    allidx = np.concatenate(parts)
    assert len(allidx) == len(y)
    assert np.array_equal(np.sort(allidx), np.arange(len(y)))
    assert all(len(p) >= 1 for p in parts)


def test_iid_assigns_every_sample_exactly_once_and_balanced():
    parts = iid_partition(1003, 10, seed=1)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(1003))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


def test_partitions_are_seeded():
    y = labels()
    a = dirichlet_partition(y, 10, 0.5, seed=7)
    b = dirichlet_partition(y, 10, 0.5, seed=7)
    c = dirichlet_partition(y, 10, 0.5, seed=8)
    assert all(np.array_equal(p, q) for p, q in zip(a, b))
    assert not all(np.array_equal(p, q) for p, q in zip(a, c))


def _mean_label_entropy(y, parts, c=10):
    ent = []
    for p in parts:
        h = np.bincount(y[p], minlength=c) / len(p)
        h = h[h > 0]
        ent.append(-(h * np.log(h)).sum())
    return float(np.mean(ent))


def test_alpha_controls_label_skew():
    y = labels(6000)
    ents = [_mean_label_entropy(y, dirichlet_partition(y, 20, a, seed=0)) for a in (0.05, 0.5, 100.0)]
    assert ents[0] < ents[1] < ents[2]
    assert ents[2] > 0.95 * np.log(10)  # large α ≈ IID label mix
    assert ents[0] < 0.5 * np.log(10)  # small α: few classes per client


def test_bad_arguments():
    with pytest.raises(ValueError):
        dirichlet_partition(labels(), 5, 0.0, seed=0)
    with pytest.raises(ValueError):
        iid_partition(5, 6, seed=0)


# ---------------------------------------------------------------------- a failed dataset load
def _tree(root):
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


@pytest.fixture
def offline(monkeypatch):
    """torchvision's real MNIST download code, with the network unreachable: it creates its folders
    and then fails (as on a machine without internet)."""
    import urllib.error

    import fedcal.data.datasets as dsmod

    def unreachable(*args, **kwargs):
        raise urllib.error.URLError("network unreachable")

    monkeypatch.setattr("urllib.request.urlopen", unreachable)
    monkeypatch.setattr("torchvision.datasets.utils._urlretrieve", unreachable, raising=False)
    dsmod._load_cached.cache_clear()
    yield
    dsmod._load_cached.cache_clear()


def test_a_failed_load_into_a_missing_data_dir_creates_nothing(tmp_path, offline):
    from fedcal.config import ConfigError
    from fedcal.data import load_dataset

    data_dir = tmp_path / "a" / "b" / "data"
    with pytest.raises(ConfigError, match="'dataset': cannot load 'mnist'"):
        load_dataset("mnist", data_dir)
    assert list(tmp_path.iterdir()) == []  # neither data-dir nor its missing parents are left behind


def test_a_failed_load_into_an_existing_data_dir_removes_only_what_it_created(tmp_path, offline, monkeypatch):
    from fedcal.config import ConfigError
    from fedcal.data import load_dataset

    data_dir = tmp_path / "data"
    (data_dir / "MNIST" / "raw").mkdir(parents=True)  # an earlier, partial download of the user's
    (data_dir / "MNIST" / "raw" / "old.gz").write_bytes(b"old")
    (data_dir / "cifar10_train.npz").write_bytes(b"unrelated")
    before = _tree(data_dir)
    import torchvision.datasets.mnist as tv_mnist

    real = tv_mnist.MNIST.download

    def download_then_fail(self):  # what a download cut off half-way leaves: new folders and a partial file
        (data_dir / "MNIST" / "raw" / "partial.gz").write_bytes(b"part")
        (data_dir / "MNIST" / "processed").mkdir()
        (data_dir / "MNIST" / "processed" / "x.pt").write_bytes(b"x")
        (data_dir / "tmp-download").mkdir()
        real(self)

    monkeypatch.setattr(tv_mnist.MNIST, "download", download_then_fail)
    with pytest.raises(ConfigError, match="'dataset': cannot load 'mnist'"):
        load_dataset("mnist", data_dir)
    assert _tree(data_dir) == before
