"""RFD-LoRA throughput and upload sizes, against baselines measured in the same run.

For the run config given (any ``dst-*`` key), on one CPU thread unless ``--threads``:

* **client steps per second** of :func:`fedcal.distill.clients.local_train` (B = ``batch-size``
  texts of at most ``dst-max-length`` tokens) for every rank of ``dst-ranks``, with LoRA on the
  attention query/value only and on ``dst-lora-targets``, as a ratio to full fine-tuning of the same
  model (every weight trainable, plain AdamW) — the cost LoRA saves or adds per step;
* **anchor logits**: seconds for one client to compute its logits on the anchor set (forward only);
* **bytes uploaded per client per round**: RFD-LoRA's anchor logits against each baseline's adapter
  tensors (:func:`fedcal.distill.methods.upload_bytes`, the same sizes a run records from its
  messages), per rank, and their ratio.

    python benchmarks/distill_throughput.py data-dir=../shared/data dst-corpus=sentiment dst-train-size=0

``--against-small`` instead compares the config's backbone (all-MiniLM-L6-v2 by default) with the
small offline encoder (``dst-backbone=""`` with LoRA on query, value and the word embeddings, as its
runs use), both measured in this run on the same texts: client steps/s at rank ``--rank`` for the
small encoder, full fine-tuning, q/v LoRA on every layer and q/v LoRA on the top k layers over the
cached lower layers for each k of ``--top-layers`` (the one-off cost of caching a text's lower
layers reported beside), the anchor-logit time of each, and the bytes each method uploads per
client per round at every rank of ``dst-ranks`` — each as a ratio to the small encoder's.

    python benchmarks/distill_throughput.py --against-small --steps 4 --top-layers 1,2 --small-steps 1 \\
        data-dir=../shared/data dst-corpus=sentiment dst-train-size=1200 dst-test-size=100

``--cache`` times what the frozen-layer cache saves at the config's ``dst-lora-layers`` = k (k > 0),
both sides measured in this run on the same texts, each as before (cache off: the frozen lower layers
run in every step, as a whole classifier with LoRA on its top k layers computes them) → after (cache
on: the top k layers over the lower layers' cached hidden states): **client round** steps/s (local
training on the first client's shard), **server distillation** steps/s (the student's
``dst-distill-steps`` on the anchors), and their ratios; a third row times the cache on with the
padding skipped (:mod:`fedcal.text.unpad`: the encoder layers' linear modules compute the attended
tokens only, as every run does; the first two rows run them padded), its ratios against the same
cache-off row; beside them the one-off cost of the cache per text (filling it, and reading it back in
a new process).

    python benchmarks/distill_throughput.py --cache --steps 4 data-dir=../shared/data dst-corpus=sentiment \
        dst-train-size=2000 dst-test-size=300 num-clients=6 dst-lora-layers=2
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import tempfile
import time

import torch


def _steps_per_second(model, inputs, mask, labels, steps: int, batch_size: int) -> float:
    from fedcal.distill.clients import local_train

    n = steps * batch_size
    x, m, y = inputs[:n], mask[:n], labels[:n]
    local_train(model, x[:batch_size], m[:batch_size], y[:batch_size], epochs=1, batch_size=batch_size)  # warm-up
    t0 = time.perf_counter()
    local_train(model, x, m, y, epochs=1, batch_size=batch_size, generator=torch.Generator().manual_seed(0))
    return steps / (time.perf_counter() - t0)


def _anchor_seconds(model, inputs, mask) -> float:
    from fedcal.distill.clients import anchor_logits

    anchor_logits(model, inputs[:8], mask[:8])  # warm-up
    t0 = time.perf_counter()
    anchor_logits(model, inputs, mask)
    return time.perf_counter() - t0


def single(cfg, args) -> None:
    """The table of one backbone: LoRA against full fine-tuning, anchor logits, upload bytes."""
    from fedcal.distill.clients import adapter_state, lora_model
    from fedcal.distill.methods import upload_bytes
    from fedcal.distill.run_data import DistillRunSpec, base_classifier, client_batch, distill_data, inputs_of

    data = distill_data(DistillRunSpec.from_config(cfg))
    base = base_classifier(data.backbone, data.num_classes, "cpu", data.lora_layers)
    batch, labels, _ = client_batch(DistillRunSpec.from_config(cfg), 0)
    x, mask = inputs_of(batch), batch["attention_mask"]
    steps = min(args.steps, len(labels) // cfg.batch_size)
    full = copy.deepcopy(base).train()
    for p in full.parameters():
        p.requires_grad_(True)
    full_sps = _steps_per_second(full, x, mask, labels, steps, cfg.batch_size)
    print(f"{len(labels)} client texts, batch {cfg.batch_size} × {cfg.dst_max_length} tokens, {steps} timed steps, "
          f"{args.threads} thread(s)\n")
    print(f"full fine-tuning: {full_sps:.2f} steps/s (the baseline)\n")
    print("| targets | rank | steps/s | × full fine-tuning | trainable parameters |")
    print("|---|---|---|---|---|")
    states = {}
    for targets in dict.fromkeys((("query", "value"), cfg.lora_targets)):
        for rank in cfg.distill_ranks:
            model = lora_model(base, rank, alpha=cfg.dst_alpha, target_modules=targets, allowed_ranks=None)
            sps = _steps_per_second(model, x, mask, labels, steps, cfg.batch_size)
            n = sum(p.numel() for p in model.parameters() if p.requires_grad)
            print(f"| {'+'.join(targets)} | {rank} | {sps:.2f} | {sps / full_sps:.2f} | {n:,} |")
            states[(targets, rank)] = adapter_state(model)
    model = lora_model(base, cfg.distill_ranks[0], target_modules=cfg.lora_targets, allowed_ranks=None)
    secs = _anchor_seconds(model, inputs_of(data.anchor_batch), data.anchor_batch["attention_mask"])
    print(f"\nanchor logits: {secs:.2f} s for {len(data.anchors)} anchors (forward only)\n")
    logits = upload_bytes("rfd", num_anchors=len(data.anchors), num_classes=data.num_classes)
    print(f"RFD-LoRA upload: {logits:,} bytes per client per round at every rank\n")
    print("| targets | rank | FedIT / FLoRA / FlexLoRA bytes | FFA-LoRA bytes | adapters ÷ RFD logits |")
    print("|---|---|---|---|---|")
    for (targets, rank), state in states.items():
        full_b, ffa_b = upload_bytes("fedit", state=state), upload_bytes("ffa", state=state)
        print(f"| {'+'.join(targets)} | {rank} | {full_b:,} | {ffa_b:,} | {full_b / logits:.1f} |")


def against_small(cfg, args) -> None:
    """The config's backbone against the small encoder, both measured here (see the docstring)."""
    from fedcal.distill.clients import adapter_state, lora_model
    from fedcal.distill.methods import upload_bytes
    from fedcal.distill.run_data import DistillRunSpec, base_classifier, client_batch, distill_data, inputs_of
    from fedcal.text.frozen import num_layers

    # the small encoder at its default size; --small-steps 1 skips its MLM pretraining, which changes its
    # weights but not its speed or its tensors' shapes (what this benchmark measures)
    small_cfg = cfg.replace(dst_backbone="", dst_lora_targets="query,value,word_embeddings", dst_lora_layers=0,
                            dst_bb_steps=args.small_steps)
    tops = [int(k) for k in args.top_layers.split(",") if k.strip()]
    settings = [("small encoder, LoRA on query+value+word_embeddings", small_cfg, "lora"),
                ("full fine-tuning", cfg.replace(dst_lora_layers=0), "full"),
                ("LoRA on query+value, every layer", cfg.replace(dst_lora_layers=0), "lora")]
    settings += [(f"LoRA on query+value, top {k} layers (cached below)", cfg.replace(dst_lora_layers=k), "lora")
                 for k in tops]
    rows, base_sps, base_anchor, n_layers = [], None, None, None
    for label, c, kind in settings:
        t0 = time.perf_counter()
        data = distill_data(DistillRunSpec.from_config(c))
        batch, labels, _ = client_batch(DistillRunSpec.from_config(c), 0)
        setup_s = time.perf_counter() - t0  # tokenising, plus the lower layers' forward under dst-lora-layers
        base = base_classifier(data.backbone, data.num_classes, "cpu", data.lora_layers)
        if c is not small_cfg and n_layers is None:
            n_layers = num_layers(base)
        x, mask = inputs_of(batch), batch["attention_mask"]
        steps = min(args.steps, len(labels) // c.batch_size)
        if kind == "full":
            model = copy.deepcopy(base).train()
            for p in model.parameters():
                p.requires_grad_(True)
        else:
            model = lora_model(base, args.rank, alpha=c.dst_alpha, target_modules=c.lora_targets, allowed_ranks=None)
        sps = _steps_per_second(model, x, mask, labels, steps, c.batch_size)
        anchor_s = _anchor_seconds(model, inputs_of(data.anchor_batch), data.anchor_batch["attention_mask"])
        n_texts = len(labels) + len(data.anchors) + len(data.test_labels) + len(data.triggered.labels)
        cache = f"{1000 * setup_s / n_texts:.1f}" if c.dst_lora_layers else "–"
        if base_sps is None:
            base_sps, base_anchor = sps, anchor_s
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        rows.append(f"| {label} | {sps:.3f} | {sps / base_sps:.3f} | {anchor_s:.1f} | {anchor_s / base_anchor:.1f} | "
                    f"{cache} | {trainable:,} |")
        del model, base
    print(f"{len(labels)} client texts, batch {cfg.batch_size} × at most {cfg.dst_max_length} tokens (each batch at "
          f"its longest text), {steps} timed steps at rank {args.rank}, {len(data.anchors)} anchors, "
          f"{args.threads} torch thread(s); backbone {cfg.dst_backbone!r} has {n_layers} layers\n")
    print("| client | steps/s | × small encoder | anchor logits (s) | × small encoder | caching (ms per text) | "
          "trainable parameters |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    logits = upload_bytes("rfd", num_anchors=len(data.anchors), num_classes=data.num_classes)
    print(f"\nRFD-LoRA upload: {logits:,} bytes per client per round (the anchor logits), at every rank and on "
          "every backbone\n")
    print("| backbone and adapter | rank | FedIT / FLoRA / FlexLoRA bytes | FFA-LoRA bytes | adapters ÷ RFD logits | "
          "× small encoder's adapters |")
    print("|---|---|---|---|---|---|")
    small_bytes = {}
    bytes_settings = [("small encoder, query+value+word_embeddings", small_cfg),
                      ("query+value, every layer", cfg.replace(dst_lora_layers=0))]
    bytes_settings += [(f"query+value, top {k} layers", cfg.replace(dst_lora_layers=k)) for k in tops]
    for label, c in bytes_settings:
        data = distill_data(DistillRunSpec.from_config(c))
        base = base_classifier(data.backbone, data.num_classes, "cpu", data.lora_layers)
        for rank in cfg.distill_ranks:
            state = adapter_state(lora_model(base, rank, alpha=c.dst_alpha, target_modules=c.lora_targets,
                                             allowed_ranks=None))
            full_b, ffa_b = upload_bytes("fedit", state=state), upload_bytes("ffa", state=state)
            small_bytes.setdefault(rank, full_b)
            print(f"| {label} | {rank} | {full_b:,} | {ffa_b:,} | {full_b / logits:.1f} | "
                  f"{full_b / small_bytes[rank]:.2f} |")


class _Uncached(torch.nn.Module):
    """A top-layers model that runs the frozen lower layers itself in every forward (no cache): what
    the whole classifier with LoRA on its top k layers computes, lower layers in eval mode and
    without gradient (nothing below the adapters needs one)."""

    def __init__(self, prefix, top):
        super().__init__()
        self.prefix, self.top = prefix, top

    def train(self, mode: bool = True):
        super().train(mode)
        self.prefix.eval()  # frozen lower layers: no dropout, in either setting
        return self

    def forward(self, input_ids=None, attention_mask=None, **_):
        with torch.no_grad():
            h = self.prefix(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.top(inputs_embeds=h, attention_mask=attention_mask)


def _distill_steps_per_second(student, ids, mask, cfg, steps: int) -> float:
    from fedcal.distill.student import build_consensus, distill_step

    n = ids.shape[0]
    gen = torch.Generator().manual_seed(0)
    uploads = [torch.randn(n, 2, generator=gen) for _ in range(3)]  # the consensus's values do not change its cost
    consensus = build_consensus(uploads, clip=cfg.dst_clip, method="mean")
    opt = torch.optim.AdamW([p for p in student.parameters() if p.requires_grad], lr=cfg.dst_distill_lr)
    kw = dict(batch_size=cfg.dst_distill_batch or None, cat=cfg.dst_cat, mmd=cfg.dst_mmd, dis=cfg.dst_dis,
              t0=cfg.dst_t0, kappa=cfg.dst_kappa, tau=cfg.dst_tau, lam=cfg.dst_lambda, rho=cfg.dst_rho)
    distill_step(student, ids, mask, consensus, opt, steps=1, generator=gen, **kw)  # warm-up
    t0 = time.perf_counter()
    distill_step(student, ids, mask, consensus, opt, steps=steps, generator=gen, **kw)
    return steps / (time.perf_counter() - t0)


def cache_on_off(cfg, args) -> None:
    """Client-round and server-distillation steps/s with the frozen-layer cache off and on (see the
    docstring), and the cache's one-off cost per text."""
    from fedcal.distill.clients import lora_model
    from fedcal.distill.run_data import (DistillRunSpec, _encode_batch, base_classifier, client_batch, distill_data,
                                         frozen_prefix)
    from fedcal.distill.student import student_model
    from fedcal.text import backbone_tokenizer, frozen
    from fedcal.text.unpad import keep_padding

    if not cfg.dst_lora_layers:
        raise SystemExit("distill_throughput.py: error: --cache needs dst-lora-layers=k > 0 (LoRA on the top k layers)")
    spec = DistillRunSpec.from_config(cfg)
    data = distill_data(spec)
    batch, labels, _ = client_batch(spec, 0)
    prefix = frozen_prefix(data.backbone, data.num_classes, "cpu", cfg.dst_lora_layers)
    top = base_classifier(data.backbone, data.num_classes, "cpu", cfg.dst_lora_layers)
    rank = args.rank
    steps = max(1, min(args.steps, len(labels) // cfg.batch_size))
    rows = []
    for label, cached, skip in (("cache off (lower layers run every step)", False, False),
                                ("cache on (top layers over cached states)", True, False),
                                ("cache on, padding skipped (linear layers on attended tokens only)", True, True)):
        client = lora_model(top, rank, alpha=cfg.dst_alpha, target_modules=cfg.lora_targets, allowed_ranks=None)
        student = student_model(top, cfg.dst_student_rank, alpha=cfg.dst_alpha, target_modules=cfg.lora_targets,
                                seed=cfg.seed)
        if cached:
            x, anchors = batch["inputs_embeds"], data.anchor_batch["inputs_embeds"]
        else:
            client, student = _Uncached(prefix, client), _Uncached(prefix, student)
            x, anchors = batch["input_ids"], data.anchor_batch["input_ids"]
        with contextlib.nullcontext() if skip else keep_padding():
            c_sps = _steps_per_second(client, x, batch["attention_mask"], labels, steps, cfg.batch_size)
            s_sps = _distill_steps_per_second(student, anchors, data.anchor_batch["attention_mask"], cfg, args.steps)
        rows.append((label, c_sps, s_sps))
        print(f"{label}: client {c_sps:.3f} steps/s, server {s_sps:.3f} steps/s", flush=True)
    # the cache's one-off cost: filled in an empty folder, then read back as a new process would
    texts = [data.train_texts[i] for i in data.shards[0]]
    tok = backbone_tokenizer(data.backbone)
    old = os.environ.get("FEDCAL_CACHE_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["FEDCAL_CACHE_DIR"] = tmp
        try:
            t0 = time.perf_counter()
            _encode_batch(spec, data.backbone, data.num_classes, tok, texts)
            fill = time.perf_counter() - t0
            frozen._SEGMENTS.clear()
            t0 = time.perf_counter()
            _encode_batch(spec, data.backbone, data.num_classes, tok, texts)
            read = time.perf_counter() - t0
        finally:
            os.environ.pop("FEDCAL_CACHE_DIR") if old is None else os.environ.__setitem__("FEDCAL_CACHE_DIR", old)
    n_layers = frozen.num_layers(base_classifier(data.backbone, data.num_classes, "cpu", 0))
    print(f"\n{len(labels)} texts in client 0's shard, batch {cfg.batch_size} × at most {cfg.dst_max_length} tokens, "
          f"{steps} timed client steps and {args.steps} server steps "
          f"({min(cfg.dst_distill_batch or len(data.anchors), len(data.anchors))} of {len(data.anchors)} anchors each), "
          f"LoRA r={rank} (student r={cfg.dst_student_rank}) on "
          f"{'+'.join(cfg.lora_targets)} of the top {cfg.dst_lora_layers} of {n_layers} layers, "
          f"{args.threads} torch thread(s)\n")
    print("| setting | client round steps/s | × cache off | server distillation steps/s | × cache off |")
    print("|---|---|---|---|---|")
    for label, c_sps, s_sps in rows:
        print(f"| {label} | {c_sps:.3f} | {c_sps / rows[0][1]:.2f} | {s_sps:.3f} | {s_sps / rows[0][2]:.2f} |")
    print(f"\nthe cache's one-off cost, {len(texts)} texts: filling it (tokenising and the lower "
          f"{n_layers - cfg.dst_lora_layers} layers' forward, batches of equal-length texts) "
          f"{1000 * fill / len(texts):.1f} ms per text; reading it back in a new process "
          f"(tokenising and the file read) {1000 * read / len(texts):.2f} ms per text")


def main() -> None:
    from fedcal.config import RunConfig, parse_override

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="timed optimiser steps per configuration")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--against-small", action="store_true", help="compare with the small encoder (see above)")
    ap.add_argument("--cache", action="store_true", help="the frozen-layer cache off and on (see above)")
    ap.add_argument("--top-layers", default="1,2", help="--against-small: the k of dst-lora-layers to time")
    ap.add_argument("--rank", type=int, default=8, help="--against-small, --cache: the clients' LoRA rank timed")
    ap.add_argument("--small-steps", type=int, default=2000,
                    help="--against-small: MLM steps of the small encoder (1: untrained weights, same speed)")
    ap.add_argument("overrides", nargs="*", help="run-config key=value")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    one_client = {} if args.cache else {"num_clients": 1}  # --cache: client 0's shard of num-clients
    cfg = RunConfig.from_flower(dict(parse_override(o) for o in args.overrides), task="distill", **one_client)
    (cache_on_off if args.cache else against_small if args.against_small else single)(cfg, args)


if __name__ == "__main__":
    main()
