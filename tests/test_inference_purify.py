"""Feature-purification baselines of robust federated inference (manifold projection, CoPur)."""

import pytest
import torch

from fedcal.inference import apply_attack
from fedcal.inference.evaluate import ProbitData, attack_accuracy
from fedcal.inference.probit_attacks import adversary_mask
from fedcal.inference.purify import CoPur, ManifoldProjection, ProbitFusion, train_fusion


def _structured_logits(N, n=9, C=5, seed=0, noise=0.3):
    """Logits on a low-dimensional manifold, CoPur's premise: client i answers a query of class y
    with A_i[y] + noise, A_i a fixed random logit table per client (the same tables for every
    split): the n·C-dimensional answers are C points plus noise."""
    A = 2.0 * torch.randn(n, C, C, generator=torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, C, (N,), generator=g)
    return A[:, y].transpose(0, 1) + noise * torch.randn(N, n, C, generator=g), y


def _structured(N, n=9, C=5, seed=0, noise=0.3):
    """The same answers as probits (their softmax)."""
    z, y = _structured_logits(N, n, C, seed, noise)
    return z.softmax(-1), y


@pytest.fixture(scope="module")
def fusion():
    sp, sy = _structured(1200)
    model = ProbitFusion(9, 5, hidden=64, latent=8, seed=0)
    history = train_fusion(model, sp, sy, epochs=30, lr=3e-3)
    assert history[-1] < history[0] / 5
    return model


def _acc(agg, p, y):
    with torch.no_grad():
        return (agg(p).argmax(1) == y).float().mean().item()


def test_copur_ignores_block_sparse_corruption_that_drags_the_projection(fusion):
    """With 3 of 9 clients' blocks replaced, CoPur's ℓ2,1 fit stays at clean accuracy while the
    ℓ2 projection is dragged towards the corrupted blocks (the CoPur paper's comparison)."""
    tp, ty = _structured(400, seed=1)
    mp, cp = ManifoldProjection(fusion), CoPur(fusion)
    assert _acc(mp, tp, ty) > 0.97 and _acc(cp, tp, ty) > 0.97
    mask = adversary_mask(len(ty), 9, 3, generator=torch.Generator().manual_seed(0))
    for attack in ("logit_flip", "lma"):
        bad = apply_attack(attack, tp, mask, labels=ty, amplification=2.0)
        assert _acc(cp, bad, ty) > 0.95, attack
        assert _acc(cp, bad, ty) > _acc(mp, bad, ty) + 0.03, attack


def test_copur_lowers_its_objective_and_zero_steps_is_the_projection(fusion):
    tp, _ = _structured(200, seed=2)
    bad = apply_attack("lma", tp, adversary_mask(200, 9, 3, generator=torch.Generator().manual_seed(1)))
    observed = torch.ones(200, 9, dtype=torch.bool)
    cp = CoPur(fusion, steps=30)
    with torch.no_grad():
        start = cp.objective(bad, observed, fusion.encode(bad))
        end = cp.objective(bad, observed, cp.fit_latent(bad, observed))
        assert (end <= start + 1e-6).all() and end.mean() < 0.9 * start.mean()
        assert torch.equal(CoPur(fusion, steps=0)(bad), ManifoldProjection(fusion)(bad))


def test_absent_and_unknown_columns(fusion):
    """Blocks of absent clients are filled with the uniform vector and left out of CoPur's fit;
    a column the fusion was not trained on is ignored; column order is the fusion's, not the query's."""
    tp, _ = _structured(50, seed=3)
    cp = CoPur(fusion, steps=10)
    with torch.no_grad():
        full = cp(tp)
        order = [4, 0, 8, 1, 2, 3, 5, 6, 7]
        assert torch.allclose(cp.for_columns(order)(tp[:, order]), full, atol=1e-6)
        # client 8 absent: by hand, the fusion's own aggregate with a uniform block 8, unobserved
        observed = torch.ones(50, 9, dtype=torch.bool)
        observed[:, 8] = False
        by_hand = cp.aggregate(tp, observed)
        assert torch.allclose(cp.for_columns(list(range(8)))(tp[:, :8]), by_hand, atol=1e-6)
        changed = tp.clone()
        changed[:, 8] = torch.softmax(torch.randn(50, 5), -1)
        assert torch.allclose(cp.aggregate(changed, observed), by_hand, atol=1e-6)
        # an extra column 42 the fusion never saw: whatever it holds, nothing changes
        extra = torch.cat([tp, torch.eye(5)[torch.zeros(50, dtype=torch.long)][:, None]], dim=1)
        assert torch.allclose(cp.for_columns(list(range(9)) + [42])(extra), full, atol=1e-6)
    with pytest.raises(ValueError, match="client columns"):
        cp.for_columns([0, 1])(tp)


def test_unrolled_purification_has_the_true_gradient():
    """The white-box attacks differentiate through CoPur's inner loop: the unrolled gradient
    equals finite differences (torch.autograd.gradcheck, float64)."""
    model = ProbitFusion(3, 3, hidden=6, latent=2, seed=0).double()
    cp = CoPur(model, steps=3, lr=0.3)
    h = torch.softmax(torch.randn(2, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)), -1)
    assert torch.autograd.gradcheck(lambda x: cp(x), (h.requires_grad_(True),), eps=1e-6, atol=1e-5)
    assert torch.autograd.gradcheck(lambda x: ManifoldProjection(model)(x), (h,), eps=1e-6, atol=1e-5)


def test_positional_aggregators_in_the_evaluation(fusion):
    """attack_accuracy tells CoPur which clients answered: a client outside the server split's
    columns never changes its answers, and queries missing a client are still answered."""
    tp, ty = _structured(120, seed=4)
    extra = torch.softmax(torch.randn(120, 1, 5), -1)
    probits = torch.cat([tp[:, :4], extra, tp[:, 4:]], dim=1)  # test column 4 is a client the server never saw
    valid = torch.ones(120, 10, dtype=torch.bool)
    valid[:40, 0] = False
    probits[:40, 0] = 0.0
    fusion.columns = [0, 1, 2, 3, 5, 6, 7, 8, 9]
    try:
        data = ProbitData(tp, ty, probits, valid, ty, list(range(10)), server_columns=fusion.columns)
        cp = CoPur(fusion, steps=10)
        df = attack_accuracy({"copur": cp}, data, 0, ["none"])
        probits[:, 4] = torch.eye(5)[(ty + 1) % 5]  # the unknown client turns hostile: ignored
        assert attack_accuracy({"copur": cp}, data, 0, ["none"])["accuracy"].item() == df["accuracy"].item()
        assert df["accuracy"].item() > 0.9 and df["queries"].item() == 120
    finally:
        fusion.columns = list(range(9))


def test_probit_data_keeps_server_columns_and_reads_old_files(tmp_path):
    tp, ty = _structured(10)
    data = ProbitData(tp, ty, tp, torch.ones(10, 9, dtype=torch.bool), ty, list(range(9)), server_columns=[0, 2])
    data.save(tmp_path / "p.pt")
    assert ProbitData.load(tmp_path / "p.pt").server_columns == [0, 2]
    old = dict(data.__dict__)
    del old["server_columns"]  # a file saved before the positional baselines existed
    torch.save(old, tmp_path / "old.pt")
    assert ProbitData.load(tmp_path / "old.pt").server_columns is None


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_classes"):
        ProbitFusion(3, 1)
    with pytest.raises(ValueError, match="distinct"):
        ProbitFusion(3, 4, columns=[0, 0, 1])
    model = ProbitFusion(3, 4)
    with pytest.raises(ValueError, match=r"\(B, 3, 4\)"):
        ManifoldProjection(model)(torch.full((2, 4, 4), 0.25))
    with pytest.raises(ValueError, match="NaN"):
        CoPur(model)(torch.full((2, 3, 4), float("nan")))
    with pytest.raises(ValueError, match="steps"):
        CoPur(model, steps=-1)
    with pytest.raises(ValueError, match="labels"):
        train_fusion(model, torch.full((5, 3, 4), 0.25), torch.zeros(4), epochs=1)


@pytest.fixture(scope="module")
def logit_fusion():
    sz, sy = _structured_logits(600)
    model = ProbitFusion(9, 5, hidden=64, latent=8, seed=0, space="logits")
    history = train_fusion(model, sz, sy, epochs=20, lr=3e-3)
    assert history[-1] < history[0] / 5
    return model


def test_copur_on_logits_reconstructs_the_low_rank_answers_and_ignores_sparse_blocks(logit_fusion):
    """On logits (the literature's CoPur): the decoder has no softmax, the clean answers (C points
    plus noise of std 0.3 per entry, so ‖noise_i‖ ≈ 0.3·√5 ≈ 0.67 per block) are reconstructed to
    within that noise, and with 3 of 9 blocks replaced by flipped, amplified logits (−2·z) the ℓ2,1
    fit keeps the honest blocks near their clean reconstruction where the ℓ2 projection is dragged."""
    from fedcal.inference.logit_attacks import attack_logits

    tz, ty = _structured_logits(200, seed=1)
    cp, mp = CoPur(logit_fusion), ManifoldProjection(logit_fusion)
    assert cp.reads == "logits" and cp.for_columns(list(range(9))).reads == "logits"
    observed = torch.ones(200, 9, dtype=torch.bool)
    with torch.no_grad():
        clean = logit_fusion.decode(cp.fit_latent(tz, observed))
        assert ((clean - tz).norm(dim=-1).mean() < 0.67 * 1.5) and _acc(cp, tz, ty) > 0.97
        mask = adversary_mask(200, 9, 3, generator=torch.Generator().manual_seed(0))
        bad = attack_logits("logit_flip", tz, tz.softmax(-1), mask, amplification=2.0)
        purified = logit_fusion.decode(cp.fit_latent(bad, observed))
        projected = logit_fusion.decode(logit_fusion.encode(bad))
        honest = ~mask
        err_cp = (purified - clean).norm(dim=-1)[honest].mean()
        err_mp = (projected - clean).norm(dim=-1)[honest].mean()
        assert err_cp < 0.5 * err_mp
        assert _acc(cp, bad, ty) > 0.9 and _acc(cp, bad, ty) > _acc(mp, bad, ty)
        # absent blocks are zero logits (the uniform probit vector's logits), not 1/C
        assert torch.equal(logit_fusion.absent(tz), torch.zeros_like(tz))


def test_logit_purifiers_in_the_evaluation(logit_fusion):
    """attack_accuracy hands a logit-reading aggregator the clients' logits and the attacks' logit
    forms: the probit CoPur and the logit CoPur see the same clients, and without logits in the data
    a logit aggregator is refused."""
    tz, ty = _structured_logits(100, seed=5)
    data = ProbitData(tz.softmax(-1), ty, tz.softmax(-1), torch.ones(100, 9, dtype=torch.bool), ty, list(range(9)),
                      server_logits=tz, test_logits=tz)
    from fedcal.inference.logit_attacks import attack_logits

    cp = CoPur(logit_fusion, steps=10)
    df = attack_accuracy({"copur_logit": cp}, data, 3, ["none", "logit_flip", "lma"], amplification=2.0)
    acc = df.set_index("attack")["accuracy"]
    # by hand: the batch's adversaries (seed 0, first query 0) and each attack's logit form
    mask = adversary_mask(100, 9, 3, generator=torch.Generator().manual_seed(0))
    for attack in ("none", "logit_flip", "lma"):
        attacked = attack_logits(attack, tz, tz.softmax(-1), mask, amplification=2.0)
        assert acc[attack] == pytest.approx(_acc(cp, attacked, ty))
    assert acc["none"] > 0.95
    with pytest.raises(ValueError, match="read logits"):
        attack_accuracy({"copur_logit": cp}, ProbitData(tz.softmax(-1), ty, tz.softmax(-1),
                                                        torch.ones(100, 9, dtype=torch.bool), ty, list(range(9))),
                        3, ["none"])
