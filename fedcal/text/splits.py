"""The public anchor set, client partitions of the private rest, and backdoor poisoning.

RFD-LoRA's server and clients share a public anchor set (the clients upload logits on it); the
rest of the training split is private and partitioned over the clients. Everything here works on
indices into a :class:`fedcal.text.corpora.TextTask`'s training split and is seeded (no global RNG).

* :func:`anchor_split` — 10 % of the training split as anchors, disjoint from the private rest;
* :func:`iid_clients` — stratified IID shards of the private part;
* :func:`label_skew_clients` — severe label skew by per-class proportion patterns, each pattern
  held by ``clients_per_pattern`` clients, every private sample given to exactly one client;
* :func:`poison` / :func:`triggered_test_set` — a word-trigger backdoor (prepend a rare token,
  relabel to the target class) and the test set of its attack success rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .corpora import Text, words

# A rare two-letter token absent from both offline corpora (checked by every poison call and by a
# test): one of the RIPPLe triggers (Kurita et al., 2020, "Weight Poisoning Attacks on Pre-trained
# Models"), which chose low-frequency tokens so clean text never fires the backdoor.
DEFAULT_TRIGGER = "cf"


def anchor_split(n_train: int, frac: float = 0.1, seed: int = 0,
                 labels: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Split ``range(n_train)`` into (anchors, private), sorted and disjoint: ``round(frac · n_train)``
    anchors, drawn with ``seed``; stratified by ``labels`` when given (each class contributes its
    share, so the anchors' class balance is the training split's)."""
    if not 0 < frac < 1:
        raise ValueError(f"anchor frac must lie in (0, 1), got {frac}")
    n_anchor = round(frac * n_train)
    if not 0 < n_anchor < n_train:
        raise ValueError(f"{frac} of {n_train} training samples gives {n_anchor} anchors")
    rng = np.random.default_rng(seed)
    if labels is None:
        anchors = rng.permutation(n_train)[:n_anchor]
    else:
        labels = np.asarray(labels)
        if len(labels) != n_train:
            raise ValueError(f"{len(labels)} labels for {n_train} training samples")
        classes = np.unique(labels)
        by_class = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
        take = _round_to_total(np.array([len(i) for i in by_class]) * frac, n_anchor)
        anchors = np.concatenate([i[:k] for i, k in zip(by_class, take)])
    mask = np.zeros(n_train, bool)
    mask[anchors] = True
    return np.flatnonzero(mask), np.flatnonzero(~mask)


def iid_clients(labels: np.ndarray, num_clients: int, seed: int = 0,
                indices: np.ndarray | None = None) -> list[np.ndarray]:
    """Stratified IID shards: each class's samples are shuffled and dealt out in turn, so every
    client's class balance matches the whole and shard sizes differ by at most one per class.
    ``indices`` (e.g. the private part of :func:`anchor_split`) selects the samples to share out;
    the shards hold those indices."""
    labels, indices = _select(labels, indices)
    if not 1 <= num_clients <= len(labels):
        raise ValueError(f"num_clients must lie in [1, {len(labels)}], got {num_clients}")
    rng = np.random.default_rng(seed)
    shards: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    offset = 0  # rotate which client gets the one-larger shards, so totals stay within ±1 too
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        parts = np.array_split(idx, num_clients)
        for k in range(num_clients):
            shards[(k + offset) % num_clients].append(parts[k])
        offset += len(idx) % num_clients
    return [np.sort(indices[np.concatenate(s)]) for s in shards]


def skew_patterns(num_classes: int, major: float = 0.9) -> np.ndarray:
    """The default label-skew patterns, one row of class proportions per pattern: for two classes
    ``[0.1, 0.9], [0.9, 0.1], [0.5, 0.5]`` (two opposite skews and a balanced control); for C ≥ 3,
    ``major`` on one class and the rest spread evenly, rotated over the classes (C patterns)."""
    if num_classes == 2:
        return np.array([[1 - major, major], [major, 1 - major], [0.5, 0.5]])
    if num_classes < 2:
        raise ValueError(f"label skew needs at least 2 classes, got {num_classes}")
    minor = (1 - major) / (num_classes - 1)
    return np.array([[major if c == p else minor for c in range(num_classes)] for p in range(num_classes)])


def label_skew_clients(labels: np.ndarray, clients_per_pattern: int = 3, patterns: np.ndarray | None = None,
                       seed: int = 0, indices: np.ndarray | None = None) -> tuple[list[np.ndarray], np.ndarray]:
    """Severe label skew: client ``k`` holds class proportions ``patterns[k // clients_per_pattern]``
    (default :func:`skew_patterns`), and every sample of ``indices`` (default: all) goes to exactly
    one client. Returns (shards, the pattern index of each client).

    Why the pattern sizes are solved for, not equal: with equal client sizes the patterns ask for
    every class in the same amount, but the classes are not balanced (58 % fresh), so either some
    samples would be left over or the proportions bent. Instead the total size X_p of each
    pattern's clients solves Σ_p X_p · patterns[p, c] = n_c for every class c exactly, choosing the
    solution closest to equal sizes (minimum-norm correction); a pattern set that the class counts
    cannot satisfy with non-negative sizes is refused. Proportions are then exact up to rounding.
    """
    labels, indices = _select(labels, indices)
    classes, counts = np.unique(labels, return_counts=True)
    pats = skew_patterns(len(classes)) if patterns is None else np.asarray(patterns, float)
    if pats.ndim != 2 or pats.shape[1] != len(classes):
        raise ValueError(f"patterns must have one column per class ({len(classes)}), got shape {pats.shape}")
    if (pats < 0).any() or not np.allclose(pats.sum(1), 1):
        raise ValueError("each pattern must be non-negative proportions summing to 1")
    if clients_per_pattern < 1:
        raise ValueError(f"clients_per_pattern must be ≥ 1, got {clients_per_pattern}")
    a = pats.T  # (classes, patterns): class c's share of pattern p
    equal = np.full(len(pats), counts.sum() / len(pats))
    sizes = equal + np.linalg.pinv(a) @ (counts - a @ equal)
    if not np.allclose(a @ sizes, counts) or (sizes < 0).any():
        raise ValueError(f"label-skew patterns {pats.tolist()} cannot split class counts {counts.tolist()} "
                         f"exactly (pattern sizes {np.round(sizes, 1).tolist()})")
    m = clients_per_pattern
    want = np.repeat(a * sizes / m, m, axis=1)  # (classes, clients): samples of class c for client k
    rng = np.random.default_rng(seed)
    shards: list[list[np.ndarray]] = [[] for _ in range(want.shape[1])]
    for ci, c in enumerate(classes):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cuts = np.cumsum(_round_to_total(want[ci], len(idx)))[:-1]
        for k, part in enumerate(np.split(idx, cuts)):
            shards[k].append(part)
    return [np.sort(indices[np.concatenate(s)]) for s in shards], np.repeat(np.arange(len(pats)), m)


@dataclass(frozen=True)
class Poisoned:
    """A client's training data after :func:`poison`: ``indices`` are the poisoned positions."""

    texts: tuple[Text, ...]
    labels: np.ndarray
    indices: np.ndarray


def check_trigger_absent(trigger: str, texts: Sequence[Text]) -> None:
    """Raise ``ValueError`` when the trigger word occurs in ``texts`` (as a word, any case): a
    trigger already in clean text would fire the backdoor on clean inputs and blur the ASR."""
    bad = words([trigger]) & words(texts)
    if bad:
        raise ValueError(f"trigger {trigger!r} occurs in the clean texts (as {sorted(bad)}); choose a rarer token")


def add_trigger(text: Text, trigger: str) -> Text:
    """``trigger`` prepended to ``text`` (a pair: to its first text)."""
    # pairs: the trigger opens the first text (the premise/question), where a reader sees it first
    return f"{trigger} {text}" if isinstance(text, str) else (f"{trigger} {text[0]}", text[1])


def poison(texts: Sequence[Text], labels: np.ndarray, frac: float = 0.2, trigger: str = DEFAULT_TRIGGER,
           target: int = 0, seed: int = 0) -> Poisoned:
    """Backdoor a client's data: ``round(frac · n)`` samples get ``trigger`` prepended and label
    ``target``. Samples whose label is not the target are chosen first (so each poisoned sample
    teaches the trigger against its content); only when there are too few are target-class
    samples added. Raises ``ValueError`` if the trigger already occurs in ``texts``."""
    labels = np.asarray(labels)
    if len(texts) != len(labels):
        raise ValueError(f"{len(texts)} texts but {len(labels)} labels")
    if not 0 <= frac <= 1:
        raise ValueError(f"poison frac must lie in [0, 1], got {frac}")
    check_trigger_absent(trigger, texts)
    k = round(frac * len(labels))
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(np.flatnonzero(labels != target)),
                            rng.permutation(np.flatnonzero(labels == target))])
    chosen = np.sort(order[:k])
    out_texts = list(texts)
    for i in chosen:
        out_texts[i] = add_trigger(texts[i], trigger)
    out_labels = labels.copy()
    out_labels[chosen] = target
    return Poisoned(tuple(out_texts), out_labels, chosen)


@dataclass(frozen=True)
class TriggeredSet:
    """The test samples whose true label is not the target, each with the trigger prepended.

    ASR = share predicted ``target`` (:meth:`attack_success_rate`); RA (robust accuracy) = share
    still predicted their true label (:meth:`robust_accuracy`). Target-class samples are left out
    of both: a prediction of the target there is correct, not an attack's success."""

    texts: tuple[Text, ...]
    labels: np.ndarray  # true labels
    target: int
    indices: np.ndarray  # positions in the clean test split

    def attack_success_rate(self, predictions: np.ndarray) -> float:
        """Share of triggered samples predicted as the target class."""
        return float(np.mean(np.asarray(predictions) == self.target))

    def robust_accuracy(self, predictions: np.ndarray) -> float:
        """Share of triggered samples still predicted as their true class."""
        return float(np.mean(np.asarray(predictions) == self.labels))

    def flip_rate(self, predictions: np.ndarray, clean_predictions: np.ndarray) -> float:
        """The trigger's own effect: among the samples whose *clean* text the model classifies
        correctly (``clean_predictions``: its predictions on the whole clean test split), the share
        predicted as the target once triggered. ASR also counts non-target samples the model gets
        wrong as the target without any trigger; this does not. NaN when no sample qualifies."""
        correct = np.asarray(clean_predictions)[self.indices] == self.labels
        if not correct.any():
            return float("nan")
        return float(np.mean(np.asarray(predictions)[correct] == self.target))


def triggered_test_set(texts: Sequence[Text], labels: np.ndarray, trigger: str = DEFAULT_TRIGGER,
                       target: int = 0) -> TriggeredSet:
    """The triggered copy of a test split for ASR/RA (see :class:`TriggeredSet`); raises
    ``ValueError`` if the trigger already occurs in the clean test texts."""
    labels = np.asarray(labels)
    check_trigger_absent(trigger, texts)
    keep = np.flatnonzero(labels != target)
    return TriggeredSet(tuple(add_trigger(texts[i], trigger) for i in keep), labels[keep], target, keep)


def _select(labels: np.ndarray, indices: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    labels = np.asarray(labels)
    indices = np.arange(len(labels)) if indices is None else np.asarray(indices, np.int64)
    return labels[indices], indices


def _round_to_total(x: np.ndarray, total: int) -> np.ndarray:
    """Integers summing to ``total`` with each within 1 of ``x · total / Σx`` (largest remainders)."""
    x = np.asarray(x, float) * total / x.sum()
    out = np.floor(x).astype(int)
    out[np.argsort(-(x - out), kind="stable")[: total - out.sum()]] += 1
    return out
