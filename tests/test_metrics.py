import math

import pytest
import torch

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
    import numpy as np

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
