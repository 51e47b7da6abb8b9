"""The field's calibration estimators (fedcal.calibration_metrics): by hand on small cases, against
torchmetrics' CalibrationError (l1 = ECE, max = MCE, l2 = RMS) and binary CalibrationError per class
(class-wise ECE), against relplot's smooth ECE, and by invariants of their definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedcal.calibration_metrics import (ESTIMATORS, adaptive_ece, classwise_ece, estimates, estimator_metrics,
                                        ks_error, smooth_ece, smooth_ece_at)
from fedcal.config import ConfigError, RunConfig
from fedcal.config.train import calibration_estimators
from fedcal.metrics import calibration_metrics


def _t(*rows):
    return torch.tensor(rows, dtype=torch.float64)


# the hand case: bins (0, .5] and (.5, 1]; bin 0 holds .25, .35 (acc .5, conf .3: gap +.2),
# bin 1 holds .95, .85 (acc .5, conf .9: gap -.4)
CONF, CORRECT = _t([0.95, 0.85, 0.25, 0.35]), _t([1.0, 0.0, 0.0, 1.0])


def test_binned_estimators_by_hand():
    out = estimates(CONF, CORRECT, ("mce", "smce", "rmsce"), n_bins=2)
    assert float(out["ece"][0]) == pytest.approx(0.5 * 0.2 + 0.5 * 0.4)
    assert float(out["sece"][0]) == pytest.approx(0.5 * 0.2 - 0.5 * 0.4)
    assert float(out["mce"][0]) == pytest.approx(0.4) and float(out["smce"][0]) == pytest.approx(-0.4)
    assert float(out["rmsce"][0]) == pytest.approx(math.sqrt(0.5 * 0.04 + 0.5 * 0.16))



def test_an_empty_bin_never_holds_the_maximum():
    # every confidence in the top bin of 10, calibrated there: MCE 0, not an empty bin's gap
    out = estimates(_t([0.95, 0.95]), _t([1.0, 0.9]), ("mce",), n_bins=10)
    assert float(out["mce"][0]) == pytest.approx(0.0, abs=1e-12)
    assert float(estimates(_t([0.15, 0.95]), _t([0.0, 1.0]), ("smce",), n_bins=10)["smce"][0]) == pytest.approx(-0.15)


def test_adaptive_bins_hold_equal_mass():
    conf, correct = _t([0.1, 0.2, 0.3, 0.9]), _t([0.0, 0.0, 1.0, 1.0])
    # equal mass: {.1, .2} (acc 0, conf .15) and {.3, .9} (acc 1, conf .6); equal width: {.1, .2, .3}, {.9}
    assert float(adaptive_ece(conf, correct, 2)[0]) == pytest.approx(0.5 * 0.15 + 0.5 * 0.4)
    assert float(estimates(conf, correct, (), 2)["ece"][0]) == pytest.approx(0.75 * (1 / 3 - 0.2) + 0.25 * 0.1)
    # one bin: |accuracy - mean confidence|; n bins of one each: mean |correct - conf|
    assert float(adaptive_ece(conf, correct, 1)[0]) == pytest.approx(abs(0.5 - 0.375))
    assert float(adaptive_ece(conf, correct, 4)[0]) == pytest.approx((0.1 + 0.2 + 0.7 + 0.1) / 4)


def test_classwise_ece_by_hand():
    probs = torch.tensor([[[0.8, 0.2], [0.6, 0.4], [0.3, 0.7]]], dtype=torch.float64)
    labels = torch.tensor([[0, 1, 1]])
    # class 0: p = .8, .6 (bin 1: conf .7, hit .5) and .3 (bin 0: hit 0) -> 2/3 * .2 + 1/3 * .3
    # class 1: p = .2, .4 (bin 0: conf .3, hit .5) and .7 (bin 1: hit 1) -> the same
    assert float(classwise_ece(probs, labels, 2)[0]) == pytest.approx(7 / 30)


def test_ks_error_by_hand():
    # confidence order .25 (0), .35 (1), .85 (0), .95 (1): cumulative gap /4 = -.0625, .1, -.1125, -.1
    ks, sks = ks_error(CONF, CORRECT)
    assert float(ks[0]) == pytest.approx(0.1125) and float(sks[0]) == pytest.approx(-0.1125)


def _smooth_ece_by_quadrature(f, y, sigma):
    """∫_0^1 |(1/n) Σ K(t, f_i)(y_i - f_i)| dt with the reflected Gaussian written out, by scipy."""
    from scipy.integrate import quad

    def kernel(t, u):
        return sum(math.exp(-0.5 * ((t - u - 2 * j) / sigma) ** 2) + math.exp(-0.5 * ((t + u - 2 * j) / sigma) ** 2)
                   for j in range(-6, 7)) / (sigma * math.sqrt(2 * math.pi))

    def h(t):
        return abs(sum(kernel(t, fi) * (yi - fi) for fi, yi in zip(f, y)) / len(f))

    return quad(h, 0, 1, limit=200, epsabs=1e-10)[0]


@pytest.mark.parametrize("sigma", [0.05, 0.1, 0.3])
def test_smooth_ece_is_its_integral(sigma):
    f, y = [0.3137, 0.7021, 0.9555, 0.52], [1.0, 0.0, 1.0, 1.0]
    got = float(smooth_ece_at(_t(f), _t(y), sigma)[0])
    assert got == pytest.approx(_smooth_ece_by_quadrature(f, y, sigma), abs=1e-5)


def test_smooth_ece_of_one_signed_residuals_is_the_mean_gap():
    # every prediction over-confident: h(t) <= 0 everywhere, and the reflected kernel integrates to 1
    f = torch.rand(1, 300, generator=torch.Generator().manual_seed(1)) * 0.5 + 0.5
    for sigma in (0.02, 0.2, 1.0):
        assert float(smooth_ece_at(f, torch.zeros_like(f), sigma)[0]) == pytest.approx(float(f.mean()), abs=1e-6)


def _predictions(n=4000, classes=10, seed=0, spread=1.5, noise=0.4):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, classes, generator=g) * spread
    labels = logits.argmax(1)
    flip = torch.rand(n, generator=g) < noise
    labels[flip] = torch.randint(classes, (int(flip.sum()),), generator=g)
    return logits.softmax(1), labels


def test_smooth_ece_bandwidth_is_the_fixed_point():
    probs, labels = _predictions()
    conf, pred = probs.double().max(1)
    value, sigma = smooth_ece(conf, (pred == labels).double())
    assert value == pytest.approx(sigma, abs=2e-3)
    assert float(smooth_ece_at(conf[None], (pred == labels).double()[None], sigma)[0]) == pytest.approx(value)


def test_smooth_ece_agrees_with_relplot():
    relplot = pytest.importorskip("relplot")
    g = torch.Generator().manual_seed(3)  # confidences U(.3, 1), correct with probability conf - .06
    conf = torch.rand(5000, generator=g, dtype=torch.float64) * 0.7 + 0.3
    correct = (torch.rand(5000, generator=g, dtype=torch.float64) < conf - 0.06).double()
    f, y = conf.numpy(), correct.numpy()
    # relplot sums on a mesh of max(200, 10/sigma) points and cuts its kernel at +-0.5, so it is
    # this integral to within its discretisation (about 1e-3 relative) at small bandwidths only
    for sigma in (0.02, 0.05, 0.1):
        assert float(smooth_ece_at(conf[None], correct[None], sigma)[0]) == pytest.approx(
            relplot.smECE_sigma(f, y, sigma), rel=1e-3)
    value, sigma = smooth_ece(conf, correct)
    theirs, their_sigma = relplot.smECE(f, y, return_width=True)
    assert sigma < 0.1 and sigma == pytest.approx(their_sigma, abs=2e-3) and value == pytest.approx(theirs, abs=2e-3)


@pytest.mark.parametrize("norm,name", [("l1", "ece"), ("max", "mce"), ("l2", "rmsce")])
def test_binned_estimators_agree_with_torchmetrics(norm, name):
    tm = pytest.importorskip("torchmetrics.functional.classification")
    probs, labels = _predictions()
    for n_bins in (10, 15):
        ours = estimator_metrics(probs, labels, ("mce", "rmsce"), n_bins)
        ours["ece"] = calibration_metrics(probs.log(), labels, n_bins)["ece"]
        theirs = float(tm.multiclass_calibration_error(probs, labels, 10, n_bins=n_bins, norm=norm))
        assert ours[name] == pytest.approx(theirs, abs=1e-6)


def test_classwise_ece_agrees_with_torchmetrics_per_class():
    tm = pytest.importorskip("torchmetrics.functional.classification")
    probs, labels = _predictions(classes=5)
    theirs = np.mean([float(tm.binary_calibration_error(probs[:, k], (labels == k).long(), n_bins=15))
                      for k in range(5)])
    assert estimator_metrics(probs, labels, ("cwece",), 15)["cwece"] == pytest.approx(theirs, abs=1e-6)


def test_estimators_of_r_sets_equal_each_set_alone():
    probs, labels = _predictions(n=500)
    sets = [probs[:250], probs[250:]]
    conf = torch.stack([p.double().max(1).values for p in sets])
    correct = torch.stack([(p.argmax(1) == labels[i * 250:(i + 1) * 250]).double() for i, p in enumerate(sets)])
    names = ("mce", "rmsce", "ace", "ksce", "sksce")
    batch = estimates(conf, correct, names, 15, sigma=0.1)
    for r in range(2):
        alone = estimates(conf[r:r + 1], correct[r:r + 1], names, 15, sigma=0.1)
        for k in batch:
            assert float(batch[k][r]) == pytest.approx(float(alone[k][0]), abs=1e-12), k


def test_the_key_chooses_what_a_run_records():
    assert calibration_estimators("") == ()
    assert calibration_estimators(" mce, ksce ,mce") == ("mce", "ksce")
    assert calibration_estimators("all") == ESTIMATORS
    assert RunConfig.from_flower({"calibration-metrics": "ace,smece"}).calibration_metrics == "ace,smece"
    with pytest.raises(ConfigError, match="unknown estimator 'ece2'"):
        RunConfig.from_flower({"calibration-metrics": "ece2"})
    probs, labels = _predictions(n=300)
    assert set(estimator_metrics(probs, labels, ("smece", "mce"), 15)) == {"smece", "smece_sigma", "mce"}
    assert estimator_metrics(probs, labels, (), 15) == {}


def test_new_keys_keep_committed_run_ids():
    """The hashes of a default config and of a digits TSA run, pinned before the keys existed."""
    from fedcal.results import config_hash

    assert config_hash(RunConfig()) == "1877bc25fa2e"
    digits = RunConfig.from_flower({"dataset": "digits", "tau": 5.0, "num-rounds": 3})
    assert config_hash(digits) == "0d954f97b48c"
    assert config_hash(digits.replace(calibration_metrics="mce")) != "0d954f97b48c"
    assert config_hash(digits.replace(calibration_bootstrap=200)) != "0d954f97b48c"


# ---------------------------------------------------------------------- bootstrap intervals
def _logits(n=2000, seed=0):
    probs, labels = _predictions(n=n, seed=seed)
    return probs.double().log(), labels


def test_bootstrap_is_seeded_and_brackets_the_metrics():
    from fedcal.calibration_metrics import bootstrap_intervals

    logits, labels = _logits()
    a = bootstrap_intervals(logits, labels, ("mce", "ksce"), 15, 100, seed=3)
    assert a == bootstrap_intervals(logits, labels, ("mce", "ksce"), 15, 100, seed=3)
    assert a != bootstrap_intervals(logits, labels, ("mce", "ksce"), 15, 100, seed=4)
    full = calibration_metrics(logits, labels, 15)
    rows = {r["metric"]: r for r in a}
    assert set(rows) == {"accuracy", "ece", "sece", "brier", "nll", "mce", "ksce"}
    for k in ("accuracy", "ece", "sece", "brier", "nll"):
        assert rows[k]["estimate"] == pytest.approx(full[k], abs=1e-9)
        assert rows[k]["lo"] < rows[k]["hi"]


def test_one_resample_is_the_metric_of_that_resample():
    """With B = 1 both bounds are the metrics of the one index set the seeded generator draws."""
    from fedcal.calibration_metrics import bootstrap_intervals

    logits, labels = _logits(n=400)
    idx = torch.randint(400, (1, 400), generator=torch.Generator().manual_seed(9))[0]
    want = calibration_metrics(logits[idx], labels[idx], 15)
    want.update(estimator_metrics(logits[idx].softmax(1), labels[idx], ("rmsce", "ace", "cwece", "sksce"), 15))
    for r in bootstrap_intervals(logits, labels, ("rmsce", "ace", "cwece", "sksce"), 15, 1, seed=9):
        assert r["lo"] == pytest.approx(want[r["metric"]], abs=1e-9) and r["hi"] == pytest.approx(r["lo"])


def test_bootstrap_width_is_the_sampling_noise_of_a_mean():
    """Accuracy and sECE are means over the test set: their 95 % intervals are about 2·1.96·sd/sqrt(n)."""
    from fedcal.calibration_metrics import bootstrap_intervals

    logits, labels = _logits(n=3000, seed=2)
    probs = logits.softmax(1).double()
    conf, pred = probs.max(1)
    correct = (pred == labels).double()
    rows = {r["metric"]: r for r in bootstrap_intervals(logits, labels, (), 15, 1000, seed=0)}
    for name, values in (("accuracy", correct), ("sece", correct - conf)):
        want = 2 * 1.96 * float(values.std()) / math.sqrt(len(values))
        assert rows[name]["hi"] - rows[name]["lo"] == pytest.approx(want, rel=0.15), name
