"""Tests of fedcal.aggregate against hand-computed values and independent loop/numpy
implementations (SPEC §3)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
import torch

from fedcal import aggregate as A
from fedcal.aggregate._checks import _check_weights

# --------------------------------------------------------------------------------------------
# independent reference implementations (plain Python loops / numpy, float64)
# --------------------------------------------------------------------------------------------


def ref_trimmed_mean(x: np.ndarray, f: int) -> np.ndarray:
    n, d = x.shape
    out = []
    for i in range(d):
        col = sorted(float(v) for v in x[:, i])
        kept = col[f : n - f]
        out.append(sum(kept) / len(kept))
    return np.array(out)


def ref_median(x: np.ndarray) -> np.ndarray:
    return np.array([statistics.median(float(v) for v in x[:, i]) for i in range(x.shape[1])])


def ref_krum(x: np.ndarray, f: int, m: int | None = None):
    n = x.shape[0]
    scores = []
    for k in range(n):
        dists = sorted(float(np.sum((x[k] - x[j]) ** 2)) for j in range(n) if j != k)
        scores.append(sum(dists[: n - f - 2]))
    m = n - f if m is None else m
    order = sorted(range(n), key=lambda k: (scores[k], k))
    return np.array(scores), order[:m]


def ref_fltrust(x: np.ndarray, g0: np.ndarray):
    g_norm = math.sqrt(float(g0 @ g0))
    num = np.zeros_like(g0)
    ts = []
    for row in x:
        r_norm = math.sqrt(float(row @ row))
        cos = float(row @ g0) / (r_norm * g_norm) if r_norm > 0 and g_norm > 0 else 0.0
        t = max(cos, 0.0)
        ts.append(t)
        if t > 0:
            num = num + t * row * (g_norm / r_norm)
    total = sum(ts)
    return (num / total if total > 0 else num * 0), np.array(ts)


def ref_foolsgold_weights(hist: np.ndarray) -> np.ndarray:
    """Fung et al.'s published steps: cosine (diagonal excluded), pardoning, normalisation,
    logit — written with loops, as in the authors' numpy code."""
    n = hist.shape[0]
    if n == 1:
        return np.ones(1)
    norms = [math.sqrt(float(h @ h)) for h in hist]
    cs = np.full((n, n), -np.inf)
    for i in range(n):
        for j in range(n):
            if i != j:
                cs[i, j] = float(hist[i] @ hist[j]) / (norms[i] * norms[j])
    maxcs = cs.max(axis=1)
    for i in range(n):
        for j in range(n):
            if i != j and maxcs[i] < maxcs[j] and maxcs[j] > 0:
                cs[i, j] = cs[i, j] * maxcs[i] / maxcs[j]
    wv = 1 - cs.max(axis=1)
    wv = np.clip(wv, 0, 1)
    wv = wv / wv.max()
    wv[wv == 1] = 0.99
    with np.errstate(divide="ignore"):
        wv = np.log(wv / (1 - wv)) + 0.5
    wv[np.isinf(wv) & (wv > 0)] = 1
    return np.clip(np.nan_to_num(wv, nan=0.0, neginf=0.0), 0, 1)


def t64(a) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64)


# --------------------------------------------------------------------------------------------
# hand-computed cases
# --------------------------------------------------------------------------------------------

X3 = [[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]]
X4 = [[1.0, 2.0], [3.0, 4.0], [5.0, 0.0], [100.0, 100.0]]


def test_fedavg_hand():
    # p = [1,1,2]/4 → (0.25·1 + 0.25·3 + 0.5·5, 0.25·2 + 0.25·4 + 0) = (3.5, 1.5)
    out = A.fedavg(t64(X3), t64([1, 1, 2]))
    assert torch.allclose(out, t64([3.5, 1.5]))
    # equal weights: ((1+3+5)/3, (2+4+0)/3) = (3, 2)
    assert torch.allclose(A.fedavg(t64(X3)), t64([3.0, 2.0]))


def test_trimmed_mean_hand():
    # coord 0 sorted 1,3,5,100 → drop 1 and 100 → 4; coord 1 sorted 0,2,4,100 → 3
    assert torch.allclose(A.trimmed_mean(t64(X4), 1), t64([4.0, 3.0]))
    # f = 0 is the plain mean: (109/4, 106/4)
    assert torch.allclose(A.trimmed_mean(t64(X4), 0), t64([27.25, 26.5]))


def test_median_hand_true_median_for_even_n():
    # even n: coord 0 → (3+5)/2 = 4, coord 1 → (2+4)/2 = 3 (torch.median would say 3, 2)
    assert torch.allclose(A.coordinate_median(t64(X4)), t64([4.0, 3.0]))
    # odd n: (3, 2)
    assert torch.allclose(A.coordinate_median(t64(X3)), t64([3.0, 2.0]))


def test_geometric_median_hand():
    # collinear points 0, 1, 10 on the x-axis: the geometric median is the middle one (1, 0)
    pts = t64([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0]])
    assert torch.allclose(A.geometric_median(pts, tol=1e-12, max_iter=1000), t64([1.0, 0.0]), atol=1e-5)
    # square corners: by symmetry the centre (0.5, 0.5)
    sq = t64([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert torch.allclose(A.geometric_median(sq), t64([0.5, 0.5]), atol=1e-6)
    # 1-D weighted: weights 1 and 3 on points 0 and 1 → argmin |z| + 3|z − 1| is z = 1. The
    # smoothed objective √(z² + eps) + 3√((z − 1)² + eps) has its minimum at 1 − √(eps/8) (the
    # derivatives cancel where (1 − z)/√((1 − z)² + eps) = 1/3), so eps = 1e-12 puts it 3.5e-7
    # from 1; the default eps = 1e-8 would put it 3.5e-5 away.
    out = A.geometric_median(t64([[0.0], [1.0]]), t64([1.0, 3.0]), eps=1e-12, tol=1e-12, max_iter=1000)
    assert torch.allclose(out, t64([1.0]), atol=1e-5)
    assert torch.allclose(A.geometric_median(t64([[0.0], [1.0]]), t64([1.0, 3.0]), tol=1e-12, max_iter=1000),
                          t64([1.0 - math.sqrt(1e-8 / 8)]), atol=1e-9, rtol=0)


def test_median_of_means_hand():
    x = t64([[1.0], [3.0], [5.0], [7.0], [100.0], [0.0]])
    # groups {1,3}, {5,7}, {100,0} → means 2, 6, 50 → median 6
    assert torch.allclose(A.median_of_means(x, 3, groups=torch.tensor([0, 0, 1, 1, 2, 2])), t64([6.0]))
    # G = 1 → mean 116/6; G = n → median (3+5)/2 = 4, whatever the random partition
    g = torch.Generator().manual_seed(0)
    assert torch.allclose(A.median_of_means(x, 1, generator=g), t64([116 / 6]))
    assert torch.allclose(A.median_of_means(x, 6, generator=g), t64([4.0]))


def test_median_of_means_random_partition_matches_reference():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(7, 4))
    out = A.median_of_means(t64(x), 3, generator=torch.Generator().manual_seed(5))
    # reproduce the partition: rows at permutation positions p go to group ⌊3p/7⌋ (sizes 3,2,2)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(5)).tolist()
    groups = [[perm[p] for p in range(7) if (3 * p) // 7 == g] for g in range(3)]
    assert sorted(len(g) for g in groups) == [2, 2, 3]
    means = np.array([x[g].mean(axis=0) for g in groups])
    assert np.allclose(out.numpy(), ref_median(means))


def test_multikrum_hand():
    # d = 1, points 0, 1, 2, 4, 20; n = 5, f = 1 → 2 nearest neighbours (squared distances):
    #   0: 1 + 4 = 5;  1: 1 + 1 = 2;  2: 1 + 4 = 5;  4: 4 + 9 = 13;  20: 256 + 324 = 580
    x = t64([[0.0], [1.0], [2.0], [4.0], [20.0]])
    assert torch.allclose(A.krum_scores(x, 1), t64([5.0, 2.0, 5.0, 13.0, 580.0]))
    # ranking 1, 0, 2 (tie 5 = 5 broken by index), 3 → m = n − f = 4 drops the outlier 20
    assert A.multikrum_select(x, 1).tolist() == [1, 0, 2, 3]
    assert torch.allclose(A.multikrum(x, 1), t64([(0 + 1 + 2 + 4) / 4]))
    # m = 2 keeps {1, 0}; weights 3 and 1 on them → (3·0 + 1·1)/4
    assert torch.allclose(A.multikrum(x, 1, m=2), t64([0.5]))
    assert torch.allclose(A.multikrum(x, 1, m=2, weights=t64([3, 1, 1, 1, 1])), t64([0.25]))


def test_fltrust_hand():
    # g0 = (3,4), ‖g0‖ = 5. a = (1,0): cos 0.6, rescaled (5,0); b = (0,2): cos 0.8, rescaled
    # (0,5); c = (−3,−4): cos −1 → trust 0. aggregate = (0.6·(5,0) + 0.8·(0,5))/1.4 = (15/7, 20/7)
    agg, ts = A.fltrust(t64([[1.0, 0.0], [0.0, 2.0], [-3.0, -4.0]]), t64([3.0, 4.0]))
    assert torch.allclose(ts, t64([0.6, 0.8, 0.0]))
    assert torch.allclose(agg, t64([15 / 7, 20 / 7]))


def test_foolsgold_hand():
    # a = (1,0), b = (3,4), c = (0,1), d = (−1,0). Cosines: ab 0.6, ac 0, ad −1, bc 0.8,
    # bd −0.6, cd 0 → v = (0.6, 0.8, 0.8, 0).
    # Pardoning: a: cs_ab = 0.6·0.6/0.8 = 0.45, cs_ac = 0; d: every cs_dj · 0/v_j = 0.
    # w = 1 − rowmax = (0.55, 0.2, 0.2, 1) → /max → (0.55, 0.2, 0.2, 0.99 after the 1 → 0.99)
    # logit: a: ln(0.55/0.45) + 0.5 = 0.7007; b, c: ln(0.25) + 0.5 < 0 → 0; d: ln 99 + 0.5 → 1
    fg = A.FoolsGoldHistory()
    agg, w = fg(["a", "b", "c", "d"], t64([[1.0, 0.0], [3.0, 4.0], [0.0, 1.0], [-1.0, 0.0]]))
    wa = math.log(0.55 / 0.45) + 0.5
    assert torch.allclose(w, t64([wa, 0.0, 0.0, 1.0]))
    assert torch.allclose(agg, t64([(wa - 1.0) / (wa + 1.0), 0.0]))
    # without pardoning b and c would keep weight 0.5 (w = (0.4, 0.2, 0.2, 1) → logit 0.5):
    # the reference, which pardons, agrees with the hand values
    hist = np.array([[1.0, 0.0], [3.0, 4.0], [0.0, 1.0], [-1.0, 0.0]])
    assert np.allclose(ref_foolsgold_weights(hist), w.numpy())
    # κ = 0.1 exposes the 1 → 0.99 step: d gets 0.1·(ln(0.99/0.01) + 0.5), not 1
    _, wk = A.FoolsGoldHistory(kappa=0.1)(["a", "b", "c", "d"], torch.from_numpy(hist))
    assert torch.allclose(wk, t64([0.1 * wa, 0.0, 0.0, 0.1 * (math.log(99) + 0.5)]))


# --------------------------------------------------------------------------------------------
# agreement with the independent implementations on random data
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,f", [(5, 0), (5, 2), (8, 3), (9, 1)])
def test_trimmed_mean_matches_reference(n, f):
    x = np.random.default_rng(n * 10 + f).normal(size=(n, 6))
    assert np.allclose(A.trimmed_mean(t64(x), f).numpy(), ref_trimmed_mean(x, f))


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_median_matches_reference(n):
    x = np.random.default_rng(n).normal(size=(n, 7))
    assert np.allclose(A.coordinate_median(t64(x)).numpy(), ref_median(x))


@pytest.mark.parametrize("n,f,m", [(5, 1, None), (7, 2, None), (7, 2, 3), (10, 3, 1), (6, 0, 6)])
def test_multikrum_matches_reference(n, f, m):
    rng = np.random.default_rng(n + 100 * f)
    x = rng.normal(size=(n, 5))
    x[: max(f, 1)] += 8.0  # some outliers
    scores, sel = ref_krum(x, f, m)
    assert np.allclose(A.krum_scores(t64(x), f).numpy(), scores)
    assert A.multikrum_select(t64(x), f, m).tolist() == sel
    w = rng.uniform(1, 10, size=n)
    expect = (w[sel, None] * x[sel]).sum(axis=0) / w[sel].sum()
    assert np.allclose(A.multikrum(t64(x), f, m, weights=t64(w)).numpy(), expect)


def test_fltrust_matches_reference():
    rng = np.random.default_rng(3)
    g0 = rng.normal(size=6)
    x = rng.normal(size=(8, 6)) * rng.uniform(0.1, 10, size=(8, 1)) + 0.5 * g0
    x[2] = 0.0  # a zero update: trust 0, no NaN
    agg, ts = A.fltrust(t64(x), t64(g0))
    ragg, rts = ref_fltrust(x, g0)
    assert rts[2] == 0 and 0 < (rts > 0).sum() < 8
    assert np.allclose(ts.numpy(), rts)
    assert np.allclose(agg.numpy(), ragg)


def test_foolsgold_matches_reference_over_rounds():
    rng = np.random.default_rng(7)
    d = 8
    common = rng.normal(size=d)
    base = {c: common + rng.normal(size=d) for c in range(7)}
    base[1] = base[0] + 0.05 * rng.normal(size=d)  # a near-sybil pair
    rounds = [[0, 1, 2, 3], [1, 2, 4, 5, 6], [0, 2, 3, 4, 5], [3], [6, 5, 1, 0], [2, 4]]
    fg = A.FoolsGoldHistory()
    hist: dict[int, np.ndarray] = {}
    interior = 0
    for r, ids in enumerate(rounds):
        x = np.array([base[c] + 0.8 * rng.normal(size=d) for c in ids])
        for c, row in zip(ids, x):
            hist[c] = hist.get(c, 0) + row
        rw = ref_foolsgold_weights(np.array([hist[c] for c in ids]))
        sizes = rng.uniform(1, 5, size=len(ids))
        agg, w = fg(ids, t64(x), weights=t64(sizes))
        assert np.allclose(w.numpy(), rw), f"round {r}"
        coef = rw * sizes
        assert np.allclose(agg.numpy(), (coef[:, None] * x).sum(0) / coef.sum()), f"round {r}"
        interior += int(((rw > 0) & (rw < 1)).sum())
    # the history really is cumulative and keyed by id
    for c, h in hist.items():
        assert np.allclose(fg.history[c].numpy(), h)
    assert interior > 0, "the example should exercise the logit's interior"


# --------------------------------------------------------------------------------------------
# invariance to client order
# --------------------------------------------------------------------------------------------


def _perm_case(seed=0, n=7, d=5):
    rng = np.random.default_rng(seed)
    x = t64(rng.normal(size=(n, d)))
    w = t64(rng.uniform(1, 10, size=n))
    perm = torch.from_numpy(rng.permutation(n))
    return x, w, perm


@pytest.mark.parametrize(
    "rule",
    [
        lambda x, w: A.fedavg(x, w),
        lambda x, w: A.trimmed_mean(x, 2),
        lambda x, w: A.coordinate_median(x),
        lambda x, w: A.geometric_median(x, w, tol=1e-12, max_iter=500),
        lambda x, w: A.multikrum(x, 2, weights=w),
        lambda x, w: A.multikrum(x, 1, m=3, weights=w),
    ],
    ids=["fedavg", "trimmed_mean", "coordinate_median", "geometric_median", "multikrum", "krum_m3"],
)
def test_order_invariance(rule):
    x, w, perm = _perm_case()
    assert torch.allclose(rule(x, w), rule(x[perm], w[perm]), atol=1e-10)


def test_order_invariance_median_of_means():
    x, _, perm = _perm_case()
    groups = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    # the same partition of clients, listed in another order
    assert torch.allclose(A.median_of_means(x, 3, groups=groups), A.median_of_means(x[perm], 3, groups=groups[perm]))
    # G ∈ {1, n}: the partition does not matter at all
    for G in (1, 7):
        a = A.median_of_means(x, G, generator=torch.Generator().manual_seed(0))
        b = A.median_of_means(x[perm], G, generator=torch.Generator().manual_seed(1))
        assert torch.allclose(a, b)


def test_order_invariance_fltrust():
    x, _, perm = _perm_case()
    g0 = x.mean(0) + 0.1
    a, ta = A.fltrust(x, g0)
    b, tb = A.fltrust(x[perm], g0)
    assert torch.allclose(a, b) and torch.allclose(ta[perm], tb)


def test_order_invariance_foolsgold():
    rng = np.random.default_rng(4)
    fg1, fg2 = A.FoolsGoldHistory(), A.FoolsGoldHistory()
    for ids in ([0, 1, 2, 3, 4], [5, 1, 3, 2], [4, 0, 5, 2, 1]):
        x = t64(rng.normal(size=(len(ids), 6)) + 0.5)
        w = t64(rng.uniform(1, 3, size=len(ids)))
        perm = torch.from_numpy(rng.permutation(len(ids)))
        a, wa = fg1(ids, x, w)
        b, wb = fg2([ids[i] for i in perm], x[perm], w[perm])
        assert torch.allclose(a, b) and torch.allclose(wa[perm], wb)


# --------------------------------------------------------------------------------------------
# rule-specific properties
# --------------------------------------------------------------------------------------------


def _objective(z, x):
    return torch.linalg.vector_norm(x - z, dim=1).sum().item()


def test_geometric_median_beats_mean_and_median_with_outliers():
    rng = np.random.default_rng(2)
    inliers = rng.normal(size=(8, 5))
    outliers = rng.normal(size=(3, 5)) + 40.0
    x = t64(np.vstack([inliers, outliers]))
    gm = A.geometric_median(x, tol=1e-10, max_iter=500)
    obj = _objective(gm, x)
    assert obj < _objective(x.mean(0), x) - 1.0
    assert obj < _objective(A.coordinate_median(x), x)
    # and it is a local minimum: small perturbations do not improve it
    for k in range(5):
        e = torch.zeros(5, dtype=torch.float64)
        e[k] = 1e-3
        assert obj <= _objective(gm + e, x) + 1e-9 and obj <= _objective(gm - e, x) + 1e-9


def test_geometric_median_robust_to_huge_outlier():
    rng = np.random.default_rng(6)
    inliers = t64(rng.normal(size=(9, 4)))
    x = torch.cat([inliers, torch.full((1, 4), 1e6, dtype=torch.float64)])
    gm = A.geometric_median(x)
    assert torch.linalg.vector_norm(gm - inliers.mean(0)) < 1.5
    assert torch.linalg.vector_norm(A.fedavg(x)) > 1e5  # the mean is dragged away


def test_foolsgold_sybils_get_zero_weight():
    rng = np.random.default_rng(0)
    honest = rng.normal(size=(4, 10))
    sybil = rng.normal(size=10)
    fg = A.FoolsGoldHistory()
    ids = ["h0", "h1", "h2", "h3", "s0", "s1", "s2"]
    for _ in range(3):  # the sybils send the same update round after round
        x = np.vstack([honest + 0.3 * rng.normal(size=honest.shape), np.tile(sybil, (3, 1))])
        agg, w = fg(ids, torch.tensor(x, dtype=torch.float32))
    assert torch.all(w[4:] < 1e-6)
    assert torch.all(w[:4] > 0)
    honest_only = (w[:4, None] * torch.tensor(x[:4], dtype=torch.float32)).sum(0) / w[:4].sum()
    assert torch.allclose(agg, honest_only, atol=1e-5)


def test_fltrust_opposite_and_rescaled():
    g0 = t64([1.0, 2.0, 2.0])  # ‖g0‖ = 3
    agg, ts = A.fltrust(torch.stack([-g0, 100 * g0]), g0)
    assert ts.tolist() == pytest.approx([0.0, 1.0])
    # the scaled-up update is rescaled to ‖g0‖: it contributes exactly g0
    assert torch.allclose(agg, g0)
    assert torch.allclose(torch.linalg.vector_norm(agg), t64(3.0))
    # all updates opposite → zero update, no NaN
    agg0, ts0 = A.fltrust(torch.stack([-g0, -2 * g0]), g0)
    assert torch.equal(agg0, torch.zeros(3, dtype=torch.float64)) and torch.equal(ts0, torch.zeros(2, dtype=torch.float64))


def test_median_of_means_seeded_generator():
    x = t64(np.random.default_rng(0).normal(size=(9, 3)))
    ga, gb = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)

    def a(u):
        return A.median_of_means(u, 3, generator=ga)

    def b(u):
        return A.median_of_means(u, 3, generator=gb)

    assert torch.equal(a(x), b(x)) and torch.equal(a(x), b(x))


# --------------------------------------------------------------------------------------------
# degenerate cases and errors
# --------------------------------------------------------------------------------------------


def _rules_for(n):
    """Every (n, d) rule as ``rule(updates, weights=None)``; the order statistics ignore weights."""
    rules = {
        "fedavg": lambda x, w=None: A.fedavg(x, w),
        "trimmed_mean": lambda x, w=None: A.trimmed_mean(x, (n - 1) // 2),
        "median": lambda x, w=None: A.coordinate_median(x),
        "geometric_median": lambda x, w=None: A.geometric_median(x, w),
        "median_of_means": lambda x, w=None: A.median_of_means(x, max(1, n // 2),
                                                               generator=torch.Generator().manual_seed(0)),
    }
    if n >= 3:
        rules["multikrum"] = lambda x, w=None: A.multikrum(x, n - 3, weights=w)
    return rules


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_all_identical_updates(dtype):
    u = torch.tensor([0.3, -1.7, 2.5], dtype=dtype)
    x = u.repeat(5, 1)
    w = torch.tensor([1.0, 2, 3, 4, 5], dtype=dtype)
    for name, rule in _rules_for(5).items():
        out = rule(x, w)
        assert torch.isfinite(out).all() and torch.allclose(out, u, atol=1e-6), name
    agg, ts = A.fltrust(x, u)
    assert torch.allclose(agg, u) and torch.allclose(ts, torch.ones(5, dtype=dtype))
    # FoolsGold: identical histories are indistinguishable sybils → every w = 0 → zero update
    agg, w = A.FoolsGoldHistory()(list(range(5)), x)
    assert torch.equal(w, torch.zeros(5, dtype=dtype)) and torch.equal(agg, torch.zeros(3, dtype=dtype))


def test_all_zero_updates():
    x = torch.zeros(4, 3)
    zero = torch.zeros(3)
    for name, rule in _rules_for(4).items():
        assert torch.equal(rule(x), zero), name
    agg, ts = A.fltrust(x, torch.ones(3))
    assert torch.equal(agg, zero) and torch.equal(ts, torch.zeros(4))
    agg, ts = A.fltrust(torch.ones(4, 3), torch.zeros(3))  # zero server update: no trust
    assert torch.equal(agg, zero) and torch.equal(ts, torch.zeros(4))
    agg, w = A.FoolsGoldHistory()([0, 1, 2, 3], x)
    assert torch.equal(agg, zero) and torch.isfinite(w).all()


def test_one_client():
    u = torch.tensor([[1.0, -2.0, 0.5]])
    for name, rule in _rules_for(1).items():
        assert torch.allclose(rule(u, torch.tensor([3.0])), u[0]), name
    agg, w = A.FoolsGoldHistory()(["only"], u)
    assert torch.equal(w, torch.ones(1)) and torch.allclose(agg, u[0])
    agg, ts = A.fltrust(u, 2 * u[0])  # aligned with g0, rescaled to ‖g0‖ = 2‖u‖
    assert torch.allclose(ts, torch.ones(1)) and torch.allclose(agg, 2 * u[0])
    with pytest.raises(ValueError, match="n ≥ f \\+ 3"):
        A.multikrum(u, 0)


def test_f_too_large():
    x = torch.randn(4, 2)
    with pytest.raises(ValueError, match="n > 2f"):
        A.trimmed_mean(x, 2)
    with pytest.raises(ValueError, match="n - f - 2"):
        A.multikrum(x, 2)
    with pytest.raises(ValueError, match="n - f - 2"):
        A.multikrum_select(x, 2)
    with pytest.raises(ValueError, match="f must be"):
        A.trimmed_mean(x, -1)
    for m in (0, 5):
        with pytest.raises(ValueError, match="m must be"):
            A.multikrum(x, 1, m=m)
    for g in (0, 5):
        with pytest.raises(ValueError, match="num_groups"):
            A.median_of_means(x, g)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_updates_rejected(bad):
    x = torch.randn(5, 3)
    x[2, 1] = bad
    calls = [
        lambda: A.fedavg(x),
        lambda: A.trimmed_mean(x, 1),
        lambda: A.coordinate_median(x),
        lambda: A.geometric_median(x),
        lambda: A.median_of_means(x, 2),
        lambda: A.multikrum(x, 1),
        lambda: A.fltrust(x, torch.ones(3)),
        lambda: A.FoolsGoldHistory()(list(range(5)), x),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="NaN or Inf"):
            call()


def test_shape_and_weight_errors():
    with pytest.raises(ValueError, match="2-D"):
        A.fedavg(torch.ones(3))
    with pytest.raises(ValueError, match="empty"):
        A.coordinate_median(torch.ones(0, 3))
    x = torch.randn(3, 2)
    with pytest.raises(ValueError, match="shape"):
        A.fedavg(x, torch.ones(2))
    with pytest.raises(ValueError, match="non-negative"):
        A.fedavg(x, torch.tensor([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="all zero"):
        A.geometric_median(x, torch.zeros(3))
    with pytest.raises(ValueError, match="all zero"):
        _check_weights(torch.zeros(3), x)  # the check every weighted rule runs
    with pytest.raises(ValueError, match="client ids"):
        A.FoolsGoldHistory()([0, 1], x)
    with pytest.raises(ValueError, match="unique"):
        A.FoolsGoldHistory()([0, 1, 1], x)
    with pytest.raises(ValueError, match="server_update"):
        A.fltrust(x, torch.ones(3))
    with pytest.raises(ValueError, match="shape"):
        A.geometric_median(torch.randn(2, 3, 2), torch.ones(2, 2))  # neither (n,) nor (B, n)
    with pytest.raises(ValueError, match="at least 2-D"):
        A.geometric_median(torch.ones(3))


def test_flatten_roundtrip():
    like = [torch.randn(2, 3), torch.randn(4), torch.tensor(7)]
    vec = A.flatten_state(like)
    assert vec.shape == (11,)
    back = A.unflatten(vec, like)
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(back, like))
    # integer buffers are rounded back, e.g. an averaged num_batches_tracked
    ints = A.unflatten(torch.tensor([2.6]), [torch.tensor(0, dtype=torch.long)])
    assert ints[0].dtype == torch.long and ints[0].item() == 3
    with pytest.raises(ValueError, match="elements"):
        A.unflatten(vec[:-1], like)


def test_float64_keeps_dtype():
    x = torch.randn(6, 3, dtype=torch.float64)
    w = torch.rand(6, dtype=torch.float64) + 0.1
    for name, rule in _rules_for(6).items():
        assert rule(x, w).dtype == torch.float64, name
    agg, ts = A.fltrust(x, x[0])
    assert agg.dtype == ts.dtype == torch.float64
    agg, fw = A.FoolsGoldHistory()(list(range(6)), x)
    assert agg.dtype == fw.dtype == torch.float64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_cuda_matches_cpu():
    rng = np.random.default_rng(9)
    x = torch.tensor(rng.normal(size=(9, 50)), dtype=torch.float32)
    w = torch.tensor(rng.uniform(1, 5, size=9), dtype=torch.float32)
    xc, wc = x.cuda(), w.cuda()
    for name, rule in _rules_for(9).items():
        if name == "median_of_means":
            continue  # random partition; checked with explicit groups below
        out = rule(xc, wc)
        assert out.is_cuda and out.dtype == torch.float32, name
        assert torch.allclose(out.cpu(), rule(x, w), atol=1e-4), name
    groups = torch.arange(9) % 3
    assert torch.allclose(A.median_of_means(xc, 3, groups=groups).cpu(), A.median_of_means(x, 3, groups=groups), atol=1e-5)
    assert A.median_of_means(xc, 3, generator=torch.Generator("cuda").manual_seed(0)).is_cuda
    a, ta = A.fltrust(xc, xc[0])
    b, tb = A.fltrust(x, x[0])
    assert a.is_cuda and torch.allclose(a.cpu(), b, atol=1e-4) and torch.allclose(ta.cpu(), tb, atol=1e-5)
    a, wa = A.FoolsGoldHistory()(list(range(9)), xc, wc)
    b, wb = A.FoolsGoldHistory()(list(range(9)), x, w)
    assert a.is_cuda and torch.allclose(a.cpu(), b, atol=1e-4) and torch.allclose(wa.cpu(), wb, atol=1e-5)


def test_krum_distances_exact_for_near_duplicates_far_from_origin():
    # Sybil-like updates: a large shared component plus tiny individual differences. A float32
    # Gram trick would rank these in rounding noise; the scores must match float64 differences.
    g = torch.Generator().manual_seed(3)
    base = torch.randn(200_000, generator=g) * 10
    scales = torch.tensor([1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2])
    ups = (base + scales[:, None] * torch.randn(6, 200_000, generator=g)).float()
    x = ups.double()
    exact = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    exact.fill_diagonal_(float("inf"))
    expected = torch.sort(exact, dim=1).values[:, : 6 - 1 - 2].sum(1)
    got = A.krum_scores(ups, 1)
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=0)
    assert A.multikrum_select(ups, 1, 1).item() == int(torch.argmin(expected))


# --------------------------------------------------------------------------------------------
# the hyper-parameters a rule actually uses when fewer replies than planned arrived
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n,f,m,expected",
    [
        (10, 2, None, (2, 8)),  # enough replies: f kept, m = n − f
        (5, 1, None, (1, 4)),
        (7, 2, 3, (2, 3)),  # explicit m kept
        (4, 2, None, (1, 3)),  # n = 4 < f + 3: f shrinks to n − 3 = 1, m = 4 − 1
        (3, 5, None, (0, 3)),  # f shrinks to 0
        (2, 1, None, (0, 2)),  # n − 3 < 0: f = max(0, n − 3) = 0
        (1, 0, None, (0, 1)),
        (5, 1, 9, (1, 5)),  # m clamped to n
        (5, 1, 0, (1, 1)),  # m clamped to 1 (config: krum-m = 0 means "n − f" only through None)
    ],
)
def test_multikrum_params_hand(n, f, m, expected):
    assert A.multikrum_params(n, f, m) == expected


@pytest.mark.parametrize(
    "n,f,expected",
    [(10, 2, 2), (5, 2, 2), (4, 2, 1), (3, 1, 1), (2, 1, 0), (1, 3, 0), (6, 0, 0), (7, 9, 3)],
)
def test_trim_for_hand(n, f, expected):
    # (n − 1) // 2 is the largest f with n > 2f: 4 → 1, 2 → 0, 1 → 0, 7 → 3
    assert A.trim_for(n, f) == expected
    x = torch.randn(n, 3)
    A.trimmed_mean(x, A.trim_for(n, f))  # always a valid trim for n replies


def test_params_match_the_strategies_former_arithmetic():
    """The formulas the strategies used inline before they called these functions."""
    for n in range(1, 12):
        for f in range(0, 8):
            assert A.trim_for(n, f) == min(f, (n - 1) // 2)
            for m in [None, *range(0, 14)]:
                ff = min(f, max(0, n - 3))
                mm = m if m is not None else n - ff
                assert A.multikrum_params(n, f, m) == (ff, max(1, min(mm, n)))
                if n >= 3:
                    ff, mm = A.multikrum_params(n, f, m)
                    assert len(A.multikrum_select(torch.randn(n, 2), ff, mm)) == mm


def test_params_errors():
    with pytest.raises(ValueError, match="n must be"):
        A.multikrum_params(0, 1)
    with pytest.raises(ValueError, match="f must be"):
        A.multikrum_params(5, -1)
    with pytest.raises(ValueError, match="m must be"):
        A.multikrum_params(5, 1, -2)
    with pytest.raises(ValueError, match="n must be"):
        A.trim_for(0, 1)
    with pytest.raises(ValueError, match="f must be"):
        A.trim_for(5, 1.5)


# --------------------------------------------------------------------------------------------
# the one geometric median: batched and weighted
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weighted", ["none", "shared", "per_entry"])
def test_geometric_median_batched_equals_per_entry(weighted):
    g = torch.Generator().manual_seed(8)
    pts = torch.randn(3, 4, 7, 5, generator=g, dtype=torch.float64)
    w = {"none": None, "shared": torch.rand(7, generator=g, dtype=torch.float64) + 0.5,
         "per_entry": torch.rand(3, 4, 7, generator=g, dtype=torch.float64) + 0.5}[weighted]
    out = A.geometric_median(pts, w, tol=1e-13, max_iter=2000)
    assert out.shape == (3, 4, 5)
    for i in range(3):
        for j in range(4):
            wij = None if w is None else (w if w.ndim == 1 else w[i, j])
            one = A.geometric_median(pts[i, j], wij, tol=1e-13, max_iter=2000)
            torch.testing.assert_close(out[i, j], one, rtol=0, atol=1e-10)


def test_geometric_median_integer_weights_repeat_points():
    # weight 2 on a point is the same objective as listing the point twice
    x = t64([[0.0, 0.0], [4.0, 0.0], [0.0, 3.0], [5.0, 5.0]])
    a = A.geometric_median(x, t64([1.0, 2.0, 1.0, 1.0]), tol=1e-13, max_iter=5000)
    b = A.geometric_median(torch.cat([x, x[1:2]]), tol=1e-13, max_iter=5000)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-9)


def test_geometric_median_autograd_and_buffer_paths_agree_bit_for_bit():
    g = torch.Generator().manual_seed(2)
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(5, 9, 6, generator=g, dtype=dtype)
        w = torch.rand(9, generator=g, dtype=dtype) + 0.1
        for weights in (None, w):
            with torch.no_grad():
                fast = A.geometric_median(x, weights)
            slow = A.geometric_median(x.clone().requires_grad_(True), weights)
            assert slow.requires_grad and torch.equal(fast, slow.detach())


def test_geometric_median_max_iter_zero_is_the_start():
    x = t64([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0]])
    assert torch.equal(A.geometric_median(x, max_iter=0), x.mean(0))
    w = t64([1.0, 1.0, 2.0])
    assert torch.allclose(A.geometric_median(x, w, max_iter=0), (w[:, None] * x).sum(0) / 4)


def test_public_names():
    """Functions only: the former callable classes and the rule registry are gone."""
    for gone in ("FedAvg", "TrimmedMean", "CoordinateMedian", "GeometricMedian", "MedianOfMeans", "MultiKrum",
                 "FLTrust", "FoolsGold", "RULES", "get_rule"):
        assert not hasattr(A, gone), gone
    for name in A.__all__:
        obj = getattr(A, name)
        assert callable(obj) and obj.__doc__, name


# --------------------------------------------------------------------------------------------
# overflow (issue 16): a finite update of norm 1e30 in float32, weights above float32's range
# --------------------------------------------------------------------------------------------
def _honest_and_huge(n=7, d=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    honest = 0.05 + 0.01 * torch.randn(n - 1, d, generator=g)
    huge = 1e30 * torch.randn(1, d, generator=g).sign()
    return honest, torch.cat([honest, huge])


def test_geometric_median_huge_point_is_an_outlier_of_one():
    honest, x = _honest_and_huge()
    gm = A.geometric_median(x)
    assert torch.isfinite(gm).all()
    # an outlier of one moves the geometric median by at most the honest spread, like any outlier
    ref = A.geometric_median(torch.cat([honest, honest.mean(0, keepdim=True) + 10.0]).double())
    assert torch.linalg.vector_norm(gm.double() - ref) < 0.02
    assert torch.linalg.vector_norm(gm - honest.mean(0)) < 0.05
    # the rescaled path computes the same median: points × 2^70 (squares overflow float32)
    small = honest[:5]
    scaled = A.geometric_median(small * 2.0 ** 70)
    assert torch.allclose(scaled / 2.0 ** 70, A.geometric_median(small), rtol=1e-5, atol=1e-7)
    assert torch.isfinite(A.geometric_median(x, torch.tensor([1.0] * 6 + [1e-3]))).all()


def test_multikrum_excludes_a_huge_update_and_ranks_the_others_exactly():
    honest, x = _honest_and_huge()
    scores = A.krum_scores(x, 1)
    assert scores.argmax() == 6
    # the honest scores are those of the honest rows alone plus nothing from the outlier
    ref = torch.tensor([ref_krum_score(x.double().numpy(), i, 1) for i in range(6)])
    assert torch.allclose(scores[:6], ref.to(scores.dtype), rtol=1e-9)
    assert 6 not in A.multikrum_select(x, 1).tolist()
    assert torch.allclose(A.multikrum(x, 1), honest.mean(0), atol=1e-6)


def ref_krum_score(x: np.ndarray, i: int, f: int) -> float:
    d = sorted(float(((x[i] - x[j]) ** 2).sum()) for j in range(len(x)) if j != i)
    return sum(d[: len(x) - f - 2])


def test_fltrust_huge_update_has_bounded_influence():
    honest, x = _honest_and_huge()
    g0 = torch.full((40,), 0.05)
    agg, trust = A.fltrust(x, g0)
    assert torch.isfinite(agg).all() and torch.isfinite(trust).all()
    assert torch.linalg.vector_norm(agg) <= torch.linalg.vector_norm(g0) * (1 + 1e-5)
    # the honest trust scores are those without the huge update
    _, ref = A.fltrust(honest, g0)
    assert torch.allclose(trust[:6], ref, atol=1e-5)


def test_foolsgold_norm_bound_needs_a_meaningful_median():
    """The bound is norm_bound × the true median norm, and only with 3+ updates and a median
    above 0: otherwise one client (or two) could shrink the honest update."""
    tiny = torch.full((1, 4), -1e-9)
    pair = torch.cat([torch.full((1, 4), 0.01), tiny])
    agg, _ = A.FoolsGoldHistory(norm_bound=100.0)(["a", "b"], pair)
    plain, _ = A.FoolsGoldHistory(norm_bound=None)(["a", "b"], pair)
    assert torch.equal(agg, plain)  # n = 2: no clipping
    mostly_zero = torch.cat([torch.zeros(3, 4), torch.full((2, 4), 0.01)])
    ids = list("abcde")
    agg, _ = A.FoolsGoldHistory(norm_bound=100.0)(ids, mostly_zero)
    plain, _ = A.FoolsGoldHistory(norm_bound=None)(ids, mostly_zero)
    assert torch.equal(agg, plain)  # median norm 0: nothing to measure against
    # an even n uses the true median (mean of the two middle norms), not the lower one
    norms = torch.tensor([1.0, 1.0, 3.0, 3.0])
    rows = norms[:, None] * torch.tensor([[1.0, 0.0]])
    rows[3] = torch.tensor([0.0, 250.0])  # norm 250 > 100 × 2 (true median 2), < 100 × 3
    clip = A.FoolsGoldHistory(norm_bound=100.0).clip_factors(rows)
    assert clip is not None and float(clip[3]) == pytest.approx(200.0 / 250.0) and (clip[:3] == 1).all()


def test_foolsgold_huge_update_finite_weights_and_norm_bound():
    honest, x = _honest_and_huge()
    ids = list(range(7))
    agg, w = A.FoolsGoldHistory()(ids, x)
    assert torch.isfinite(w).all()
    bounded, w2 = A.FoolsGoldHistory(norm_bound=10.0)(ids, x)
    assert torch.equal(w, w2)  # the bound changes the aggregate, not the weights
    median_norm = torch.linalg.vector_norm(x.double(), dim=1).median()  # the round's median norm
    assert torch.linalg.vector_norm(bounded) <= 10.0 * median_norm * (1 + 1e-5)
    # ordinary updates: the bound changes nothing, bit for bit
    a, _ = A.FoolsGoldHistory(norm_bound=10.0)(ids[:6], honest)
    b, _ = A.FoolsGoldHistory()(ids[:6], honest)
    assert torch.equal(a, b)
    # histories that overflow float32 are kept in float64, the weights stay finite
    h = A.FoolsGoldHistory()
    big = torch.cat([honest, torch.full((1, 40), 3e38)])
    for _ in range(2):
        out, w = h(ids, big)
    assert torch.isfinite(w).all() and h.history[6].dtype == torch.float64
    with pytest.raises(ValueError):
        A.FoolsGoldHistory(norm_bound=0.0)


@pytest.mark.parametrize("rule", ["fedavg", "median", "trimmed_mean", "median_of_means"])
def test_sums_near_the_float32_maximum_do_not_overflow(rule):
    x = torch.tensor([[3e38, -3e38], [3e38, -3e38], [2e38, -2e38], [3e38, -3e38]])
    out = {"fedavg": lambda: A.fedavg(x), "median": lambda: A.coordinate_median(x),
           "trimmed_mean": lambda: A.trimmed_mean(x, 0),
           "median_of_means": lambda: A.median_of_means(x, 2, groups=torch.tensor([0, 0, 1, 1]))}[rule]()
    assert torch.isfinite(out).all()
    expect = {"fedavg": 2.75e38, "median": 3e38, "trimmed_mean": 2.75e38, "median_of_means": 2.75e38}[rule]
    assert out[0].item() == pytest.approx(expect, rel=1e-6) and out[1].item() == pytest.approx(-expect, rel=1e-6)


def test_fit_weights_rescales_only_absurd_weights():
    ordinary = torch.tensor([10.0, 250.0, 3.0], dtype=torch.float64)
    assert torch.equal(A.fit_weights(ordinary), ordinary.float())
    huge = A.fit_weights(torch.tensor([10.0, 1e39], dtype=torch.float64))
    assert torch.isfinite(huge).all() and huge.max() <= 1
    assert huge[0] / huge[1] == pytest.approx(1e-38, rel=1e-5)
    x = torch.randn(2, 5)
    assert torch.isfinite(A.fedavg(x, huge)).all()


def test_buffer_validation_and_aggregation():
    assert A.buffer_problem("bn.running_var", np.array([1.0, -0.5], dtype=np.float32)) is not None
    assert "negative" in A.buffer_problem("bn.running_var", np.array([-1.0], dtype=np.float32))
    assert A.buffer_problem("bn.running_var", np.array([1e30], dtype=np.float32)) is None  # valid: the rule's job
    assert "NaN" in A.buffer_problem("bn.running_mean", np.array([np.nan], dtype=np.float32))
    assert A.buffer_problem("bn.running_mean", np.array([-3.0], dtype=np.float32)) is None  # means may be < 0
    assert "counter" in A.buffer_problem("bn.num_batches_tracked", np.array(-1, dtype=np.int64))
    assert A.buffer_problem("bn.num_batches_tracked", np.array(7, dtype=np.int64)) is None
    assert A.buffer_problem("bn.num_batches_tracked", np.array(2**53, dtype=np.int64)) is None
    # near 2**63 a merged counter would wrap to a negative value and stall every later round
    assert "2**53" in A.buffer_problem("bn.num_batches_tracked", np.array(2**63 - 1, dtype=np.int64))
    values = torch.tensor([[1.0, 0.1], [1.1, 0.2], [0.9, 0.0], [1e30, 1e30]], dtype=torch.float64)
    assert torch.allclose(A.buffer_median(values), torch.tensor([1.05, 0.15], dtype=torch.float64))
    w = torch.tensor([1.0, 1.0, 2.0, 0.0], dtype=torch.float64)
    assert torch.allclose(A.buffer_mean(values, w), torch.tensor([0.975, 0.075], dtype=torch.float64))
