"""Time of one local AdamW step of the LM case study's GPT-2 with the small BPE vocabulary against
GPT-2's own 50,257-token vocabulary (+ RoBERTa's 5 special tokens), measured in the same run.

Same architecture otherwise (``lm-hidden``, ``lm-layers``, ``lm-heads``, ``lm-context`` of the run
config, the defaults unless given), B = ``batch-size`` windows; the median of ``--steps`` steps after
one warm-up step, on one CPU thread unless ``--threads``. Prints the parameter counts and the ratio:
why ``lm-tokenizer=bpe`` is the default on CPU (docs/lm.md).

    python benchmarks/lm_step.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def step_seconds(vocab: int, cfg, steps: int) -> tuple[int, float]:
    """(parameters, median seconds per step) of a fresh GPT-2 of ``vocab`` tokens."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from fedcal.lm.model import CausalLM

    model = CausalLM(GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=cfg.lm_context, n_embd=cfg.lm_hidden,
                                                n_layer=cfg.lm_layers, n_head=cfg.lm_heads, resid_pdrop=0.0,
                                                embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=2)))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    x = torch.randint(0, vocab, (cfg.batch_size, cfg.lm_context), generator=torch.Generator().manual_seed(0))
    times = []
    for _ in range(steps + 1):
        t = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
    return sum(p.numel() for p in model.parameters()), statistics.median(times[1:])


def main() -> None:
    from fedcal.config import RunConfig

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="run-config keys, e.g. lm-hidden=256")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = RunConfig.from_flower({"task": "lm", **dict(o.split("=", 1) for o in args.overrides)})
    small = step_seconds(cfg.lm_vocab, cfg, args.steps)
    gpt2 = step_seconds(50262, cfg, args.steps)
    print(f"B = {cfg.batch_size} windows of {cfg.lm_context} tokens, hidden {cfg.lm_hidden}, {cfg.lm_layers} layers, "
          f"{args.threads} thread(s)")
    print(f"small BPE ({cfg.lm_vocab} tokens): {small[0]:,} parameters, {small[1]:.3f} s/step")
    print(f"GPT-2 BPE (50262 tokens): {gpt2[0]:,} parameters, {gpt2[1]:.3f} s/step")
    print(f"ratio GPT-2 / small: {gpt2[1] / small[1]:.1f}x time, {gpt2[0] / small[0]:.1f}x parameters")


if __name__ == "__main__":
    main()
