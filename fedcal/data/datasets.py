"""Datasets as in-memory tensors.

Every loader returns a :class:`Dataset` of normalised float32 tensors (images NCHW, tabular
N×D) and int64 labels. Sources, in order of preference:

* ``<data_dir>/<name>_{train,test}.npz`` (arrays ``x`` uint8, ``y`` int64) — the offline
  format, written from torchvision's download by ``fedcal data`` (:mod:`fedcal.studies.data`);
* torchvision's own loaders (download on networked machines, cached under ``data_dir``); a load
  that fails leaves the filesystem as it was: whatever it created (``data_dir`` itself and its
  missing parents, partial downloads) is removed, and nothing that existed before is touched;
* scikit-learn's bundled ``digits`` (offline default) and a seeded ``synthetic`` task;
* text datasets (``rt-sentiment``): a frozen encoder's sentence embeddings of a text corpus, inputs
  (N, hidden), built and cached on disk by :func:`fedcal.text.embed.text_dataset`;
* ``mitbih``: MIT-BIH arrhythmia beats read with ``wfdb`` from ``<data_dir>/mitbih`` (or
  ``data_dir`` itself when it holds the ``*.hea`` headers), inputs (N, 1, 180), the five AAMI
  classes, the record (patient) of every training beat in ``groups_train``
  (:mod:`fedcal.data.ecg`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedcal.config import ConfigError
from fedcal.data.ecg import AAMI_CLASSES, load_mitbih, records_folder

# Per-channel statistics of the training sets (the usual published values).
_NORMALISATION = {
    "mnist": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}
_NUM_CLASSES = {"mnist": 10, "cifar10": 10, "cifar100": 100, "digits": 10}
# Text datasets, built by fedcal.text (its loaders import this module for Dataset, so they are named
# here, not imported: the reference is resolved on first use, as a Task's report is).
_TEXT_LOADERS = {"rt-sentiment": "fedcal.text.embed:text_dataset"}


@dataclass(frozen=True)
class Dataset:
    """A classification task held in memory."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    #: per training sample, the group it belongs to (the patient of an ECG beat), for partitions
    #: that keep a group on one client (``partition=patient``); None for datasets without groups
    groups_train: torch.Tensor | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def default_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """``data_dir`` if given, else ``$FEDCAL_DATA_DIR``, else ``~/.cache/fedcal/data``."""
    if data_dir:
        return Path(data_dir).expanduser()
    env = os.environ.get("FEDCAL_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "fedcal" / "data"


def load_dataset(name: str, data_dir: str | os.PathLike[str] | None = None) -> Dataset:
    """Load a dataset by name (cached per process: a client never re-reads its data).

    Raises :class:`fedcal.config.ConfigError` naming ``dataset``/``data-dir`` when the data
    cannot be found or downloaded.
    """
    return _load_cached(name, str(default_data_dir(data_dir)))


@functools.lru_cache(maxsize=4)
def _load_cached(name: str, data_dir: str) -> Dataset:
    root = Path(data_dir)
    if name == "digits":
        return _digits()
    if name == "synthetic":
        return synthetic_dataset()
    if name == "mitbih":
        return _mitbih(root)
    if name in _TEXT_LOADERS:
        import importlib

        module, func = _TEXT_LOADERS[name].split(":")
        return getattr(importlib.import_module(module), func)(name, root)
    if name not in _NORMALISATION:
        raise ConfigError(f"run-config key 'dataset': unknown dataset {name!r}")
    npz_train, npz_test = npz_files(name, root)
    if npz_train.exists() and npz_test.exists():
        xtr, ytr = _read_npz(npz_train)
        xte, yte = _read_npz(npz_test)
    else:
        xtr, ytr, xte, yte = _torchvision(name, root)
    mean, std = _NORMALISATION[name]
    return Dataset(
        name=name,
        x_train=_images_to_tensor(xtr, mean, std),
        y_train=torch.as_tensor(ytr, dtype=torch.int64),
        x_test=_images_to_tensor(xte, mean, std),
        y_test=torch.as_tensor(yte, dtype=torch.int64),
        num_classes=_NUM_CLASSES[name],
    )


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path) as f:
        missing = {"x", "y"} - set(f.files)
        if missing:
            raise ConfigError(f"run-config key 'data-dir': {path} lacks arrays {sorted(missing)}")
        return f["x"], f["y"].astype(np.int64)


#: the datasets read from ``<data_dir>/<name>_{train,test}.npz`` or, without them, torchvision's download
TORCHVISION_DATASETS = ("mnist", "cifar10", "cifar100")


def npz_files(name: str, root: str | os.PathLike[str]) -> tuple[Path, Path]:
    """``<root>/<name>_train.npz`` and ``<root>/<name>_test.npz``: the files the loader reads first."""
    return Path(root) / f"{name}_train.npz", Path(root) / f"{name}_test.npz"


def download_urls(name: str) -> list[str]:
    """Where torchvision downloads ``name`` from (its dataset class's mirrors / URL)."""
    import torchvision

    cls = _torchvision_class(name)
    if issubclass(cls, torchvision.datasets.MNIST):
        return list(cls.mirrors)
    return [cls.url]


def _torchvision_class(name: str):
    import torchvision  # imported lazily: only networked users reach this path

    return {"mnist": torchvision.datasets.MNIST, "cifar10": torchvision.datasets.CIFAR10,
            "cifar100": torchvision.datasets.CIFAR100}[name]


def torchvision_arrays(name: str, root: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test) of ``name`` through torchvision's own dataset class, which
    downloads into ``root`` what is not there yet: images uint8 (N, H, W) or (N, H, W, C), labels
    int64 — the arrays of the ``.npz`` files. A load that fails leaves the filesystem as it was
    (:class:`_FileSnapshot`) and re-raises torchvision's error."""
    cls = _torchvision_class(name)
    root = Path(root)
    before = _FileSnapshot(root)
    try:
        train = cls(str(root), train=True, download=True)
        test = cls(str(root), train=False, download=True)
    except BaseException:
        before.remove_created()
        raise

    def arrays(ds):  # MNIST stores tensors, CIFAR numpy arrays + lists
        x = ds.data.numpy() if isinstance(ds.data, torch.Tensor) else np.asarray(ds.data)
        return np.ascontiguousarray(x, dtype=np.uint8), np.asarray(ds.targets, dtype=np.int64)

    return (*arrays(train), *arrays(test))


def _torchvision(name: str, root: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    try:
        return torchvision_arrays(name, root)
    except Exception as exc:  # torchvision raises URLError/RuntimeError offline
        reason = " ".join(str(exc).split())
        raise ConfigError(
            f"run-config key 'dataset': cannot load {name!r}: no {name}_train.npz/{name}_test.npz "
            f"in data-dir {str(root)!r} and torchvision could not download it ({reason}). "
            f"Set 'data-dir' (or $FEDCAL_DATA_DIR) to a folder holding the data "
            f"(`fedcal data {name} --out DIR` writes them where the network allows)."
        ) from exc


class _FileSnapshot:
    """What existed at and under ``root`` before a load, so that a failed load can remove exactly
    what it created: the topmost missing ancestor of ``root`` (with everything in it) if ``root``
    did not exist, else every new file or folder under ``root``. Paths that existed are kept,
    whatever the load wrote into them. Not safe against two processes downloading into the same
    new ``data-dir`` at once (parallel sweep cells): one's clean-up may remove the other's
    partial download, which then fails the same way and is retried by the next run."""

    def __init__(self, root: Path):
        self.root = Path(root).absolute()
        top = None  # the topmost ancestor of root (or root) that does not exist yet
        for p in (self.root, *self.root.parents):
            if p.exists() or p.is_symlink():
                break
            top = p
        self.top_missing = top
        self.paths = set() if top is not None else set(self._walk())

    def _walk(self):
        for dirpath, dirnames, filenames in os.walk(self.root):
            for n in (*dirnames, *filenames):
                yield os.path.join(dirpath, n)

    def remove_created(self) -> None:
        if self.top_missing is not None:
            if self.top_missing.is_dir() and not self.top_missing.is_symlink():
                shutil.rmtree(self.top_missing, ignore_errors=True)
            elif self.top_missing.exists() or self.top_missing.is_symlink():
                self.top_missing.unlink(missing_ok=True)
            return
        for dirpath, dirnames, filenames in os.walk(self.root, topdown=True):
            for n in list(dirnames):
                p = os.path.join(dirpath, n)
                if p not in self.paths:
                    dirnames.remove(n)  # do not descend: the whole folder is new
                    if os.path.islink(p):
                        os.unlink(p)
                    else:
                        shutil.rmtree(p, ignore_errors=True)
            for n in filenames:
                p = os.path.join(dirpath, n)
                if p not in self.paths:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(p)


def _images_to_tensor(x: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(x)).float().div_(255.0)
    if t.ndim == 3:  # N,H,W grey
        t = t.unsqueeze(1)
    elif t.ndim == 4 and t.shape[-1] in (1, 3):  # N,H,W,C → N,C,H,W
        t = t.permute(0, 3, 1, 2).contiguous()
    m = torch.tensor(mean).view(1, -1, 1, 1)
    s = torch.tensor(std).view(1, -1, 1, 1)
    return (t - m) / s


@functools.lru_cache(maxsize=1)
def _digits_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    # A fixed split (independent of the run seed) so every run is scored on the same test set.
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    # StandardScaler leaves constant pixels (always 0 in the training split) unscaled.
    return xtr, xte, ytr, yte, StandardScaler().fit(xtr)


def _digits() -> Dataset:
    xtr, xte, ytr, yte, scaler = _digits_split()
    f = lambda a: torch.as_tensor(scaler.transform(a), dtype=torch.float32)  # noqa: E731
    return Dataset("digits", f(xtr), torch.as_tensor(ytr), f(xte), torch.as_tensor(yte), 10)


def _mitbih(root: Path) -> Dataset:
    """MIT-BIH beats (fedcal.data.ecg): DS1 trains, DS2 tests; inputs (N, 1, WINDOW)."""
    train, test = load_mitbih(records_folder(root))
    x = lambda b: torch.from_numpy(np.ascontiguousarray(b.x, dtype=np.float32)).unsqueeze(1)  # noqa: E731
    y = lambda b: torch.from_numpy(np.asarray(b.y, dtype=np.int64))  # noqa: E731
    return Dataset("mitbih", x(train), y(train), x(test), y(test), len(AAMI_CLASSES),
                   groups_train=torch.from_numpy(np.asarray(train.record, dtype=np.int64)))


# Image shape (C, H, W) of each image dataset; digits' 64 features are an 8×8 grey image.
_IMAGE_SHAPES = {"mnist": (1, 28, 28), "cifar10": (3, 32, 32), "cifar100": (3, 32, 32), "digits": (1, 8, 8)}


@dataclass(frozen=True)
class PixelSpace:
    """How a dataset's model inputs relate to its pixels in [0, 1].

    ``inputs = ((pixels - mean) / std).reshape(N, *input_shape)`` with ``pixels`` of shape
    (N, *image_shape); ``mean`` and ``std`` broadcast against ``image_shape`` (per channel for
    MNIST/CIFAR, per pixel for digits, whose StandardScaler works per feature on 0–16 values).
    Adversarial budgets (ε) and image corruptions are defined on pixels, so attacks and
    corruptions go through this map rather than perturbing normalised inputs.
    """

    image_shape: tuple[int, int, int]
    input_shape: tuple[int, ...]
    mean: torch.Tensor
    std: torch.Tensor

    def to_inputs(self, pixels: torch.Tensor) -> torch.Tensor:
        """Model inputs of pixel images (N, *image_shape) in [0, 1]."""
        mean, std = self.mean.to(pixels.device, pixels.dtype), self.std.to(pixels.device, pixels.dtype)
        return ((pixels - mean) / std).reshape(len(pixels), *self.input_shape)

    def to_pixels(self, inputs: torch.Tensor) -> torch.Tensor:
        """Pixel images in [0, 1] of model inputs (the inverse of :meth:`to_inputs`, clamped to
        [0, 1] against float rounding)."""
        x = inputs.reshape(len(inputs), *self.image_shape)
        mean, std = self.mean.to(x.device, x.dtype), self.std.to(x.device, x.dtype)
        return (x * std + mean).clamp_(0.0, 1.0)


def pixel_space(name: str) -> PixelSpace:
    """The :class:`PixelSpace` of an image dataset (mnist, cifar10, cifar100, digits).

    Raises :class:`fedcal.config.ConfigError` for datasets that are not images (synthetic).
    """
    if name not in _IMAGE_SHAPES:
        raise ConfigError(f"run-config key 'dataset': {name!r} has no pixel space (not an image dataset); "
                          f"image datasets: {', '.join(_IMAGE_SHAPES)}")
    shape = _IMAGE_SHAPES[name]
    if name == "digits":
        scaler = _digits_split()[4]  # raw pixel values are 0..16
        mean = torch.as_tensor(scaler.mean_ / 16.0, dtype=torch.float32).reshape(shape)
        std = torch.as_tensor(scaler.scale_ / 16.0, dtype=torch.float32).reshape(shape)
        return PixelSpace(shape, (64,), mean, std)
    m, s = _NORMALISATION[name]
    return PixelSpace(shape, shape, torch.tensor(m).view(-1, 1, 1), torch.tensor(s).view(-1, 1, 1))


def synthetic_dataset(
    n_train: int = 2000, n_test: int = 500, num_features: int = 20, num_classes: int = 4,
    separation: float = 1.5, seed: int = 1234,
) -> Dataset:
    """Gaussian class clusters: a small, fast, fully deterministic task for tests."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(num_classes, num_features, generator=g) * separation

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, num_classes, (n,), generator=g)
        return centres[y] + torch.randn(n, num_features, generator=g), y

    xtr, ytr = draw(n_train)
    xte, yte = draw(n_test)
    return Dataset("synthetic", xtr, ytr, xte, yte, num_classes)
