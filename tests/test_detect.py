"""The detection case study (task = detect, SPEC §10): scenes, the TSA loss, the metrics, the
Flower task end to end. Small enough for one core: scenes from scikit-learn's 8×8 digits."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from fedcal.config import ConfigError, RunConfig
from fedcal.detect import metrics as dm
from fedcal.detect.model import DetectorSpec, build_detector, detr_config
from fedcal.detect.scenes import INK, SceneSpec, Scenes, client_class_mix, digit_images, make_scenes, render
from fedcal.detect.local_round import detection_loss, local_round

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SMALL = SceneSpec("digits", 32, 1, 3, 8, 16)


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCAL_CACHE_DIR", str(tmp_path / "cache"))


# ---------------------------------------------------------------------------------- scenes
def _same(a: Scenes, b: Scenes) -> bool:
    return (torch.equal(a.images, b.images) and all(torch.equal(x, y) for x, y in zip(a.boxes, b.boxes))
            and all(torch.equal(x, y) for x, y in zip(a.labels, b.labels)))


def test_scenes_are_deterministic_and_cached(tmp_path):
    a = make_scenes(SMALL, 12, seed=3, client=1, cache=False)
    b = make_scenes(SMALL, 12, seed=3, client=1, cache=True)  # generated, then written
    cached = list((tmp_path / "cache" / "detect-scenes").glob("*.npz"))
    assert len(cached) == 1
    c = make_scenes(SMALL, 12, seed=3, client=1, cache=True)  # read back
    assert _same(a, b) and _same(a, c)
    assert not _same(a, make_scenes(SMALL, 12, seed=4, client=1, cache=False))
    assert not _same(a, make_scenes(SMALL, 12, seed=3, client=2, cache=False))
    for boxes, labels in zip(a.boxes, a.labels):
        assert 1 <= len(boxes) <= 3 and len(labels) == len(boxes)
        assert (boxes[:, :2] >= 0).all() and (boxes[:, 2:] <= 32).all() and (boxes[:, 2:] > boxes[:, :2]).all()
        assert ((labels >= 0) & (labels < 10)).all()
    assert a.images.shape == (12, 1, 32, 32) and 0 <= a.images.min() and a.images.max() <= 1


def test_a_box_is_the_pasted_digit_ink():
    """One digit per scene: its box is exactly the extent of the canvas's ink (> INK)."""
    digits, labels = digit_images("digits", "", "train")
    pools = {c: np.flatnonzero(labels == c) for c in range(10)}
    spec = SceneSpec("digits", 40, 1, 1, 10, 30)
    scenes = render(spec, digits, np.full(10, 0.1), pools, np.random.default_rng(0), 20)
    for img, box in zip(scenes.images, scenes.boxes):
        rows, cols = torch.where(img[0] > INK)
        assert box.tolist() == [[float(cols.min()), float(rows.min()), float(cols.max() + 1), float(rows.max() + 1)]]


def test_clients_are_non_iid_and_test_scenes_uniform():
    mixes = [client_class_mix(10, 0.1, 0, k) for k in range(3)]
    assert all((m < 0.01).sum() >= 4 for m in mixes)  # α = 0.1: each client sees few classes
    assert np.allclose([m.sum() for m in mixes], 1) and not np.allclose(mixes[0], mixes[1])
    a = make_scenes(SMALL, 40, 0, client=1, alpha=0.1, cache=False)
    counts = np.bincount(torch.cat(a.labels).numpy(), minlength=10)
    assert counts.argmax() == mixes[1].argmax() and counts[mixes[1] < 1e-3].sum() == 0
    with pytest.raises(ConfigError, match="empty scene set"):
        make_scenes(SMALL, 0, 0, client=0)
    with pytest.raises(ConfigError, match="'dataset'"):
        make_scenes(SceneSpec("cifar10"), 2, 0, client=0)


@pytest.mark.skipif(not (SHARED / "mnist_train.npz").exists(), reason="../shared/data (MNIST) absent")
def test_mnist_scenes():
    spec = SceneSpec("mnist", 64, 1, 4, 14, 28)
    a = make_scenes(spec, 5, 0, client=0, data_dir=str(SHARED), cache=False)
    assert _same(a, make_scenes(spec, 5, 0, client=0, data_dir=str(SHARED), cache=False))
    assert a.images.shape == (5, 1, 64, 64) and all((b[:, 2:] <= 64).all() for b in a.boxes)


# ---------------------------------------------------------------------------------- the TSA loss
def _giou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # xyxy pairs
    iw = (torch.minimum(a[2], b[2]) - torch.maximum(a[0], b[0])).clamp(min=0)
    ih = (torch.minimum(a[3], b[3]) - torch.maximum(a[1], b[1])).clamp(min=0)
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    hull = (torch.maximum(a[2], b[2]) - torch.minimum(a[0], b[0])) * (torch.maximum(a[3], b[3]) - torch.minimum(a[1], b[1]))
    return inter / union - (hull - union) / hull


def _hand_loss(z, boxes, target, tau, eos=0.1):
    """A second implementation: brute-force matching on DETR's costs, then weighted CE of z/τ,
    L1 and GIoU (weights 1, 5, 2)."""
    import itertools

    p = (z / tau).softmax(-1)
    q, n = z.shape[0], len(target["class_labels"])
    xy = lambda b: torch.stack([b[0] - b[2] / 2, b[1] - b[3] / 2, b[0] + b[2] / 2, b[1] + b[3] / 2])  # noqa: E731
    cost = torch.zeros(q, n)
    for i in range(q):
        for j in range(n):
            cost[i, j] = (5 * (boxes[i] - target["boxes"][j]).abs().sum() - p[i, target["class_labels"][j]]
                          - 2 * _giou(xy(boxes[i]), xy(target["boxes"][j])))
    best = min(itertools.permutations(range(q), n), key=lambda perm: sum(float(cost[perm[j], j]) for j in range(n)))
    cls = torch.full((q,), z.shape[1] - 1)
    w = torch.ones(z.shape[1])
    w[-1] = eos
    for j, i in enumerate(best):
        cls[i] = target["class_labels"][j]
    logp = (z / tau).log_softmax(-1)
    ce = -(w[cls] * logp[torch.arange(q), cls]).sum() / w[cls].sum()
    l1 = sum((boxes[i] - target["boxes"][j]).abs().sum() for j, i in enumerate(best)) / n
    giou = sum(1 - _giou(xy(boxes[i]), xy(target["boxes"][j])) for j, i in enumerate(best)) / n
    return ce + 5 * l1 + 2 * giou, ce


@pytest.mark.parametrize("tau", [0.2, 1.0, 5.0])
def test_the_temperature_divides_the_class_logits_in_detrs_loss(tau):
    g = torch.Generator().manual_seed(1)
    z = torch.randn(4, 4, generator=g) * 2  # 4 queries, 3 classes + no object
    boxes = torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.7, 0.6, 0.3, 0.2], [0.5, 0.5, 0.5, 0.5], [0.2, 0.8, 0.1, 0.1]])
    target = {"class_labels": torch.tensor([1, 0]), "boxes": torch.tensor([[0.32, 0.3, 0.2, 0.25], [0.7, 0.62, 0.3, 0.2]])}
    config = detr_config(DetectorSpec(num_classes=3))
    loss, parts = detection_loss(z[None], boxes[None], [target], config, tau)
    want, want_ce = _hand_loss(z, boxes, target, tau)
    assert math.isclose(float(loss), float(want), rel_tol=1e-5)
    assert math.isclose(parts["loss_ce"], float(want_ce), rel_tol=1e-5)
    # the box losses do not depend on τ (same matching here)
    _, ref = detection_loss(z[None], boxes[None], [target], config, 1.0)
    assert math.isclose(parts["loss_bbox"], ref["loss_bbox"]) and math.isclose(parts["loss_giou"], ref["loss_giou"])
    with pytest.raises(ValueError, match="tau"):
        detection_loss(z[None], boxes[None], [target], config, 0.0)


def test_the_attacker_trains_at_eta_beta_tau(monkeypatch):
    import fedcal.detect.local_round as dt

    seen = []
    real = torch.optim.AdamW
    monkeypatch.setattr(dt.torch.optim, "AdamW", lambda params, lr, weight_decay: seen.append(lr) or real(params, lr=lr))
    model = build_detector(DetectorSpec("grid", image_size=32, backbone_width=4))
    scenes = make_scenes(SMALL, 4, 0, client=0, cache=False)
    for tau, coupled in ((5.0, True), (5.0, False), (0.2, True)):
        stats = local_round(model, scenes, steps=1, batch_size=2, lr=1e-3, weight_decay=0.0, tau=tau, coupled=coupled,
                            generator=torch.Generator().manual_seed(0))
        assert math.isfinite(stats.loss) and stats.num_examples == 4
    assert seen == pytest.approx([5e-3, 1e-3, 2e-4])


# ---------------------------------------------------------------------------------- metrics
def _outputs(pred_boxes, labels, confident=8.0, classes=3):
    """Logits making query i predict ``labels[i]`` (−1: no object) with a large margin."""
    z = torch.zeros(1, len(labels), classes + 1)
    for i, c in enumerate(labels):
        z[0, i, c] = confident
    return z, torch.tensor([pred_boxes], dtype=torch.float32)


def test_map50_by_hand():
    gt_boxes, gt_labels = [torch.tensor([[10.0, 10.0, 30.0, 30.0]])], [torch.tensor([1])]
    z, b = _outputs([[0.3125, 0.3125, 0.3125, 0.3125], [0.8, 0.8, 0.1, 0.1]], [1, -1])  # query 0 = the true box (/64)
    assert dm.mean_average_precision(z, b, gt_boxes, gt_labels, 64) == pytest.approx(1.0)
    # shifted by 12 pixels: IoU = 8·20 / (2·400 − 160) = 0.25 < 0.5
    z, b = _outputs([[0.5, 0.3125, 0.3125, 0.3125], [0.8, 0.8, 0.1, 0.1]], [1, -1])
    assert dm.mean_average_precision(z, b, gt_boxes, gt_labels, 64) == pytest.approx(0.0)
    # right box, wrong class: 0
    z, b = _outputs([[0.3125, 0.3125, 0.3125, 0.3125]], [2])
    assert dm.mean_average_precision(z, b, gt_boxes, gt_labels, 64) == pytest.approx(0.0)


def test_no_object_calibration_by_hand():
    config = detr_config(DetectorSpec(num_classes=3))
    # query 0 on the true box, query 1 matched to the second box but shifted (IoU < 0.5), query 2 idle
    z, b = _outputs([[0.3, 0.3, 0.2, 0.2], [0.9, 0.7, 0.1, 0.1], [0.5, 0.9, 0.05, 0.05]], [1, 0, -1])
    targets = [{"class_labels": torch.tensor([1, 0]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.7, 0.7, 0.1, 0.1]])}]
    assert dm.matched_objects(z, b, targets, config).tolist() == [[True, False, False]]
    # confidences 0.9, 0.9, 0.1 (bins of width 0.5): bin 2 holds {0.9: 1, 0.9: 0} → gap 0.5 − 0.9;
    # bin 1 holds {0.1: 0} → gap −0.1. ECE = 2/3·0.4 + 1/3·0.1 = 0.3; sECE = −0.3
    cal = dm.object_calibration(torch.tensor([0.9, 0.9, 0.1]), torch.tensor([True, False, False]), n_bins=2)
    assert cal["ece"] == pytest.approx(0.3) and cal["sece"] == pytest.approx(-0.3)
    _, _, p_obj = dm.scores_labels(torch.tensor([[[0.0, 0.0, math.log(2.0)]]]))  # p = (1/4, 1/4, 1/2)
    assert float(p_obj) == pytest.approx(0.5)


def test_boxes_kept_by_hand_and_monotone():
    scores = torch.tensor([[0.9, 0.5, 0.1], [0.35, 0.2, 0.0]])
    assert dm.boxes_kept(scores, (0.0, 0.3, 0.5, 0.95)) == [2.5, 1.5, 0.5, 0.0]  # score > t
    curve = dm.boxes_kept(torch.rand(50, 16))
    assert all(a >= b for a, b in zip(curve, curve[1:]))
    z, b = _outputs([[0.5, 0.5, 0.25, 0.25], [0.2, 0.2, 0.1, 0.1]], [2, -1])
    kept = dm.kept_detections(z[0], b[0], 0.3, 64)
    assert len(kept) == 1 and kept[0]["label"] == 2 and kept[0]["x1"] == pytest.approx(24.0)


def test_keep_rules_by_hand():
    """Which queries each rule keeps at 0.3 (3 classes + no object, p = softmax(z)):
    q0 a confident class 1; q1 flat, p = 1/4 each: object score 3/4, class score 1/4; q2 a confident
    no-object; q3 p = (1, 1, 1, 2)/5: object 3/5, class 1/5; q4 p = (3, 3, 1, 2)/9: object 7/9, class 1/3."""
    z = torch.tensor([[[0.0, 8.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 8.0],
                       [0.0, 0.0, 0.0, math.log(2.0)], [math.log(3.0), math.log(3.0), 0.0, math.log(2.0)]]])
    obj, labels = dm.keep_scores(z, "object")
    cls, labels_c = dm.keep_scores(z, "class")
    e8 = math.exp(8.0)
    assert obj[0].tolist() == pytest.approx([(e8 + 2) / (e8 + 3), 0.75, 3 / (e8 + 3), 0.6, 7 / 9])
    assert cls[0].tolist() == pytest.approx([e8 / (e8 + 3), 0.25, 1 / (e8 + 3), 0.2, 1 / 3])
    assert labels.tolist() == labels_c.tolist() and labels[0, 0] == 1
    assert (obj[0] > 0.3).tolist() == [True, True, False, True, True]
    assert (cls[0] > 0.3).tolist() == [True, False, False, False, True]
    boxes = torch.full((5, 4), 0.5)
    assert [k["score"] for k in dm.kept_detections(z[0], boxes, 0.3, 64, rule="class")] == pytest.approx([e8 / (e8 + 3), 1 / 3])
    assert len(dm.kept_detections(z[0], boxes, 0.3, 64)) == 4  # the object rule is the default
    with pytest.raises(ValueError, match="keep rule"):
        dm.keep_scores(z, "score")
    # max_c p_c <= sum_c p_c: whatever the class rule keeps, the object rule keeps too
    g = torch.Generator().manual_seed(0)
    rand = torch.randn(20, 16, 11, generator=g) * 3
    for t in dm.THRESHOLDS:
        assert dm.boxes_kept(dm.keep_scores(rand, "class")[0], (t,)) <= dm.boxes_kept(dm.keep_scores(rand, "object")[0], (t,))


def test_the_object_rule_keeps_more_boxes_as_tau_falls():
    """A TSA model trained at τ answers at τ = 1 with roughly its calibrated logits scaled by τ
    (z/τ fitted the labels). On a scene of 60 empty queries (no-object logit 2, class logits near 0)
    and 4 objects (a class logit 6), scaling the logits by τ: under the object rule the kept count
    falls monotonically with τ — every empty query's 1 − p_∅ = 1 − 1/(1 + Σ_c e^{τ(z_c − z_∅)}) grows
    as τ falls — from all 64 queries at τ = 0.2 (1 − p_∅ ≈ 0.87) to the 4 objects at τ = 5; the class
    rule goes the other way (at τ = 0.2 even an object's top class has p ≈ 0.24 < 0.3)."""
    g = torch.Generator().manual_seed(0)
    z = torch.cat([torch.randn(64, 10, generator=g) * 0.1, torch.full((64, 1), 2.0)], dim=1)
    z[:4, :10] = 0.0
    z[torch.arange(4), torch.arange(4)] = 6.0
    taus = (0.2, 0.5, 1.0, 2.0, 5.0)
    kept = {rule: [dm.boxes_kept(dm.keep_scores((tau * z)[None], rule)[0], (0.3,))[0] for tau in taus]
            for rule in dm.KEEP_RULES}
    assert all(a >= b for a, b in zip(kept["object"], kept["object"][1:]))
    assert kept["object"][0] == 64 and kept["object"][-1] == 4
    assert kept["class"][0] == 0 and kept["class"][-1] == 4


def test_detection_metrics_record_both_keep_rules():
    config = detr_config(DetectorSpec(num_classes=3))
    scenes = Scenes(torch.zeros(1, 1, 64, 64), [torch.tensor([[10.0, 10.0, 30.0, 30.0]])], [torch.tensor([1])])
    z = torch.tensor([[[0.0, 8.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 8.0]]])
    b = torch.tensor([[[0.3125, 0.3125, 0.3125, 0.3125], [0.7, 0.7, 0.1, 0.1], [0.2, 0.8, 0.1, 0.1]]])
    for keep, headline in (("object", 2.0), ("class", 1.0)):
        m, curves = dm.detection_metrics(z, b, scenes, config, n_bins=2, threshold=0.3, keep=keep)
        assert (m["boxes_kept_object"], m["boxes_kept_class"], m["boxes_kept"]) == (2.0, 1.0, headline)
        assert set(curves["kept"]) == set(dm.KEEP_RULES)
        assert curves["kept"]["object"][dm.THRESHOLDS.index(0.3)] == 2.0
    with pytest.raises(ValueError, match="keep rule"):
        dm.detection_metrics(z, b, scenes, config, keep="max")


# ---------------------------------------------------------------------------------- models
def test_detectors_share_detrs_output_structure():
    x = torch.rand(2, 1, 32, 32)
    for spec in (DetectorSpec("grid", image_size=32, backbone_width=4),
                 DetectorSpec("detr", image_size=32, queries=5, d_model=16, backbone_width=4)):
        logits, boxes = build_detector(spec)(x)
        q = 16 if spec.name == "grid" else 5
        assert logits.shape == (2, q, 11) and boxes.shape == (2, q, 4)
        assert ((boxes >= 0) & (boxes <= 1)).all()
    with pytest.raises(ConfigError, match="'det-model'"):
        build_detector(DetectorSpec("yolo"))


# ---------------------------------------------------------------------------------- the task
TINY = dict(task="detect", num_clients=3, clients_per_round=3, attack="tsa", tau=5.0, attacker_ratio=0.34,
            det_digits="digits", det_size=32, det_min_scale=8, det_max_scale=16, det_max_digits=2,
            det_train_scenes=6, det_test_scenes=4, det_rounds=2, det_local_steps=2, det_batch_size=3,
            det_backbone_width=4, engine="inprocess", device="cpu")


def test_detect_end_to_end_through_flower(tmp_path, monkeypatch):
    import fedcal.tasks.detect as task
    from fedcal.app.engine import simulate
    from fedcal.reports.detect import detect_report

    taus = []
    real = task.local_round
    monkeypatch.setattr(task, "local_round", lambda *a, **k: taus.append(k["tau"]) or real(*a, **k))
    runs = []
    for tau, attack in ((5.0, "tsa"), (1.0, "none")):
        cfg = RunConfig.from_flower(dict(TINY, tau=tau, attack=attack, output_dir=str(tmp_path / "runs")))
        runs.append(simulate(cfg, progress=False))
    assert sorted(taus[:3]) == sorted(taus[3:6]) == [1.0, 1.0, 5.0] and taus[6:] == [1.0] * 6  # one attacker
    run = runs[0]
    assert run.name.startswith("detect-grid-tsa5-s0-") and runs[1].name.startswith("detect-grid-benign-s0-")
    assert (run / "DONE").exists() and (run / "model.pt").exists()
    metrics = pd.read_csv(run / "metrics.csv")
    final = metrics[metrics["round"] == 2].set_index("metric")["value"]
    assert final["replies_accepted"] == 3 and final["replies_rejected"] == 0
    assert 0 <= final["map50"] <= 1 and 0 <= final["obj_ece"] <= 1
    assert final["boxes_kept"] == final["boxes_kept_object"] >= final["boxes_kept_class"]  # det-keep = object
    kept = pd.read_csv(run / "kept.csv")
    assert set(kept["round"]) == {0, 1, 2} and set(kept["rule"]) == {"object", "class"}
    assert (kept.groupby(["round", "rule"])["kept"].apply(lambda k: k.is_monotonic_decreasing)).all()
    md = detect_report(runs, tmp_path / "report")
    assert "τ = 5" in md and "benign" in md
    assert "boxes kept / image (object score)" in md and "boxes kept / image (class score)" in md
    assert set(pd.read_csv(tmp_path / "report" / "kept.csv")["rule"]) == {"object", "class"}
    # a run from before the keep rules (only boxes_kept, the class score's) is refused, named
    legacy = metrics[~metrics["metric"].isin(["boxes_kept_object", "boxes_kept_class"])]
    legacy.to_csv(run / "metrics.csv", index=False)
    with pytest.raises(ValueError, match=f"{run.name}.*re-run"):
        detect_report(runs, tmp_path / "report2")
    for name in ("table.csv", "runs.csv", "kept.csv", "boxes_kept.png", "no_object_reliability.png", "examples.png",
                 "curves.png"):
        assert (tmp_path / "report" / name).exists(), name


def test_bad_replies_are_rejected_with_the_node_named(tmp_path):
    from fedcal.results import run_dir_for
    from fedcal.tasks.detect import MESSAGE_TYPE, run_detect
    from tests.strategy_harness import FakeGrid

    cfg = RunConfig.from_flower(dict(TINY, det_rounds=1, output_dir=str(tmp_path)))
    types = []

    def respond(node, content):
        if "arrays" not in content:  # the identity handshake: node k is partition k − 1
            return RecordDict({"identity": MetricRecord({"partition-id": node - 1})})
        state = {k: torch.from_numpy(np.array(v.numpy())) for k, v in content["arrays"].items()}
        if node == 2:
            state[next(iter(state))] = state[next(iter(state))] * float("nan")
        if node == 3:
            key = next(iter(state))
            state[key] = state[key][:1].clone()  # (4, 1, 3, 3) → (1, 1, 3, 3)
        return RecordDict({"arrays": ArrayRecord(state), "metrics": MetricRecord({"num-examples": 6})})

    grid = FakeGrid([1, 2, 3], respond)
    real_send = grid.send_and_receive

    def send(messages, **kwargs):
        messages = list(messages)
        types.extend(m.metadata.message_type for m in messages)
        return real_send(messages, **kwargs)

    grid.send_and_receive = send
    frame = run_detect(grid, cfg)
    assert MESSAGE_TYPE in types
    rejections = pd.read_csv(run_dir_for(cfg) / "rejections.csv")
    assert sorted(rejections["partition_id"]) == [1, 2]
    assert "NaN" in rejections.loc[rejections["partition_id"] == 1, "reason"].item()
    assert "shape" in rejections.loc[rejections["partition_id"] == 2, "reason"].item()
    assert frame.loc[frame["round"] == 1, "replies_accepted"].item() == 1


def test_the_keep_rule_is_hashed_only_when_set():
    """The keep rule changes the run's headline boxes_kept and example: det-keep=class is another run;
    the default keeps the names runs had before the key existed (docs/results/detect-mnist/runs.csv)."""
    from fedcal.results import default_run_name

    base = dict(task="detect", num_clients=10, data_dir="../shared/data", output_dir="runs/detect", engine="inprocess")
    names = [default_run_name(RunConfig.from_flower(dict(base, attack=a, tau=t))) for a, t in
             (("tsa", 0.2), ("none", 1.0), ("tsa", 5.0))]
    assert names == ["detect-grid-tsa0.2-s0-d020cea5", "detect-grid-benign-s0-d0b7594f", "detect-grid-tsa5-s0-729f86ee"]
    cls = default_run_name(RunConfig.from_flower(dict(base, attack="tsa", tau=0.2, det_keep="class")))
    assert cls.startswith("detect-grid-tsa0.2-s0-") and cls != names[0]
    with pytest.raises(ConfigError, match="'det-keep'"):
        RunConfig.from_flower({"det-keep": "score"})


def test_detect_config_errors():
    from fedcal.tasks.detect import check_detect_config

    with pytest.raises(ConfigError, match="'attack'"):
        check_detect_config(RunConfig.from_flower(dict(TINY, attack="noise")))
    with pytest.raises(ConfigError, match="'det-clients-per-round'"):
        check_detect_config(RunConfig.from_flower(dict(TINY, det_clients_per_round=5)))
    with pytest.raises(ConfigError, match="'det-model'"):
        check_detect_config(RunConfig.from_flower(dict(TINY, det_model="yolo")))
    with pytest.raises(ConfigError, match="'det-max-digits'"):
        check_detect_config(RunConfig.from_flower(dict(TINY, det_min_digits=3, det_max_digits=2)))


def test_an_unloadable_hub_detector_fails_at_once_naming_det_model(monkeypatch):
    """det-model=foo/bar took 59 s of from_pretrained's retries before its error. The config check
    asks the Hub once at most (offline: not at all) and never starts from_pretrained."""
    from transformers import DetrForObjectDetection

    from fedcal.tasks.detect import check_detect_config

    def no_download(*args, **kwargs):
        raise AssertionError("from_pretrained was called for an unloadable name")

    monkeypatch.setattr(DetrForObjectDetection, "from_pretrained", no_download)
    cfg = RunConfig.from_flower(dict(TINY, det_model="foo/bar"))
    with pytest.raises(ConfigError, match=r"^run-config key 'det-model': 'foo/bar' is not a local folder"):
        check_detect_config(cfg)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match=r"'det-model'.*offline"):
        check_detect_config(cfg)
