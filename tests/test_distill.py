"""fedcal.distill: the RFD-LoRA core (consensus, DIS/CAT, distillation loss, LoRA baselines).

Every expectation is independent of the code under test: numbers worked out by hand on tiny
tensors (written out below), invariants, a straightforward per-anchor re-implementation of the
loss, finite differences, and torch.linalg.svd computed here for the FlexLoRA checks.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from fedcal.distill import (Consensus, aggregate_logits, cat_temperature, clip_logits, dis_weights,
                            distillation_loss, distillation_terms, fedit_average, ffa_average,
                            flexlora_redistribute, flora_stack, group_moments, lora_delta, median_of_means,
                            random_groups, true_median)

D = torch.float64


def _t(x):
    return torch.tensor(x, dtype=D)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _uploads(n=5, A=3, C=4, seed=0):
    return 3.0 * torch.randn(n, A, C, generator=_gen(seed), dtype=D)


def _close(a, b, atol=1e-12):
    torch.testing.assert_close(torch.as_tensor(a, dtype=D), torch.as_tensor(b, dtype=D), atol=atol, rtol=0)


# ---------------------------------------------------------------- clipping


def test_clip_logits_hand_values():
    z = _t([-12.0, -3.0, 0.0, 7.5, 11.0, math.inf, -math.inf])
    _close(clip_logits(z), [-10.0, -3.0, 0.0, 7.5, 10.0, 10.0, -10.0])
    _close(clip_logits(z, c=1.0), [-1.0, -1.0, 0.0, 1.0, 1.0, 1.0, -1.0])


def test_clip_logits_bounds_random():
    z = 100 * torch.randn(50, generator=_gen(1), dtype=D)
    out = clip_logits(z, 2.5)
    assert out.abs().max() <= 2.5
    inside = z.abs() <= 2.5
    assert torch.equal(out[inside], z[inside])  # values inside the range are untouched


@pytest.mark.parametrize("c", [0.0, -1.0, math.inf, math.nan, True])
def test_clip_logits_bad_c(c):
    with pytest.raises(ValueError, match="c must"):
        clip_logits(_t([1.0]), c)


def test_clip_logits_refuses_nan():
    with pytest.raises(ValueError, match="NaN"):
        clip_logits(_t([1.0, math.nan]))


# ---------------------------------------------------------------- groups


@pytest.mark.parametrize("n", [1, 2, 5, 7])
def test_random_groups_partition_with_balanced_sizes(n):
    for M in range(1, n + 1):
        groups = random_groups(n, M, _gen(n * 10 + M))
        assert len(groups) == M
        sizes = [len(g) for g in groups]
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == n
        assert sorted(torch.cat(groups).tolist()) == list(range(n))


def test_random_groups_is_reproducible_and_random():
    a = random_groups(7, 3, _gen(5))
    b = random_groups(7, 3, _gen(5))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    draws = {tuple(tuple(g.tolist()) for g in random_groups(7, 3, _gen(s))) for s in range(10)}
    assert len(draws) > 1  # the partition is drawn, not fixed
    assert sorted(len(g) for g in a) == [2, 2, 3]


@pytest.mark.parametrize("n, M", [(4, 0), (4, 5), (0, 1), (4, 2.0), (4, True)])
def test_random_groups_bad_sizes(n, M):
    with pytest.raises(ValueError, match=r"must be (in|an integer)"):
        random_groups(n, M)


def test_group_moments_and_mom_hand_values_even_groups():
    # clients (A = 1 anchor, C = 2 classes): k0 = [1, 2], k1 = [3, -2], k2 = [0, 4], k3 = [-2, 0]
    Z = _t([[[1, 2]], [[3, -2]], [[0, 4]], [[-2, 0]]])
    groups = [[0, 1], [2, 3]]
    means, second = group_moments(Z, groups)
    _close(means, [[[2, 0]], [[-1, 2]]])            # (1+3)/2, (2-2)/2 ; (0-2)/2, (4+0)/2
    _close(second, [[[5, 4]], [[2, 8]]])            # (1+9)/2, (4+4)/2 ; (0+4)/2, (16+0)/2
    c = median_of_means(Z, groups)
    # true median of two values = their average (torch.median's lower median would give [-1, 0])
    _close(c.logits, [[0.5, 1.0]])
    _close(c.mu, [[0.5, 1.0]])
    _close(c.var, [[3.5 - 0.25, 6.0 - 1.0]])        # median second moments (5+2)/2, (4+8)/2 minus mu²
    # population variance of the group means: coord 0 {2, -1} -> 2.25, coord 1 {0, 2} -> 1
    _close(c.dispersion, [3.25])


def test_median_and_mean_hand_values():
    Z = _t([[[1, 2]], [[3, -2]], [[0, 4]], [[-2, 0]]])
    med = aggregate_logits(Z, "median")
    # coord 0 sorted [-2, 0, 1, 3] -> 0.5 ; coord 1 sorted [-2, 0, 2, 4] -> 1
    _close(med.logits, [[0.5, 1.0]])
    # squares coord 0 sorted [0, 1, 4, 9] -> 2.5 ; coord 1 sorted [0, 4, 4, 16] -> 4
    _close(med.var, [[2.5 - 0.25, 4.0 - 1.0]])
    # variance over clients: coord 0 (0.25+6.25+0.25+6.25)/4 = 3.25, coord 1 (1+9+9+1)/4 = 5
    _close(med.dispersion, [8.25])
    mean = aggregate_logits(Z, "mean")
    _close(mean.logits, [[0.5, 1.0]])
    _close(mean.var, [[3.5 - 0.25, 6.0 - 1.0]])     # mean of squares (14/4, 24/4) minus mean²
    _close(mean.dispersion, [8.25])
    assert torch.equal(mean.mu, mean.logits) and torch.equal(med.mu, med.logits)


def test_median_odd_count_hand_values():
    Z = _t([[[5.0]], [[-1.0]], [[2.0]]])
    med = aggregate_logits(Z, "median")
    _close(med.logits, [[2.0]])
    _close(med.var, [[0.0]])                         # median(25, 1, 4) = 4 = 2²
    mean = aggregate_logits(Z, "mean")
    _close(mean.logits, [[2.0]])
    _close(mean.var, [[6.0]])                        # (25+1+4)/3 - 4
    _close(mean.dispersion, [6.0])


def test_true_median_is_not_the_lower_median():
    x = _t([[4.0, 1.0], [2.0, 3.0], [0.0, 7.0], [9.0, -1.0]])
    _close(true_median(x, dim=0), [3.0, 2.0])        # sorted [0,2,4,9] -> 3 ; [-1,1,3,7] -> 2
    _close(true_median(x, dim=1), [2.5, 2.5, 3.5, 4.0])


@pytest.mark.parametrize("method", ["median", "mean"])
def test_median_and_mean_are_permutation_invariant(method):
    Z = _uploads(6)
    perm = torch.randperm(6, generator=_gen(3))
    a, b = aggregate_logits(Z, method), aggregate_logits(Z[perm], method)
    for f in ("logits", "mu", "var", "dispersion"):
        _close(getattr(a, f), getattr(b, f))


def test_mom_is_invariant_under_a_consistent_relabelling():
    Z = _uploads(7)
    groups = random_groups(7, 3, _gen(2))
    perm = torch.randperm(7, generator=_gen(4))      # new client j is old client perm[j]
    where = torch.argsort(perm)                      # old client i sits at position where[i]
    a = median_of_means(Z, groups)
    b = median_of_means(Z[perm], [where[g] for g in groups])
    c = median_of_means(Z, list(reversed(groups)))   # the order of the groups does not matter either
    for f in ("logits", "var", "dispersion"):
        _close(getattr(a, f), getattr(b, f))
        _close(getattr(a, f), getattr(c, f))


def test_mom_with_one_group_is_the_mean():
    Z = _uploads(5)
    one = aggregate_logits(Z, "mom", 1, _gen())
    mean = aggregate_logits(Z, "mean")
    _close(one.logits, Z.mean(0))
    _close(one.var, mean.var)
    _close(one.dispersion, torch.zeros(3))            # a single group mean has no spread


@pytest.mark.parametrize("n", [5, 6])
def test_mom_with_n_groups_is_the_coordinate_median(n):
    Z = _uploads(n, seed=n)
    mom = aggregate_logits(Z, "mom", n, _gen(7))
    med = aggregate_logits(Z, "median")
    s = Z.sort(dim=0).values
    expected = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    _close(mom.logits, expected)
    for f in ("logits", "var", "dispersion"):
        _close(getattr(mom, f), getattr(med, f))


def test_mom_uses_the_generators_groups():
    Z = _uploads(7)
    c = aggregate_logits(Z, "mom", 3, _gen(11))
    ref = median_of_means(Z, random_groups(7, 3, _gen(11)))
    assert torch.equal(c.logits, ref.logits) and torch.equal(c.dispersion, ref.dispersion)


@pytest.mark.parametrize("method, M", [("mom", 1), ("mom", 2), ("mom", 3), ("mom", 6), ("median", None),
                                       ("mean", None)])
def test_robust_variance_is_never_negative(method, M):
    Z = _uploads(6, seed=9)
    assert (aggregate_logits(Z, method, M, _gen()).var >= 0).all()
    # identical clients: mean(z²) and mean(z)² may differ by rounding; the clamp keeps var >= 0
    same = _t([[[0.1, 1 / 3, -7.3, 1e3 + 0.1]]]).expand(6, 1, 4).contiguous()
    c = aggregate_logits(same, method, M, _gen())
    assert (c.var >= 0).all() and c.var.max() < 1e-9
    _close(c.dispersion, [0.0])


def test_groups_that_agree_give_weight_one():
    # the clients differ but both group means are [2, 0] (all values exact in binary)
    Z = _t([[[1, 2]], [[3, -2]], [[4, 0]], [[0, 0]]])
    c = median_of_means(Z, [[0, 1], [2, 3]])
    _close(c.dispersion, [0.0])
    _close(dis_weights(c.dispersion), [1.0])


def test_aggregate_bad_inputs():
    Z = _uploads(4)
    with pytest.raises(ValueError, match="unknown aggregation method 'trimmed'.*mom, median, mean"):
        aggregate_logits(Z, "trimmed")
    with pytest.raises(ValueError, match="needs num_groups"):
        aggregate_logits(Z, "mom")
    with pytest.raises(ValueError, match=r"M \(the number of groups\) must be in \[1, 4\]"):
        aggregate_logits(Z, "mom", 5)
    with pytest.raises(ValueError, match="3-D"):
        aggregate_logits(Z[0], "mean")
    bad = Z.clone()
    bad[1, 0, 0] = math.nan
    with pytest.raises(ValueError, match="NaN or Inf"):
        aggregate_logits(bad, "median")
    with pytest.raises(ValueError, match="client 2 appears 0 times"):
        median_of_means(Z, [[0, 1], [3]])
    with pytest.raises(ValueError, match="client 1 appears 2 times"):
        median_of_means(Z, [[0, 1], [1, 2, 3]])
    with pytest.raises(ValueError, match="group 1 must be a non-empty"):
        median_of_means(Z, [[0, 1, 2, 3], []])
    with pytest.raises(ValueError, match=r"outside \[0, 4\)"):
        median_of_means(Z, [[0, 1, 2, 4]])


# ---------------------------------------------------------------- DIS and CAT


def test_dis_weights_hand_values():
    v = _t([0.0, 1.0, 3.0])
    _close(dis_weights(v), [1.0, 0.5, 0.25])
    _close(dis_weights(v, rho=2.0), [1.0, 1 / 3, 1 / 7])
    _close(dis_weights(v, rho=0.0), [1.0, 1.0, 1.0])


@pytest.mark.parametrize("rho, v", [(-1.0, [1.0]), (math.inf, [1.0]), (1.0, [-0.5]), (1.0, [math.nan])])
def test_dis_weights_bad_inputs(rho, v):
    with pytest.raises(ValueError, match="rho|dispersion"):
        dis_weights(_t(v), rho)


def test_cat_temperature_hand_values():
    z = _t([[0.0, 0.0], [math.log(9), 0.0], [math.log(4), 0.0], [math.log(7), math.log(3)]])
    # max softmax: 0.5 (<= tau), 0.9, 0.8, 0.7 (= tau): T = 2 (1 + 2 [q - 0.7]+)
    _close(cat_temperature(z), [2.0, 2.8, 2.4, 2.0])
    _close(cat_temperature(z, t0=1.0, kappa=10.0, tau=0.5), [1.0, 5.0, 4.0, 3.0])
    _close(cat_temperature(z, kappa=0.0), [2.0] * 4)
    _close(cat_temperature(_t([[5.0]])), [2.0 * (1 + 2 * 0.3)])  # one class: q = 1


def test_cat_is_t0_whenever_the_teacher_is_unconfident():
    z = 0.3 * torch.randn(20, 5, generator=_gen(2), dtype=D)
    assert (torch.softmax(z, -1).amax(-1) <= 0.7).all()
    _close(cat_temperature(z, t0=1.7), torch.full((20,), 1.7, dtype=D))
    # and it never goes below T0 nor above T0 (1 + kappa (1 - tau))
    T = cat_temperature(10 * torch.randn(20, 5, generator=_gen(3), dtype=D))
    assert (T >= 2.0).all() and (T <= 2.0 * (1 + 2 * 0.3) + 1e-12).all()


@pytest.mark.parametrize("kw, word", [({"t0": 0.0}, "t0"), ({"kappa": -1.0}, "kappa"), ({"tau": 1.5}, "tau"),
                                      ({"tau": math.nan}, "tau")])
def test_cat_temperature_bad_parameters(kw, word):
    with pytest.raises(ValueError, match=word):
        cat_temperature(_t([[0.0, 1.0]]), **kw)


# ---------------------------------------------------------------- distillation loss


def _teacher(logits, var, dispersion):
    logits = _t(logits)
    return Consensus(logits=logits, mu=logits, var=_t(var), dispersion=_t(dispersion))


def test_loss_hand_case_and_switches_mmd_dis():
    # teacher z~ = mu = [0, 0] (max softmax 0.5 <= tau, so T = T0 = 2), var = [1, 1], v = 1 -> w = 1/2
    teacher = _teacher([[0.0, 0.0]], [[1.0, 1.0]], [1.0])
    student = _t([[2.0, 0.0]])
    # CE: p = [1/2, 1/2], log q = log_softmax([1, 0]) -> CE = log(1 + e) - 1/2
    ce = math.log(1 + math.e) - 0.5                   # 0.8132616875182228
    # moment: d = [2, 0]: |d|² = 4, d² - var = [3, -1] -> 10; total 14, times lambda 0.1 -> 1.4
    _close(distillation_loss(student, teacher), 0.5 * (ce + 1.4))
    _close(distillation_loss(student, teacher, dis=False), ce + 1.4)
    _close(distillation_loss(student, teacher, mmd=False), 0.5 * ce)
    _close(distillation_loss(student, teacher, mmd=False, dis=False), ce)
    _close(distillation_loss(student, teacher, lam=1.0), 0.5 * (ce + 14.0))
    _close(distillation_loss(student, teacher, rho=3.0), 0.25 * (ce + 1.4))
    # the teacher is unconfident here, so turning CAT off changes nothing
    _close(distillation_loss(student, teacher, cat=False), 0.5 * (ce + 1.4))
    terms = distillation_terms(student, teacher)
    _close(terms.ce, [ce])
    _close(terms.moment, [14.0])
    _close(terms.weight, [0.5])
    _close(terms.temperature, [2.0])


def test_loss_hand_case_switch_cat():
    # confident teacher [ln 9, 0]: softmax [0.9, 0.1] -> T = 2 (1 + 2 * 0.2) = 2.8 with CAT, 2 without.
    # The student equals the teacher, so CE is the entropy of softmax([ln 9, 0] / T):
    #   T = 2:   [0.75, 0.25]                 -> 0.5623351446188082
    #   T = 2.8: 9^(1/2.8) / (9^(1/2.8) + 1) = 0.6866971484142799 -> 0.6217178894050222
    teacher = _teacher([[math.log(9), 0.0]], [[0.0, 0.0]], [0.0])
    student = _t([[math.log(9), 0.0]])
    _close(distillation_loss(student, teacher, mmd=False), 0.6217178894050222)
    _close(distillation_loss(student, teacher, mmd=False, cat=False), 0.5623351446188082)
    _close(distillation_loss(student, teacher, mmd=False, cat=False, t0=1.0),
           -(0.9 * math.log(0.9) + 0.1 * math.log(0.1)))


def _reference_loss(student, Z_logits, mu, var, disp, cat, mmd, dis, t0=2.0, kappa=2.0, tau=0.7, lam=0.1,
                    rho=1.0):
    """The loss written out anchor by anchor, class by class."""
    A, C = student.shape
    total = 0.0
    for x in range(A):
        e = [math.exp(float(Z_logits[x, i])) for i in range(C)]
        conf = max(e) / sum(e)
        T = t0 * (1 + kappa * max(conf - tau, 0.0)) if cat else t0
        w = 1.0 / (1.0 + rho * float(disp[x])) if dis else 1.0
        te = [math.exp(float(Z_logits[x, i]) / T) for i in range(C)]
        p = [v / sum(te) for v in te]
        log_norm = torch.logsumexp(student[x] / T, dim=0)
        ce = -sum(p[i] * (student[x, i] / T - log_norm) for i in range(C))
        term = ce
        if mmd:
            d = [student[x, i] - float(mu[x, i]) for i in range(C)]
            term = term + lam * (sum(di ** 2 for di in d) + sum((d[i] ** 2 - float(var[x, i])) ** 2 for i in range(C)))
        total = total + w * term
    return total / A


@pytest.mark.parametrize("cat", [True, False])
@pytest.mark.parametrize("mmd", [True, False])
@pytest.mark.parametrize("dis", [True, False])
def test_loss_and_gradient_match_a_direct_reimplementation(cat, mmd, dis):
    Z = clip_logits(_uploads(5, A=3, C=4, seed=21), 4.0)
    teacher = aggregate_logits(Z, "mom", 2, _gen(1))
    s0 = torch.randn(3, 4, generator=_gen(22), dtype=D)
    s1 = s0.clone().requires_grad_(True)
    s2 = s0.clone().requires_grad_(True)
    loss = distillation_loss(s1, teacher, cat=cat, mmd=mmd, dis=dis)
    ref = _reference_loss(s2, teacher.logits, teacher.mu, teacher.var, teacher.dispersion, cat, mmd, dis)
    _close(loss, ref)
    loss.backward()
    ref.backward()
    _close(s1.grad, s2.grad)


def test_gradient_matches_the_closed_form():
    # d/dz_W of w (CE + lam M) / A = (w / A) ((q - p) / T + lam (2 d + 4 d (d² - var)))
    Z = _uploads(6, A=4, C=3, seed=5)
    teacher = aggregate_logits(Z, "median")
    s = torch.randn(4, 3, generator=_gen(6), dtype=D, requires_grad=True)
    distillation_loss(s, teacher, lam=0.3, rho=0.5).backward()
    T = cat_temperature(teacher.logits)[:, None]
    w = (1 / (1 + 0.5 * teacher.dispersion))[:, None]
    p, q = torch.softmax(teacher.logits / T, -1), torch.softmax(s.detach() / T, -1)
    d = s.detach() - teacher.mu
    expected = w / 4 * ((q - p) / T + 0.3 * (2 * d + 4 * d * (d * d - teacher.var)))
    _close(s.grad, expected)


def test_gradient_finite_differences_float64():
    Z = _uploads(4, A=2, C=3, seed=8)
    teacher = aggregate_logits(Z, "mom", 2, _gen(3))
    s = torch.randn(2, 3, generator=_gen(9), dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: distillation_loss(x, teacher), (s,), eps=1e-6, atol=1e-6)


def test_no_gradient_reaches_the_teacher():
    Z = _uploads(5).requires_grad_(True)
    teacher = aggregate_logits(Z, "mom", 3, _gen())
    s = torch.zeros(3, 4, dtype=D, requires_grad=True)
    distillation_loss(s, teacher).backward()
    assert Z.grad is None and s.grad is not None


def test_loss_bad_inputs():
    teacher = _teacher([[0.0, 0.0]], [[1.0, 1.0]], [1.0])
    with pytest.raises(ValueError, match=r"shape \(A, C\) = \(1, 2\)"):
        distillation_loss(_t([[1.0, 2.0, 3.0]]), teacher)
    with pytest.raises(ValueError, match="student_logits contains NaN"):
        distillation_loss(_t([[math.nan, 0.0]]), teacher)
    with pytest.raises(ValueError, match="lam"):
        distillation_loss(_t([[0.0, 0.0]]), teacher, lam=-0.1)
    with pytest.raises(ValueError, match="rho"):
        distillation_loss(_t([[0.0, 0.0]]), teacher, dis=False, rho=-1.0)
    with pytest.raises(ValueError, match="t0"):
        distillation_loss(_t([[0.0, 0.0]]), teacher, cat=False, t0=0.0)
    with pytest.raises(ValueError, match="kappa"):
        distillation_loss(_t([[0.0, 0.0]]), teacher, cat=False, kappa=-1.0)
    with pytest.raises(ValueError, match="dispersion must be"):
        distillation_loss(_t([[0.0, 0.0]]), _teacher([[0.0, 0.0]], [[1.0, 1.0]], [1.0, 2.0]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        teacher.var = teacher.mu  # type: ignore[misc]
    with pytest.raises(ValueError, match="must be a Consensus"):
        distillation_loss(_t([[0.0, 0.0]]), _t([[0.0, 0.0]]))


# ---------------------------------------------------------------- LoRA baselines


def test_fedit_hand_average():
    As = [_t([[1.0, 2.0]]), _t([[3.0, 4.0]])]
    Bs = [_t([[1.0], [0.0]]), _t([[0.0], [2.0]])]
    A, B = fedit_average(As, Bs, [1, 3])              # p = [1/4, 3/4]
    _close(A, [[2.5, 3.5]])                           # 1/4 [1, 2] + 3/4 [3, 4]
    _close(B, [[0.25], [1.5]])                        # 1/4 [1, 0] + 3/4 [0, 2]
    A, B = fedit_average(As, Bs, None)                # equal weights
    _close(A, [[2.0, 3.0]])
    _close(B, [[0.5], [1.0]])


def test_ffa_hand_average():
    Bs = [_t([[1.0, 2.0], [3.0, 4.0]]), _t([[5.0, 6.0], [7.0, 8.0]])]
    _close(ffa_average(Bs, [2, 2]), [[3.0, 4.0], [5.0, 6.0]])
    _close(ffa_average(Bs, [0, 1]), Bs[1])
    with pytest.raises(ValueError, match="client 1: B has shape"):
        ffa_average([Bs[0], _t([[1.0], [2.0]])], None)


def test_flora_hand_stack():
    # client 0: rank 1, B0 A0 = [[1, 0], [1, 0]]; client 1: rank 2, B1 A1 = [[0, 1], [1, 0]]; alpha = 2
    # dW0 = 2/1 * B0 A0 = [[2, 0], [2, 0]], dW1 = 2/2 * B1 A1 = [[0, 1], [1, 0]]; mean [[1, .5], [1.5, 0]]
    As = [_t([[1.0, 0.0]]), _t([[0.0, 1.0], [1.0, 0.0]])]
    Bs = [_t([[1.0], [1.0]]), _t([[1.0, 0.0], [0.0, 1.0]])]
    A_s, B_s = flora_stack(As, Bs, [1, 1], alpha=2.0)
    _close(A_s, [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    _close(B_s, [[1.0, 0.5, 0.0], [1.0, 0.0, 0.5]])  # columns c_k B_k with c = [1/2 * 2/1, 1/2 * 2/2]
    _close(B_s @ A_s, [[1.0, 0.5], [1.5, 0.0]])


def test_flora_product_is_the_weighted_sum_of_updates():
    g = _gen(4)
    ranks, d_out, d_in, alpha, w = (1, 2, 3), 4, 5, 8.0, [1.0, 2.0, 3.0]
    As = [torch.randn(r, d_in, generator=g, dtype=D) for r in ranks]
    Bs = [torch.randn(d_out, r, generator=g, dtype=D) for r in ranks]
    A_s, B_s = flora_stack(As, Bs, w, alpha)
    assert A_s.shape == (6, d_in) and B_s.shape == (d_out, 6)
    expected = sum((wk / 6.0) * (alpha / r) * (B @ A) for wk, r, A, B in zip(w, ranks, As, Bs))
    _close(B_s @ A_s, expected)
    _close(lora_delta(As[1], Bs[1], alpha), (alpha / 2) * Bs[1] @ As[1])


def _clients(ranks=(2, 3), d_out=6, d_in=5, seed=12):
    g = _gen(seed)
    As = [torch.randn(r, d_in, generator=g, dtype=D) for r in ranks]
    Bs = [torch.randn(d_out, r, generator=g, dtype=D) for r in ranks]
    return As, Bs


def test_flexlora_full_rank_reproduces_the_average():
    As, Bs = _clients()
    alpha, w = 4.0, [3.0, 1.0]
    W = 0.75 * (alpha / 2) * Bs[0] @ As[0] + 0.25 * (alpha / 3) * Bs[1] @ As[1]
    out = flexlora_redistribute(As, Bs, w, [5, 2], alpha)
    A, B = out[5]
    assert A.shape == (5, 5) and B.shape == (6, 5)
    _close((alpha / 5) * B @ A, W, atol=1e-10)


def test_flexlora_lower_rank_is_the_best_approximation():
    As, Bs = _clients()
    alpha, w = 4.0, [3.0, 1.0]
    W = 0.75 * (alpha / 2) * Bs[0] @ As[0] + 0.25 * (alpha / 3) * Bs[1] @ As[1]
    U, S, Vh = torch.linalg.svd(W)
    out = flexlora_redistribute(As, Bs, w, (1, 2, 3), alpha)
    g = _gen(13)
    for r, (A, B) in out.items():
        assert A.shape == (r, 5) and B.shape == (6, r)
        approx = (alpha / r) * B @ A
        _close(approx, U[:, :r] @ torch.diag(S[:r]) @ Vh[:r], atol=1e-10)
        err = torch.linalg.norm(W - approx)
        _close(err, S[r:].square().sum().sqrt(), atol=1e-10)  # Eckart–Young: the tail energy
        rivals = [torch.randn(6, r, generator=g, dtype=D) @ torch.randn(r, 5, generator=g, dtype=D)
                  for _ in range(20)]
        rivals.append(U[:, 1:r + 1] @ torch.diag(S[1:r + 1]) @ Vh[1:r + 1])       # the wrong singular triples
        rivals.append(approx + 1e-3 * torch.randn(6, r, generator=g, dtype=D) @ Vh[:r])  # a nearby rank-r
        for rival in rivals:
            assert err <= torch.linalg.norm(W - rival) + 1e-12


def test_flexlora_hand_case():
    # one client, rank 2, alpha = 2: dW = (2/2) diag(3, 1) I = diag(3, 1). Rank 1 keeps diag(3, 0):
    # A = sqrt(3) e1ᵀ, B = (1/2) sqrt(3) e1 (up to a common sign), and (2/1) B A = diag(3, 0).
    out = flexlora_redistribute([torch.eye(2, dtype=D)], [_t([[3.0, 0.0], [0.0, 1.0]])], None, 1, 2.0)
    A, B = out[1]
    _close(A.abs(), [[math.sqrt(3), 0.0]])
    _close(B.abs(), [[math.sqrt(3) / 2], [0.0]])
    _close(2.0 * B @ A, [[3.0, 0.0], [0.0, 0.0]])


def test_flexlora_rank_above_the_layer_is_the_update_padded_with_zeros():
    # the hand case at rank 3 on a 2 × 2 layer: the update diag(3, 1) itself, in rank-3 shapes
    # (A (3, 2), B (2, 3)) whose third component is zero: (2/3) B A = diag(3, 1) exactly.
    A, B = flexlora_redistribute([torch.eye(2, dtype=D)], [_t([[3.0, 0.0], [0.0, 1.0]])], None, 3, 2.0)[3]
    assert A.shape == (3, 2) and B.shape == (2, 3)
    _close(A[2], [0.0, 0.0])
    _close(B[:, 2], [0.0, 0.0])
    _close(2.0 / 3 * B @ A, [[3.0, 0.0], [0.0, 1.0]])


def test_lora_bad_inputs():
    As, Bs = _clients((2, 2))
    with pytest.raises(ValueError, match="client 1: A has shape"):
        fedit_average([As[0], As[1][:1]], [Bs[0], Bs[1][:, :1]], None)
    with pytest.raises(ValueError, match="client 1: B has 1 columns but A has 2 rows"):
        flora_stack(As, [Bs[0], Bs[1][:, :1]], None, 1.0)
    with pytest.raises(ValueError, match="client 1: A has d_in = 4"):
        flora_stack([As[0], As[1][:, :4]], Bs, None, 1.0)
    with pytest.raises(ValueError, match="client 1: B has d_out = 5"):
        flora_stack(As, [Bs[0], Bs[1][:5]], None, 1.0)
    bad = As[1].clone()
    bad[0, 0] = math.inf
    with pytest.raises(ValueError, match="A of client 1 contains NaN or Inf"):
        fedit_average([As[0], bad], Bs, None)
    with pytest.raises(ValueError, match="client 1 has weight -1"):
        fedit_average(As, Bs, [1.0, -1.0])
    with pytest.raises(ValueError, match="positive sum"):
        fedit_average(As, Bs, [0.0, 0.0])
    with pytest.raises(ValueError, match=r"weights must have shape \(2,\)"):
        fedit_average(As, Bs, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="weights contain NaN"):
        ffa_average(Bs, [math.nan, 1.0])
    with pytest.raises(ValueError, match="one matrix per client each"):
        fedit_average(As, Bs[:1], None)
    with pytest.raises(ValueError, match="non-empty list"):
        flora_stack([], [], None, 1.0)
    with pytest.raises(ValueError, match="alpha"):
        flora_stack(As, Bs, None, 0.0)
    with pytest.raises(ValueError, match=r"target rank must be in >= 1, got 0"):
        flexlora_redistribute(As, Bs, None, [2, 0], 1.0)
    with pytest.raises(ValueError, match="ranks is empty"):
        flexlora_redistribute(As, Bs, None, [], 1.0)
    with pytest.raises(ValueError, match="2-D matrix"):
        ffa_average([torch.zeros(3, dtype=D)], None)
