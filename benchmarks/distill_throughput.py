"""RFD-LoRA throughput and upload sizes, against baselines measured in the same run.

For the run config given (the small offline backbone by default; any ``dst-*`` key), on one CPU
thread unless ``--threads``:

* **client steps per second** of :func:`fedcal.distill.clients.local_train` (B = ``batch-size``
  texts of ``dst-max-length`` tokens) for every rank of ``dst-ranks``, with LoRA on the attention
  query/value only and on ``dst-lora-targets``, as a ratio to full fine-tuning of the same model
  (every weight trainable, plain AdamW) — the cost LoRA saves or adds per step;
* **anchor logits**: seconds for one client to compute its logits on the anchor set (forward only);
* **bytes uploaded per client per round**: RFD-LoRA's anchor logits against each baseline's adapter
  tensors (:func:`fedcal.distill.clients.upload_bytes`, the same sizes a run records from its
  messages), per rank, and their ratio.

    python benchmarks/distill_throughput.py data-dir=../shared/data dst-corpus=sentiment dst-train-size=0
"""

from __future__ import annotations

import argparse
import copy
import time

import torch


def _steps_per_second(model, batch, labels, steps: int, batch_size: int) -> float:
    from fedcal.distill.clients import local_train

    n = steps * batch_size
    ids, mask, y = batch["input_ids"][:n], batch["attention_mask"][:n], labels[:n]
    local_train(model, ids[:batch_size], mask[:batch_size], y[:batch_size], epochs=1, batch_size=batch_size)  # warm-up
    t0 = time.perf_counter()
    local_train(model, ids, mask, y, epochs=1, batch_size=batch_size, generator=torch.Generator().manual_seed(0))
    return steps / (time.perf_counter() - t0)


def main() -> None:
    from fedcal.config import RunConfig, parse_override
    from fedcal.distill.clients import adapter_state, anchor_logits, lora_model, upload_bytes
    from fedcal.distill.setup import base_classifier, client_batch, distill_data

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="timed optimiser steps per configuration")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("overrides", nargs="*", help="run-config key=value")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = RunConfig.from_flower(dict(parse_override(o) for o in args.overrides), task="distill", num_clients=1)
    data = distill_data(cfg)
    base = base_classifier(data.backbone, data.num_classes, "cpu")
    batch, labels, _ = client_batch(cfg, 0)
    steps = min(args.steps, len(labels) // cfg.batch_size)
    full = copy.deepcopy(base).train()
    for p in full.parameters():
        p.requires_grad_(True)
    full_sps = _steps_per_second(full, batch, labels, steps, cfg.batch_size)
    print(f"{len(labels)} client texts, batch {cfg.batch_size} × {cfg.dst_max_length} tokens, {steps} timed steps, "
          f"{args.threads} thread(s)\n")
    print(f"full fine-tuning: {full_sps:.2f} steps/s (the baseline)\n")
    print("| targets | rank | steps/s | × full fine-tuning | trainable parameters |")
    print("|---|---|---|---|---|")
    states = {}
    for targets in (("query", "value"), cfg.lora_targets):
        for rank in cfg.distill_ranks:
            model = lora_model(base, rank, alpha=cfg.dst_alpha, target_modules=targets, allowed_ranks=None)
            sps = _steps_per_second(model, batch, labels, steps, cfg.batch_size)
            n = sum(p.numel() for p in model.parameters() if p.requires_grad)
            print(f"| {'+'.join(targets)} | {rank} | {sps:.2f} | {sps / full_sps:.2f} | {n:,} |")
            states[(targets, rank)] = adapter_state(model)
    model = lora_model(base, cfg.distill_ranks[0], target_modules=cfg.lora_targets, allowed_ranks=None)
    anchor_logits(model, data.anchor_batch["input_ids"][:8], data.anchor_batch["attention_mask"][:8])
    t0 = time.perf_counter()
    anchor_logits(model, data.anchor_batch["input_ids"], data.anchor_batch["attention_mask"])
    print(f"\nanchor logits: {time.perf_counter() - t0:.2f} s for {len(data.anchors)} anchors (forward only)\n")
    logits = upload_bytes("rfd", num_anchors=len(data.anchors), num_classes=data.num_classes)
    print(f"RFD-LoRA upload: {logits:,} bytes per client per round at every rank\n")
    print("| targets | rank | FedIT / FLoRA / FlexLoRA bytes | FFA-LoRA bytes | adapters ÷ RFD logits |")
    print("|---|---|---|---|---|")
    for (targets, rank), state in states.items():
        full_b, ffa_b = upload_bytes("fedit", state=state), upload_bytes("ffa", state=state)
        print(f"| {'+'.join(targets)} | {rank} | {full_b:,} | {ffa_b:,} | {full_b / logits:.1f} |")


if __name__ == "__main__":
    main()
