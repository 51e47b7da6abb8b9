"""Common image corruptions at CIFAR-10-C's parameters (flwr-free, numpy + Pillow + SciPy).

The recipes and their five severities are those of Hendrycks & Dietterich, "Benchmarking
Neural Network Robustness to Common Corruptions and Perturbations" (ICLR 2019), as their
CIFAR-10-C generation script applies them to 32×32 images (``make_cifar_c.py`` in
``hendrycks/robustness``). Written here rather than taken from the ``imagecorruptions`` package
on PyPI because that package (1.1.2, the newest) (a) carries ImageNet-C's parameters, tuned for
224×224 images — its defocus blur at severity 3 is a disk of radius 6, which wipes out a 32×32
image, where CIFAR-10-C uses radius 0.5 —, (b) imports ``pkg_resources``, gone from current
setuptools, and (c) calls scikit-image's removed ``multichannel=`` argument. Each recipe below is
a few lines of numpy on the documented formula, applied to a whole batch at once.

Every corruption maps uint8 images of shape (N, H, W, C) (C = 1 or 3, any H×W: MNIST's 28×28
and digits' 8×8 included) to uint8 images of the same shape, deterministically given the
``numpy.random.Generator`` it is handed. Colour-space recipes (brightness, saturate) treat a
grey image as R = G = B, where HSV's value is the grey level and its saturation 0.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
from PIL import Image
from scipy import ndimage

SEVERITIES = (1, 2, 3, 4, 5)

# name → parameter per severity 1..5 (CIFAR-10-C's values)
_PARAMS: dict[str, tuple] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),  # σ of additive N(0, σ²) on [0, 1] pixels
    "shot_noise": (500, 250, 100, 75, 50),  # photons per unit intensity: Poisson(x·c)/c
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),  # fraction of salt-and-pepper values
    "speckle_noise": (0.06, 0.10, 0.12, 0.16, 0.20),  # σ of multiplicative noise x + x·N(0, σ²)
    "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),  # σ in pixels
    "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1.0, 0.2), (1.5, 0.1)),  # (disk radius, anti-alias σ)
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),  # factor towards each image's per-channel mean
    "brightness": (0.05, 0.10, 0.15, 0.20, 0.30),  # added to HSV value
    "saturate": ((0.3, 0.0), (0.1, 0.0), (1.5, 0.0), (2.0, 0.1), (2.5, 0.2)),  # S ← S·a + b
    "jpeg_compression": (80, 65, 58, 50, 40),  # JPEG quality
    "pixelate": (0.95, 0.90, 0.85, 0.75, 0.65),  # box-downsample factor, then box-upsample
}


def _unit(images: np.ndarray) -> np.ndarray:
    return images.astype(np.float64) / 255.0


def _to_uint8(x: np.ndarray) -> np.ndarray:
    # CIFAR-10-C stores np.uint8(np.clip(x, 0, 1) * 255): truncation, not rounding.
    return (np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8)


def gaussian_noise(images: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    """x + N(0, c²), clipped to [0, 1]."""
    x = _unit(images)
    return _to_uint8(x + rng.normal(scale=c, size=x.shape))


def shot_noise(images: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    """Poisson(x·c) / c: photon noise with c photons per unit intensity."""
    x = _unit(images)
    return _to_uint8(rng.poisson(x * c) / c)


def impulse_noise(images: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    """Salt and pepper: each value (per channel) replaced with probability c, by 1 or 0 with equal odds."""
    x = _unit(images)
    hit = rng.random(x.shape) < c
    salt = rng.random(x.shape) < 0.5
    x = np.where(hit & salt, 1.0, np.where(hit & ~salt, 0.0, x))
    return _to_uint8(x)


def speckle_noise(images: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    """x + x·N(0, c²)."""
    x = _unit(images)
    return _to_uint8(x + x * rng.normal(scale=c, size=x.shape))


def gaussian_blur(images: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    """Gaussian blur of σ = c pixels in H and W (each image and channel separately)."""
    x = _unit(images)
    return _to_uint8(ndimage.gaussian_filter(x, sigma=(0, c, c, 0), mode="nearest", truncate=4.0))


def _gaussian_taps3(sigma: float) -> np.ndarray:
    taps = np.exp(-np.array([1.0, 0.0, 1.0]) / (2.0 * sigma * sigma))
    return taps / taps.sum()


def _disk_kernel(radius: float, alias_sigma: float) -> np.ndarray:
    """CIFAR-10-C's defocus kernel: a normalised disk of ``radius`` on a 17×17 grid, anti-aliased
    by a 3×3 Gaussian of σ = ``alias_sigma`` (the radii used are all ≤ 8)."""
    grid = np.arange(-8, 9)
    xx, yy = np.meshgrid(grid, grid)
    disk = (xx ** 2 + yy ** 2 <= radius ** 2).astype(np.float64)
    disk /= disk.sum()
    taps = _gaussian_taps3(alias_sigma)
    disk = ndimage.correlate1d(disk, taps, axis=0, mode="mirror")
    return ndimage.correlate1d(disk, taps, axis=1, mode="mirror")


def defocus_blur(images: np.ndarray, c: tuple[float, float], rng: np.random.Generator) -> np.ndarray:
    """Correlation with an anti-aliased disk (lens defocus), reflect-101 borders."""
    x = _unit(images)
    kernel = _disk_kernel(*c)[None, :, :, None]  # same kernel for every image and channel
    return _to_uint8(ndimage.correlate(x, kernel, mode="mirror"))


def contrast(images: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    """(x − m)·c + m, with m each image's per-channel mean."""
    x = _unit(images)
    m = x.mean(axis=(1, 2), keepdims=True)
    return _to_uint8((x - m) * c + m)


def _hsv_adjust(images: np.ndarray, fn: Callable[[np.ndarray], None]) -> np.ndarray:
    from matplotlib.colors import hsv_to_rgb, rgb_to_hsv  # the same HSV as scikit-image's

    x = _unit(images)
    grey = x.shape[-1] == 1
    rgb = np.repeat(x, 3, axis=-1) if grey else x
    hsv = rgb_to_hsv(rgb)
    fn(hsv)
    out = hsv_to_rgb(hsv)
    return _to_uint8(out[..., :1] if grey else out)


def brightness(images: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    """HSV value V ← clip(V + c, 0, 1)."""

    def shift(hsv: np.ndarray) -> None:
        hsv[..., 2] = np.clip(hsv[..., 2] + c, 0.0, 1.0)

    return _hsv_adjust(images, shift)


def saturate(images: np.ndarray, c: tuple[float, float], rng: np.random.Generator) -> np.ndarray:
    """HSV saturation S ← clip(S·a + b, 0, 1) (a grey image stays grey: its S is 0, and b is
    applied to a hue-less colour, which the recipe defines as no change)."""

    def scale(hsv: np.ndarray) -> None:
        hsv[..., 1] = np.clip(hsv[..., 1] * c[0] + c[1], 0.0, 1.0)

    if images.shape[-1] == 1:
        return images.copy()
    return _hsv_adjust(images, scale)


def _pil_each(images: np.ndarray, fn: Callable[[Image.Image], Image.Image]) -> np.ndarray:
    out = np.empty_like(images)
    for i, img in enumerate(images):
        pil = Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img)
        res = np.asarray(fn(pil))
        out[i] = res[..., None] if res.ndim == 2 else res
    return out


def jpeg_compression(images: np.ndarray, c: int, rng: np.random.Generator) -> np.ndarray:
    """Encode as JPEG at quality c and decode (Pillow)."""

    def jpeg(pil: Image.Image) -> Image.Image:
        buf = io.BytesIO()
        pil.save(buf, "JPEG", quality=c)
        buf.seek(0)
        return Image.open(buf).convert(pil.mode)

    return _pil_each(images, jpeg)


def pixelate(images: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
    """Box-downsample to int(c·size), then box-upsample back (Pillow)."""

    def pix(pil: Image.Image) -> Image.Image:
        w, h = pil.size
        return pil.resize((int(w * c), int(h * c)), Image.BOX).resize((w, h), Image.BOX)

    return _pil_each(images, pix)


CORRUPTIONS: dict[str, Callable[[np.ndarray, object, np.random.Generator], np.ndarray]] = {
    "gaussian_noise": gaussian_noise, "shot_noise": shot_noise, "impulse_noise": impulse_noise,
    "speckle_noise": speckle_noise, "gaussian_blur": gaussian_blur, "defocus_blur": defocus_blur,
    "contrast": contrast, "brightness": brightness, "saturate": saturate,
    "jpeg_compression": jpeg_compression, "pixelate": pixelate,
}
#: the corruptions of the report by default (the issue's eight: noise ×3, blur, digital ×4)
DEFAULT_CORRUPTIONS = ("gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "contrast", "brightness",
                       "jpeg_compression", "pixelate")


def corrupt(images: np.ndarray, name: str, severity: int = 3, seed: int = 0) -> np.ndarray:
    """``images`` (uint8, N×H×W×C with C ∈ {1, 3}) under corruption ``name`` at ``severity``.

    Deterministic given ``seed``: the random stream is seeded by (seed, the corruption's index),
    so each corruption draws its own noise. Raises ValueError naming the problem for an unknown
    name, a severity outside 1..5 or images that are not uint8 N×H×W×{1,3}.
    """
    if name not in CORRUPTIONS:
        raise ValueError(f"unknown corruption {name!r}; choose from {', '.join(CORRUPTIONS)}")
    if severity not in SEVERITIES:
        raise ValueError(f"corruption severity must be one of 1..5, got {severity!r}")
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] not in (1, 3):
        raise ValueError(f"corruptions take uint8 images of shape N×H×W×C with C in (1, 3), got "
                         f"{images.dtype} of shape {images.shape}")
    rng = np.random.default_rng([seed, list(CORRUPTIONS).index(name)])
    return CORRUPTIONS[name](images, _PARAMS[name][severity - 1], rng)
