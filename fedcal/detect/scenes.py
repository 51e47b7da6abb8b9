"""Deterministic multi-digit detection scenes (flwr-free), SPEC §10's offline detection data.

A scene is a square grey canvas (``size`` × ``size`` pixels, black) with ``min_digits`` to
``max_digits`` digits pasted at random positions and scales; each digit's class and box are
known exactly. Digits come from :func:`fedcal.data.load_dataset` (``mnist``: 28×28, from
``data-dir``; ``digits``: scikit-learn's bundled 8×8 digits, available everywhere) in pixel space
(:func:`fedcal.data.pixel_space`, values in [0, 1]); training scenes use the dataset's training
split, test scenes its test split.

**One digit.** Its side ``s`` is drawn uniformly from [``min_scale``, ``max_scale``] pixels, the
digit image is resized to s × s (bilinear, antialiased), and its top-left corner is drawn
uniformly so the square lies inside the canvas; up to 20 draws avoid overlapping an earlier
digit's box by more than IoU 0.3 (the last draw is kept otherwise). It is pasted with
``canvas = max(canvas, digit)``. Its **box** is the pasted extent of its ink: the tight box
``[x1, y1, x2, y2)`` (pixels, x2/y2 exclusive) of the resized digit's pixels > :data:`INK`, offset
by the position — so a box always lies inside the canvas.

**Non-IID clients** (label skew by a Dirichlet over classes): client k draws
π_k ~ Dir(α·1_C) once (α = ``det-alpha``), and every digit of its scenes has class c ~ π_k and is a
uniformly drawn training image of class c. Test scenes draw classes uniformly.

**Determinism.** Every draw comes from ``numpy.random.default_rng`` seeded by SHA-256 of
``(seed, split, client, scene parameters)``: the same arguments give the same scenes, on any
machine. Generated scenes are cached as ``.npz`` under ``<cache>/detect-scenes/`` (``<cache>`` =
``$FEDCAL_CACHE_DIR``, else ``~/.cache/fedcal``; outside the repository, never committed), keyed by
a hash of everything that determines them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from fedcal.config import ConfigError, ConfigSpec, setting_of

#: a resized digit's pixel is ink (part of its box) above this value
INK = 0.2
#: the digit sources scenes may be built from
SOURCES = ("mnist", "digits")
_MAX_OVERLAP = 0.3
_PLACEMENT_TRIES = 20


@dataclass(frozen=True)
class SceneSpec(ConfigSpec):
    """Everything that determines a set of scenes besides the digits (its hash names the cache; the
    ``det-*`` keys' declared defaults are its defaults). A task builds it with
    ``SceneSpec.from_config(cfg)``."""

    CONFIG_KEYS = {"source": "det_digits", "size": "det_size", "min_digits": "det_min_digits",
                   "max_digits": "det_max_digits", "min_scale": "det_min_scale", "max_scale": "det_max_scale"}

    source: str = setting_of("det_digits").default
    size: int = setting_of("det_size").default
    min_digits: int = setting_of("det_min_digits").default
    max_digits: int = setting_of("det_max_digits").default
    min_scale: int = setting_of("det_min_scale").default
    max_scale: int = setting_of("det_max_scale").default

    def check(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError(f"run-config key 'dataset': detection scenes are built from {' or '.join(SOURCES)}, "
                              f"got {self.source!r}")
        if not 1 <= self.min_digits <= self.max_digits:
            raise ConfigError(f"run-config key 'det-max-digits' must be >= det-min-digits >= 1, got "
                              f"{self.min_digits}..{self.max_digits}")
        if not 4 <= self.min_scale <= self.max_scale <= self.size:
            raise ConfigError(f"run-config key 'det-max-scale': need 4 <= det-min-scale <= det-max-scale <= det-size, "
                              f"got {self.min_scale}..{self.max_scale} on a {self.size}-pixel canvas")


@dataclass(frozen=True)
class Scenes:
    """N scenes: ``images`` (N, 1, S, S) float32 in [0, 1]; per scene its ``boxes`` (n_i, 4) float32
    ``[x1, y1, x2, y2)`` in pixels and ``labels`` (n_i,) int64 (digit classes 0..9)."""

    images: torch.Tensor
    boxes: list[torch.Tensor]
    labels: list[torch.Tensor]

    def __len__(self) -> int:
        return len(self.images)

    @property
    def size(self) -> int:
        return int(self.images.shape[-1])

    def subset(self, idx) -> Scenes:
        idx = [int(i) for i in idx]
        return Scenes(self.images[idx], [self.boxes[i] for i in idx], [self.labels[i] for i in idx])

    def targets(self, idx=None) -> list[dict[str, torch.Tensor]]:
        """DETR's training targets of scenes ``idx`` (all by default): ``class_labels`` and ``boxes``
        as normalised (center x, center y, width, height) — the format of transformers' DETR loss."""
        idx = range(len(self)) if idx is None else idx
        out = []
        for i in idx:
            b = self.boxes[int(i)] / self.size
            cxcywh = torch.stack([(b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2, b[:, 2] - b[:, 0],
                                  b[:, 3] - b[:, 1]], dim=1) if len(b) else torch.zeros(0, 4)
            out.append({"class_labels": self.labels[int(i)].long(), "boxes": cxcywh.float()})
        return out


def cache_root() -> Path:
    """``$FEDCAL_CACHE_DIR`` if set, else ``~/.cache/fedcal`` (as :mod:`fedcal.text.backbone`)."""
    env = os.environ.get("FEDCAL_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "fedcal"


def _rng(*parts) -> np.random.Generator:
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


@functools.lru_cache(maxsize=4)
def digit_images(source: str, data_dir: str, split: str) -> tuple[torch.Tensor, np.ndarray]:
    """(pixels (N, h, w) float32 in [0, 1], labels (N,)) of a digit source's ``split``."""
    from fedcal.data import load_dataset, pixel_space

    if source not in SOURCES:
        raise ConfigError(f"run-config key 'dataset': detection scenes are built from {' or '.join(SOURCES)}, "
                          f"got {source!r}")
    ds = load_dataset(source, data_dir or None)
    x, y = (ds.x_train, ds.y_train) if split == "train" else (ds.x_test, ds.y_test)
    pixels = pixel_space(source).to_pixels(x)[:, 0]
    return pixels.contiguous(), y.numpy()


def _resize(digit: torch.Tensor, s: int) -> torch.Tensor:
    return F.interpolate(digit[None, None], size=(s, s), mode="bilinear", align_corners=False,
                         antialias=s < digit.shape[-1])[0, 0].clamp_(0, 1)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def render(spec: SceneSpec, digits: torch.Tensor, classes: np.ndarray, pools: dict[int, np.ndarray],
           rng: np.random.Generator, count: int) -> Scenes:
    """``count`` scenes; each digit's class is drawn from ``classes`` (a probability vector over
    classes) and its image from ``pools[class]`` (indices into ``digits``)."""
    spec.check()
    S = spec.size
    images = torch.zeros(count, 1, S, S)
    all_boxes, all_labels = [], []
    available = np.array([c for c in range(len(classes)) if len(pools.get(c, ())) > 0])
    p = np.asarray(classes, dtype=np.float64)[available]
    p = p / p.sum()
    for n in range(count):
        k = int(rng.integers(spec.min_digits, spec.max_digits + 1))
        boxes, labels, squares = [], [], []
        for _ in range(k):
            c = int(rng.choice(available, p=p))
            img = digits[int(rng.choice(pools[c]))]
            s = int(rng.integers(spec.min_scale, spec.max_scale + 1))
            for _try in range(_PLACEMENT_TRIES):
                x0, y0 = int(rng.integers(0, S - s + 1)), int(rng.integers(0, S - s + 1))
                sq = np.array([x0, y0, x0 + s, y0 + s], dtype=np.float64)
                if all(_iou(sq, o) <= _MAX_OVERLAP for o in squares):
                    break
            squares.append(sq)
            patch = _resize(img, s)
            ink = patch > INK
            if not bool(ink.any()):  # an empty digit (never in MNIST/digits): no object
                continue
            rows, cols = torch.where(ink)
            images[n, 0, y0:y0 + s, x0:x0 + s] = torch.maximum(images[n, 0, y0:y0 + s, x0:x0 + s], patch)
            boxes.append([x0 + int(cols.min()), y0 + int(rows.min()), x0 + int(cols.max()) + 1, y0 + int(rows.max()) + 1])
            labels.append(c)
        all_boxes.append(torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4))
        all_labels.append(torch.tensor(labels, dtype=torch.int64))
    return Scenes(images, all_boxes, all_labels)


def client_class_mix(num_classes: int, alpha: float, seed: int, client: int) -> np.ndarray:
    """π_k ~ Dir(α·1_C) of client ``client`` (seeded by (seed, client))."""
    return _rng("detect-mix", seed, client).dirichlet(np.full(num_classes, float(alpha)))


def _pools(labels: np.ndarray) -> dict[int, np.ndarray]:
    return {int(c): np.flatnonzero(labels == c) for c in np.unique(labels)}


def _to_npz(path: Path, scenes: Scenes) -> None:
    counts = np.array([len(b) for b in scenes.boxes], dtype=np.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
    np.savez_compressed(tmp, images=(scenes.images[:, 0].numpy() * 255).round().astype(np.uint8),
                        boxes=torch.cat(scenes.boxes).numpy() if len(scenes) else np.zeros((0, 4), np.float32),
                        labels=torch.cat(scenes.labels).numpy() if len(scenes) else np.zeros(0, np.int64),
                        counts=counts)
    os.replace(tmp, path)


def _from_npz(path: Path) -> Scenes:
    with np.load(path) as f:
        images = torch.from_numpy(f["images"].astype(np.float32) / 255.0)[:, None]
        ends = np.cumsum(f["counts"])
        starts = ends - f["counts"]
        boxes = [torch.from_numpy(f["boxes"][a:b].copy()) for a, b in zip(starts, ends)]
        labels = [torch.from_numpy(f["labels"][a:b].copy()) for a, b in zip(starts, ends)]
    return Scenes(images, boxes, labels)


def make_scenes(spec: SceneSpec, count: int, seed: int, *, split: str = "train", client: int = -1,
                alpha: float = 0.5, data_dir: str = "", cache: bool = True) -> Scenes:
    """``count`` scenes of one client (``split="train"``, ``client`` ≥ 0, classes ~ its π_k) or of the
    test set (``split="test"``, uniform classes). Cached on disk when ``cache``.

    Images are stored as uint8 in the cache; fresh scenes are rounded the same way, so a cached
    and a freshly generated set are identical.
    """
    spec.check()
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if count < 1:
        raise ConfigError(f"an empty scene set ({count} scenes): every client and the test set need >= 1 scene")
    key = {"spec": asdict(spec), "count": count, "seed": seed, "split": split,
           "client": client if split == "train" else -1, "alpha": alpha if split == "train" else None, "v": 1}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_root() / "detect-scenes" / f"{spec.source}-{split}-{digest}.npz"
    if cache and path.exists():
        try:
            return _from_npz(path)
        except Exception:  # noqa: BLE001 — a torn cache file is regenerated
            pass
    digits, labels = digit_images(spec.source, str(data_dir or ""), split)
    pools = _pools(labels)
    num_classes = int(labels.max()) + 1
    if split == "train":
        mix = client_class_mix(num_classes, alpha, seed, client)
    else:
        mix = np.full(num_classes, 1.0 / num_classes)
    scenes = render(spec, digits, mix, pools, _rng("detect-scenes", seed, split, client, json.dumps(asdict(spec))), count)
    scenes = Scenes((scenes.images * 255).round() / 255, scenes.boxes, scenes.labels)
    if cache:
        try:
            _to_npz(path, scenes)
        except OSError:  # a read-only cache is not an error: the scenes are regenerated next time
            pass
    return scenes
