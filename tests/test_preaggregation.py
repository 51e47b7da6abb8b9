"""Pre-aggregation steps of fedcal.aggregate (NNM, bucketing, static clipping, ARC, centred
clipping) and their composition with the rules: hand-computed values, invariants, a plain-loop
second implementation, and ByzFL's implementations where installed."""

from __future__ import annotations

import doctest
import importlib
import math
from functools import partial

import pytest
import torch

from fedcal import aggregate as A


def t64(rows):
    return torch.tensor(rows, dtype=torch.float64)


def rand(n, d, seed=0, dtype=torch.float64):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# --------------------------------------------------------------------------------------------
# static clipping
# --------------------------------------------------------------------------------------------
def test_static_clip_by_hand():
    x = t64([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [-6.0, 8.0]])
    out = A.static_clip(x, c=1.0)
    assert torch.allclose(out, t64([[0.6, 0.8], [0.3, 0.4], [0.0, 0.0], [-0.6, 0.8]]), atol=1e-15)
    assert torch.equal(out[1:3], x[1:3])  # rows within the bound are untouched, bit for bit


def test_static_clip_invariants():
    x = rand(20, 30) * torch.logspace(-2, 2, 20, dtype=torch.float64)[:, None]
    out = A.static_clip(x, c=1.5)
    norms_in, norms_out = x.norm(dim=1), out.norm(dim=1)
    assert bool((norms_out <= 1.5 * (1 + 1e-12)).all())
    assert torch.allclose(norms_out, norms_in.clamp(max=1.5))
    cos = (x * out).sum(1) / (norms_in * norms_out)
    assert torch.allclose(cos, torch.ones(20, dtype=torch.float64))  # direction kept


def test_static_clip_huge_float32_row_is_clipped_to_the_bound_not_to_zero():
    # ‖row‖ = 1e30·√100 overflows float32's squares: a plain vector_norm says inf and c / inf
    # would scale the row to 0; the bound is what a clipped row must keep.
    x = torch.cat([torch.full((1, 100), 1e30), torch.ones(2, 100) * 0.01])
    out = A.static_clip(x, c=2.0)
    assert torch.isfinite(out).all()
    assert math.isclose(float(out[0].double().norm()), 2.0, rel_tol=1e-6)
    assert torch.equal(out[1:], x[1:])
    # ARC (f = 1 of 3: k = 1) clips it to the next largest norm, centred clipping to τ around 0
    assert math.isclose(float(A.arc(x, 1)[0].double().norm()), 0.1, rel_tol=1e-6)
    assert math.isclose(float(A.centered_clip(x, tau=3.0)[0].double().norm()), 3.0, rel_tol=1e-6)


@pytest.mark.parametrize("c", [0.0, -1.0, float("nan"), float("inf")])
def test_static_clip_refuses_a_bad_bound(c):
    with pytest.raises(ValueError, match="clip bound c"):
        A.static_clip(rand(3, 2), c=c)


# --------------------------------------------------------------------------------------------
# ARC
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, f, k", [(10, 3, 4), (10, 0, 0), (9, 3, 4), (4, 2, 2), (1, 0, 0), (3, 1, 1),
                                     (5, 2, 2), (25, 6, 9), (10, 10, 0)])
def test_arc_count_is_floor_of_two_f_over_n_times_n_minus_f(n, f, k):
    assert A.arc_count(n, f) == k == math.floor(2 * f * (n - f) / n)


def test_arc_count_refuses_more_attackers_than_clients():
    with pytest.raises(ValueError, match="f ≤ n"):
        A.arc_count(3, 4)


def test_arc_by_hand():
    # n = 5, f = 2: k = ⌊2·2·3/5⌋ = 2 largest norms (5 and 4) clipped to the third largest (3)
    x = t64([[1.0], [-2.0], [3.0], [4.0], [-5.0]])
    assert torch.equal(A.arc(x, f=2), t64([[1.0], [-2.0], [3.0], [3.0], [-3.0]]))
    # n = 4, f = 1: k = 1; the largest (norm 10) clipped to the second largest (norm 2)
    y = t64([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0], [-8.0, 6.0]])
    assert torch.allclose(A.arc(y, f=1), t64([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0], [-1.6, 1.2]]), atol=1e-15)


def test_arc_invariants():
    x = rand(17, 12, seed=3) * torch.linspace(0.1, 9.0, 17, dtype=torch.float64)[:, None]
    f = 4
    k = A.arc_count(17, f)
    out = A.arc(x, f)
    norms = x.norm(dim=1)
    order = torch.argsort(norms, descending=True)
    bound = norms[order[k]]
    assert torch.equal(out[order[k:]], x[order[k:]])  # the n − k smallest untouched
    assert torch.allclose(out[order[:k]].norm(dim=1), torch.full((k,), float(bound), dtype=torch.float64))
    assert torch.equal(A.arc(x, 0), x)  # f = 0 clips nothing


# --------------------------------------------------------------------------------------------
# NNM
# --------------------------------------------------------------------------------------------
def test_nnm_by_hand():
    # f = 1, k = 3 neighbours: rows 0, 1, 2 mix {0, 1, 2} → 1; row 3 (10) mixes {10, 2, 1} → 13/3
    x = t64([[0.0], [1.0], [2.0], [10.0]])
    assert torch.allclose(A.nnm(x, f=1), t64([[1.0], [1.0], [1.0], [13.0 / 3.0]]), atol=1e-15)
    # 2-D: f = 2, k = 2: each row with its single nearest other row
    y = t64([[0.0, 0.0], [1.0, 0.0], [5.0, 5.0], [5.0, 7.0]])
    assert torch.allclose(A.nnm(y, f=2), t64([[0.5, 0.0], [0.5, 0.0], [5.0, 6.0], [5.0, 6.0]]), atol=1e-15)


def test_nnm_identical_honest_vectors_are_returned_unchanged():
    v = t64([0.3, -1.2, 2.5])
    honest = v.expand(7, 3)
    byzantine = t64([[100.0, 100.0, 100.0], [-50.0, 3.0, 9.0]])
    out = A.nnm(torch.cat([honest, byzantine]), f=2)
    # each honest row's 7 nearest are the honest copies: their mean is v (to the mean's rounding)
    assert torch.allclose(out[:7], honest, rtol=1e-15, atol=0)


def test_nnm_f0_is_the_mean_everywhere_and_itself_counts_first():
    x = rand(6, 4, seed=1)
    assert torch.allclose(A.nnm(x, 0), x.mean(0).expand(6, 4))
    # k = 1: every row is its own only neighbour, even when another row equals it
    dup = t64([[1.0, 2.0], [1.0, 2.0], [3.0, 0.0]])
    assert torch.equal(A.nnm(dup, f=2), dup)


def test_nnm_matches_a_plain_loop():
    x = rand(9, 5, seed=2)
    f = 3
    expected = []
    for i in range(9):
        d = sorted(range(9), key=lambda j: (float(((x[i] - x[j]) ** 2).sum()) if j != i else -1.0, j))
        expected.append(x[d[: 9 - f]].mean(0))
    assert torch.allclose(A.nnm(x, f), torch.stack(expected), atol=1e-14)


def test_nnm_refuses_f_of_n_or_more():
    with pytest.raises(ValueError, match="f < n"):
        A.nnm(rand(3, 2), f=3)


# --------------------------------------------------------------------------------------------
# bucketing
# --------------------------------------------------------------------------------------------
def test_bucketing_by_hand():
    x = t64([[0.0], [1.0], [2.0], [3.0], [10.0]])
    perm = torch.tensor([4, 0, 3, 1, 2])  # buckets {4, 0}, {3, 1}, {2}: the last one holds the leftover
    assert torch.equal(A.bucketing(x, 2, permutation=perm), t64([[5.0], [2.0], [2.0]]))
    assert torch.equal(A.bucket_labels(5, 2, permutation=perm), torch.tensor([0, 1, 2, 1, 0]))
    assert torch.equal(A.bucket_labels(5, 2, permutation=perm.int()), torch.tensor([0, 1, 2, 1, 0]))
    # s divides n: ⌈6/3⌉ = 2 full buckets
    y = t64([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [4.0, 3.0], [5.0, 6.0], [6.0, 9.0]])
    out = A.bucketing(y, 3, permutation=torch.tensor([0, 3, 5, 1, 2, 4]))
    assert torch.equal(out, t64([[11.0 / 3.0, 4.0], [10.0 / 3.0, 2.0]]))


def test_bucketing_invariants_and_seeding():
    x = rand(11, 4, seed=4)
    out = A.bucketing(x, 3, generator=torch.Generator().manual_seed(7))
    again = A.bucketing(x, 3, generator=torch.Generator().manual_seed(7))
    assert out.shape == (4, 4) and torch.equal(out, again)  # ⌈11/3⌉ buckets, reproducible
    sizes = torch.tensor([3.0, 3.0, 3.0, 2.0], dtype=torch.float64)
    assert torch.allclose((sizes[:, None] * out).sum(0), x.sum(0))  # every row in exactly one bucket
    assert not torch.equal(out, A.bucketing(x, 3, generator=torch.Generator().manual_seed(8)))
    assert torch.allclose(A.bucketing(x, 11, generator=torch.Generator().manual_seed(0)), x.mean(0, keepdim=True))
    assert torch.allclose(A.bucketing(x, 50, generator=torch.Generator().manual_seed(0)), x.mean(0, keepdim=True))
    one = A.bucketing(x, 1, generator=torch.Generator().manual_seed(3))  # s = 1: the rows, shuffled
    assert torch.equal(torch.sort(one, dim=0).values, torch.sort(x, dim=0).values)


@pytest.mark.parametrize("perm", [[0, 1, 1], [0, 1], [0.0, 1.0, 2.0], [0, 1, 3], [True, False, True]])
def test_bucketing_refuses_a_non_permutation(perm):
    with pytest.raises(ValueError, match="permutation"):
        A.bucketing(rand(3, 2), 2, permutation=torch.tensor(perm))


def test_bucketing_refuses_a_boolean_permutation_that_sorts_like_one():
    # [True, False] sorts to [False, True] == [0, 1]; taken as indices it reorders the rows
    with pytest.raises(ValueError, match="permutation"):
        A.bucketing(t64([[1.0], [5.0]]), 1, permutation=torch.tensor([True, False]))


# --------------------------------------------------------------------------------------------
# centred clipping
# --------------------------------------------------------------------------------------------
def test_centered_clip_by_hand():
    x = t64([[1.0, 0.0], [0.0, 1.0], [30.0, 40.0]])
    # one step from 0: the far row (norm 50) is clipped to norm 5
    assert torch.allclose(A.centered_clip(x, tau=5.0), t64([[1.0, 0.0], [0.0, 1.0], [3.0, 4.0]]), atol=1e-15)
    # two steps: v1 = (4/3, 5/3); around v1 only the far row, (86/3, 115/3) away, is clipped
    v1 = t64([4.0 / 3.0, 5.0 / 3.0])
    far = t64([86.0, 115.0]) * 5.0 / math.sqrt(86.0 ** 2 + 115.0 ** 2)
    expected = torch.stack([x[0], x[1], v1 + far])
    out = A.centered_clip(x, tau=5.0, iterations=2)
    assert torch.allclose(out, expected, atol=1e-14)
    assert torch.allclose(out.mean(0), v1 + (x[0] - v1 + x[1] - v1 + far) / 3, atol=1e-14)


def _cc_loop(x, tau, iterations, v):
    """Centred clipping as the paper writes it, one row at a time (second implementation)."""
    for _ in range(iterations):
        steps = []
        for row in x:
            z = row - v
            norm = float(z.norm())
            steps.append(z * min(1.0, tau / norm) if norm > 0 else z)
        v = v + torch.stack(steps).mean(0)
    return v


def test_centered_clip_mean_is_the_paper_aggregate_and_rows_stay_within_tau():
    x = rand(12, 6, seed=5) + torch.tensor([8.0] * 3 + [0.0] * 9, dtype=torch.float64)[:, None] * 10
    center = rand(1, 6, seed=6)[0]
    for iterations in (1, 3):
        out = A.centered_clip(x, tau=2.0, iterations=iterations, center=center)
        assert torch.allclose(out.mean(0), _cc_loop(x, 2.0, iterations, center), atol=1e-12)
        previous = _cc_loop(x, 2.0, iterations - 1, center)
        assert bool(((out - previous).norm(dim=1) <= 2.0 + 1e-12).all())


def test_centered_clip_is_translation_equivariant_and_identity_for_a_large_tau():
    x = rand(8, 3, seed=7)
    t = t64([5.0, -2.0, 0.5])
    assert torch.allclose(A.centered_clip(x + t, tau=0.7, iterations=2, center=t),
                          A.centered_clip(x, tau=0.7, iterations=2) + t, atol=1e-12)
    assert torch.allclose(A.centered_clip(x, tau=1e6), x, atol=1e-15)


@pytest.mark.parametrize("kwargs, match", [
    ({"tau": 0.0}, "tau"), ({"tau": float("nan")}, "tau"), ({"tau": 1.0, "iterations": 0}, "iterations"),
    ({"tau": 1.0, "center": torch.zeros(3)}, "center"), ({"tau": 1.0, "center": torch.tensor([0.0, float("inf")])}, "center"),
])
def test_centered_clip_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        A.centered_clip(rand(3, 2), **kwargs)


# --------------------------------------------------------------------------------------------
# shared input checks, overflow
# --------------------------------------------------------------------------------------------
STEPS = {
    "nnm": partial(A.nnm, f=1),
    "bucketing": partial(A.bucketing, s=2, generator=torch.Generator().manual_seed(0)),
    "static_clip": partial(A.static_clip, c=1.0),
    "arc": partial(A.arc, f=1),
    "centered_clip": partial(A.centered_clip, tau=1.0),
}


@pytest.mark.parametrize("name", sorted(STEPS))
@pytest.mark.parametrize("bad, match", [
    (torch.tensor([[1.0, float("nan")], [0.0, 1.0], [2.0, 2.0]]), "NaN or Inf"),
    (torch.tensor([[1.0, float("inf")], [0.0, 1.0], [2.0, 2.0]]), "NaN or Inf"),
    (torch.zeros(3), "2-D"),
    (torch.zeros(0, 3), "empty"),
])
def test_every_step_validates_its_input_as_the_rules_do(name, bad, match):
    with pytest.raises(ValueError, match=match):
        STEPS[name](bad)


@pytest.mark.parametrize("name", sorted(STEPS))
def test_every_step_keeps_a_huge_finite_float32_row_finite(name):
    # two rows of 2e38: their norms, sums and differences all overflow float32
    x = torch.cat([torch.full((2, 64), 2e38), 0.01 * torch.ones(4, 64)])
    out = STEPS[name](x)
    assert out.dtype == torch.float32 and torch.isfinite(out).all(), name


def test_integer_updates_are_taken_as_floats():
    assert A.static_clip(torch.tensor([[3, 4]]), c=1.0).dtype == torch.get_default_dtype()


# --------------------------------------------------------------------------------------------
# composition
# --------------------------------------------------------------------------------------------
def test_compose_nnm_then_trimmed_mean_by_hand():
    rule = A.compose([partial(A.nnm, f=1)], partial(A.trimmed_mean, f=1))
    # NNM gives [1, 1, 1, 13/3]; the trimmed mean (f = 1) of that is mean(1, 1) = 1
    assert torch.allclose(rule(t64([[0.0], [1.0], [2.0], [10.0]])), t64([1.0]))
    assert rule.__name__ == "nnm → trimmed_mean"


def test_compositions_are_shape_correct():
    x = rand(10, 7, seed=8)
    g = torch.Generator().manual_seed(1)
    pipeline = [partial(A.static_clip, c=2.0), partial(A.nnm, f=2), partial(A.bucketing, s=3, generator=g),
                partial(A.arc, f=1), partial(A.centered_clip, tau=1.0)]
    assert A.pre_aggregate(x, pipeline).shape == (4, 7)  # ⌈10/3⌉ buckets survive to the end
    for rule in (A.fedavg, A.coordinate_median, partial(A.trimmed_mean, f=1), A.geometric_median,
                 partial(A.median_of_means, num_groups=2, generator=torch.Generator().manual_seed(0))):
        out = A.compose(pipeline, rule)(x)
        assert out.shape == (7,) and torch.isfinite(out).all()
    assert A.compose([partial(A.nnm, f=2)], partial(A.multikrum, f=2))(x).shape == (7,)
    assert torch.equal(A.pre_aggregate(x, []), x)


def test_compose_with_cc_then_mean_is_centred_clipping():
    x = rand(9, 4, seed=9) * 3
    composed = A.compose([partial(A.centered_clip, tau=0.5, iterations=2)], A.fedavg)
    assert torch.allclose(composed(x), _cc_loop(x, 0.5, 2, torch.zeros(4, dtype=torch.float64)), atol=1e-12)


def test_compose_passes_weights_while_rows_are_clients_and_refuses_them_after_bucketing():
    x = rand(6, 3, seed=10)
    w = torch.tensor([1.0, 2.0, 3.0, 1.0, 1.0, 2.0], dtype=torch.float64)
    clipped = A.compose([partial(A.static_clip, c=0.5)], A.fedavg)
    assert torch.allclose(clipped(x, weights=w), A.fedavg(A.static_clip(x, 0.5), weights=w))
    bucketed = A.compose([partial(A.bucketing, s=2, generator=torch.Generator().manual_seed(0))], A.fedavg)
    with pytest.raises(ValueError, match="weights: pre-aggregation"):
        bucketed(x, weights=w)
    assert bucketed(x).shape == (3,)


def test_pre_aggregate_names_a_faulty_step():
    def drops_a_column(x):
        return x[:, 1:]

    def poisons(x):
        return x * float("nan")

    with pytest.raises(ValueError, match="step drops_a_column must return an"):
        A.pre_aggregate(rand(3, 2), [drops_a_column])
    with pytest.raises(ValueError, match="step poisons contain NaN"):
        A.pre_aggregate(rand(3, 2), [partial(A.nnm, f=1), poisons])
    with pytest.raises(ValueError, match="step list must return"):
        A.pre_aggregate(rand(3, 2), [list])


@pytest.mark.parametrize("module", ["clipping", "nnm", "bucketing", "centered_clipping", "compose"])
def test_docstring_examples_run(module):
    mod = importlib.import_module(f"fedcal.aggregate.{module}")
    result = doctest.testmod(mod, extraglobs={"torch": torch})
    assert result.attempted > 0 and result.failed == 0


# --------------------------------------------------------------------------------------------
# ByzFL (not a dependency: pip install byzfl)
# --------------------------------------------------------------------------------------------
def _byzfl():
    return pytest.importorskip("byzfl")


@pytest.mark.parametrize("n, f", [(7, 1), (10, 3), (15, 7)])
def test_nnm_matches_byzfl(n, f):
    byzfl = _byzfl()
    x = rand(n, 20, seed=n, dtype=torch.float32)
    assert torch.allclose(A.nnm(x, f), byzfl.NNM(f)(x), atol=1e-6)


@pytest.mark.parametrize("n, s", [(10, 2), (11, 3), (7, 7), (5, 1)])
def test_bucketing_matches_byzfl_on_the_same_permutation(n, s):
    byzfl = _byzfl()
    x = rand(n, 8, seed=n + s, dtype=torch.float32)
    torch.manual_seed(123)  # ByzFL draws torch.randperm(n) from the global generator
    theirs = byzfl.Bucketing(s)(x)
    ours = A.bucketing(x, s, generator=torch.Generator().manual_seed(123))
    assert ours.shape == theirs.shape and torch.allclose(ours, theirs, atol=1e-6)


@pytest.mark.parametrize("c", [0.5, 2.0, 100.0])
def test_static_clip_matches_byzfl(c):
    byzfl = _byzfl()
    x = rand(9, 15, seed=11, dtype=torch.float32) * torch.linspace(0.05, 3.0, 9)[:, None]
    assert torch.allclose(A.static_clip(x, c), byzfl.Clipping(c)(x.clone()), atol=1e-6)


@pytest.mark.parametrize("n, f", [(10, 0), (10, 3), (9, 3), (25, 6), (4, 2)])
def test_arc_matches_byzfl(n, f):
    byzfl = _byzfl()
    x = rand(n, 12, seed=n * 31 + f, dtype=torch.float32) * torch.linspace(0.1, 5.0, n)[:, None]
    assert torch.allclose(A.arc(x, f), byzfl.ARC(f)(x.clone()), atol=1e-6)
