import math

import numpy as np
import pytest
import torch

from fedcal.checks import (
    _check_float64,
    _check_gammas,
    _check_labels,
    _check_logits,
    _check_logits_labels,
    _check_matrix,
    _check_probs,
)
from fedcal.metrics import bin_index, calibration_metrics, reliability_bins


def logits_for(probs):
    """Logits whose softmax is exactly ``probs`` (up to float error)."""
    return torch.log(torch.tensor(probs, dtype=torch.float64))


def test_hand_computed_two_bins():
    # 4 samples, 2 classes, 2 bins: confidences 0.6, 0.6 (bin 2: (0.5,1]) and 0.9, 0.9.
    probs = [[0.6, 0.4], [0.6, 0.4], [0.9, 0.1], [0.1, 0.9]]
    labels = torch.tensor([0, 1, 0, 0])  # correct, wrong, correct, wrong
    m = calibration_metrics(logits_for(probs), labels, n_bins=2)
    # All four fall in bin (0.5, 1]: acc = 0.5, mean conf = (0.6+0.6+0.9+0.9)/4 = 0.75.
    assert m["accuracy"] == pytest.approx(0.5)
    assert m["ece"] == pytest.approx(0.25)
    assert m["sece"] == pytest.approx(-0.25)  # over-confident → negative
    brier = ((0.4**2 + 0.4**2) + (0.6**2 + 0.6**2) + (0.1**2 + 0.1**2) + (0.9**2 + 0.9**2)) / 4
    assert m["brier"] == pytest.approx(brier)
    nll = -(math.log(0.6) + math.log(0.4) + math.log(0.9) + math.log(0.1)) / 4
    assert m["nll"] == pytest.approx(nll)


def test_hand_computed_several_bins_under_confident():
    # 10 bins. Bin (0.5,0.6]: two samples conf 0.55, both correct → gap +0.45.
    # Bin (0.9,1.0]: one sample conf 0.95, correct → gap +0.05.
    probs = [[0.55, 0.45], [0.45, 0.55], [0.95, 0.05]]
    labels = torch.tensor([0, 1, 0])
    m = calibration_metrics(logits_for(probs), labels, n_bins=10)
    expected = (2 / 3) * 0.45 + (1 / 3) * 0.05
    assert m["ece"] == pytest.approx(expected)
    assert m["sece"] == pytest.approx(expected)  # under-confident → positive


def test_bin_edges_zero_and_one_and_right_closed():
    conf = torch.tensor([0.0, 1e-12, 0.5, 0.5 + 1e-12, 1.0], dtype=torch.float64)
    # 2 bins: (0, .5] → 0 (with 0 itself), (.5, 1] → 1 (with 1 itself)
    assert bin_index(conf, 2).tolist() == [0, 0, 0, 1, 1]
    b15 = bin_index(torch.tensor([0.0, 1.0, 2 / 15], dtype=torch.float64), 15).tolist()
    assert b15[0] == 0 and b15[1] == 14 and b15[2] == 1


def test_confidence_exactly_one_counts_in_last_bin():
    logits = torch.tensor([[100.0, -100.0], [0.0, 0.0]], dtype=torch.float64)  # conf 1.0 and 0.5
    bins = reliability_bins(logits, torch.tensor([0, 0]), n_bins=15)
    assert bins["count"][14] == 1
    assert bins["count"].sum() == 2


def test_perfectly_calibrated_has_zero_ece():
    # 10 samples at confidence 0.8, 8 correct: accuracy == confidence.
    probs = [[0.8, 0.2]] * 10
    labels = torch.tensor([0] * 8 + [1] * 2)
    m = calibration_metrics(logits_for(probs), labels)
    assert m["ece"] == pytest.approx(0.0, abs=1e-12)
    assert m["sece"] == pytest.approx(0.0, abs=1e-12)
    assert m["accuracy"] == pytest.approx(0.8)


def test_maximally_wrong_confident_model():
    logits = torch.tensor([[50.0, -50.0, -50.0]] * 6, dtype=torch.float64)
    labels = torch.tensor([1, 2, 1, 2, 1, 2])
    m = calibration_metrics(logits, labels)
    assert m["accuracy"] == 0.0
    assert m["ece"] == pytest.approx(1.0)
    assert m["sece"] == pytest.approx(-1.0)
    assert m["brier"] == pytest.approx(2.0)  # (1-0)² + (0-1)²
    assert m["nll"] == pytest.approx(100.0)  # finite: computed with log_softmax
    assert math.isfinite(m["nll"])


def test_nll_stable_for_extreme_logits():
    logits = torch.tensor([[1e4, -1e4]], dtype=torch.float32)
    m = calibration_metrics(logits, torch.tensor([1]))
    assert m["nll"] == pytest.approx(2e4)


def test_metrics_match_independent_numpy_implementation():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(500, 7, generator=g) * 3
    labels = torch.randint(0, 7, (500,), generator=g)
    m = calibration_metrics(logits, labels, n_bins=15)
    z = logits.double().numpy()
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    conf, pred = p.max(1), p.argmax(1)
    correct = (pred == labels.numpy()).astype(float)
    ece = sece = 0.0
    for b in range(15):
        lo, hi = b / 15, (b + 1) / 15
        sel = (conf > lo) & (conf <= hi) if b else (conf <= hi)
        if sel.any():
            gap = correct[sel].mean() - conf[sel].mean()
            ece += sel.mean() * abs(gap)
            sece += sel.mean() * gap
    assert m["ece"] == pytest.approx(ece)
    assert m["sece"] == pytest.approx(sece)
    assert m["accuracy"] == pytest.approx(correct.mean())


def test_bad_input_is_rejected_clearly():
    with pytest.raises(ValueError, match="shape"):
        calibration_metrics(torch.zeros(3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="labels"):
        calibration_metrics(torch.zeros(3, 2), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="NaN"):
        calibration_metrics(torch.tensor([[float("nan"), 0.0]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="lie in"):
        calibration_metrics(torch.zeros(1, 2), torch.tensor([2]))


# ---------------------------------------------------------------------------- shared input checks
def test_check_logits_converts_and_names_what_is_wrong():
    z = _check_logits([[0.1, 0.2], [0.3, 0.4]])
    assert z.dtype == torch.float64 and z.device.type == "cpu"
    assert z[0, 0].item() == 0.1  # lists go through numpy: no float32 rounding
    assert _check_logits(torch.ones(2, 3, dtype=torch.float16)).dtype == torch.float64
    with pytest.raises(ValueError, match=r"scores must be 2-D \(n, C\), got shape \(3,\)"):
        _check_logits(torch.zeros(3), "scores")
    with pytest.raises(ValueError, match="logits is empty"):
        _check_logits(torch.zeros(0, 3))
    with pytest.raises(ValueError, match="logits needs at least 2 classes, got C = 1"):
        _check_logits(torch.zeros(4, 1), min_classes=2)
    with pytest.raises(ValueError, match="logits contains NaN or Inf"):
        _check_logits(torch.tensor([[0.0, float("inf")]]))
    with pytest.raises(ValueError, match="logits must be real-valued"):
        _check_logits(torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="logits must be numeric"):
        _check_logits([["a", "b"]])


def test_check_labels_converts_and_names_what_is_wrong():
    y = _check_labels([0.0, 2.0, 1.0], 3, 3)
    assert y.dtype == torch.int64 and y.tolist() == [0, 2, 1]
    assert _check_labels(torch.tensor([1, 0], dtype=torch.uint8), 2, 2).dtype == torch.int64
    with pytest.raises(ValueError, match=r"labels must have shape \(4,\)"):
        _check_labels([0, 1, 2], 4, 3)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\), got range \[0, 3\]"):
        _check_labels([0, 3], 2, 3)
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 3\), got range \[-1, 0\]"):
        _check_labels([-1, 0], 2, 3, name="targets")
    with pytest.raises(ValueError, match="labels must be integers"):
        _check_labels([0.5, 1.0], 2, 3)
    with pytest.raises(ValueError, match="labels contains NaN"):
        _check_labels([float("nan"), 1.0], 2, 3)
    with pytest.raises(ValueError, match="labels must be integers, got dtype torch.bool"):
        _check_labels(torch.tensor([True, False]), 2, 3)


def test_check_probs_range_sum_and_tolerances():
    p = _check_probs([[0.25, 0.75], [1.0, 0.0]])
    assert p.dtype == torch.float64
    with pytest.raises(ValueError, match=r"probs must lie in \[0, 1\]"):
        _check_probs([[1.5, -0.5]])
    with pytest.raises(ValueError, match="probs rows must sum to 1"):
        _check_probs([[0.5, 0.4]])
    _check_probs([[0.5, 0.5 + 5e-5]], sum_atol=1e-4)  # within the given tolerance
    with pytest.raises(ValueError, match=r"q rows must sum to 1 \(tolerance 1e-06\) \(hint\)"):
        _check_probs([[0.5, 0.5 + 5e-5]], "q", hint=" (hint)")
    with pytest.raises(ValueError, match="probs contains NaN"):
        _check_probs([[float("nan"), 1.0]])


def test_check_float64_matrix_and_gammas():
    assert _check_float64(torch.arange(3)).dtype == torch.float64
    with pytest.raises(ValueError, match=r"X must be 2-D, got shape \(3,\)"):
        _check_matrix([1.0, 2.0, 3.0], "X")
    with pytest.raises(ValueError, match="w must be 1-D"):
        _check_float64([[1.0]], "w", ndim=1)
    with pytest.raises(ValueError, match="X contains NaN or Inf"):
        _check_matrix([[1.0, float("nan")]], "X")
    assert np.array_equal(_check_gammas().numpy(), np.linspace(0.0, 1.0, 101))  # bit for bit
    assert _check_gammas(0.3).tolist() == [0.3]
    with pytest.raises(ValueError, match="gammas must lie in"):
        _check_gammas([0.5, 1.5])
    with pytest.raises(ValueError, match="gammas contains NaN"):
        _check_gammas([float("nan")])
    with pytest.raises(ValueError, match="gammas must be a non-empty 1-D"):
        _check_gammas([])


def test_one_validation_path_gives_one_message():
    """Metrics, calibrators and analyses reject the same mistake with the same message."""
    from fedcal.analysis import triage_curves
    from fedcal.calibrate import TemperatureScaling, probs_metrics

    nan = torch.tensor([[float("nan"), 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 1])
    for f in (calibration_metrics, TemperatureScaling().fit, triage_curves, _check_logits_labels):
        with pytest.raises(ValueError, match="logits contains NaN or Inf"):
            f(nan, y)
    for f in (calibration_metrics, TemperatureScaling().fit, triage_curves):
        with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\), got range \[0, 5\]"):
            f(torch.zeros(2, 2), torch.tensor([0, 5]))
        with pytest.raises(ValueError, match=r"labels must have shape \(2,\)"):
            f(torch.zeros(2, 2), torch.tensor([0, 1, 1]))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\)"):
        probs_metrics(torch.full((2, 2), 0.5), torch.tensor([0, 5]))


def test_calibration_metrics_batch_equals_one_run_at_a_time():
    from fedcal.metrics import calibration_metrics_batch

    g = torch.Generator().manual_seed(1)
    scale = torch.tensor([0.05, 1.0, 4.0, 30.0]).view(4, 1, 1)  # under- to over-confident
    z = torch.randn(4, 500, 7, generator=g) * scale
    y = torch.randint(0, 7, (500,), generator=g)
    many = calibration_metrics_batch(z, y, 10)
    for r in range(4):
        one = calibration_metrics(z[r], y, 10)
        assert many[r].keys() == one.keys()
        for k in one:
            assert abs(many[r][k] - one[k]) < 1e-12, (r, k)
    with pytest.raises(ValueError, match=r"\(R, n, C\)"):
        calibration_metrics_batch(z[0], y)
    with pytest.raises(ValueError):
        calibration_metrics_batch(z, y[:10])
