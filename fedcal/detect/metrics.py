"""What the detection case study measures (flwr-free), all at τ = 1.

From a detector's outputs on the test scenes — class logits z (N, Q, C + 1), the last column "no
object", and boxes (N, Q, 4) as normalised cxcywh — with p = softmax(z):

* **label of a query**: argmax_{c < C} p_c, the most probable digit class.
* **keep rules** (:data:`KEEP_RULES`): a query is **kept** at threshold t when its score s > t, with
  either of two scores, and every run records both:

  - ``object`` (the default, ``det-keep``): s = 1 − p_∅ = Σ_{c < C} p_c, the probability that the
    query is an object at all — SPEC §10's "a query is kept when its object score exceeds a
    threshold", the score whose calibration the no-object metrics measure. A flatter softmax (an
    under-confident model, TSA with τ < 1) moves mass off p_∅ onto the classes, so more queries pass.
  - ``class``: s = max_{c < C} p_c, transformers' ``DetrImageProcessor.post_process_object_detection``
    (``prob[..., :-1].max(-1)``, as in the DETR repository's demo). A flatter softmax spreads the
    object mass over the C classes, so its largest share can fall below t even where 1 − p_∅ rises:
    the two rules can move in opposite directions under the same attack.
* **mAP@0.5**: torchmetrics' ``MeanAveragePrecision`` (COCO's 101-point interpolated AP, IoU 0.5,
  xyxy pixel boxes, pycocotools backend) over every query's (box, score, label) — the usual
  DETR evaluation, which ranks all queries rather than thresholding them.
* **no-object calibration**: the confidence that a query is an object is 1 − p_∅. A query is an
  object (positive) when transformers' Hungarian matcher — the training costs (class 1, L1 5,
  GIoU 2) on the model's τ = 1 outputs — assigns it a ground-truth box **and** that box's IoU with
  the query's box is ≥ 0.5; every other query is negative. ECE and signed ECE (accuracy −
  confidence per bin, so sECE < 0 = over-confident that boxes are objects) over all N·Q queries,
  with :func:`fedcal.metrics.confidence_calibration`'s equal-width bins.
* **boxes kept versus threshold**: the mean number of kept queries per image at each threshold
  of a grid (the source paper's selective-perception curve); non-increasing in t by construction.
"""

from __future__ import annotations

import numpy as np
import torch

from fedcal.extras import require

#: thresholds of the boxes-kept curve
THRESHOLDS = tuple(round(t, 2) for t in np.linspace(0.05, 0.95, 19))
#: the scores a query can be kept by (module docstring); the first is the default of ``det-keep``
KEEP_RULES = ("object", "class")


def to_xyxy(boxes: torch.Tensor, size: float = 1.0) -> torch.Tensor:
    """cxcywh (…, 4) → xyxy, scaled by ``size`` (pixels of a square canvas)."""
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1) * size


def scores_labels(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(score s, label, object probability 1 − p_∅) of every query, each (N, Q)."""
    p = logits.double().softmax(-1)
    scores, labels = p[..., :-1].max(-1)
    return scores, labels, 1.0 - p[..., -1]


def keep_scores(logits: torch.Tensor, rule: str = "object") -> tuple[torch.Tensor, torch.Tensor]:
    """(score, label) of every query, each (N, Q), under keep rule ``rule`` (:data:`KEEP_RULES`):
    ``object`` scores 1 − p_∅ (summed over the classes, exact where p_∅ is near 1), ``class`` scores
    max_c p_c; the label is the most probable class under both."""
    if rule not in KEEP_RULES:
        raise ValueError(f"keep rule must be one of {', '.join(KEEP_RULES)}, got {rule!r}")
    p = logits.double().softmax(-1)
    top, labels = p[..., :-1].max(-1)
    return (p[..., :-1].sum(-1) if rule == "object" else top), labels


def mean_average_precision(logits: torch.Tensor, boxes: torch.Tensor, gt_boxes: list[torch.Tensor],
                           gt_labels: list[torch.Tensor], size: int) -> float:
    """mAP@0.5 (torchmetrics) of every query against the ground truth (xyxy pixel boxes)."""
    require("pycocotools", "detect", "the detection case study (task=detect)")  # torchmetrics' mAP backend
    require("torchmetrics", "detect", "the detection case study (task=detect)")
    from torchmetrics.detection import MeanAveragePrecision

    scores, labels, _ = scores_labels(logits)
    xyxy = to_xyxy(boxes.double(), size)
    metric = MeanAveragePrecision(box_format="xyxy", iou_type="bbox", iou_thresholds=[0.5])
    preds = [{"boxes": xyxy[i].float(), "scores": scores[i].float(), "labels": labels[i]} for i in range(len(logits))]
    target = [{"boxes": gt_boxes[i].float().reshape(-1, 4), "labels": gt_labels[i].long()} for i in range(len(logits))]
    metric.update(preds, target)
    value = float(metric.compute()["map"])
    return value if value >= 0 else float("nan")  # torchmetrics says −1 when there is no ground truth


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of paired xyxy boxes (n, 4) × (n, 4) → (n,)."""
    w = (torch.minimum(a[:, 2], b[:, 2]) - torch.maximum(a[:, 0], b[:, 0])).clamp(min=0)
    h = (torch.minimum(a[:, 3], b[:, 3]) - torch.maximum(a[:, 1], b[:, 1])).clamp(min=0)
    inter = w * h
    area = lambda x: (x[:, 2] - x[:, 0]).clamp(min=0) * (x[:, 3] - x[:, 1]).clamp(min=0)  # noqa: E731
    union = area(a) + area(b) - inter
    return torch.where(union > 0, inter / union.clamp(min=1e-12), torch.zeros_like(inter))


@torch.no_grad()
def matched_objects(logits: torch.Tensor, boxes: torch.Tensor, targets: list[dict], config,
                    iou: float = 0.5) -> torch.Tensor:
    """(N, Q) bool: the query is Hungarian-matched (transformers' matcher, ``config``'s costs) to a
    ground-truth box with IoU ≥ ``iou`` (``targets``: normalised cxcywh, as for training)."""
    require("transformers", "detect", "the detection case study (task=detect)")
    from transformers.loss.loss_for_object_detection import HungarianMatcher

    matcher = HungarianMatcher(class_cost=config.class_cost, bbox_cost=config.bbox_cost, giou_cost=config.giou_cost)
    positive = torch.zeros(logits.shape[:2], dtype=torch.bool)
    for start in range(0, len(logits), 256):  # the matcher's cost matrix is (batch·Q) × (all targets)
        sl = slice(start, start + 256)
        tg = targets[sl]
        if not any(len(t["class_labels"]) for t in tg):
            continue
        indices = matcher({"logits": logits[sl].float(), "pred_boxes": boxes[sl].float()}, tg)
        for k, (qi, ti) in enumerate(indices):
            if len(qi):
                ious = box_iou(to_xyxy(boxes[start + k][qi].double()), to_xyxy(tg[k]["boxes"][ti].double()))
                positive[start + k, qi[ious >= iou]] = True
    return positive


def object_calibration(p_object: torch.Tensor, positive: torch.Tensor, n_bins: int = 15) -> dict:
    """ECE / sECE of "this query is an object" (1 − p_∅) against ``positive``; ``{"ece", "sece", "bins"}``."""
    from fedcal.metrics import confidence_calibration

    return confidence_calibration(p_object.reshape(-1).double(), positive.reshape(-1).double(), n_bins)


def boxes_kept(scores: torch.Tensor, thresholds=THRESHOLDS) -> list[float]:
    """Mean kept queries per image (score > t) at each threshold t."""
    n = max(int(scores.shape[0]), 1)
    return [float((scores > t).sum()) / n for t in thresholds]


def kept_detections(logits: torch.Tensor, boxes: torch.Tensor, threshold: float, size: int,
                    rule: str = "object") -> list[dict]:
    """The kept queries of one image (logits (Q, C+1), boxes (Q, 4)) under keep rule ``rule``: xyxy
    pixel box, label, score (the rule's)."""
    scores, labels = keep_scores(logits[None], rule)
    keep = torch.nonzero(scores[0] > threshold).flatten()
    xyxy = to_xyxy(boxes.double(), size)
    return [{"x1": float(xyxy[q, 0]), "y1": float(xyxy[q, 1]), "x2": float(xyxy[q, 2]), "y2": float(xyxy[q, 3]),
             "label": int(labels[0, q]), "score": float(scores[0, q])} for q in keep.tolist()]


def detection_metrics(logits: torch.Tensor, boxes: torch.Tensor, scenes, config, n_bins: int = 15,
                      threshold: float = 0.3, keep: str = "object") -> tuple[dict[str, float], dict]:
    """(scalar metrics, curves) of a model's test outputs on ``scenes`` (:class:`fedcal.detect.scenes.Scenes`).

    Scalars: ``map50``, ``obj_ece``, ``obj_sece``, ``mean_obj_prob`` (mean 1 − p_∅ over queries),
    ``positive_rate`` (share of positive queries), ``boxes_kept`` (per image at ``threshold`` under keep
    rule ``keep``), ``boxes_kept_object`` and ``boxes_kept_class`` (the same under each rule, whichever
    ``keep`` is), ``gt_boxes`` (per image). Curves: ``kept`` ({rule: list over :data:`THRESHOLDS`} for
    every rule), ``bins``."""
    if keep not in KEEP_RULES:
        raise ValueError(f"keep rule must be one of {', '.join(KEEP_RULES)}, got {keep!r}")
    if not (torch.isfinite(logits).all() and torch.isfinite(boxes).all()):
        nan = float("nan")
        return ({k: nan for k in ("map50", "obj_ece", "obj_sece", "mean_obj_prob", "positive_rate", "boxes_kept",
                                  *(f"boxes_kept_{r}" for r in KEEP_RULES), "gt_boxes")}, {})
    _, _, p_obj = scores_labels(logits)
    kept = {rule: boxes_kept(keep_scores(logits, rule)[0]) for rule in KEEP_RULES}
    at_threshold = {rule: boxes_kept(keep_scores(logits, rule)[0], (threshold,))[0] for rule in KEEP_RULES}
    positive = matched_objects(logits, boxes, scenes.targets(), config)
    cal = object_calibration(p_obj, positive, n_bins)
    metrics = {
        "map50": mean_average_precision(logits, boxes, scenes.boxes, scenes.labels, scenes.size),
        "obj_ece": float(cal["ece"]),
        "obj_sece": float(cal["sece"]),
        "mean_obj_prob": float(p_obj.mean()),
        "positive_rate": float(positive.double().mean()),
        "boxes_kept": at_threshold[keep],
        **{f"boxes_kept_{rule}": at_threshold[rule] for rule in KEEP_RULES},
        "gt_boxes": float(np.mean([len(b) for b in scenes.boxes])),
    }
    return metrics, {"kept": kept, "bins": cal["bins"]}
