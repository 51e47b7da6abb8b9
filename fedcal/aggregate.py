"""Robust aggregation rules (SPEC §3), flwr-free and fully vectorised in torch.

Every rule takes a stacked ``(n, d)`` floating tensor ``updates`` of client updates Δ_k
(n clients, d flattened parameters; CPU or CUDA) and returns a ``(d,)`` aggregate on the same
device and dtype. ``weights`` is an optional ``(n,)`` non-negative tensor of data sizes; ``None``
means equal weights.

Two styles, after ByzFL's aggregators:

* plain functions — :func:`fedavg`, :func:`trimmed_mean`, :func:`coordinate_median`,
  :func:`geometric_median`, :func:`median_of_means`, :func:`multikrum` (+ :func:`krum_scores`,
  :func:`multikrum_select`) and :func:`fltrust`;
* small callable classes built with their hyper-parameters and applied as
  ``rule(updates, weights=None)`` — :class:`FedAvg`, :class:`TrimmedMean`,
  :class:`CoordinateMedian`, :class:`GeometricMedian`, :class:`MedianOfMeans`,
  :class:`MultiKrum` (listed in :data:`RULES`), plus :class:`FLTrust` and the stateful
  :class:`FoolsGold`, whose call signatures differ (server update / client ids).

The coordinate-wise order statistics (trimmed mean, median, median of means) ignore data-size
weights: a Byzantine client can report any data size, and the classical definitions are
unweighted. Their classes still validate ``weights`` so that a strategy can pass data sizes to
every rule uniformly.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

__all__ = [
    "RULES",
    "CoordinateMedian",
    "FLTrust",
    "FedAvg",
    "FoolsGold",
    "GeometricMedian",
    "MedianOfMeans",
    "MultiKrum",
    "TrimmedMean",
    "coordinate_median",
    "fedavg",
    "flatten_state",
    "fltrust",
    "geometric_median",
    "get_rule",
    "krum_scores",
    "median_of_means",
    "multikrum",
    "multikrum_select",
    "trimmed_mean",
    "unflatten",
]


# ---------------------------------------------------------------------------
# validation helpers
# ---------------------------------------------------------------------------


def _check_updates(updates) -> torch.Tensor:
    """(n, d) floating tensor with n ≥ 1 and only finite values, else ValueError."""
    updates = torch.as_tensor(updates)
    if updates.ndim != 2:
        raise ValueError(f"updates must be a 2-D (n, d) tensor, got shape {tuple(updates.shape)}")
    if updates.shape[0] == 0:
        raise ValueError("updates is empty: need at least one client update (n ≥ 1)")
    if not updates.is_floating_point():
        updates = updates.to(torch.get_default_dtype())
    # A single NaN/Inf would silently poison every rule (or every norm), so refuse it early.
    # Any NaN/Inf makes the sum non-finite, so one reduction (no n×d mask) clears the common
    # case; only a non-finite sum (NaN/Inf, or a float overflow) needs the element-wise check.
    if not bool(torch.isfinite(updates.sum())) and not bool(torch.isfinite(updates).all()):
        raise ValueError("updates contain NaN or Inf values")
    return updates


def _check_weights(weights, updates: torch.Tensor) -> torch.Tensor | None:
    """None, or an (n,) finite non-negative tensor with positive sum (on updates' device/dtype)."""
    if weights is None:
        return None
    n = updates.shape[0]
    weights = torch.as_tensor(weights, device=updates.device).to(updates.dtype)
    if weights.shape != (n,):
        raise ValueError(f"weights must have shape ({n},) to match updates, got {tuple(weights.shape)}")
    if not bool(torch.isfinite(weights).all()):
        raise ValueError("weights contain NaN or Inf values")
    if bool((weights < 0).any()):
        raise ValueError("weights must be non-negative (they are data sizes)")
    if not bool(weights.sum() > 0):
        raise ValueError("weights are all zero: at least one client must have positive weight")
    return weights


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < low:
        raise ValueError(f"{name} must be ≥ {low}, got {value}")
    return value


def true_median(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Median along ``dim`` with the mean of the two middle values for even sizes (not
    ``torch.median``, which returns the lower one). Shared with the inference aggregators."""
    n = x.shape[dim]
    s = torch.sort(x, dim=dim).values
    # For odd n both indices are the middle one; for even n they are the two middle ones.
    return 0.5 * (s.select(dim, (n - 1) // 2) + s.select(dim, n // 2))


def trimmed_mean_along(x: torch.Tensor, f: int, dim: int = 0) -> torch.Tensor:
    """Mean along ``dim`` after dropping the f largest and f smallest values (needs n > 2f).
    Shared with the inference aggregators (CWTM, DeepSet-TM pooling)."""
    n = x.shape[dim]
    if f < 0:
        raise ValueError(f"f must be >= 0; got {f}")
    if n <= 2 * f:
        raise ValueError(f"trimmed mean needs n > 2f, got n = {n} and f = {f} (at most f = {(n - 1) // 2})")
    if f == 0:
        return x.mean(dim=dim)
    return torch.sort(x, dim=dim).values.narrow(dim, f, n - 2 * f).mean(dim=dim)


# ---------------------------------------------------------------------------
# flattening
# ---------------------------------------------------------------------------


def flatten_state(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Concatenate tensors (e.g. a model's parameters/state) into one flat (d,) vector.

    vec = concat(t_1.reshape(-1), …, t_L.reshape(-1)); dtypes are promoted as by ``torch.cat``.
    """
    tensors = list(tensors)
    if not tensors:
        raise ValueError("flatten_state needs at least one tensor")
    return torch.cat([torch.as_tensor(t).reshape(-1) for t in tensors])


def unflatten(vec: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Inverse of :func:`flatten_state`: split ``vec`` into tensors shaped like ``like``.

    Each piece takes the shape, dtype and device of its template; pieces for integer templates
    (e.g. BatchNorm's ``num_batches_tracked``) are rounded, not truncated, before the cast.
    """
    like = list(like)
    vec = torch.as_tensor(vec)
    if vec.ndim != 1:
        raise ValueError(f"vec must be 1-D, got shape {tuple(vec.shape)}")
    sizes = [t.numel() for t in like]
    if sum(sizes) != vec.numel():
        raise ValueError(f"vec has {vec.numel()} elements but the templates hold {sum(sizes)}")
    out = []
    for piece, t in zip(torch.split(vec, sizes), like):
        if not t.is_floating_point() and not t.is_complex() and piece.is_floating_point():
            piece = piece.round()
        out.append(piece.reshape(t.shape).to(dtype=t.dtype, device=t.device))
    return out


# ---------------------------------------------------------------------------
# averaging rules
# ---------------------------------------------------------------------------


def fedavg(updates: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Weighted average: Σ_k p_k Δ_k with p_k = w_k / Σ_j w_j (equal p_k when weights is None).

    Source: McMahan et al., "Communication-Efficient Learning of Deep Networks from
    Decentralized Data" (AISTATS 2017); SPEC §3 FedAvg.
    """
    updates = _check_updates(updates)
    weights = _check_weights(weights, updates)
    if weights is None:
        return updates.mean(dim=0)
    return (weights / weights.sum()) @ updates


def trimmed_mean(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Coordinate-wise trimmed mean: per coordinate, drop the f largest and f smallest values
    and average the remaining n − 2f. Requires n > 2f. Unweighted.

    Source: Yin et al., "Byzantine-Robust Distributed Learning: Towards Optimal Statistical
    Rates" (ICML 2018); SPEC §3 coordinate-wise trimmed mean.
    """
    return trimmed_mean_along(_check_updates(updates), _check_int("f", f, 0), dim=0)


def coordinate_median(updates: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median: med_k Δ_k[i] for every coordinate i. Unweighted.

    For even n this is the true median, ½(Δ_(n/2)[i] + Δ_(n/2+1)[i]) of the two middle order
    statistics — not ``torch.median``, which returns the lower of the two.

    Source: Yin et al., "Byzantine-Robust Distributed Learning: Towards Optimal Statistical
    Rates" (ICML 2018); SPEC §3 coordinate-wise median.
    """
    return true_median(_check_updates(updates), dim=0)


def geometric_median(
    updates: torch.Tensor,
    weights: torch.Tensor | None = None,
    eps: float = 1e-8,
    max_iter: int = 100,
    tol: float = 1e-6,
) -> torch.Tensor:
    """Weighted geometric median argmin_z Σ_k w_k ‖z − Δ_k‖ by smoothed Weiszfeld.

    z⁰ = Σ w_k Δ_k / Σ w_k;  z ← Σ β_k Δ_k / Σ β_k with β_k = w_k / max(eps, ‖z − Δ_k‖);
    stop when ‖z_new − z‖ ≤ tol · (‖z‖ + eps) or after max_iter iterations.

    Source: Pillutla, Kakade & Harchaoui, "Robust Aggregation for Federated Learning"
    (RFA, IEEE TSP 2022), Algorithm 2 (smoothed Weiszfeld); SPEC §3 geometric median.
    """
    updates = _check_updates(updates)
    weights = _check_weights(weights, updates)
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    max_iter = _check_int("max_iter", max_iter, 0)
    if tol < 0:
        raise ValueError(f"tol must be ≥ 0, got {tol}")
    if weights is None:
        weights = torch.ones(updates.shape[0], dtype=updates.dtype, device=updates.device)
    z = (weights / weights.sum()) @ updates
    for _ in range(max_iter):
        dist = torch.linalg.vector_norm(updates - z, dim=1)
        # eps smoothing: a point that coincides with z would otherwise get infinite weight.
        beta = weights / dist.clamp_min(eps)
        z_new = (beta / beta.sum()) @ updates
        change = torch.linalg.vector_norm(z_new - z)
        scale = torch.linalg.vector_norm(z)
        z = z_new
        if bool(change <= tol * (scale + eps)):
            break
    return z


def _group_labels(n: int, num_groups: int, generator: torch.Generator | None) -> torch.Tensor:
    """Random partition into num_groups groups whose sizes differ by at most one."""
    device = generator.device if generator is not None else "cpu"
    perm = torch.randperm(n, generator=generator, device=device).cpu()
    labels = torch.empty(n, dtype=torch.long)
    # The row at position p of the permutation joins group ⌊p·G/n⌋ (sizes ⌊n/G⌋ or ⌈n/G⌉).
    labels[perm] = torch.arange(n) * num_groups // n
    return labels


def median_of_means(
    updates: torch.Tensor,
    num_groups: int,
    generator: torch.Generator | None = None,
    groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """Median of means: partition the n rows at random into G groups (sizes ⌊n/G⌋ or ⌈n/G⌉),
    average each group, and take the coordinate-wise (true) median of the G group means.
    G = n gives the coordinate median, G = 1 the mean. Unweighted.

    ``groups`` (optional, (n,) integer labels in [0, G), every group non-empty) fixes the
    partition instead of drawing it with ``generator``.

    Source: Minsker, "Geometric median and robust estimation in Banach spaces" (Bernoulli 2015)
    / Chen, Su & Xu, "Distributed Statistical Machine Learning in Adversarial Settings:
    Byzantine Gradient Descent" (2017); SPEC §3 median of means.
    """
    updates = _check_updates(updates)
    n = updates.shape[0]
    num_groups = _check_int("num_groups", num_groups, 1)
    if num_groups > n:
        raise ValueError(f"num_groups must be in [1, n] = [1, {n}], got {num_groups}")
    if groups is None:
        labels = _group_labels(n, num_groups, generator)
    else:
        labels = torch.as_tensor(groups).cpu()
        if labels.shape != (n,) or labels.is_floating_point():
            raise ValueError(f"groups must be an (n,) = ({n},) integer tensor of group labels")
        labels = labels.long()
        if bool((labels < 0).any()) or bool((labels >= num_groups).any()):
            raise ValueError(f"group labels must lie in [0, {num_groups})")
    counts = torch.bincount(labels, minlength=num_groups)
    if bool((counts == 0).any()):
        raise ValueError("every group must contain at least one update")
    labels = labels.to(updates.device)
    sums = torch.zeros(num_groups, updates.shape[1], dtype=updates.dtype, device=updates.device)
    sums.index_add_(0, labels, updates)
    means = sums / counts.to(device=updates.device, dtype=updates.dtype).unsqueeze(1)
    return true_median(means, dim=0)


# ---------------------------------------------------------------------------
# MultiKrum
# ---------------------------------------------------------------------------


def _krum_check(n: int, f: int) -> int:
    f = _check_int("f", f, 0)
    if n - f - 2 < 1:
        raise ValueError(
            f"MultiKrum needs n - f - 2 ≥ 1 (n ≥ f + 3), got n = {n} and f = {f} (at most f = {n - 3})"
        )
    return f


def pairwise_sq_distances(updates: torch.Tensor, chunk: int = 1 << 16) -> torch.Tensor:
    """(n, n) squared Euclidean distances, float64, through a BLAS Gram matrix.

    The Gram trick ‖a‖² + ‖b‖² − 2ab is fast (one matmul) but cancels catastrophically in
    float32 for near-duplicate updates (sybils). Centring the rows first (distances are
    translation invariant) and accumulating the Gram matrix in float64, a column chunk at a
    time (cache-sized chunks: the float64 copies stay in cache), keeps it exact to ~1e-16
    relative while staying O(n²d) BLAS. It costs a few times a float32 Gram: the price of
    ranking sybil-like near-duplicates correctly.
    """
    n, d = updates.shape
    mean = updates.mean(dim=0, dtype=torch.float64)
    gram = torch.zeros(n, n, dtype=torch.float64, device=updates.device)
    for start in range(0, d, chunk):
        block = updates[:, start:start + chunk].double() - mean[start:start + chunk]
        gram += block @ block.T
    sq = gram.diagonal()
    return (sq[:, None] + sq[None, :] - 2 * gram).clamp_min_(0.0)


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
    chosen = updates[selected]
    if weights is None:
        return chosen.mean(dim=0)
    w = weights[selected]
    if not bool(w.sum() > 0):
        raise ValueError("the clients MultiKrum selected all have zero weight")
    return (w / w.sum()) @ chosen


# ---------------------------------------------------------------------------
# FLTrust
# ---------------------------------------------------------------------------


def fltrust(
    updates: torch.Tensor, server_update: torch.Tensor, eps: float = 1e-12
) -> tuple[torch.Tensor, torch.Tensor]:
    """FLTrust: TS_k = ReLU(cos(Δ_k, g₀)), Δ'_k = Δ_k · ‖g₀‖ / ‖Δ_k‖,
    aggregate = Σ TS_k Δ'_k / Σ TS_k (the zero update when every TS_k = 0).

    Every norm is floored at ``eps``, so a zero update (or zero g₀) gets trust 0, never NaN.
    Returns ``(aggregate, trust_scores)``.

    Source: Cao et al., "FLTrust: Byzantine-robust Federated Learning via Trust
    Bootstrapping" (NDSS 2021); SPEC §3 FLTrust.
    """
    updates = _check_updates(updates)
    g0 = torch.as_tensor(server_update, device=updates.device).to(updates.dtype)
    if g0.shape != (updates.shape[1],):
        raise ValueError(f"server_update must have shape ({updates.shape[1]},), got {tuple(g0.shape)}")
    if not bool(torch.isfinite(g0).all()):
        raise ValueError("server_update contains NaN or Inf values")
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    g0_norm = torch.linalg.vector_norm(g0)
    norms = torch.linalg.vector_norm(updates, dim=1).clamp_min(eps)
    cos = (updates @ g0) / (norms * g0_norm.clamp_min(eps))
    trust = torch.relu(cos)
    total = trust.sum()
    if not bool(total > 0):
        return torch.zeros_like(g0), trust
    # Σ TS_k (‖g₀‖/‖Δ_k‖) Δ_k / Σ TS_k, with the rescaling folded into the coefficients.
    coef = trust * (g0_norm / norms) / total
    return coef @ updates, trust


# ---------------------------------------------------------------------------
# FoolsGold
# ---------------------------------------------------------------------------


class FoolsGold:
    """FoolsGold (stateful): down-weights clients whose update histories look alike (sybils).

    Per call, for the clients of this round (Fung et al.'s published step order):

    1. history H_k ← H_k + Δ_k (kept across calls in :attr:`history`, keyed by client id);
    2. cs_ij = cos(H_i, H_j) for i ≠ j (diagonal excluded); v_i = max_j cs_ij;
    3. pardoning: if v_i < v_j then cs_ij ← cs_ij · v_i / v_j;
    4. w_i = clip(1 − max_j cs_ij, 0, 1); w ← w / max(w); w_i = 0.99 where w_i = 1;
    5. logit: w ← clip(κ (ln(w / (1 − w)) + 0.5), 0, 1) (+inf → 1, −inf/NaN → 0);

    aggregate = Σ w_k Δ_k / Σ w_k (× data-size weights when given), the zero update when every
    w_k = 0. One client gets w = 1.

    Guards (where the published code divides by zero): pardoning is applied only when v_j > 0;
    a 1 − max cs below ``tol`` (default 100 · machine epsilon of the dtype) counts as 0, so
    numerically identical histories are sybils rather than rounding noise rescaled by
    step 4; when every w_i = 0 (e.g. all histories parallel) the aggregate is zero.

    Source: Fung, Yoon & Beschastnikh, "The Limitations of Federated Learning in Sybil
    Settings" (RAID 2020), Algorithm 1; SPEC §3 FoolsGold.
    """

    def __init__(self, kappa: float = 1.0, eps: float = 1e-12, tol: float | None = None):
        if kappa <= 0:
            raise ValueError(f"kappa must be > 0, got {kappa}")
        self.kappa = float(kappa)
        self.eps = float(eps)
        self.tol = tol
        self.history: dict[Hashable, torch.Tensor] = {}

    def reset(self) -> None:
        """Forget every client's history."""
        self.history.clear()

    def _update_history(self, client_ids: list, updates: torch.Tensor) -> torch.Tensor:
        d = updates.shape[1]
        rows = []
        for cid, delta in zip(client_ids, updates):
            old = self.history.get(cid)
            if old is None:
                new = delta.detach().clone()
            else:
                if old.shape != (d,):
                    raise ValueError(f"client {cid!r} sent {d} parameters, its history has {old.numel()}")
                new = old.to(device=updates.device, dtype=updates.dtype) + delta.detach()
            self.history[cid] = new
            rows.append(new)
        return torch.stack(rows)

    def weights(self, hist: torch.Tensor) -> torch.Tensor:
        """FoolsGold weights (steps 2–5) of the rows of ``hist`` (n, d)."""
        n = hist.shape[0]
        if n == 1:
            return torch.ones(1, dtype=hist.dtype, device=hist.device)
        norms = torch.linalg.vector_norm(hist, dim=1).clamp_min(self.eps)
        # The n×n bookkeeping is tiny: do it in float64 so rounding cannot flip a weight.
        cs = ((hist @ hist.T) / (norms[:, None] * norms[None, :])).double()
        cs.fill_diagonal_(float("-inf"))
        v = cs.max(dim=1).values
        # Pardoning: honest clients that merely resemble a sybil-like (higher-v) client are
        # forgiven in proportion v_i / v_j. Only for v_j > 0: the published code divides by v_j.
        pardon = (v[:, None] < v[None, :]) & (v[None, :] > 0)
        ratio = torch.where(pardon, v[:, None] / torch.where(pardon, v[None, :], 1.0), 1.0)
        cs = cs * ratio  # diagonal stays −inf (ratio is 1 there)
        w = (1.0 - cs.max(dim=1).values).clamp(0.0, 1.0)
        tol = self.tol if self.tol is not None else 100 * torch.finfo(hist.dtype).eps
        w = torch.where(w <= tol, 0.0, w)
        top = w.max()
        if not bool(top > 0):
            return torch.zeros(n, dtype=hist.dtype, device=hist.device)
        w = w / top
        w = torch.where(w == 1.0, 0.99, w)
        w = self.kappa * (torch.log(w / (1.0 - w)) + 0.5)
        w = torch.nan_to_num(w, nan=0.0, posinf=1.0, neginf=0.0).clamp(0.0, 1.0)
        return w.to(hist.dtype)

    def __call__(
        self, client_ids: Sequence[Hashable], updates: torch.Tensor, weights: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Aggregate this round's updates; returns ``(aggregate, w)`` with w the FoolsGold
        weights in client_ids order. ``weights`` (data sizes) multiply w when given."""
        updates = _check_updates(updates)
        weights = _check_weights(weights, updates)
        client_ids = list(client_ids)
        if len(client_ids) != updates.shape[0]:
            raise ValueError(f"got {len(client_ids)} client ids for {updates.shape[0]} updates")
        if len(set(client_ids)) != len(client_ids):
            raise ValueError("client ids must be unique within a round")
        w = self.weights(self._update_history(client_ids, updates))
        coef = w if weights is None else w * weights
        total = coef.sum()
        if not bool(total > 0):
            return torch.zeros(updates.shape[1], dtype=updates.dtype, device=updates.device), w
        return (coef / total) @ updates, w


# ---------------------------------------------------------------------------
# callable classes (ByzFL style) and registry
# ---------------------------------------------------------------------------


class FedAvg:
    """``FedAvg()(updates, weights=None)`` → :func:`fedavg`."""

    def __call__(self, updates, weights=None):
        return fedavg(updates, weights)


class TrimmedMean:
    """``TrimmedMean(f)(updates, weights=None)`` → :func:`trimmed_mean` (weights ignored)."""

    def __init__(self, f: int):
        self.f = _check_int("f", f, 0)

    def __call__(self, updates, weights=None):
        updates = _check_updates(updates)
        _check_weights(weights, updates)
        return trimmed_mean(updates, self.f)


class CoordinateMedian:
    """``CoordinateMedian()(updates, weights=None)`` → :func:`coordinate_median` (weights ignored)."""

    def __call__(self, updates, weights=None):
        updates = _check_updates(updates)
        _check_weights(weights, updates)
        return coordinate_median(updates)


class GeometricMedian:
    """``GeometricMedian(eps, max_iter, tol)(updates, weights=None)`` → :func:`geometric_median`."""

    def __init__(self, eps: float = 1e-8, max_iter: int = 100, tol: float = 1e-6):
        self.eps, self.max_iter, self.tol = eps, max_iter, tol

    def __call__(self, updates, weights=None):
        return geometric_median(updates, weights, eps=self.eps, max_iter=self.max_iter, tol=self.tol)


class MedianOfMeans:
    """``MedianOfMeans(num_groups, seed=None)(updates, weights=None)`` → :func:`median_of_means`
    (weights ignored). A seed gives the rule its own generator, so the partitions of successive
    calls differ but the sequence is reproducible."""

    def __init__(self, num_groups: int, seed: int | None = None):
        self.num_groups = _check_int("num_groups", num_groups, 1)
        self.generator = None if seed is None else torch.Generator().manual_seed(int(seed))

    def __call__(self, updates, weights=None):
        updates = _check_updates(updates)
        _check_weights(weights, updates)
        return median_of_means(updates, self.num_groups, generator=self.generator)


class MultiKrum:
    """``MultiKrum(f, m=None)(updates, weights=None)`` → :func:`multikrum`."""

    def __init__(self, f: int, m: int | None = None):
        self.f = _check_int("f", f, 0)
        self.m = None if m is None else _check_int("m", m, 1)

    def __call__(self, updates, weights=None):
        return multikrum(updates, self.f, self.m, weights)


class FLTrust:
    """``FLTrust(eps)(updates, server_update, weights=None)`` → :func:`fltrust`
    (weights ignored: the trust scores replace data-size weighting)."""

    def __init__(self, eps: float = 1e-12):
        self.eps = eps

    def __call__(self, updates, server_update, weights=None):
        updates = _check_updates(updates)
        _check_weights(weights, updates)
        return fltrust(updates, server_update, eps=self.eps)


RULES: dict[str, type] = {
    "fedavg": FedAvg,
    "trimmed_mean": TrimmedMean,
    "median": CoordinateMedian,
    "geometric_median": GeometricMedian,
    "median_of_means": MedianOfMeans,
    "multikrum": MultiKrum,
}


def get_rule(name: str, **kwargs):
    """Build the rule ``RULES[name](**kwargs)``, e.g. ``get_rule("trimmed_mean", f=1)``."""
    try:
        cls = RULES[name]
    except KeyError:
        raise ValueError(f"unknown aggregation rule {name!r}; choose from {sorted(RULES)}") from None
    return cls(**kwargs)
