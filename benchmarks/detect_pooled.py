"""How far a detector gets on the MNIST scenes in a fixed CPU time, trained centrally on pooled data:
the measurement behind the detection case study's choice of the grid detector for the CPU table
(docs/detection.md, "Measurement notes").

All 10 clients' training scenes of the default scene spec pooled (10 × 200 scenes, Dirichlet(0.5)
class mixes), AdamW at ``--lr`` (weight decay 1e-4), batches of 16 from a seeded generator, one torch
thread; every 50 steps the model is scored on 200 test scenes (mAP@0.5, boxes kept per image at 0.3,
the no-object ECE) and a line is printed, until ``--minutes`` of training have passed. Run it once per
detector to compare them on the same machine:

    python benchmarks/detect_pooled.py detr --minutes 6 --data-dir ../shared/data
    python benchmarks/detect_pooled.py grid --minutes 6 --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    from fedcal.detect.metrics import detection_metrics
    from fedcal.detect.model import DetectorSpec, build_detector
    from fedcal.detect.scenes import Scenes, SceneSpec, make_scenes
    from fedcal.detect.local_round import local_round, predict

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("detector", choices=("detr", "grid"))
    ap.add_argument("--minutes", type=float, default=6.0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--data-dir", default="../shared/data")
    args = ap.parse_args()
    torch.set_num_threads(1)
    spec = SceneSpec("mnist", 64, 1, 4, 14, 28)
    train = [make_scenes(spec, 200, 0, split="train", client=k, alpha=0.5, data_dir=args.data_dir) for k in range(10)]
    test = make_scenes(spec, 200, 0, split="test", data_dir=args.data_dir)
    pooled = Scenes(torch.cat([s.images for s in train]), sum([s.boxes for s in train], []),
                    sum([s.labels for s in train], []))
    model = build_detector(DetectorSpec(name=args.detector, queries=16), seed=0)
    print(f"{args.detector}: {sum(p.numel() for p in model.parameters()):,} parameters, {len(pooled)} pooled "
          f"training scenes, {len(test)} test scenes", flush=True)
    gen = torch.Generator().manual_seed(0)
    start, steps = time.time(), 0
    while time.time() - start < 60 * args.minutes:
        t = time.time()
        stats = local_round(model, pooled, steps=50, batch_size=16, lr=args.lr, weight_decay=1e-4, generator=gen)
        steps += 50
        step_s = (time.time() - t) / 50
        logits, boxes = predict(model, test.images)
        m, _ = detection_metrics(logits, boxes, test, model.loss_config)
        print(f"steps {steps}  {time.time() - start:.0f} s  {step_s:.3f} s/step  loss {stats.loss:.3f}  "
              f"class CE {stats.loss_ce:.3f}  mAP@0.5 {m['map50']:.3f}  kept@0.3 {m['boxes_kept_object']:.2f} "
              f"(object score) {m['boxes_kept_class']:.2f} (class score) (true {m['gt_boxes']:.2f})  "
              f"no-object ECE {m['obj_ece']:.3f}", flush=True)


if __name__ == "__main__":
    main()
