"""``fedcal data``: the .npz files the loaders read, written from torchvision's dataset classes;
offline it fails in one line naming the dataset, the URL and what to do."""

import gzip
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fedcal.cli as cli
from fedcal.data.datasets import load_dataset
from fedcal.studies.data import write_npz

torchvision = pytest.importorskip("torchvision")
ROOT = Path(__file__).resolve().parents[1]


def _idx(path: Path, array: np.ndarray, code: int) -> None:
    """An IDX file as MNIST's (magic: 0, 0, type code 0x08 = uint8, number of dimensions; big-endian sizes)."""
    header = bytes([0, 0, code, array.ndim]) + b"".join(struct.pack(">I", n) for n in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def _fake_mnist(raw_root: Path, rng) -> dict[str, np.ndarray]:
    """A 5+3-image MNIST in torchvision's raw layout (``<root>/MNIST/raw/*-ubyte``, the files its
    MNIST class reads without downloading when they exist)."""
    raw = raw_root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    arrays = {"xtr": rng.integers(0, 256, (5, 28, 28)), "ytr": rng.integers(0, 10, 5),
              "xte": rng.integers(0, 256, (3, 28, 28)), "yte": rng.integers(0, 10, 3)}
    _idx(raw / "train-images-idx3-ubyte", arrays["xtr"], 0x08)
    _idx(raw / "train-labels-idx1-ubyte", arrays["ytr"], 0x08)
    _idx(raw / "t10k-images-idx3-ubyte", arrays["xte"], 0x08)
    _idx(raw / "t10k-labels-idx1-ubyte", arrays["yte"], 0x08)
    return arrays


def test_mnist_raw_files_become_the_npz_files_the_loader_reads(tmp_path):
    rng = np.random.default_rng(0)
    want = _fake_mnist(tmp_path / "raw", rng)
    out = tmp_path / "data"
    out.mkdir()
    train, test = write_npz("mnist", out, tmp_path / "raw")
    assert (train.name, test.name) == ("mnist_train.npz", "mnist_test.npz")
    with np.load(train) as f:
        assert f["x"].dtype == np.uint8 and f["x"].shape == (5, 28, 28) and f["y"].dtype == np.int64
        np.testing.assert_array_equal(f["x"], want["xtr"])
        np.testing.assert_array_equal(f["y"], want["ytr"])
    assert not list(out.glob("*.tmp"))
    ds = load_dataset("mnist", out)  # read from the .npz files: no torchvision folder under out
    assert not (out / "MNIST").exists()
    assert ds.x_train.shape == (5, 1, 28, 28) and ds.x_test.shape == (3, 1, 28, 28)
    # the loader's normalisation of the same bytes: (pixel / 255 - 0.1307) / 0.3081
    expected = (torch.tensor(want["xte"], dtype=torch.float32) / 255 - 0.1307) / 0.3081
    torch.testing.assert_close(ds.x_test[:, 0], expected)
    assert ds.y_test.tolist() == want["yte"].tolist()


def test_cifar10_batches_become_hwc_npz_files(tmp_path, monkeypatch, capsys):
    """torchvision's CIFAR-10 pickles (torchvision's integrity check, an MD5 of the real files, and its
    download monkeypatched away) through the command itself: images stay (N, 32, 32, 3) uint8 as torchvision reads them."""
    rng = np.random.default_rng(1)
    base = tmp_path / "data" / "cifar-10-batches-py"
    base.mkdir(parents=True)
    batches = {}
    for name in ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"]:
        flat = rng.integers(0, 256, (2, 3 * 32 * 32)).astype(np.uint8)  # CHW rows, as CIFAR's pickles hold them
        labels = rng.integers(0, 10, 2).tolist()
        batches[name] = (flat, labels)
        with open(base / name, "wb") as f:
            pickle.dump({"data": flat, "labels": labels}, f)
    with open(base / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)]}, f)
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *args, **kwargs: True)
    monkeypatch.setattr(torchvision.datasets.CIFAR10, "download", lambda self: None)
    import fedcal.studies.data as data

    made = []

    def fake_tempdir(prefix, dir):  # the raw files are where the fake pickles are
        import contextlib

        made.append(dir)
        return contextlib.nullcontext(str(tmp_path / "data"))

    monkeypatch.setattr(data.tempfile, "TemporaryDirectory", fake_tempdir)
    assert cli.main(["data", "cifar10", "--out", str(tmp_path / "out")]) == 0
    assert "cifar10: wrote" in capsys.readouterr().out
    with np.load(tmp_path / "out" / "cifar10_test.npz") as f:
        flat, labels = batches["test_batch"]
        assert f["x"].shape == (2, 32, 32, 3) and f["x"].dtype == np.uint8
        np.testing.assert_array_equal(f["x"], flat.reshape(2, 3, 32, 32).transpose(0, 2, 3, 1))
        assert f["y"].tolist() == labels
    with np.load(tmp_path / "out" / "cifar10_train.npz") as f:
        assert f["x"].shape == (10, 32, 32, 3) and f["y"].tolist() == sum((batches[f"data_batch_{i}"][1]
                                                                          for i in range(1, 6)), [])
    # a second call keeps the files and says so
    assert cli.main(["data", "cifar10", "--out", str(tmp_path / "out")]) == 0
    assert "already in" in capsys.readouterr().out and len(made) == 1


def test_unknown_dataset_fails_in_one_line(capsys, tmp_path):
    assert cli.main(["data", "imagenet", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "'imagenet'" in err and "mnist, cifar10, cifar100" in err
    assert not (tmp_path / "d").exists()


def test_offline_download_fails_in_one_line_naming_dataset_url_and_fix(tmp_path):
    """Offline (every request sent to a closed local port through the proxy variables urllib
    honours): one line, rc 2, naming the dataset, torchvision's URL and what to do; nothing left."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env[var] = "http://127.0.0.1:9"
    for var in ("no_proxy", "NO_PROXY"):
        env.pop(var, None)
    out = tmp_path / "data"
    done = subprocess.run([sys.executable, "-m", "fedcal", "data", "cifar10", "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("fedcal: error: cannot download cifar10 from "
                               "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz")
    assert "on a machine with internet" in lines[0] and "cifar10_train.npz" in lines[0]
    assert not out.exists()
