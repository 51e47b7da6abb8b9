"""Krum scores and MultiKrum: average the m updates closest to their n − f − 2 neighbours."""

from __future__ import annotations

import torch

from ._checks import _check_int, _check_updates, _check_weights
from .median import true_median
from .numerics import unit_scaled64

_OUTLIER_RATIO = 2.0 ** 20


def _krum_check(n: int, f: int) -> int:
    f = _check_int("f", f, 0)
    if n - f - 2 < 1:
        raise ValueError(
            f"MultiKrum needs n - f - 2 ≥ 1 (n ≥ f + 3), got n = {n} and f = {f} (at most f = {n - 3})"
        )
    return f


def multikrum_params(n: int, f: int, m: int | None = None) -> tuple[int, int]:
    """The (f, m) MultiKrum actually uses when only n replies arrived.

    f' = min(f, max(0, n − 3)) (fewer replies than planned shrink f, so that n ≥ f' + 3 when
    n ≥ 3); m' = n − f' when m is None, else m; then m' is clamped to [1, n].

    >>> multikrum_params(10, 2), multikrum_params(4, 2), multikrum_params(5, 1, 9)
    ((2, 8), (1, 3), (1, 5))
    """
    n = _check_int("n", n, 1)
    f = _check_int("f", f, 0)
    f = min(f, max(0, n - 3))
    m = n - f if m is None else _check_int("m", m, 0)
    return f, max(1, min(m, n))


def pairwise_sq_distances(updates: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
    """(n, n) squared Euclidean distances, float64, through a BLAS Gram matrix.

    The Gram trick ‖a‖² + ‖b‖² − 2ab is fast (one matmul) but cancels catastrophically in
    float32 for near-duplicate updates (sybils). Centring every coordinate first (distances are
    translation invariant, coordinate by coordinate) and accumulating the Gram matrix in
    float64 keeps it exact to ~1e-16 relative while staying O(n²d) BLAS. The work is done a
    cache-sized column chunk at a time — cast to float64, centre on the chunk's own coordinate
    means, ``addmm`` into the Gram — so the data is read once more (a float64 mean of the
    whole matrix, or a float64 copy of it, costs more than the Gram itself). When one row is
    more than 2^20 times larger than the typical row (its max |value| against the median
    row's), the rows are centred on their coordinate-wise median instead of their mean, which
    that row would otherwise own.
    """
    n, d = updates.shape
    if chunk is None:  # n × chunk float64 values ≈ 1 MiB: in cache, and few chunks for small n
        chunk = max(1 << 12, min(1 << 18, (1 << 17) // n))
    # max |value| of each row, from two reductions of the input (an abs() would copy it)
    row_max = torch.maximum(updates.amax(dim=1), -updates.amin(dim=1))
    # A row far larger than the typical one (a Byzantine update of norm 1e30) would drag the mean
    # with it and the centred honest rows would cancel to noise: centre on the coordinate-wise
    # median then, which the honest majority holds.
    outlier = bool(row_max.max() > _OUTLIER_RATIO * row_max.median())
    gram = torch.zeros(n, n, dtype=torch.float64, device=updates.device)
    for start in range(0, d, chunk):
        part = updates[:, start:start + chunk]
        block = part.to(torch.float64, copy=True)  # centred in place
        if outlier:
            block -= true_median(block, dim=0)
        else:
            # Centred on the mean rounded to float32 (where it fits): for float32 updates x − m is
            # then exact in float64, and so are the Gram's products (≤ 48 significant bits), so
            # equal distances stay equal (ties keep breaking by index).
            mean = part.mean(dim=0, dtype=torch.float32)
            if not bool(torch.isfinite(mean.sum())):  # float32 overflow: the float64 mean
                mean = block.mean(dim=0)
            block -= mean
        gram.addmm_(block, block.T)
    sq = gram.diagonal()
    dist = (sq[:, None] + sq[None, :] - 2 * gram).clamp_min_(0.0)
    if not bool(torch.isfinite(dist).all()):
        # Only for float64 values beyond ~1e150 (float32 inputs square well inside float64):
        # the same distances of the rows / 2^e, times 4^e — +inf where the true distance is
        # not representable, never NaN, so such rows simply score worst.
        scaled, e = unit_scaled64(updates)
        dist = torch.ldexp(pairwise_sq_distances(scaled, chunk), torch.tensor(2 * e, dtype=torch.float64))
    return dist


def krum_scores(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Krum score of every update: s_k = Σ_{j ∈ N_k} ‖Δ_k − Δ_j‖², where N_k are the n − f − 2
    other updates closest to Δ_k. Requires n ≥ f + 3.

    Source: Blanchard et al., "Machine Learning with Adversaries: Byzantine Tolerant Gradient
    Descent" (NeurIPS 2017); SPEC §3 MultiKrum.
    """
    updates = _check_updates(updates)
    n = updates.shape[0]
    f = _krum_check(n, f)
    dist = pairwise_sq_distances(updates)
    dist.fill_diagonal_(float("inf"))  # a client is not its own neighbour
    return torch.sort(dist, dim=1).values[:, : n - f - 2].sum(dim=1)


def multikrum_select(updates: torch.Tensor, f: int, m: int | None = None) -> torch.Tensor:
    """Indices of the m updates with the lowest Krum scores (default m = n − f), lowest score
    first, ties broken by the lower index (stable sort). Requires n ≥ f + 3 and m ∈ [1, n].

    Source: El Mhamdi, Guerraoui & Rouault, "The Hidden Vulnerability of Distributed Learning
    in Byzantium" (ICML 2018) / Blanchard et al. (NeurIPS 2017); SPEC §3 MultiKrum.
    """
    updates = _check_updates(updates)
    n = updates.shape[0]
    f = _krum_check(n, f)
    m = n - f if m is None else _check_int("m", m, 1)
    if m > n:
        raise ValueError(f"m must be in [1, n] = [1, {n}], got {m}")
    scores = krum_scores(updates, f)
    return torch.sort(scores, stable=True).indices[:m]


def multikrum(
    updates: torch.Tensor, f: int, m: int | None = None, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """MultiKrum: average of the m lowest-scored updates S (see :func:`multikrum_select`),
    Σ_{k∈S} w_k Δ_k / Σ_{k∈S} w_k (equal w_k when weights is None).

    Source: Blanchard et al., "Machine Learning with Adversaries: Byzantine Tolerant Gradient
    Descent" (NeurIPS 2017); SPEC §3 MultiKrum.
    """
    updates = _check_updates(updates)
    weights = _check_weights(weights, updates)
    selected = multikrum_select(updates, f, m)
    # One matrix-vector product over every row with weight 0 outside S: no copy of the chosen
    # rows (which cost more than the product); finite rows times 0 add exactly 0.
    w = torch.ones(len(selected), dtype=updates.dtype, device=updates.device) if weights is None else weights[selected]
    if not bool(w.sum() > 0):
        raise ValueError("the clients MultiKrum selected all have zero weight")
    p = torch.zeros(updates.shape[0], dtype=updates.dtype, device=updates.device)
    p[selected] = w / w.sum()
    return p @ updates
