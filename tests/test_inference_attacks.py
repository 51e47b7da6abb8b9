"""Tests for fedcal.inference.probit_attacks against hand-computed expectations."""
import math

import numpy as np
import pytest
import torch

from fedcal.inference.probit_attacks import (
    PROBIT_ATTACKS, adversary_mask, apply_attack, class_covariance, cpa, cw_margin,
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
