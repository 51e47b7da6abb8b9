"""KITTI 2D object detection as the detection case study's real dataset (flwr-free; networked users).

SPEC §10 names KITTI 2D for users with the data; offline the case study runs on MNIST scenes
(:mod:`fedcal.detect.scenes`). ``det-data=kitti`` reads the "left color images of object" training
set through :class:`torchvision.datasets.Kitti` from ``data-dir`` in torchvision's layout::

    <data-dir>/Kitti/raw/training/image_2/000000.png ...
    <data-dir>/Kitti/raw/training/label_2/000000.txt ...

(``torchvision.datasets.Kitti(<data-dir>, download=True)`` fetches it, about 12 GB; fedcal never
downloads it by itself). Only the training split carries labels, so the test set is held out from it.

**Classes.** KITTI's eight object types, in :data:`KITTI_CLASSES` order (Car = 0 … Misc = 7).
``DontCare`` regions (unlabelled or too-far objects) are dropped: the DETR loss and mAP have no
"ignore" region, so a detection there counts as a false positive — the usual simplification when
KITTI is read as plain COCO-style boxes. Any other type is an error naming the label file.

**Images.** Each image is turned grey (ITU-R 601 luma, PIL's ``"L"``), scaled by
``size / max(width, height)`` with PIL's bilinear filter, and pasted at the top-left of a black
``size`` × ``size`` canvas (a letterbox: KITTI's 1242 × 375 frames keep their aspect ratio, the
rest of the canvas is padding); boxes are scaled by the same factor. So the image is a
:class:`~fedcal.detect.scenes.Scenes` like the MNIST canvases and every detector runs unchanged.
A box narrower or lower than one pixel after scaling cannot be learnt at that size and is dropped;
how many were dropped is logged (raise ``det-size``: 384 keeps most of KITTI's cars).

**Splits.** Images are ordered by file name; a fixed permutation (independent of ``seed``, so every
run is evaluated on the same images) holds out :data:`HELD_OUT` of them as the test set, of which
the first ``det-test-scenes`` are used. The rest are dealt to clients by
:func:`fedcal.data.partition.dirichlet_partition` (α = ``det-alpha``, seeded by ``seed``) over each
image's *dominant class* (its most frequent object type; an image with no object is its own
class), the label skew of the MNIST scenes; a client uses the first ``det-train-scenes`` images of
its shard (fewer when the shard is smaller, logged).

Prepared images are cached as ``.npz`` under ``<cache>/detect-kitti/`` like the generated scenes,
keyed by the images' names and sizes, the canvas size and the indices.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedcal.config import ConfigError
from fedcal.detect.scenes import Scenes, _from_npz, _rng, _to_npz, cache_root

logger = logging.getLogger(__name__)

#: KITTI 2D object types, in class-index order
KITTI_CLASSES = ("Car", "Van", "Truck", "Pedestrian", "Person_sitting", "Cyclist", "Tram", "Misc")
#: the type KITTI uses for regions without a labelled object (dropped)
IGNORED = "DontCare"
#: the share of the labelled images held out as the test set
HELD_OUT = 0.2


@dataclass(frozen=True)
class KittiIndex:
    """Every labelled image of a KITTI root, ordered by file name: its path, its boxes
    ``[x1, y1, x2, y2]`` in original pixels (float32, ``DontCare`` dropped) and class indices."""

    paths: tuple[str, ...]
    boxes: tuple[np.ndarray, ...]
    labels: tuple[np.ndarray, ...]

    def __len__(self) -> int:
        return len(self.paths)

    def dominant(self) -> np.ndarray:
        """Each image's most frequent class (ties: the lower index); ``len(KITTI_CLASSES)`` when empty."""
        out = np.full(len(self), len(KITTI_CLASSES), dtype=np.int64)
        for i, lab in enumerate(self.labels):
            if len(lab):
                out[i] = int(np.bincount(lab, minlength=len(KITTI_CLASSES)).argmax())
        return out


def _dataset(root: str):
    from torchvision.datasets import Kitti

    try:
        return Kitti(root, train=True, download=False)
    except RuntimeError as err:  # torchvision: "Dataset not found"
        raise ConfigError(
            f"run-config key 'data-dir': det-data=kitti needs KITTI's 2D object training set under "
            f"{Path(root) / 'Kitti' / 'raw' / 'training'} (image_2/ and label_2/); "
            f"torchvision.datasets.Kitti({str(root)!r}, download=True) fetches it (about 12 GB)") from err


@functools.lru_cache(maxsize=2)
def read_index(root: str) -> KittiIndex:
    """The labelled images under ``root`` (torchvision's KITTI layout, module docstring)."""
    ds = _dataset(root)
    order = np.argsort(np.array([os.path.basename(p) for p in ds.images]), kind="stable")
    if len(order) == 0:
        raise ConfigError(f"run-config key 'data-dir': no KITTI image under {root}")
    paths, boxes, labels = [], [], []
    for i in order:
        image, target = ds[int(i)]  # PIL opens lazily: only the header is read here
        image.close()
        b, lab = [], []
        for obj in target:
            kind = obj["type"]
            if kind == IGNORED:
                continue
            if kind not in KITTI_CLASSES:
                raise ValueError(f"{ds.targets[int(i)]}: unknown KITTI object type {kind!r} (known: "
                                 f"{', '.join(KITTI_CLASSES)}, {IGNORED})")
            x1, y1, x2, y2 = obj["bbox"]
            if not (np.isfinite([x1, y1, x2, y2]).all() and x2 > x1 and y2 > y1):
                raise ValueError(f"{ds.targets[int(i)]}: invalid {kind} box {obj['bbox']} (need x2 > x1, y2 > y1)")
            b.append([x1, y1, x2, y2])
            lab.append(KITTI_CLASSES.index(kind))
        paths.append(ds.images[int(i)])
        boxes.append(np.asarray(b, dtype=np.float32).reshape(-1, 4))
        labels.append(np.asarray(lab, dtype=np.int64))
    return KittiIndex(tuple(paths), tuple(boxes), tuple(labels))


def split(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(training, held-out test) indices of ``n`` images: a fixed permutation, :data:`HELD_OUT` of it
    (at least one image) as the test set; both sorted."""
    if n < 2:
        raise ConfigError(f"run-config key 'data-dir': KITTI needs >= 2 labelled images (train and test), got {n}")
    perm = _rng("kitti-split", n).permutation(n)
    k = max(1, int(round(HELD_OUT * n)))
    return np.sort(perm[k:]), np.sort(perm[:k])


def letterbox(image, size: int) -> tuple[torch.Tensor, float]:
    """A PIL image as a grey ``size`` × ``size`` canvas in [0, 1] (scaled by ``size / max(w, h)``,
    pasted top-left) and the scale factor."""
    from PIL import Image

    w, h = image.size
    scale = size / max(w, h)
    nw, nh = max(1, round(w * scale)), max(1, round(h * scale))
    grey = image.convert("L").resize((nw, nh), Image.Resampling.BILINEAR)
    canvas = torch.zeros(size, size)
    canvas[:nh, :nw] = torch.from_numpy(np.asarray(grey, dtype=np.float32) / 255.0)
    return canvas, scale


def load_images(index: KittiIndex, idx, size: int) -> tuple[Scenes, int]:
    """Images ``idx`` of ``index`` letterboxed to ``size`` (module docstring) and how many boxes were
    dropped as smaller than a pixel."""
    from PIL import Image

    images = torch.zeros(len(idx), 1, size, size)
    boxes, labels, dropped = [], [], 0
    for n, i in enumerate(int(j) for j in idx):
        with Image.open(index.paths[i]) as image:
            images[n, 0], scale = letterbox(image, size)
        b = torch.from_numpy(index.boxes[i] * scale)
        keep = ((b[:, 2] - b[:, 0]) >= 1) & ((b[:, 3] - b[:, 1]) >= 1)
        dropped += int((~keep).sum())
        boxes.append(b[keep].clamp_(0, size))
        labels.append(torch.from_numpy(index.labels[i])[keep])
    # rounded like the cache stores them, so a cached and a fresh set are identical
    return Scenes((images * 255).round() / 255, boxes, labels), dropped


def _cached_images(root: str, index: KittiIndex, idx: np.ndarray, size: int, what: str) -> Scenes:
    names = [(os.path.basename(index.paths[i]), os.path.getsize(index.paths[i])) for i in idx]
    key = {"root": os.path.realpath(root), "images": names, "size": size, "v": 1}
    path = cache_root() / "detect-kitti" / f"{what}-{hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]}.npz"
    if path.exists():
        try:
            return _from_npz(path)
        except Exception:  # noqa: BLE001 — a torn cache file is rebuilt
            pass
    scenes, dropped = load_images(index, idx, size)
    if dropped:
        kept = sum(len(b) for b in scenes.boxes)
        logger.warning("KITTI %s: %d of %d boxes are under one pixel on a %d-pixel canvas and were dropped "
                       "(raise det-size to keep them)", what, dropped, dropped + kept, size)
    try:
        _to_npz(path, scenes)
    except OSError:  # a read-only cache is not an error
        pass
    return scenes


def kitti_test(root: str, size: int, count: int) -> Scenes:
    """The first ``count`` held-out images (fewer if the held-out set is smaller, logged)."""
    index = read_index(root)
    _, test = split(len(index))
    if count > len(test):
        logger.warning("KITTI: det-test-scenes=%d but only %d images are held out; using %d", count, len(test), len(test))
    return _cached_images(root, index, test[:count], size, "test")


def kitti_client(root: str, size: int, count: int, num_clients: int, client: int, alpha: float, seed: int) -> Scenes:
    """Client ``client``'s images: its Dirichlet shard of the training images (dominant-class label
    skew, α = ``alpha``, seeded), the first ``count`` of them (module docstring)."""
    from fedcal.data.partition import dirichlet_partition

    index = read_index(root)
    train, _ = split(len(index))
    if len(train) < num_clients:
        raise ConfigError(f"run-config key 'num-clients': KITTI under {root} has {len(train)} training images, "
                          f"fewer than num-clients={num_clients}")
    try:
        shards = dirichlet_partition(index.dominant()[train], num_clients, alpha, seed)
    except ValueError as err:
        raise ConfigError(f"run-config key 'det-alpha': KITTI's client partition failed: {err}") from err
    mine = train[shards[client]]
    if count > len(mine):
        logger.warning("KITTI client %d: det-train-scenes=%d but its shard holds %d images; using %d", client, count,
                       len(mine), len(mine))
    return _cached_images(root, index, mine[:count], size, f"client{client}")


__all__ = ["HELD_OUT", "IGNORED", "KITTI_CLASSES", "KittiIndex", "kitti_client", "kitti_test", "letterbox",
           "load_images", "read_index", "split"]
