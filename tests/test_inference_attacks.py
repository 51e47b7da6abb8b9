"""Tests for fedcal.inference.probit_attacks against hand-computed expectations."""
import math

import numpy as np
import pytest
import torch

from fedcal.inference.probit_attacks import (
    OFF_SIMPLEX, PROBIT_ATTACKS, adversary_mask, apply_attack, class_covariance, cpa, cw_margin,
    lma, logit_flip, pgd_cw, sia_blackbox, sia_whitebox, validate_probits)


def mean_agg(p):
    return p.mean(1)


def geo_agg(p):
    """Small differentiable non-linear aggregator: normalised geometric mean."""
    return torch.softmax(p.clamp_min(1e-12).log().mean(1), dim=-1)


def _batch(B=6, n=7, C=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2.0 * torch.randn(B, n, C, generator=g), -1)


def _context(p):
    B = p.shape[0]
    return dict(aggregator=mean_agg, labels=torch.arange(B) % p.shape[-1],
                class_cov=class_covariance(_batch(20, 7, p.shape[-1], seed=5)),
                steps=5, kappa=math.inf, generator=torch.Generator().manual_seed(1))


# ------------------------------------------------------------------ generic
def test_adversary_mask_counts_and_seed():
    m1 = adversary_mask(50, 9, 4, torch.Generator().manual_seed(3))
    m2 = adversary_mask(50, 9, 4, torch.Generator().manual_seed(3))
    m3 = adversary_mask(50, 9, 4, torch.Generator().manual_seed(4))
    assert m1.dtype == torch.bool and m1.shape == (50, 9)
    assert (m1.sum(1) == 4).all()
    assert torch.equal(m1, m2) and not torch.equal(m1, m3)
    # identities redrawn per query
    assert len({tuple(r.tolist()) for r in m1}) > 1
    assert (adversary_mask(3, 5, 0).sum() == 0)
    for f in (5, 6, -1):
        with pytest.raises(ValueError):
            adversary_mask(3, 10, f)


@pytest.mark.parametrize("name", sorted(PROBIT_ATTACKS))
@pytest.mark.parametrize("agg", [mean_agg, geo_agg])
def test_every_attack_valid_and_only_masked_rows(name, agg):
    p = _batch()
    mask = adversary_mask(p.shape[0], p.shape[1], 3, torch.Generator().manual_seed(0))
    ctx = _context(p)
    ctx["aggregator"] = agg
    before = p.clone()
    out = apply_attack(name, p, mask, **ctx)
    assert out is not p and torch.equal(p, before)  # input untouched
    assert out.shape == p.shape
    assert torch.equal(out[~mask], p[~mask])        # honest rows bit-identical
    if name in OFF_SIMPLEX:  # the literature's code's rows: not probit vectors, and the server can tell
        assert not validate_probits(out)[mask].any() and validate_probits(out)[~mask].all()
    else:
        assert (out >= 0).all() and torch.allclose(out.sum(-1), torch.ones(p.shape[:2]), atol=1e-5)
        assert validate_probits(out).all()
    if name != "none":
        assert not torch.equal(out[mask], p[mask])


def test_shape_errors():
    p = _batch()
    mask = torch.zeros(p.shape[:2], dtype=torch.bool)
    with pytest.raises(ValueError):
        lma(p[0], mask)
    with pytest.raises(ValueError):
        lma(p, mask[:, :-1])
    with pytest.raises(ValueError):
        lma(p, mask.int())
    with pytest.raises(ValueError):
        cpa(p, mask, torch.eye(3))
    with pytest.raises(ValueError):
        sia_whitebox(p, mask, mean_agg, torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError):
        apply_attack("nope", p, mask)
    with pytest.raises(ValueError):
        apply_attack("cpa", p, mask)  # missing class_cov


# ------------------------------------------------------------------ logit flip
def test_logit_flip_hand_example():
    z = np.array([2.0, 0.5, -1.0])
    a = 3.0
    e = np.exp(-a * z)
    expected = e / e.sum()
    p = torch.tensor([[[0.7, 0.2, 0.1], [0.6, 0.3, 0.1]]], dtype=torch.float64)
    logits = torch.tensor([[[0.0, 0.0, 0.0], z.tolist()]], dtype=torch.float64)
    mask = torch.tensor([[False, True]])
    out = logit_flip(p, mask, logits=logits, amplification=a)
    np.testing.assert_allclose(out[0, 1].numpy(), expected, rtol=1e-12)
    assert torch.equal(out[0, 0], p[0, 0])
    # without logits: z = log p -> softmax(-a log p) ∝ p^-a
    out2 = logit_flip(p, mask, amplification=2.0)
    q = np.array([0.6, 0.3, 0.1]) ** -2.0
    np.testing.assert_allclose(out2[0, 1].numpy(), q / q.sum(), rtol=1e-9)


# ------------------------------------------------------------------ SIA
def test_sia_blackbox_own_runner_up():
    p = torch.tensor([[[0.5, 0.3, 0.2],    # runner-up 1
                       [0.1, 0.3, 0.6],    # runner-up 1
                       [0.2, 0.1, 0.7],    # runner-up 0
                       [0.6, 0.1, 0.3]]])  # honest
    mask = torch.tensor([[True, True, True, False]])
    out = sia_blackbox(p, mask)
    expected = torch.tensor([[0., 1, 0], [0, 1, 0], [1, 0, 0]])
    assert torch.equal(out[0, :3], expected)
    assert torch.equal(out[0, 3], p[0, 3])


def test_sia_blackbox_colluding():
    p = torch.tensor([[[0.5, 0.3, 0.2],
                       [0.1, 0.3, 0.6],
                       [0.2, 0.1, 0.7],
                       [0.0, 1.0, 0.0],    # honest, excluded from the mean
                       [0.0, 1.0, 0.0]]])
    mask = torch.tensor([[True, True, True, False, False]])
    # adversary mean = [0.2667, 0.2333, 0.5] -> runner-up 0
    out = sia_blackbox(p, mask, colluding=True)
    for i in range(3):
        assert torch.equal(out[0, i], torch.tensor([1., 0, 0]))
    assert torch.equal(out[0, 3:], p[0, 3:])


def test_sia_whitebox_matches_mean_aggregator_runner_up():
    p = _batch(B=40, n=7, C=5, seed=2)
    mask = adversary_mask(40, 7, 3, torch.Generator().manual_seed(2))
    labels = torch.randint(0, 5, (40,), generator=torch.Generator().manual_seed(9))
    out = sia_whitebox(p, mask, mean_agg, labels)
    clean = p.numpy().mean(1)                 # independent mean aggregate
    order = np.argsort(-clean, axis=1)
    n_top_correct = 0
    for b in range(40):
        top, second = order[b, 0], order[b, 1]
        if top == labels[b].item():
            want = second
            n_top_correct += 1
        else:
            want = top
        for i in np.flatnonzero(mask[b].numpy()):
            assert out[b, i].argmax().item() == want and out[b, i].max().item() == 1.0
    assert 0 < n_top_correct < 40  # both branches exercised


# ------------------------------------------------------------------ LMA / CPA
def test_lma_least_likely_of_honest_mean():
    p = torch.tensor([[[0.5, 0.2, 0.3],
                       [0.4, 0.4, 0.2],
                       [0.0, 0.0, 1.0]]])  # adversarial row must be excluded
    mask = torch.tensor([[False, False, True]])
    # honest mean [0.45, 0.3, 0.25] -> least likely 2 (with the adv row it would be 1)
    out = lma(p, mask)
    assert torch.equal(out[0, 2], torch.tensor([0., 0, 1]))


def test_cpa_hand_covariance():
    S = torch.tensor([[1.0, -0.5, 0.2, -0.1],
                      [-0.5, 1.0, -0.3, 0.4],
                      [0.2, -0.3, 1.0, -0.9],
                      [-0.1, 0.4, -0.9, 1.0]])
    p = torch.tensor([[[0.1, 0.2, 0.6, 0.1], [0.2, 0.1, 0.5, 0.2], [0.9, 0.05, 0.03, 0.02]],
                      [[0.7, 0.1, 0.1, 0.1], [0.6, 0.2, 0.1, 0.1], [0.1, 0.1, 0.1, 0.7]]])
    mask = torch.tensor([[False, False, True], [False, False, True]])
    out = cpa(p, mask, S)
    # query 0: honest class 2 -> argmin S[2] = 3 ; query 1: class 0 -> argmin S[0] = 1
    assert torch.equal(out[0, 2], torch.tensor([0., 0, 0, 1]))
    assert torch.equal(out[1, 2], torch.tensor([0., 1, 0, 0]))


def test_class_covariance_matches_numpy():
    h = _batch(10, 4, 3, seed=7)
    S = class_covariance(h)
    ref = np.cov(h.reshape(-1, 3).numpy(), rowvar=False)
    np.testing.assert_allclose(S.numpy(), ref, atol=1e-6)
    assert S.shape == (3, 3)
    honest = torch.ones(10, 4, dtype=torch.bool)
    honest[:, 0] = False
    ref2 = np.cov(h[:, 1:].reshape(-1, 3).numpy(), rowvar=False)
    np.testing.assert_allclose(class_covariance(h, honest).numpy(), ref2, atol=1e-6)


# ------------------------------------------------------------------ PGD-CW
def _cw_np(agg, labels):
    lp = np.log(np.clip(agg, 1e-12, None))
    out = []
    for b, y in enumerate(labels):
        other = np.delete(lp[b], y).max()
        out.append(other - lp[b, y])
    return np.array(out)


def test_pgd_cw_beats_clean_and_sia_on_mean():
    B, n, f, C = 24, 9, 2, 4
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, C, (B,), generator=g)
    z = 0.8 * torch.randn(B, n, C, generator=g)
    z[torch.arange(B), :, labels] += 1.5      # confident but not overwhelmingly
    p = torch.softmax(z, -1).double()
    mask = adversary_mask(B, n, f, g)
    clean = mean_agg(p)
    assert (clean.argmax(-1) == labels).float().mean() > 0.8

    # step 0.5 so softmax(u) saturates within 50 steps; restarts escape the local
    # optimum when the aggregate's runner-up classes are nearly tied
    out = pgd_cw(p, mask, mean_agg, labels, steps=50, step_size=0.5, kappa=math.inf,
                 restarts=5, generator=torch.Generator().manual_seed(0))
    sia = sia_whitebox(p, mask, mean_agg, labels)
    loss_clean = _cw_np(clean.numpy(), labels.numpy())
    loss_pgd = _cw_np(out.numpy().mean(1), labels.numpy())
    loss_sia = _cw_np(sia.numpy().mean(1), labels.numpy())
    assert (loss_pgd > loss_clean).all()
    assert loss_pgd.mean() >= loss_sia.mean()
    acc_clean = (clean.argmax(-1) == labels).float().mean()
    acc_pgd = (out.mean(1).argmax(-1) == labels).float().mean()
    assert acc_pgd < acc_clean
    assert validate_probits(out).all() and torch.equal(out[~mask], p[~mask])

    # default kappa=0: objective capped at 0, still strictly improves every query
    out0 = pgd_cw(p, mask, mean_agg, labels)
    m0 = cw_margin(out0.mean(1), labels, kappa=0.0)
    mc = cw_margin(clean, labels, kappa=0.0)
    assert (m0 >= mc).all() and (m0[mc < 0] > mc[mc < 0]).all()


def test_pgd_cw_restarts_reproducible_and_no_param_grad():
    p = _batch(B=4, n=5, C=3, seed=3)
    mask = adversary_mask(4, 5, 2, torch.Generator().manual_seed(0))
    labels = torch.tensor([0, 1, 2, 0])
    w = torch.nn.Parameter(torch.ones(5))

    def weighted(q):
        return (q * torch.softmax(w, 0)[None, :, None]).sum(1)

    a = pgd_cw(p, mask, weighted, labels, steps=5, restarts=3,
               generator=torch.Generator().manual_seed(1))
    b = pgd_cw(p, mask, weighted, labels, steps=5, restarts=3,
               generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    assert w.grad is None
    # more restarts never hurts (restart 0 identical, best kept)
    one = pgd_cw(p, mask, weighted, labels, steps=5, restarts=1, kappa=math.inf)
    three = pgd_cw(p, mask, weighted, labels, steps=5, restarts=3, kappa=math.inf,
                   generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (cw_margin(weighted(three), labels) >= cw_margin(weighted(one), labels) - 1e-6).all()


# ------------------------------------------------------------------ validation
def test_validate_probits_flags_bad_rows():
    p = torch.full((2, 4, 3), 1 / 3)
    p[0, 1, 0] = float("nan")
    p[0, 2] = torch.tensor([1.2, -0.2, 0.0])   # sums to 1 but negative
    p[1, 0] = torch.tensor([0.5, 0.5, 0.5])    # wrong sum
    p[1, 3, 2] = float("inf")
    v = validate_probits(p)
    expected = torch.tensor([[True, False, False, True], [False, True, True, False]])
    assert torch.equal(v, expected)
    assert not validate_probits(p, num_classes=4).any()
    p2 = torch.full((1, 2, 3), 1 / 3)
    p2[0, 0, 0] += 5e-5
    assert validate_probits(p2).all() and not validate_probits(p2, atol=1e-6)[0, 0]
    with pytest.raises(ValueError):
        validate_probits(p[0])


# ------------------------------------------------------------------ the literature's protocol (issue 35 §1)
def test_sia_whitebox_raise_is_the_authors_scatter():
    """The authors' white-box SIA keeps the adversary's own row and raises the target's entry to 1
    (x.scatter(-1, t, 1)): hand-computed rows, summing to 2 - p_t, against SPEC's one-hot."""
    p = torch.tensor([[[0.6, 0.3, 0.1],      # honest
                       [0.5, 0.1, 0.4],      # honest
                       [0.7, 0.2, 0.1]]])    # adversary
    mask = torch.tensor([[False, False, True]])
    labels = torch.tensor([0])
    # clean mean = [0.6, 0.2, 0.2]: top is the label, the most probable wrong class is 1 (first of the tie)
    out = PROBIT_ATTACKS["sia_whitebox_raise"](p, mask, mean_agg, labels)
    assert torch.allclose(out[0, 2], torch.tensor([0.7, 1.0, 0.1]))
    assert torch.equal(out[0, :2], p[0, :2])
    assert torch.equal(sia_whitebox(p, mask, mean_agg, labels)[0, 2], torch.tensor([0.0, 1.0, 0.0]))
    # it keeps the honest mass on the label: the mean stays right where the one-hot row flips it
    # label 1, the adversary's own row on the label: raised row [1, 0.9, 0.05], mean of class 1 stays
    # (0.6 + 0.5 + 0.9)/3 = 0.667 > class 0's (0.3 + 0.3 + 1)/3 = 0.533; the one-hot row leaves class 1 at 0.367
    flip = torch.tensor([[[0.3, 0.6, 0.1], [0.3, 0.5, 0.2], [0.05, 0.9, 0.05]]])
    y = torch.tensor([1])
    raised = PROBIT_ATTACKS["sia_whitebox_raise"](flip, mask, mean_agg, y)
    one_hot = sia_whitebox(flip, mask, mean_agg, y)
    assert raised.mean(1).argmax().item() == 1 and one_hot.mean(1).argmax().item() == 0


def test_cw_margin_in_probability_space():
    agg = torch.tensor([[0.5, 0.3, 0.2], [0.2, 0.7, 0.1]])
    y = torch.tensor([0, 0])
    np.testing.assert_allclose(cw_margin(agg, y, space="prob").numpy(), [0.3 - 0.5, 0.7 - 0.2], atol=1e-7)
    np.testing.assert_allclose(cw_margin(agg, y, kappa=0.1, space="prob").numpy(), [-0.2, 0.1], atol=1e-7)
    np.testing.assert_allclose(cw_margin(agg, y).numpy(), np.log([0.3 / 0.5, 0.7 / 0.2]), rtol=1e-6)
    with pytest.raises(ValueError, match="space"):
        cw_margin(agg, y, space="logits")


@pytest.mark.parametrize("start", ["own", "uniform"])
@pytest.mark.parametrize("loss", ["logit", "prob"])
def test_pgd_cw_rows_stay_on_the_simplex(start, loss):
    p = _batch(B=8, n=7, C=5, seed=4)
    mask = adversary_mask(8, 7, 3, torch.Generator().manual_seed(0))
    labels = torch.arange(8) % 5
    out = pgd_cw(p, mask, geo_agg, labels, steps=15, start=start, loss=loss, kappa=math.inf,
                 generator=torch.Generator().manual_seed(0))
    assert validate_probits(out).all() and torch.equal(out[~mask], p[~mask])
    again = pgd_cw(p, mask, geo_agg, labels, steps=15, start=start, loss=loss, kappa=math.inf,
                   generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)  # the uniform start is drawn from the generator
    with torch.no_grad():
        assert (cw_margin(geo_agg(out), labels) >= cw_margin(geo_agg(p), labels) - 1e-6).all() or loss == "prob"
        assert (cw_margin(geo_agg(out), labels, space=loss) >= cw_margin(geo_agg(p), labels, space=loss) - 1e-6).all()
    with pytest.raises(ValueError, match="start"):
        pgd_cw(p, mask, geo_agg, labels, start="vertex")


def test_a_confident_own_row_spends_the_step_budget_a_uniform_start_does_not():
    """Why fedcal's PGD-CW got stronger from 20 to 50 steps: from the adversary's own confident row
    (log-probability gap 10 for the label) steps of 0.1 move each logit by 0.1, so 20 steps leave
    the row on the label; from a near-uniform row (logits in [0, 1)) 20 steps reach the target's
    corner. Two adversaries of five, plain mean: mean = [0.6·3 + 2·p0, ...]/5 flips once both rows
    put > 0.8 on class 1 (class 1: (0.9 + 2·0.8)/5 = 0.5 > class 0's (1.8 + 2·0.1)/5 = 0.4)."""
    honest = torch.tensor([0.6, 0.3, 0.1])
    own = torch.softmax(torch.tensor([10.0, 0.0, 0.0]), -1)
    p = torch.stack([honest, honest, honest, own, own])[None].double()
    mask = torch.tensor([[False, False, False, True, True]])
    y = torch.tensor([0])

    def flips(**kw):
        out = pgd_cw(p, mask, mean_agg, y, generator=torch.Generator().manual_seed(0), **kw)
        return mean_agg(out).argmax().item() != 0

    assert not flips(steps=20, start="own")
    assert flips(steps=100, start="own")       # 100 steps move the label down and class 1 up by 10 each
    assert flips(steps=20, start="uniform")


def _hand_deepset(C=3, k=20.0):
    """A DeepSet with hand-set weights: rho and mu's first layer the identity (probits are
    non-negative, so the ReLUs pass them), mu's output k·I: DeepSet(Z) = softmax(k · pool_i z_i).
    Its trimmed view is softmax(k · CWTM(Z)): the coordinate-wise trimmed mean, by hand."""
    from fedcal.inference.deepset import DeepSet

    ds = DeepSet(C, hidden=C, seed=0)
    with torch.no_grad():
        for lin in (ds.rho[0], ds.rho[2], ds.mu[0]):
            lin.weight.copy_(torch.eye(C))
            lin.bias.zero_()
        ds.mu[2].weight.copy_(k * torch.eye(C))
        ds.mu[2].bias.zero_()
    return ds


def test_the_attack_through_trimming_beats_the_transfer_from_the_untrimmed_model():
    """White-box PGD against the deployed DeepSet-TM (through its trimming, exact or BPDA) is at
    least as strong as PGD crafted against the same weights with mean pooling and then sent to
    DeepSet-TM. Hand case, n = 5, f = 1, label 0, the adversary last:

    * the mean's best vertex is e1 (margin (0.29+0.28+0.28+0.31+1)/5 − (0.70+0.43+0.32+0.27)/5 = 0.088,
      e2's is 0.080), but under the trimmed mean e1 leaves class 0 ahead: class 0 keeps
      (0.27+0.32+0.43)/3 = 0.34, class 1 (0.28+0.29+0.31)/3 = 0.293;
    * e2 wins under the trimmed mean: class 2 keeps (0.29+0.40+0.42)/3 = 0.37 > 0.34.
    """
    from fedcal.inference.deepset import DeepSetTM

    ds = _hand_deepset()
    tm = DeepSetTM.from_deepset(ds, 1)
    p = torch.tensor([[[0.70, 0.29, 0.01], [0.43, 0.28, 0.29], [0.32, 0.28, 0.40], [0.27, 0.31, 0.42],
                       [0.36, 0.35, 0.29]]])
    mask = torch.tensor([[False, False, False, False, True]])
    y = torch.tensor([0])
    with torch.no_grad():
        assert tm(p).argmax().item() == 0 and ds(p).argmax().item() == 0
        e1, e2 = p.clone(), p.clone()
        e1[0, 4], e2[0, 4] = torch.tensor([0.0, 1.0, 0.0]), torch.tensor([0.0, 0.0, 1.0])
        assert tm(e1).argmax().item() == 0 and tm(e2).argmax().item() == 2  # the hand values above
    transfer = pgd_cw(p, mask, ds, y, steps=50, kappa=math.inf)  # the untrimmed model's attack
    assert transfer[0, 4].argmax().item() == 1
    for view in (tm, tm.as_bpda()):
        white = pgd_cw(p, mask, view, y, steps=50)
        with torch.no_grad():
            assert tm(white).argmax().item() != 0                  # through the trimming: the label falls
            assert cw_margin(tm(white), y) >= cw_margin(tm(transfer), y)
    with torch.no_grad():
        assert tm(transfer).argmax().item() == 0                   # the transferred row does not


def test_bpda_views_keep_the_value_and_take_the_means_gradient():
    """BPDA (the authors' BPDATrimmedMean / BPDAMedian): the deployed value, the mean's gradient — every
    row gets 1/n of it; the exact subgradient gives the trimmed rows nothing."""
    from fedcal.inference.aggregators import CoordinateMedian, TrimmedMean

    h = torch.tensor([[[0.1, 5.0], [0.2, 0.3], [0.3, 0.1], [0.4, 0.2], [9.0, 0.4]]], requires_grad=True)  # (1, 5, 2)
    ds = _hand_deepset(C=2)
    from fedcal.inference.deepset import DeepSetTM
    tm = DeepSetTM.from_deepset(ds, 1)
    exact, bpda = tm.pool(h), tm.as_bpda().pool(h)
    assert torch.equal(exact, bpda)
    np.testing.assert_allclose(exact.detach().numpy(), [[(0.2 + 0.3 + 0.4) / 3, (0.2 + 0.3 + 0.4) / 3]], rtol=1e-6)
    (g_exact,) = torch.autograd.grad(exact.sum(), h)
    (g_bpda,) = torch.autograd.grad(bpda.sum(), h)
    assert torch.allclose(g_bpda, torch.full_like(h, 1 / 5))
    kept = torch.tensor([[[0, 0], [1, 1], [1, 0], [1, 1], [0, 1]]], dtype=torch.bool)  # not trimmed, per coordinate
    assert torch.allclose(g_exact, torch.where(kept, 1 / 3, 0.0))
    assert tm.as_bpda().rho is ds.rho and tm.as_bpda().f == 1
    p = _batch(B=3, n=5, C=4, seed=1)
    for agg in (TrimmedMean(1), CoordinateMedian()):
        assert torch.equal(agg(p), agg.as_bpda()(p))
        q = p.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(agg.as_bpda()(q)[:, 0].sum(), q)
        assert (g != 0).all()  # every client row gets a gradient (exact: only the kept/median rows)


# ------------------------------------------------------------------ attacks on logits
def test_amplified_one_hot_by_hand():
    """The authors' logit one-hot (Baselines/CoPur/Attacks/sia.py), both branches."""
    from fedcal.inference.logit_attacks import amplified_one_hot

    z = torch.tensor([[3.0, -1.0, 0.5], [-2.0, -0.5, -4.0]])
    out = amplified_one_hot(z, torch.tensor([1, 0]), amplification=2.0)
    # max 3 > 0: fill -2·3, target +2·3; max -0.5 <= 0: fill 2·(-4), target -2·(-4)
    assert torch.equal(out, torch.tensor([[-6.0, 6.0, -6.0], [8.0, -8.0, -8.0]]))


def test_attack_logits_forms():
    """Logit flipping sends -a·z (unbounded, unlike its probit form); a one-hot attack sends the probit
    attack's target in the amplified logit form; PGD moves only the adversarial logits, raising the margin."""
    from fedcal.inference.logit_attacks import amplified_one_hot, attack_logits

    g = torch.Generator().manual_seed(3)
    z = 3.0 * torch.randn(6, 5, 4, generator=g)
    p = torch.softmax(z, -1)
    mask = adversary_mask(6, 5, 2, torch.Generator().manual_seed(1))
    labels = torch.arange(6) % 4
    flipped = attack_logits("logit_flip", z, p, mask, amplification=16.0)
    assert torch.equal(flipped[mask], -16.0 * z[mask]) and torch.equal(flipped[~mask], z[~mask])
    assert torch.allclose(torch.softmax(flipped, -1), logit_flip(p, mask, logits=z, amplification=16.0), atol=1e-6)
    lm = attack_logits("lma", z, p, mask, amplification=2.0)
    target = lma(p, mask).argmax(-1)
    assert torch.equal(lm[mask], amplified_one_hot(z, target, 2.0)[mask]) and torch.equal(lm[~mask], z[~mask])

    def softmax_mean(logits):
        return torch.softmax(logits, -1).mean(1)

    wb = attack_logits("sia_whitebox", z, p, mask, aggregator=softmax_mean, labels=labels)
    want = sia_whitebox(p, mask, lambda q: softmax_mean(z), labels).argmax(-1)
    assert torch.equal(wb[mask].argmax(-1), want[mask])
    pgd = attack_logits("pgd_cw", z, p, mask, aggregator=softmax_mean, labels=labels, steps=20, kappa=math.inf)
    assert torch.equal(pgd[~mask], z[~mask])
    with torch.no_grad():
        assert (cw_margin(softmax_mean(pgd), labels) > cw_margin(softmax_mean(z), labels)).all()
    with pytest.raises(ValueError, match="shape"):
        attack_logits("none", z[:, :3], p, mask)


def test_the_default_attack_list_is_spec_sevens_eight():
    """The default attack list stays SPEC §7's eight (it is hashed: an attack added later must not rename
    earlier runs)."""
    from fedcal import config

    assert config.RunConfig().inference_attacks == ("none", "logit_flip", "sia_blackbox", "sia_blackbox_colluding",
                                                    "sia_whitebox", "lma", "cpa", "pgd_cw")
