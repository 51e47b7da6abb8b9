import math

import numpy as np
import pytest
import torch

from fedcal.calibrate import (
    DEFAULT_CALIBRATORS,
    CALIBRATORS,
    HistogramBinning,
    IsotonicCalibration,
    PlattScaling,
    TemperatureScaling,
    calibrate,
    probs_metrics,
    redistribute_top_confidence,
    split_calibration,
)
from fedcal.metrics import calibration_metrics

TOP_LABEL = (PlattScaling, IsotonicCalibration, HistogramBinning)


def sample_task(n=4000, c=10, scale=2.0, seed=0):
    """Logits z_true and labels drawn from softmax(z_true): z_true is calibrated by design."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, c, generator=g, dtype=torch.float64) * scale
    y = torch.multinomial(z.softmax(1), 1, generator=g).squeeze(1)
    return z, y


def logits_with_confidence(conf, c=3):
    """Logits whose softmax puts ``conf`` on class 0 and splits the rest evenly."""
    conf = np.asarray(conf, dtype=float)
    p = np.repeat(((1 - conf) / (c - 1))[:, None], c, axis=1)
    p[:, 0] = conf
    return torch.log(torch.tensor(p))


@pytest.fixture(scope="module")
def task():
    return sample_task()


def test_probs_metrics_matches_calibration_metrics(task):
    z, y = task
    want = calibration_metrics(z, y, n_bins=15)
    got = probs_metrics(z.softmax(1), y, n_bins=15)
    for key in ("accuracy", "ece", "sece", "brier"):
        assert got[key] == pytest.approx(want[key], abs=1e-12)
    assert got["nll"] == pytest.approx(want["nll"], rel=1e-9)


def test_probs_metrics_nll_floor():
    probs = torch.tensor([[1.0, 0.0], [0.5, 0.5]], dtype=torch.float64)
    m = probs_metrics(probs, torch.tensor([1, 0]))
    assert m["nll"] == pytest.approx((-math.log(1e-12) - math.log(0.5)) / 2)
    with pytest.raises(ValueError, match="sum to 1"):
        probs_metrics(torch.tensor([[0.7, 0.7]]), torch.tensor([0]))


@pytest.mark.parametrize("t_known", [2.5, 0.5])
def test_temperature_recovers_known_temperature(task, t_known):
    z, y = task
    ts = TemperatureScaling().fit(z * t_known, y)
    assert ts.temperature_ == pytest.approx(t_known, rel=0.05)


def test_temperature_fixes_overconfidence(task):
    z, y = task
    z_over = z * 3.0  # over-confident model
    cal, test = split_calibration(len(y), 500, seed=1)
    before = calibration_metrics(z_over[test], y[test])
    ts = TemperatureScaling().fit(z_over[cal], y[cal])
    after = probs_metrics(ts.predict_proba(z_over[test]), y[test])
    assert before["sece"] < -0.1  # clearly over-confident to start with
    assert after["ece"] < before["ece"] / 2
    assert abs(after["sece"]) < abs(before["sece"]) / 2
    assert after["accuracy"] == before["accuracy"]
    assert after["nll"] < before["nll"]
    # transform gives the scaled logits, usable with calibration_metrics directly.
    assert calibration_metrics(ts.transform(z_over[test]), y[test])["ece"] == pytest.approx(after["ece"])
    assert torch.equal(ts.predict_proba(z_over).argmax(1), z_over.argmax(1))


def test_isotonic_monotone_and_bounded(task):
    z, y = task
    iso = IsotonicCalibration().fit(z[:1000] * 3, y[:1000])
    z_test = z[1000:] * 3
    conf = z_test.softmax(1).max(1).values
    order = conf.argsort()
    cal_conf = iso.predict_confidence(z_test)[order]
    assert (cal_conf.diff() >= -1e-12).all()
    assert ((cal_conf >= 0) & (cal_conf <= 1)).all()
    probs = iso.predict_proba(z_test)
    assert ((probs >= 0) & (probs <= 1)).all()
    # Out-of-range confidences are clipped to the end values, not extrapolated.
    extreme = logits_with_confidence([0.34, 0.999999], c=10)
    assert ((iso.predict_confidence(extreme) >= 0) & (iso.predict_confidence(extreme) <= 1)).all()


def test_histogram_matches_independent_per_bin_accuracy():
    n_bins = 5  # bins (0,.2], (.2,.4], (.4,.6], (.6,.8], (.8,1]
    conf = np.array([0.35, 0.38, 0.45, 0.55, 0.58, 0.85, 0.9, 0.95, 0.97])
    correct = np.array([0, 1, 1, 1, 0, 1, 1, 1, 0])
    z = logits_with_confidence(conf, c=3)  # predicted class is 0
    labels = torch.tensor(np.where(correct == 1, 0, 1))
    hb = HistogramBinning(n_bins=n_bins).fit(z, labels)

    edges = np.linspace(0, 1, n_bins + 1)
    expected = np.empty(n_bins)
    for b in range(n_bins):
        inside = (conf > edges[b]) & (conf <= edges[b + 1])
        expected[b] = correct[inside].mean() if inside.any() else (edges[b] + edges[b + 1]) / 2
    np.testing.assert_allclose(hb.bin_confidence_, expected)
    np.testing.assert_array_equal(hb.bin_count_, [0, 2, 3, 0, 4])
    assert np.isnan(hb.bin_accuracy_[[0, 3]]).all()
    assert expected[3] == pytest.approx(0.7)  # empty bin → midpoint

    test_conf = np.array([0.39, 0.5, 0.7, 0.99])
    got = hb.predict_confidence(logits_with_confidence(test_conf, c=3)).numpy()
    np.testing.assert_allclose(got, [0.5, 2 / 3, 0.7, 0.75])


def test_platt_recovers_known_sigmoid():
    rng = np.random.default_rng(0)
    n, a, b = 3000, 8.0, -5.0
    conf = rng.uniform(0.35, 0.999, n)
    p_correct = 1 / (1 + np.exp(-(a * conf + b)))
    correct = rng.random(n) < p_correct
    z = logits_with_confidence(conf, c=3)
    labels = torch.tensor(np.where(correct, 0, rng.integers(1, 3, n)))
    platt = PlattScaling().fit(z, labels)
    grid = np.linspace(0.35, 0.999, 50)
    fitted = platt.predict_confidence(logits_with_confidence(grid, c=3)).numpy()
    truth = 1 / (1 + np.exp(-(a * grid + b)))
    assert np.abs(fitted - truth).max() < 0.05
    assert platt.coef_ > 0


def test_platt_margin_feature_recovers_known_sigmoid():
    rng = np.random.default_rng(1)
    n, a, b = 3000, 1.5, -1.0
    margin = rng.uniform(0, 5, n)
    z = torch.zeros(n, 4, dtype=torch.float64)
    z[:, 0] = torch.tensor(margin)
    correct = rng.random(n) < 1 / (1 + np.exp(-(a * margin + b)))
    labels = torch.tensor(np.where(correct, 0, rng.integers(1, 4, n)))
    platt = PlattScaling(feature="margin").fit(z, labels)
    grid = torch.zeros(50, 4, dtype=torch.float64)
    grid[:, 0] = torch.linspace(0, 5, 50, dtype=torch.float64)
    fitted = platt.predict_confidence(grid).numpy()
    truth = 1 / (1 + np.exp(-(a * grid[:, 0].numpy() + b)))
    assert np.abs(fitted - truth).max() < 0.05


@pytest.mark.parametrize("all_correct", [True, False])
def test_platt_degenerate_calibration_sets(all_correct):
    z, y = sample_task(n=10, seed=3)
    pred = z.argmax(1)
    labels = pred if all_correct else (pred + 1) % z.shape[1]
    platt = PlattScaling().fit(z, labels)
    conf = platt.predict_confidence(sample_task(n=200, seed=4)[0])
    assert ((conf > 0) & (conf < 1)).all()
    laplace = 11 / 12 if all_correct else 1 / 12  # (k+1)/(n+2)
    np.testing.assert_allclose(conf.numpy(), laplace, atol=1e-3)


@pytest.mark.parametrize("cls", TOP_LABEL)
def test_redistribution_sums_to_one_and_keeps_argmax(cls, task):
    z, y = task
    z_test = torch.cat([z[:500] * 3, torch.tensor([[1000.0, 0.0] + [0.0] * 8])])  # last row saturated
    for fit_labels in (y[:300], (z[:300].argmax(1) + 1) % 10):  # normal; all wrong (forces the floor)
        probs = cls().fit(z[:300] * 3, fit_labels).predict_proba(z_test)
        assert probs.dtype == torch.float64 and probs.shape == z_test.shape
        torch.testing.assert_close(probs.sum(1), torch.ones(len(z_test), dtype=torch.float64))
        assert ((probs >= 0) & (probs <= 1)).all()
        assert torch.equal(probs.argmax(1), z_test.argmax(1))


def test_redistribution_keeps_proportions():
    p = torch.tensor([[0.6, 0.3, 0.1], [0.5, 0.25, 0.25], [1.0, 0.0, 0.0]], dtype=torch.float64)
    q = redistribute_top_confidence(p, torch.tensor([0.8, 0.3, 0.9]))
    torch.testing.assert_close(q[0], torch.tensor([0.8, 0.15, 0.05], dtype=torch.float64))
    # 0.3 would drop below the runner-up: clipped to the tie point 0.25/(0.5+0.25) = 1/3.
    assert q[1, 0] == pytest.approx(1 / 3, abs=1e-9) and q[1].argmax() == 0
    torch.testing.assert_close(q[2], torch.tensor([0.9, 0.05, 0.05], dtype=torch.float64))


@pytest.mark.parametrize("name", sorted(DEFAULT_CALIBRATORS))
def test_tiny_calibration_set_works(name, task):
    """The SPEC calibrators keep the argmax, so accuracy is the model's (the one-vs-rest ones
    need not: their tiny-set case is in test_one_vs_rest_by_hand_and_with_classes_missing)."""
    z, y = task
    cal, test = split_calibration(len(y), 10, seed=0)
    probs = calibrate(name, (z * 3)[cal], y[cal], (z * 3)[test])
    assert probs.shape == (len(test), 10) and torch.isfinite(probs).all()
    m = probs_metrics(probs, y[test])
    assert m["accuracy"] == pytest.approx(calibration_metrics(z[test], y[test])["accuracy"])
    # numpy inputs work as well
    probs_np = calibrate(name, (z * 3)[cal].numpy(), y[cal].numpy(), (z * 3)[test].numpy())
    torch.testing.assert_close(probs_np, probs)


@pytest.mark.parametrize("cls", list(CALIBRATORS.values()))
def test_errors(cls):
    z, y = sample_task(n=20, c=4, seed=5)
    with pytest.raises(ValueError, match="not fitted"):
        cls().predict_proba(z)
    with pytest.raises(ValueError, match="labels"):
        cls().fit(z, y[:-1])
    with pytest.raises(ValueError, match=r"\(n, C\)"):
        cls().fit(z[:, 0], y)
    bad = z.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        cls().fit(bad, y)
    with pytest.raises(ValueError, match="lie in"):
        cls().fit(z, torch.full_like(y, 4))
    with pytest.raises(ValueError, match="n_cal >= 2"):
        cls().fit(z[:1], y[:1])
    fitted = cls().fit(z, y)
    assert fitted.num_classes_ == 4
    with pytest.raises(ValueError, match="NaN"):
        fitted.predict_proba(bad)
    with pytest.raises(ValueError, match="classes"):
        fitted.predict_proba(z[:, :3])


def test_registry_and_argument_errors():
    assert set(CALIBRATORS) == {"temperature", "platt", "isotonic", "histogram", "platt-ovr", "isotonic-ovr"}
    z, y = sample_task(n=20, c=4, seed=6)
    with pytest.raises(ValueError, match="unknown calibrator"):
        calibrate("beta", z, y, z)
    with pytest.raises(ValueError, match="feature"):
        PlattScaling(feature="entropy")
    with pytest.raises(ValueError, match="n_bins"):
        HistogramBinning(n_bins=0)
    with pytest.raises(ValueError, match="integers"):
        TemperatureScaling().fit(z, y.double() + 0.5)


def test_split_calibration():
    cal, test = split_calibration(100, 10, seed=7)
    assert len(cal) == 10 and len(test) == 90
    assert np.array_equal(np.sort(np.concatenate([cal, test])), np.arange(100))
    again, _ = split_calibration(100, 10, seed=7)
    other, _ = split_calibration(100, 10, seed=8)
    assert np.array_equal(cal, again) and not np.array_equal(cal, other)
    for bad in (100, 150, 1):
        with pytest.raises(ValueError, match="n_cal"):
            split_calibration(100, bad, seed=0)


# ------------------------------------------------------------------ one-vs-rest calibrators
def _ovr_data(n=600, k=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, k, generator=g, dtype=torch.float64) * 3
    y = torch.randint(0, k, (n,), generator=g)
    y[: n // 2] = z[: n // 2].argmax(1)  # half the labels follow the logits
    return z, y


@pytest.mark.parametrize("name,method,tol", [("platt-ovr", "sigmoid", 1e-4), ("isotonic-ovr", "isotonic", 1e-12)])
def test_one_vs_rest_equals_scikit_learn_calibrated_classifier(name, method, tol):
    """The second implementation: CalibratedClassifierCV on the frozen logits (it needs at least
    5 calibration samples per class, which 300 samples give here)."""
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    class Frozen(ClassifierMixin, BaseEstimator):
        def __init__(self, logits=None):
            self.logits = logits

        def fit(self, X, y):
            self.classes_ = np.arange(self.logits.shape[1])
            return self

        def decision_function(self, X):
            return self.logits[np.asarray(X)[:, 0]]

        def predict(self, X):
            return self.decision_function(X).argmax(1)

    z, y = _ovr_data()
    ref = CalibratedClassifierCV(FrozenEstimator(Frozen(z.numpy()).fit(None, None)), method=method)
    ref.fit(np.arange(300)[:, None], y[:300].numpy())
    want = ref.predict_proba(np.arange(300, 600)[:, None])
    got = calibrate(name, z[:300], y[:300], z[300:]).numpy()
    assert np.abs(got - want).max() < tol


def test_one_vs_rest_by_hand_and_with_classes_missing():
    # two classes, separable by either logit: each per-class isotonic map rises from 0 to 1
    z = torch.tensor([[1.0, -1.0], [2.0, -2.0], [-1.0, 1.0], [-2.0, 2.0]], dtype=torch.float64)
    y = torch.tensor([0, 0, 1, 1])
    probs = calibrate("isotonic-ovr", z, y, torch.tensor([[3.0, -3.0], [-0.5, 0.5]], dtype=torch.float64))
    # z_k = 3 lies past every class-0 positive: 1 and 0. z = (−0.5, 0.5) falls between the steps,
    # where isotonic regression interpolates linearly: class 0 at −0.5 between (−1, 0) and (1, 1)
    # → 0.25, class 1 at 0.5 → 0.75; they already sum to 1
    assert torch.equal(probs, torch.tensor([[1.0, 0.0], [0.25, 0.75]], dtype=torch.float64))
    # ten samples over ten classes: most classes unseen, every row still a distribution
    z, y = _ovr_data(n=200)
    for name in ("platt-ovr", "isotonic-ovr"):
        p = calibrate(name, z[:10], y[:10], z[100:])
        assert torch.isfinite(p).all() and torch.allclose(p.sum(1), torch.ones(100, dtype=torch.float64))
        assert (p >= 0).all()


def test_posthoc_defaults_to_spec_calibrators_and_refuses_unknown_ones():
    from fedcal.reports.studies import posthoc_table

    assert DEFAULT_CALIBRATORS == ("temperature", "platt", "isotonic", "histogram")
    with pytest.raises(ValueError, match="unknown calibrator 'platt-one'"):
        posthoc_table([], methods=("platt-one",))
