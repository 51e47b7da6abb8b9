"""fedcal/pages/distill_skew_diagnosis.py: the counting of the label-skew diagnosis on a hand-made
upload set (3 clients, 4 anchors, 2 classes, target class 0), every expected value computed by
hand in the comments."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tool():
    from fedcal.pages import distill_skew_diagnosis

    return distill_skew_diagnosis


LABELS = torch.tensor([0, 0, 1, 1])  # anchors' true labels: target share 0.5
UPLOADS = torch.tensor([
    [[2.0, 0.0], [1.0, 0.0], [0.5, 0.0], [0.2, 0.0]],  # client 10: target everywhere, ranks perfectly
    [[0.0, 1.0], [0.0, 2.5], [0.0, 1.0], [0.0, 3.0]],  # client 11: class 1 everywhere
    [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]],  # client 12 (backdoor): target on 3 of 4
])
CLIENTS = [10, 11, 12]
BACKDOOR = frozenset({12})


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def test_client_rows_by_hand(tool):
    priors = np.array([[0.9, 0.1], [0.1, 0.9], [0.7, 0.3]])
    rows = tool.client_rows(UPLOADS, CLIENTS, LABELS, priors, BACKDOOR, target=0)
    assert [r["client"] for r in rows] == CLIENTS
    assert [r["backdoor"] for r in rows] == ["no", "no", "yes"]
    assert [r["trained prior"] for r in rows] == ["0.90 / 0.10", "0.10 / 0.90", "0.70 / 0.30"]
    assert [r["anchor argmax"] for r in rows] == ["1.00 / 0.00", "0.00 / 1.00", "0.75 / 0.25"]
    assert [r["anchor accuracy"] for r in rows] == pytest.approx([0.5, 0.5, 0.75])
    # with two classes p(target) = sigmoid(z0 − z1)
    assert rows[0]["mean p(target)"] == pytest.approx(np.mean([sigmoid(m) for m in (2, 1, 0.5, 0.2)]))
    assert rows[2]["mean p(target)"] == pytest.approx((3 * sigmoid(1) + sigmoid(-1)) / 4)
    # AUC of the margin z0 − z1 for "label is 0", over the 2 × 2 (positive, negative) pairs, ties ½:
    # client 10: margins 2, 1 vs 0.5, 0.2 → 4/4; client 11: −1, −2.5 vs −1, −3 → (½ + 1 + 0 + 1)/4;
    # client 12: 1, 1 vs 1, −1 → (½ + 1 + ½ + 1)/4
    assert [r["AUC(target)"] for r in rows] == pytest.approx([1.0, 0.625, 0.75])


def test_consensus_row_mean_by_hand(tool):
    row = tool.consensus_row(UPLOADS, CLIENTS, LABELS, BACKDOOR, target=0, clip=10.0, method="mean",
                             num_groups=None, seed=0)
    assert row["anchors' target share"] == 0.5
    # clients labelling more than half of the anchors with the target: 10 (4/4) and 12 (3/4)
    assert (row["clients mostly target"], row["of them backdoor"], row["clients"]) == (2, 1, 3)
    assert row["MoM groups mostly target"] == "–"
    # mean logits per anchor: (1, 1/3), (2/3, 5/6), (0.5, 1/3), (0.2/3, 4/3) → argmax 0, 1, 0, 1
    assert row["plain: accuracy"] == pytest.approx(0.5)
    assert row["plain: target share"] == pytest.approx(0.5)
    # margins 2/3, −1/6 (positives) vs 1/6, −19/15 (negatives): 3 of 4 pairs ordered right
    assert row["plain: AUC"] == pytest.approx(0.75)
    # the prior the correction aims at: the median of the clients' mean p(target) (0.696, 0.17,
    # 0.616) is client 12's, and its class-1 counterpart 1 − that, so it needs no renormalising
    assert row["corrected to p(target)"] == pytest.approx((3 * sigmoid(1) + sigmoid(-1)) / 4)


def test_consensus_row_mom_singletons_is_the_median(tool):
    # M = n: every group is one client, so "groups mostly target" counts the clients, and the
    # consensus is the coordinate median: (1, 0), (1, 0), (0.5, 0), (0, 1) → argmax 0, 0, 0, 1
    row = tool.consensus_row(UPLOADS, CLIENTS, LABELS, BACKDOOR, target=0, clip=10.0, method="mom",
                             num_groups=3, seed=5)
    assert row["MoM groups mostly target"] == "2 / 3"
    assert row["plain: accuracy"] == pytest.approx(0.75)
    assert row["plain: target share"] == pytest.approx(0.75)


def test_prior_correction_leaves_clients_with_one_mean_prediction_alone(tool):
    # every client predicts the same mean distribution, so the correction's shift is 0 and the two
    # consensus columns agree
    Z = torch.stack([UPLOADS[2], UPLOADS[2], UPLOADS[2]])
    row = tool.consensus_row(Z, CLIENTS, LABELS, BACKDOOR, target=0, clip=10.0, method="median",
                             num_groups=None, seed=0)
    for col in ("accuracy", "target share", "AUC"):
        assert row[f"prior-corrected: {col}"] == pytest.approx(row[f"plain: {col}"])
    assert row["plain: accuracy"] == pytest.approx(0.75)


def test_uniform_correction_leaves_clients_whose_mean_prediction_is_uniform_alone(tool):
    # margins (1, −1) on two anchors: mean p(target) = (σ(1) + σ(−1))/2 = 1/2 exactly, so the shift
    # to the uniform prior is 0; the median's aim is 1/2 too
    Z = torch.tensor([[[0.5, -0.5], [-0.5, 0.5]]] * 3)
    row = tool.consensus_row(Z, CLIENTS, torch.tensor([0, 1]), BACKDOOR, target=0, clip=10.0, method="mean",
                             num_groups=None, seed=0)
    assert row["corrected to p(target)"] == pytest.approx(0.5)
    for col in ("accuracy", "target share", "AUC"):
        assert row[f"uniform-corrected: {col}"] == pytest.approx(row[f"plain: {col}"])
    assert (row["plain: accuracy"], row["plain: target share"], row["plain: AUC"]) == (1.0, 0.5, 1.0)


def test_auc_is_nan_when_the_anchors_hold_one_side_only(tool):
    assert math.isnan(tool.target_auc(UPLOADS[0], torch.zeros(4, dtype=torch.long), 0))
