import itertools

import numpy as np
import pytest
import torch

from fedcal import aggregate
from fedcal.inference import (AGGREGATORS, CoordinateMedian, DeepSet, DeepSetTM, GeometricMedian, Mean,
                              TrimmedMean, accuracy, as_trimmed, renormalise, train_deepset)


def _probits(B=4, n=5, C=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2.0 * torch.randn(B, n, C, generator=g, dtype=torch.float64), dim=-1)


def _np_trimmed(p, f):
    B, n, C = p.shape
    out = np.zeros((B, C))
    for b in range(B):
        for c in range(C):
            vals = sorted(p[b, :, c])
            out[b, c] = np.mean(vals[f:n - f])
        out[b] /= out[b].sum()
    return out


def _np_median(p):
    B, n, C = p.shape
    out = np.zeros((B, C))
    for b in range(B):
        for c in range(C):
            vals = sorted(p[b, :, c])
            out[b, c] = vals[n // 2] if n % 2 else 0.5 * (vals[n // 2 - 1] + vals[n // 2])
        out[b] /= out[b].sum()
    return out


def _on_simplex(z):
    assert (z >= 0).all()
    assert torch.allclose(z.sum(-1), torch.ones(z.shape[0], dtype=z.dtype), atol=1e-6)


def test_mean_matches_numpy():
    p = _probits()
    out = Mean()(p)
    np.testing.assert_allclose(out.numpy(), p.numpy().mean(1), atol=1e-12)
    _on_simplex(out)


@pytest.mark.parametrize("n", [5, 6])
def test_median_matches_numpy(n):
    p = _probits(n=n, seed=n)
    out = CoordinateMedian()(p)
    np.testing.assert_allclose(out.numpy(), _np_median(p.numpy()), atol=1e-12)
    _on_simplex(out)


def test_median_odd_hand_built():
    p = torch.tensor([[[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.5, 0.25, 0.25],
                       [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]], dtype=torch.float64)
    mid = torch.tensor([0.5, 0.25, 0.1], dtype=torch.float64)
    assert torch.allclose(CoordinateMedian()(p)[0], mid / mid.sum())


@pytest.mark.parametrize("f", [0, 1, 2])
def test_trimmed_mean_matches_numpy(f):
    p = _probits(B=6, n=5, C=3, seed=3)
    out = TrimmedMean(f)(p)
    np.testing.assert_allclose(out.numpy(), _np_trimmed(p.numpy(), f), atol=1e-12)
    _on_simplex(out)
    if f == 0:
        assert torch.allclose(out, Mean()(p))


def test_trimmed_mean_zero_sum_guard_and_grad():
    p = torch.zeros(1, 5, 3, dtype=torch.float64)
    p[0, :, 0] = torch.tensor([1, 1, 0, 0, 0.])
    p[0, :, 1] = torch.tensor([0, 0, 1, 1, 0.])
    p[0, :, 2] = torch.tensor([0, 0, 0, 0, 1.])
    assert torch.allclose(TrimmedMean(2)(p), torch.full((1, 3), 1 / 3, dtype=torch.float64))
    q = _probits().requires_grad_(True)
    TrimmedMean(1)(q)[:, 0].sum().backward()
    assert q.grad is not None and q.grad.abs().sum() > 0


def _sum_dist(z, p):  # z (B,C), p (B,n,C) -> (B,)
    return (p - z[:, None]).norm(dim=-1).sum(-1)


def test_geometric_median_minimises_sum_of_distances():
    g = torch.Generator().manual_seed(1)
    honest = torch.softmax(torch.randn(6, 7, 4, generator=g, dtype=torch.float64) * 0.5
                           + 2 * torch.eye(4, dtype=torch.float64)[0], -1)
    outliers = torch.eye(4, dtype=torch.float64)[torch.randint(1, 4, (6, 3), generator=g)]
    p = torch.cat([honest, outliers], 1)
    gm = GeometricMedian(max_iter=500, tol=1e-10)(p)
    _on_simplex(gm)
    d_gm = _sum_dist(gm, p)
    assert (d_gm < _sum_dist(Mean()(p), p)).all()
    assert (d_gm <= _sum_dist(CoordinateMedian()(p), p) + 1e-9).all()
    # local optimality: small perturbations on the simplex do not improve it
    for i, j in itertools.permutations(range(4), 2):
        z = gm.clone()
        z[:, i] += 1e-3
        z[:, j] -= 1e-3
        assert (_sum_dist(z, p) >= d_gm - 1e-7).all()
    assert (gm.argmax(-1) == 0).all()


def _geometric_median_before_the_merge(probits, eps=1e-8, max_iter=100, tol=1e-6):
    """Verbatim copy of GeometricMedian.forward as it was before it called
    fedcal.aggregate.geometric_median (the committed inference results were computed with it)."""
    z = probits.mean(dim=1)  # (B, C)
    for _ in range(max_iter):
        d = torch.sqrt(((probits - z[:, None, :]) ** 2).sum(-1) + eps)  # (B, n)
        w = 1.0 / d
        z_new = (w[..., None] * probits).sum(1) / w.sum(1, keepdim=True)
        delta = (z_new - z).abs().max()
        z = z_new
        if delta.item() < tol:
            break
    return renormalise(z)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(4))
def test_geometric_median_bit_for_bit_with_the_former_probit_code(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    B, n, C = [(300, 10, 10), (64, 7, 4), (5, 11, 100), (100, 25, 10)][seed]
    p = torch.softmax(3.0 * torch.randn(B, n, C, generator=g, dtype=dtype), dim=-1)
    p[: B // 4, : n // 3] = torch.eye(C, dtype=dtype)[torch.randint(0, C, (B // 4, n // 3), generator=g)]  # one-hots
    for kw in ({}, dict(max_iter=30, tol=0.0), dict(eps=1e-6, max_iter=3)):
        old = _geometric_median_before_the_merge(p, **kw)
        assert torch.equal(GeometricMedian(**kw)(p), old)
        with torch.no_grad():
            assert torch.equal(GeometricMedian(**kw)(p), old)
    # non-contiguous layouts (a column subset, permuted strides) too
    for view in (p[:, ::2], p.permute(1, 2, 0).contiguous().permute(2, 0, 1),
                 p.transpose(0, 1).contiguous().transpose(0, 1)):
        with torch.no_grad():
            assert torch.equal(GeometricMedian()(view), _geometric_median_before_the_merge(view))
    # with autograd (the white-box PGD attack differentiates through it): same values, same gradients
    q1, q2 = p.clone().requires_grad_(True), p.clone().requires_grad_(True)
    out1, out2 = GeometricMedian()(q1), _geometric_median_before_the_merge(q2)
    assert torch.equal(out1, out2)
    (g1,), (g2,) = torch.autograd.grad(out1[:, 0].sum(), q1), torch.autograd.grad(out2[:, 0].sum(), q2)
    assert torch.equal(g1, g2)


def test_geometric_median_robust_to_one_hot():
    p = torch.tensor([[[0.6, 0.3, 0.1]] * 4 + [[0.0, 0.0, 1.0]]])
    gm = GeometricMedian()(p)
    assert torch.allclose(gm, torch.tensor([[0.6, 0.3, 0.1]]), atol=1e-3)
    assert (Mean()(p) - gm).abs().max() > 0.1


def test_registry_and_errors():
    assert set(AGGREGATORS) == {"mean", "median", "geometric_median", "trimmed_mean"}
    p = _probits()
    for name, cls in AGGREGATORS.items():
        agg = cls(1) if name == "trimmed_mean" else cls()
        _on_simplex(agg(p))
        with pytest.raises(ValueError, match="3-D"):
            agg(p[0])
        bad = p.clone()
        bad[0, 0, 0] = float("nan")
        with pytest.raises(ValueError, match="NaN"):
            agg(bad)
    with pytest.raises(ValueError, match="n > 2f"):
        TrimmedMean(2)(_probits(n=4))
    with pytest.raises(ValueError):
        TrimmedMean(-1)
    with pytest.raises(ValueError, match="n > 2f"):
        DeepSet(3, 8, pooling="trimmed", f=2)(_probits(n=4).float())
    with pytest.raises(ValueError):
        DeepSet(3, 8, pooling="max")
    with pytest.raises(ValueError, match="3-D"):
        DeepSet(3, 8)(torch.rand(2, 3))


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_every_aggregator_refuses_non_finite_probits(value):
    """Called directly (the Flower shell validates replies first), an aggregator still refuses
    ±Inf as it refuses NaN: a mean of +Inf renormalised to a NaN row, a median or a trimmed mean
    quietly dropped it, so the answer depended on where the Inf sat."""
    bad = _probits()
    bad[1, 2, 0] = value
    aggs = [cls(1) if name == "trimmed_mean" else cls() for name, cls in AGGREGATORS.items()]
    aggs += [DeepSet(bad.shape[2], 8), DeepSet(bad.shape[2], 8, pooling="trimmed", f=1)]
    for agg in aggs:
        with pytest.raises(ValueError, match="NaN or Inf"):
            agg(bad.float() if isinstance(agg, DeepSet) else bad)


@pytest.mark.parametrize("pooling,f", [("mean", 0), ("trimmed", 2)])
def test_deepset_permutation_invariance(pooling, f):
    model = DeepSet(3, 16, pooling=pooling, f=f, seed=0)
    p = _probits(B=5, n=7, C=3).float()
    out = model(p)
    _on_simplex(out)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(model(p[:, perm]), out, atol=1e-6)
    assert model.logits(p).shape == (5, 3)
    q = p.clone().requires_grad_(True)
    model(q)[:, 0].sum().backward()
    assert q.grad.abs().sum() > 0


def test_deepset_tm_f0_equals_mean_and_shares_weights():
    model = DeepSet(3, 16, seed=0)
    p = _probits(n=6).float()
    tm0 = as_trimmed(model, 0)
    assert torch.allclose(tm0(p), model(p), atol=1e-6)
    tm2 = model.as_trimmed(2)
    assert tm2.pooling == "trimmed" and tm2.f == 2 and tm2.rho is model.rho and tm2.mu is model.mu
    assert model.pooling == "mean"
    assert isinstance(tm0, DeepSetTM) and isinstance(tm2, DeepSetTM) and isinstance(tm2, DeepSet)


def test_deepset_tm_numerics_identical_to_trimmed_pooling():
    """DeepSetTM is a DeepSet with pooling "trimmed": bit-identical outputs, the same weights."""
    model = DeepSet(3, 16, seed=0)
    p = _probits(B=6, n=7).float()
    tm = DeepSetTM.from_deepset(model, 2)
    ref = DeepSet(3, 16, pooling="trimmed", f=2, seed=0)  # same seed: same initial weights
    assert torch.equal(tm(p), ref(p)) and torch.equal(tm.logits(p), ref.logits(p))
    h = model.rho(p)
    assert torch.equal(tm.logits(p), model.mu(aggregate.trimmed_mean_along(h, 2, dim=1)))
    built = DeepSetTM(3, 16, f=2, seed=0)
    assert built.pooling == "trimmed" and built.f == 2 and torch.equal(built(p), ref(p))
    assert built.state_dict().keys() == model.state_dict().keys()
    model.train()
    assert DeepSetTM.from_deepset(model, 1).training and not DeepSetTM.from_deepset(model.eval(), 1).training
    with pytest.raises(ValueError, match="non-negative integer"):
        DeepSetTM.from_deepset(model, -1)
    with pytest.raises(ValueError, match="n > 2f"):
        tm(_probits(n=4).float())


# ---- synthetic robust-inference task ---------------------------------------------------
C, N_CLIENTS, F = 4, 9, 2
SIGMA = torch.tensor([0.4] * 6 + [0.8] * 3)  # last three clients noisier


def _task(N, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, C, (N,), generator=g)
    logits = 0.8 * torch.nn.functional.one_hot(y, C).float()[:, None, :] \
        + SIGMA[None, :, None] * torch.randn(N, N_CLIENTS, C, generator=g)
    return torch.softmax(logits, -1), y


def _runner_up_attack(p):
    """The first F clients send the one-hot of the runner-up class of the honest mean."""
    runner_up = p[:, F:].mean(1).topk(2, dim=-1).indices[:, 1]
    out = p.clone()
    out[:, :F] = torch.nn.functional.one_hot(runner_up, C).float()[:, None, :]
    return out


def test_adversarial_training_with_trimmed_pooling_is_more_robust():
    xtr, ytr = _task(1500, 0)
    xte, yte = _task(500, 1)
    xatk = _runner_up_attack(xte)
    plain = DeepSet(C, hidden=64, seed=0)
    h_plain = train_deepset(plain, xtr, ytr, epochs=10, lr=3e-3,
                            generator=torch.Generator().manual_seed(0))
    adv = DeepSet(C, hidden=64, seed=0)
    h_adv = train_deepset(adv, xtr, ytr, epochs=10, lr=3e-3, adversarial=True, f=F,
                          attack_steps=10, attack_lr=1.0, generator=torch.Generator().manual_seed(0))
    assert len(h_plain) == len(h_adv) == 10 and h_plain[-1] < h_plain[0] and h_adv[-1] < h_adv[0]
    adv_tm = adv.as_trimmed(F)
    assert accuracy(plain, xte, yte) > 0.9
    assert accuracy(adv_tm, xte, yte) > 0.9
    acc_plain_atk = accuracy(plain, xatk, yte)
    acc_adv_tm_atk = accuracy(adv_tm, xatk, yte)
    assert acc_adv_tm_atk > acc_plain_atk + 0.2, (acc_plain_atk, acc_adv_tm_atk)
    # the non-learned mean collapses under this corruption
    assert accuracy(Mean(), xatk, yte) < 0.3


def test_train_deepset_errors_and_params_untouched_by_attack():
    x, y = _task(64, 2)
    model = DeepSet(C, 8, seed=0)
    with pytest.raises(ValueError):
        train_deepset(model, x, y, 1, adversarial=True, f=0)
    with pytest.raises(ValueError):
        train_deepset(model, x, y, 1, adversarial=True, f=5)
    with pytest.raises(ValueError):
        train_deepset(model, x, y[:10], 1)
    train_deepset(model, x, y, 1, adversarial=True, f=2, m=2, n_restarts=2, attack_steps=3)
    assert all(p.requires_grad for p in model.parameters())


def test_the_literatures_corrupted_positions():
    """The authors' training corrupts the n − k clients outside a random subset of k ∈ [n − f, n],
    P(k) = 0.7·C(n, k)/Σ C(n, k') + 0.3/(f + 1): for n = 17, f = 4, by hand from C(17, 13..17) =
    2380, 680, 136, 17, 1 (sum 3214), P(m = 4) = 0.7·2380/3214 + 0.06 = 0.5784, P(m = 0) = 0.0602."""
    from math import comb

    from fedcal.inference.deepset import literature_corruption_mask

    mask = literature_corruption_mask(40_000, 17, 4, torch.Generator().manual_seed(0))
    m = mask.sum(1)
    total = sum(comb(17, k) for k in range(13, 18))
    for corrupted in range(5):
        want = 0.7 * comb(17, 17 - corrupted) / total + 0.3 / 5
        assert abs((m == corrupted).float().mean().item() - want) < 0.01, corrupted
    assert abs((m == 4).float().mean().item() - 0.5784) < 0.01
    # positions uniform over clients
    assert (mask.float().mean(0) - mask.float().mean()).abs().max() < 0.01


def test_adversarial_training_against_the_literatures_attack():
    """adv_attack='literature': the authors' attack (uniform start, CW probability margin, last iterate) in
    the adversarial phase; its rows are probit vectors on the corrupted positions only, and the trained
    DeepSet-TM withstands the runner-up corruption far better than the plain DeepSet."""
    from fedcal.inference.deepset import _literature_inputs

    xtr, ytr = _task(800, 0)
    xte, yte = _task(400, 1)
    plain = DeepSet(C, hidden=32, seed=0)
    train_deepset(plain, xtr, ytr, epochs=8, lr=3e-3, generator=torch.Generator().manual_seed(0))
    rows = _literature_inputs(plain, xte[:64], yte[:64], F, 5, 0.1, torch.Generator().manual_seed(1))
    changed = (rows != xte[:64]).any(-1)
    assert (changed.sum(1) <= F).all() and changed.any()
    _on_simplex(rows.reshape(-1, C))
    adv = DeepSet(C, hidden=32, seed=0)
    train_deepset(adv, xtr, ytr, epochs=8, lr=3e-3, adversarial=True, f=F, attack_steps=5, attack_lr=1.0,
                  generator=torch.Generator().manual_seed(0), adv_attack="literature")
    xatk = _runner_up_attack(xte)
    assert accuracy(adv.as_trimmed(F), xte, yte) > 0.75  # 8 epochs from scratch, all of them adversarial
    assert accuracy(adv.as_trimmed(F), xatk, yte) > accuracy(plain, xatk, yte) + 0.1
    with pytest.raises(ValueError, match="adv_attack"):
        train_deepset(adv, xtr, ytr, 1, adversarial=True, f=F, adv_attack="madry")
