"""Chance-level models (flwr-free): is a clean accuracy distinguishable from a constant predictor?

A model that answers one class for every input scores the rate of that class on the test set; the
best such constant predictor scores the majority-class rate, and a model guessing uniformly at
random scores 1/K in expectation. The **chance rate** of a test set is therefore
``max(1/K, majority-class rate)``.

A measured accuracy is *within noise of chance* when a model at exactly the chance rate could
have produced it: with n test samples, the number a chance-rate model gets right is Binomial(n,
p₀). The accuracy is flagged when it does not exceed the one-sided critical value of that
binomial at level :data:`ALPHA` — ``k* = min{k : P(X > k) ≤ α}``, flagged when ``accuracy · n ≤
k*`` (:meth:`ChanceLevel.threshold`). Accuracies *below* chance are flagged too: such a model is
no more a result than one at chance. scipy's ``binom.isf`` computes k*.

Reports flag such a model in a column (``chance_level``) and with a marker (:data:`MARK`) on its
accuracy cell plus a footnote (:func:`footnote`), and rankings of robustness leave it out
(:mod:`fedcal.reports.inference`): a constant predictor is "robust" to every attack.

Where the test labels come from (:func:`image_chance`, :func:`labels_chance`): the dataset's test
split read from disk only (never downloaded by a report); when the labels are not on disk the
chance rate falls back to 1/K and a warning says so.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

log = logging.getLogger("fedcal.reports")

#: level of the one-sided binomial test: an accuracy is above chance when a chance-rate model
#: would reach it with probability at most 1 %
ALPHA = 0.01
#: the marker of a chance-level accuracy in a Markdown cell
MARK = "†"


@dataclass(frozen=True)
class ChanceLevel:
    """The chance reference of one test set: K classes, n samples, the majority-class rate."""

    classes: int
    n: int
    majority: float

    @property
    def rate(self) -> float:
        """``max(1/K, majority-class rate)``: what a constant (or uniformly guessing) model scores."""
        return max(1.0 / self.classes, self.majority)

    @property
    def threshold(self) -> float:
        """The accuracy at or below which a model is within noise of chance: k*/n, k* the one-sided
        (level :data:`ALPHA`) critical count of Binomial(n, :attr:`rate`)."""
        from scipy.stats import binom  # the library for the binomial tail

        return float(binom.isf(ALPHA, self.n, self.rate)) / self.n

    def flags(self, accuracy: float) -> bool:
        """Whether ``accuracy`` (a fraction) is within noise of chance or below it. A NaN accuracy (a
        diverged model, shown as NaN) is not flagged here: it is no accuracy at all."""
        return not math.isnan(accuracy) and accuracy <= self.threshold + 1e-12

    def describe(self) -> str:
        """``chance 11.35 % (K = 10, majority class), flagged at <= 12.11 % on n = 10,000``."""
        which = "majority class" if self.majority > 1.0 / self.classes else "1/K"
        return (f"chance {100 * self.rate:.2f} % (K = {self.classes}, {which}), flagged at ≤ "
                f"{100 * self.threshold:.2f} % on n = {self.n:,}")


def labels_chance(labels: Iterable[int] | np.ndarray, classes: int) -> ChanceLevel:
    """The :class:`ChanceLevel` of a test set with these labels and ``classes`` classes."""
    y = np.asarray(labels).astype(np.int64).ravel()
    if y.size == 0:
        raise ValueError("no test labels: no chance level")
    counts = np.bincount(y, minlength=classes)
    return ChanceLevel(classes=int(max(classes, len(counts))), n=int(y.size), majority=float(counts.max() / y.size))


# the image tasks' datasets: their class counts (fedcal.data) and where their test labels are on disk
_IMAGE_CLASSES = {"mnist": 10, "cifar10": 10, "cifar100": 100, "digits": 10, "mitbih": 5}


@functools.lru_cache(maxsize=16)
def _image_labels(dataset: str, data_dir: str) -> tuple[np.ndarray, int] | None:
    """(test labels, K) of an image dataset from disk (never downloaded), or None when absent."""
    from fedcal.config import ConfigError
    from fedcal.data.datasets import default_data_dir, load_dataset

    root = default_data_dir(data_dir or None)
    if dataset in ("mnist", "cifar10", "cifar100"):
        path = Path(root) / f"{dataset}_test.npz"
        if not path.exists():
            return None
        with np.load(path) as f:
            return f["y"].astype(np.int64), _IMAGE_CLASSES[dataset]
    try:  # digits, synthetic: generated here; mitbih: read from data-dir, never downloaded
        ds = load_dataset(dataset, data_dir or None)
    except (ConfigError, OSError):
        return None
    return ds.y_test.numpy(), ds.num_classes


_WARNED: set[tuple[str, str]] = set()


def image_chance(dataset: str, data_dir: str = "", n: int | None = None) -> ChanceLevel | None:
    """The chance level of an image dataset's test set (its first ``n`` samples, when given: an
    inference run's queries). Without the labels on disk: 1/K on ``n`` samples (one warning per
    dataset; None when n is unknown too)."""
    found = _image_labels(dataset, data_dir)
    if found is not None:
        labels, classes = found
        return labels_chance(labels[:n] if n else labels, classes)
    if (dataset, data_dir) not in _WARNED:
        _WARNED.add((dataset, data_dir))
        log.warning("the test labels of %s are not on disk (data-dir %r): chance-level flags use 1/K, not its "
                    "majority-class rate", dataset, data_dir)
    if dataset not in _IMAGE_CLASSES or not n:
        return None
    return ChanceLevel(classes=_IMAGE_CLASSES[dataset], n=int(n), majority=0.0)


def cfg_chance(cfg) -> ChanceLevel | None:
    """The chance level of a training run's central evaluation (its dataset's whole test set)."""
    return image_chance(cfg.dataset, cfg.data_dir)


def footnote(levels: Iterable[ChanceLevel | None], what: str = "clean accuracy") -> str:
    """The footnote under a table with flagged cells: what :data:`MARK` means and the chance
    references of the table's test sets."""
    refs = sorted({lv.describe() for lv in levels if lv is not None})
    return (f"{MARK} {what} within noise of chance (not above it in a one-sided binomial test at level "
            f"{ALPHA:g}; docs/design.md, Reports): a constant predictor scores as much, so the model is no "
            "result" + (f" — {'; '.join(refs)}" if refs else "") + ".\n")


def marked(text: str, flagged: bool) -> str:
    """A cell's text with :data:`MARK` appended when ``flagged``."""
    return f"{text} {MARK}" if flagged else text
