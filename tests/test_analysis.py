import copy

import numpy as np
import pandas as pd
import pytest
import torch

from tests.conftest import partly_trained_digits_mlp
import torch.nn.functional as F

from fedcal.analysis import (
    default_variants,
    flat_params,
    linear_cka,
    logit_cosine,
    penultimate_features,
    representation_similarity,
    triage_change,
    triage_curves,
    update_cosine_curves,
    update_vector,
)
from fedcal.attacks import Behaviour, BehaviourKind
from fedcal.data import synthetic_dataset
from fedcal.models import build_model
from fedcal.local_training import batch_schedule, local_train


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models: intra-op threading only adds contention on shared CPUs."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# ---------------------------------------------------------------------------- CKA
def cka_hsic(X, Y):
    """Independent reference: tr(KHLH) / sqrt(tr(KHKH) tr(LHLH)), K = XXᵀ, L = YYᵀ."""
    X, Y = np.asarray(X, float), np.asarray(Y, float)
    n = X.shape[0]
    H = np.eye(n) - np.ones((n, n)) / n
    K, L = X @ X.T, Y @ Y.T
    return np.trace(K @ H @ L @ H) / np.sqrt(np.trace(K @ H @ K @ H) * np.trace(L @ H @ L @ H))


def rand_orth(d, rng):
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return q


@pytest.mark.parametrize("n,dx,dy", [(50, 8, 13), (10, 40, 60)])  # feature form / Gram form
def test_cka_matches_hsic_reference(n, dx, dy):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, dx))
    Y = X[:, :1] @ rng.normal(size=(1, dy)) + 0.5 * rng.normal(size=(n, dy))
    assert linear_cka(X, Y) == pytest.approx(cka_hsic(X, Y), rel=1e-10, abs=1e-12)
    assert linear_cka(torch.tensor(X, dtype=torch.float32), Y) == pytest.approx(cka_hsic(X, Y), rel=1e-5)


@pytest.mark.parametrize("n,d", [(40, 6), (6, 40)])
def test_cka_invariances(n, d):
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(n, d)), rng.normal(size=(n, d + 3))
    base = linear_cka(X, Y)
    assert linear_cka(X, X) == pytest.approx(1.0, abs=1e-12)
    assert 0.0 <= base <= 1.0
    assert linear_cka(Y, X) == pytest.approx(base, rel=1e-12)
    assert linear_cka(X @ rand_orth(d, rng), Y) == pytest.approx(base, rel=1e-9)
    assert linear_cka(X, Y @ rand_orth(d + 3, rng)) == pytest.approx(base, rel=1e-9)
    assert linear_cka(7.5 * X, Y) == pytest.approx(base, rel=1e-12)
    assert linear_cka(X, 0.01 * Y) == pytest.approx(base, rel=1e-12)
    assert linear_cka(X + 3.0, Y - 2.0) == pytest.approx(base, rel=1e-9)  # column centring


def test_cka_near_zero_for_independent_features():
    rng = np.random.default_rng(2)
    assert linear_cka(rng.normal(size=(3000, 5)), rng.normal(size=(3000, 7))) < 0.05


def test_cka_errors():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(10, 3))
    with pytest.raises(ValueError, match="same number of rows"):
        linear_cka(X, rng.normal(size=(9, 3)))
    with pytest.raises(ValueError, match="2-D"):
        linear_cka(X[:, 0], X)
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        linear_cka(bad, X)
    with pytest.raises(ValueError, match="constant"):
        linear_cka(np.ones((10, 3)), X)
    with pytest.raises(ValueError, match="at least 2"):
        linear_cka(X[:1], X[:1])


# ---------------------------------------------------------------------------- logit cosine
def test_logit_cosine():
    rng = np.random.default_rng(4)
    z = rng.normal(size=(20, 10))
    assert logit_cosine(z, z) == pytest.approx(1.0)
    assert logit_cosine(z, -z) == pytest.approx(-1.0)
    w = rng.normal(size=(20, 10))
    assert logit_cosine(3.0 * z, w) == pytest.approx(logit_cosine(z, w), rel=1e-12)
    # hand-computed: row 1 cos([1,0],[1,1]) = 1/√2; row 2 cos([0,2],[0,-1]) = −1
    a, b = [[1.0, 0.0], [0.0, 2.0]], [[1.0, 1.0], [0.0, -1.0]]
    assert logit_cosine(a, b) == pytest.approx((1 / np.sqrt(2) - 1) / 2)
    assert logit_cosine(torch.tensor(a), torch.tensor(b)) == pytest.approx((1 / np.sqrt(2) - 1) / 2)


def test_logit_cosine_errors():
    z = np.ones((4, 3))
    with pytest.raises(ValueError, match="same shape"):
        logit_cosine(z, np.ones((5, 3)))
    with pytest.raises(ValueError, match="2-D"):
        logit_cosine(z[0], z[0])
    with pytest.raises(ValueError, match="NaN"):
        logit_cosine(np.full((4, 3), np.nan), z)


# ---------------------------------------------------------------------------- params / features
def test_flat_params_and_update_vector():
    m = build_model("mlp", (4,), 3, seed=0)
    start = flat_params(m)
    assert start.shape == (sum(p.numel() for p in m.parameters()),)
    with torch.no_grad():
        m.head.bias += torch.tensor([1.0, 2.0, 3.0])
    d = update_vector(m, start)
    assert torch.equal(d[-3:], torch.tensor([1.0, 2.0, 3.0]))
    assert torch.count_nonzero(d) == 3
    assert torch.equal(update_vector(m, build_model("mlp", (4,), 3, seed=0)), d)  # start as a model
    m.head.bias.requires_grad_(False)  # frozen parameters are not part of the update
    assert flat_params(m).numel() == start.numel() - 3
    with pytest.raises(ValueError, match="flat vector"):
        update_vector(m, start)


def test_penultimate_features_and_similarity():
    ds = synthetic_dataset(n_train=50, n_test=30)
    m = build_model("mlp", ds.input_shape, ds.num_classes, seed=0)
    m.train()
    f = penultimate_features(m, ds.x_test, batch_size=7)
    torch.testing.assert_close(f, m.features(ds.x_test).detach())
    assert m.training  # mode restored
    same = representation_similarity(m, copy.deepcopy(m), ds.x_test)
    assert same["logit_cosine"] == pytest.approx(1.0) and same["cka"] == pytest.approx(1.0)
    other = representation_similarity(m, build_model("mlp", ds.input_shape, ds.num_classes, seed=1), ds.x_test)
    assert set(other) == {"logit_cosine", "cka"}
    assert other["cka"] < 1.0 - 1e-6 and -1.0 <= other["logit_cosine"] < 1.0 - 1e-6
    assert other["cka"] == pytest.approx(linear_cka(penultimate_features(m, ds.x_test),
                                                    penultimate_features(
                                                        build_model("mlp", ds.input_shape, ds.num_classes, seed=1),
                                                        ds.x_test)))


# ---------------------------------------------------------------------------- update cosine curves
@pytest.fixture(scope="module")
def digits_curves():
    ds, base = partly_trained_digits_mlp()
    before = flat_params(base)
    variants = {"benign": Behaviour(), **default_variants()}
    df = update_cosine_curves(base, ds.x_train, ds.y_train, ds.num_classes, variants,
                              steps=10, batch_size=32, lr=0.2, seed=2)
    assert torch.equal(flat_params(base), before)  # global model untouched
    return ds, base, df


def test_default_variants_set():
    v = default_variants()
    tsa = {(b.tau, b.coupled) for b in v.values() if b.kind == "tsa"}
    assert tsa == {(0.2, True), (5.0, True), (0.2, False), (5.0, False)}
    assert sorted(b.noise_sigma for b in v.values() if b.kind == "noise") == [0.01, 0.05, 0.1]
    assert sorted(b.flip_shift for b in v.values() if b.kind == "labelflip") == [1, 2, 3, 4, 5]
    assert len(v) == 12


def test_curves_shape(digits_curves):
    _, _, df = digits_curves
    assert list(df.columns) == ["variant", "step", "cosine"]
    assert len(df) == 13 * 10
    for _, g in df.groupby("variant"):
        assert g["step"].tolist() == list(range(1, 11))
    assert df["cosine"].between(-1, 1).all()
    assert np.allclose(df[df.variant == "benign"]["cosine"], 1.0)


def test_curves_stealth_ordering(digits_curves):
    _, _, df = digits_curves
    c = df.pivot(index="step", columns="variant", values="cosine")
    last = c.loc[10]
    assert c.loc[1, "tsa_coupled_tau5"] > 0.95
    assert last["tsa_coupled_tau5"] > 0.9
    assert last["tsa_coupled_tau0.2"] > 0.8
    assert last["tsa_uncoupled_tau0.2"] < last["tsa_coupled_tau0.2"] - 0.2
    assert (c["noise_sigma0.1"] < c["noise_sigma0.05"]).all()
    assert (c["noise_sigma0.05"] < c["noise_sigma0.01"]).all()
    for k in range(1, 6):
        assert last[f"labelflip_k{k}"] < last["tsa_coupled_tau0.2"]


def test_curves_match_independent_computation(digits_curves):
    """TSA and label-flip cosines equal a from-scratch computation on the same batches."""
    ds, base, df = digits_curves
    batches = batch_schedule(len(ds.y_train), 10, 32, torch.Generator().manual_seed(2))

    def delta(y, tau, coupled, steps):
        m = copy.deepcopy(base)
        local_train(m, ds.x_train, y, steps=steps, batch_size=32, lr=0.2, tau=tau, coupled=coupled,
                    batches=batches)
        return torch.cat([(p - q).flatten() for p, q in zip(m.parameters(), base.parameters())]).detach().double()

    for steps in (1, 10):
        ref = delta(ds.y_train, 1.0, True, steps)
        for name, y, tau, coupled in [("tsa_uncoupled_tau0.2", ds.y_train, 0.2, False),
                                      ("labelflip_k3", (ds.y_train + 3) % 10, 1.0, True)]:
            expected = float(F.cosine_similarity(delta(y, tau, coupled, steps), ref, dim=0))
            got = df[(df.variant == name) & (df.step == steps)]["cosine"].item()
            assert got == pytest.approx(expected, abs=1e-6)


def test_noise_zero_sigma_is_benign_and_seeded():
    ds = synthetic_dataset(n_train=64, n_test=4)
    m = build_model("mlp", ds.input_shape, ds.num_classes, seed=0)
    v = {"n0": Behaviour("noise", noise_sigma=0.0), "n1": Behaviour("noise", noise_sigma=0.05)}
    a = update_cosine_curves(m, ds.x_train, ds.y_train, ds.num_classes, v, steps=3, batch_size=16, lr=0.1, seed=5)
    b = update_cosine_curves(m, ds.x_train, ds.y_train, ds.num_classes, v, steps=3, batch_size=16, lr=0.1, seed=5)
    assert np.allclose(a[a.variant == "n0"]["cosine"], 1.0)
    pd.testing.assert_frame_equal(a, b)
    assert (a[a.variant == "n1"]["cosine"] < 1.0).all()


def test_tau_one_on_the_same_batches_is_the_benign_update():
    """TSA at τ = 1 (coupled or not) trains exactly like the benign client: cosine 1 at every step,
    on the updates and on the weights."""
    ds, base = partly_trained_digits_mlp()
    v = {"t1": Behaviour("tsa", tau=1.0), "t1u": Behaviour("tsa", tau=1.0, coupled=False)}
    for compare in ("update", "weights"):
        df = update_cosine_curves(base, ds.x_train[:200], ds.y_train[:200], ds.num_classes, v, steps=4, batch_size=32,
                                  lr=0.1, seed=3, compare=compare)
        assert np.allclose(df["cosine"], 1.0, atol=1e-12)


def test_a_model_with_uniform_predictions_gives_collinear_first_steps():
    """With the output layer zeroed, p = softmax(z/τ) = 1/C for every τ and input: the coupled TSA
    logit gradient η·(1/τ)(p_τ − y) = β(p − y) is the benign one, so the first update is the benign
    update (cosine 1), and the uncoupled one is it divided by τ (cosine 1 too). The cosine falls only
    once the model's predictions are no longer flat — why a measurement from an untrained global
    model finds TSA collinear and one from a trained model does not (docs/results.md)."""
    ds, base = partly_trained_digits_mlp()
    flat = copy.deepcopy(base)
    with torch.no_grad():
        flat.head.weight.zero_()
        flat.head.bias.zero_()
    tsa = {k: b for k, b in default_variants().items() if k.startswith("tsa")}
    first = update_cosine_curves(flat, ds.x_train, ds.y_train, ds.num_classes, tsa, steps=1, batch_size=32, lr=0.05,
                                 seed=0)
    assert np.allclose(first["cosine"], 1.0, atol=1e-9)
    trained = update_cosine_curves(base, ds.x_train, ds.y_train, ds.num_classes, tsa, steps=1, batch_size=32, lr=0.05,
                                   seed=0).set_index("variant")["cosine"]
    assert trained["tsa_coupled_tau5"] < 1.0 - 1e-3


def test_curves_against_other_clients_and_on_weights_match_independent_computation():
    """reference_data: the reference is the mean benign update of the other clients after k steps,
    each on its own batch schedule (round_generator(seed, 0, j + 1, "stealth")); compare="weights"
    takes the cosine of θ_start + Δ. Both recomputed here from scratch."""
    from fedcal.attacks.behaviour import round_generator

    ds, base = partly_trained_digits_mlp()
    x, y = ds.x_train[:300], ds.y_train[:300]
    others = [(ds.x_train[300 + 200 * j:500 + 200 * j], ds.y_train[300 + 200 * j:500 + 200 * j]) for j in range(3)]
    v = {"tsa5": Behaviour("tsa", tau=5.0)}
    start = torch.cat([p.detach().flatten() for p in base.parameters()]).double()

    def delta(xx, yy, tau, batches):
        m = copy.deepcopy(base)
        local_train(m, xx, yy, steps=len(batches), batch_size=32, lr=0.1, tau=tau, batches=batches)
        return torch.cat([q.detach().flatten() for q in m.parameters()]).double() - start

    got = {c: update_cosine_curves(base, x, y, ds.num_classes, {"benign": Behaviour(), **v}, steps=5, batch_size=32,
                                   lr=0.1, seed=7, reference_data=others, compare=c).set_index(["variant", "step"])
           for c in ("update", "weights")}
    own = batch_schedule(len(y), 5, 32, torch.Generator().manual_seed(7))
    for k in (1, 5):
        ref = torch.stack([delta(xo, yo, 1.0, batch_schedule(len(yo), 5, 32, round_generator(7, 0, j + 1, "stealth"))[:k])
                           for j, (xo, yo) in enumerate(others)]).mean(0)
        for name, tau in (("benign", 1.0), ("tsa5", 5.0)):
            d = delta(x, y, tau, own[:k])
            assert got["update"].loc[(name, k), "cosine"] == pytest.approx(float(F.cosine_similarity(d, ref, dim=0)),
                                                                           abs=1e-6)
            assert got["weights"].loc[(name, k), "cosine"] == pytest.approx(
                float(F.cosine_similarity(start + d, start + ref, dim=0)), abs=1e-9)
    # other clients' data: the benign client's own update is no longer the reference
    assert got["update"].loc[("benign", 5), "cosine"] < 0.99
    with pytest.raises(ValueError, match="compare"):
        update_cosine_curves(base, x, y, ds.num_classes, v, steps=1, compare="params")
    with pytest.raises(ValueError, match="reference_data"):
        update_cosine_curves(base, x, y, ds.num_classes, v, steps=1, reference_data=[])
    with pytest.raises(ValueError, match=r"reference_data\[0\]: x and y"):
        update_cosine_curves(base, x, y, ds.num_classes, v, steps=1, reference_data=[(x, y[:5])])


def test_curves_errors():
    ds = synthetic_dataset(n_train=20, n_test=4)
    m = build_model("mlp", ds.input_shape, ds.num_classes, seed=0)
    ok = {"t": Behaviour("tsa", tau=2.0)}
    with pytest.raises(ValueError, match="same number of samples"):
        update_cosine_curves(m, ds.x_train, ds.y_train[:10], ds.num_classes, ok, steps=1)
    with pytest.raises(ValueError, match="unknown kind"):
        update_cosine_curves(m, ds.x_train, ds.y_train, ds.num_classes, {"x": Behaviour("bogus")}, steps=1)
    with pytest.raises(ValueError, match="steps"):
        update_cosine_curves(m, ds.x_train, ds.y_train, ds.num_classes, ok, steps=0)
    with pytest.raises(ValueError, match="empty"):
        update_cosine_curves(m, ds.x_train, ds.y_train, ds.num_classes, {}, steps=1)
    with pytest.raises(ValueError, match="labels must lie"):
        update_cosine_curves(m, ds.x_train, ds.y_train, 1, ok, steps=1)


# ---------------------------------------------------------------------------- triage
# confidences / correctness: .9 C, .6 W, .4 C, .7 C, 1.0 W, .5 W
BENIGN_P = [[0.9, 0.05, 0.05], [0.6, 0.3, 0.1], [0.4, 0.35, 0.25],
            [0.2, 0.7, 0.1], [1.0, 0.0, 0.0], [0.5, 0.25, 0.25]]
# over-confident attacked model, same predictions: .99 C, .95 W, .8 C, .85 C, 1.0 W, .9 W
ATTACK_P = [[0.99, 0.005, 0.005], [0.95, 0.03, 0.02], [0.8, 0.1, 0.1],
            [0.1, 0.85, 0.05], [1.0, 0.0, 0.0], [0.9, 0.05, 0.05]]
LABELS = [0, 1, 0, 1, 2, 2]
GAMMAS = [0.0, 0.5, 0.65, 0.95, 1.0]


def test_triage_hand_example():
    df = triage_curves(np.array(BENIGN_P), np.array(LABELS), GAMMAS, from_logits=False)
    assert list(df.columns) == ["gamma", "sent", "unnecessary", "missed", "unnecessary_rate", "missed_rate"]
    assert df["sent"].tolist() == [0, 1, 3, 5, 5]  # γ = 0 sends nothing; γ = 1 all but the conf-1 sample
    assert df["unnecessary"].tolist() == [0, 1, 1, 3, 3]
    assert df["missed"].tolist() == [3, 3, 1, 1, 1]
    np.testing.assert_allclose(df["unnecessary_rate"], np.array([0, 1, 1, 3, 3]) / 6)
    np.testing.assert_allclose(df["missed_rate"], np.array([3, 3, 1, 1, 1]) / 6)


def test_triage_from_logits_and_monotone():
    rng = np.random.default_rng(5)
    logits = rng.normal(scale=3.0, size=(200, 5))
    labels = rng.integers(0, 5, size=200)
    df = triage_curves(torch.tensor(logits), torch.tensor(labels))
    assert len(df) == 101 and df["gamma"].iloc[0] == 0 and df["gamma"].iloc[-1] == 1
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    pd.testing.assert_frame_equal(df, triage_curves(p, labels, from_logits=False))
    assert (np.diff(df["sent"]) >= 0).all() and (np.diff(df["unnecessary"]) >= 0).all()
    assert (np.diff(df["missed"]) <= 0).all()
    n_wrong = int((logits.argmax(1) != labels).sum())
    assert df["sent"].iloc[0] == 0 and df["missed"].iloc[0] == n_wrong
    assert df["sent"].iloc[-1] == 200 and df["missed"].iloc[-1] == 0  # no softmax reaches exactly 1 here


def test_triage_change_hand_example():
    a = triage_curves(ATTACK_P, LABELS, GAMMAS, from_logits=False)
    b = triage_curves(BENIGN_P, LABELS, GAMMAS, from_logits=False)
    ch = triage_change(a, b)
    assert ch["gamma"].tolist() == GAMMAS
    assert ch["unnecessary_change"].tolist() == [0, -1, -1, -1, 0]
    assert ch["missed_change"].tolist() == [0, 0, 2, 1, 0]
    np.testing.assert_allclose(ch["missed_rate_change"], np.array([0, 0, 2, 1, 0]) / 6)
    np.testing.assert_allclose(ch["unnecessary_rate_change"], np.array([0, -1, -1, -1, 0]) / 6)
    # alignment on γ, not on row order
    pd.testing.assert_frame_equal(triage_change(a.iloc[::-1], b), ch)
    with pytest.raises(ValueError, match="gamma grids"):
        triage_change(a, triage_curves(BENIGN_P, LABELS, [0.0, 0.5, 0.6, 0.95, 1.0], from_logits=False))
    with pytest.raises(ValueError, match="gamma grids"):
        triage_change(a, b.iloc[:-1])
    with pytest.raises(ValueError, match="lacks columns"):
        triage_change(a, b.drop(columns="missed"))


def test_triage_errors():
    p, y = np.array(BENIGN_P), np.array(LABELS)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        triage_curves(p, y, [0.5, 1.2], from_logits=False)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        triage_curves(p, y, [-0.1], from_logits=False)
    with pytest.raises(ValueError, match="NaN"):
        triage_curves(p, y, [0.5, np.nan], from_logits=False)
    with pytest.raises(ValueError, match="labels must have shape"):
        triage_curves(p, y[:5], from_logits=False)
    with pytest.raises(ValueError, match="2-D"):
        triage_curves(p[0], y[:1], from_logits=False)
    with pytest.raises(ValueError, match="sum to 1"):
        triage_curves(p * 0.5, y, from_logits=False)
    with pytest.raises(ValueError, match="NaN"):
        triage_curves(np.full((6, 3), np.nan), y)
    with pytest.raises(ValueError, match="labels must lie"):
        triage_curves(p, [0, 1, 0, 1, 2, 3], from_logits=False)


class Doubled(BehaviourKind):  # benign training, update scaled by 2: cosine exactly 1
    kind = attack = "doubled"

    def stealth_update(self, behaviour, deltas, seed):
        return [2.0 * d for d in deltas]


def test_curves_dispatch_through_the_behaviour_registry(monkeypatch):
    """update_cosine_curves has no kind list of its own: a kind added to the catalogue's attacks
    works, and its hooks decide the attacked update."""
    from fedcal import catalogue

    monkeypatch.setitem(catalogue._REGISTRY, "attack", dict(catalogue.components("attack")))
    catalogue.register(catalogue.Component("attack", "doubled", f"{__name__}:Doubled"))
    ds = synthetic_dataset(n_train=64, n_test=4)
    m = build_model("mlp", ds.input_shape, ds.num_classes, seed=0)
    df = update_cosine_curves(m, ds.x_train, ds.y_train, ds.num_classes, {"d": Behaviour("doubled")},
                              steps=2, batch_size=16, lr=0.1)
    assert np.allclose(df["cosine"], 1.0)
    with pytest.raises(ValueError, match="variant 'n': noise_sigma"):
        update_cosine_curves(m, ds.x_train, ds.y_train, ds.num_classes, {"n": Behaviour("noise", noise_sigma=-1.0)})
