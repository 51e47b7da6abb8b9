"""What the LM case study measures (flwr-free): next-token calibration, the top-p nucleus, and
statistics of sampled text.

Token level (:func:`token_metrics`), every position of every held-out window at τ = 1: next-token
accuracy, perplexity exp(mean NLL), ECE / signed ECE / Brier of the next-token distribution (the
same equal-width bins as the classifiers', :func:`fedcal.metrics.confidence_calibration`), and the
mean size of the top-p nucleus — the smallest set of most likely tokens whose probability reaches
p (Holtzman et al., ICLR 2020), which is what top-p sampling draws from.

Generated text (:func:`generation_stats`), on whitespace-and-punctuation words
(:func:`fedcal.lm.corpus.word_tokens`, so the numbers do not depend on the tokenizer):

* ``rep4`` — seq-rep-4 (Welleck et al., ICLR 2020): per continuation, 1 − unique 4-grams / 4-grams,
  averaged over continuations (0: no 4-gram repeats; loops push it towards 1);
* ``distinct1`` / ``distinct2`` — distinct-n (Li et al., NAACL 2016): unique n-grams / n-grams over
  all continuations together;
* ``nonword`` — the share of generated words that never occur in the corpus (corrupted tokens glued
  into non-words).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from fedcal.extras import require
from fedcal.lm.corpus import word_tokens
from fedcal.metrics import confidence_calibration

TOKEN_KEYS = ("accuracy", "perplexity", "nll", "ece", "sece", "brier", "nucleus")
GENERATION_KEYS = ("rep4", "distinct1", "distinct2", "nonword")


def nucleus_sizes(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """For each row of ``probs`` (N, V), the number of most likely tokens top-p sampling keeps: the
    smallest k whose k largest probabilities sum to ≥ ``top_p`` (at least 1). A token is kept when
    the mass of the tokens ranked above it is still below ``top_p``."""
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must lie in (0, 1], got {top_p}")
    srt = probs.sort(dim=-1, descending=True).values.double()
    before = srt.cumsum(-1) - srt  # mass of the tokens ranked above each one
    return (before < top_p).sum(-1).clamp(min=1)


@torch.no_grad()
def token_metrics(logits_fn: Callable[[torch.Tensor], torch.Tensor], data: torch.Tensor, n_bins: int = 15,
                  top_p: float = 0.9, batch_size: int = 32) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """Next-token metrics of a causal LM on (n, L) windows ``data``: every position t < L − 1
    predicts token t + 1. ``logits_fn(input_ids)`` returns (B, L', V) logits at τ = 1. Returns
    ({accuracy, perplexity, nll, ece, sece, brier, nucleus}, reliability bins). Computed window
    batch by window batch: the (positions × vocabulary) probabilities never exist all at once."""
    if data.ndim != 2 or data.shape[1] < 2:
        raise ValueError(f"data must be (n, L ≥ 2) token windows, got shape {tuple(data.shape)}")
    if not len(data):
        raise ValueError("no windows to evaluate")
    conf, correct, nll, brier, nucleus = [], [], [], [], []
    for i in range(0, len(data), batch_size):
        x = data[i:i + batch_size]
        z = logits_fn(x[:, :-1]).float().flatten(0, 1)
        y = x[:, 1:].flatten()
        if not torch.isfinite(z).all():
            raise FloatingPointError("the model produced non-finite logits")
        logp = F.log_softmax(z.double(), dim=-1)
        p = logp.exp()
        top, pred = p.max(-1)
        conf.append(top)
        correct.append((pred == y).double())
        nll.append(-logp.gather(1, y[:, None])[:, 0])
        brier.append((p.square().sum(-1) - 2 * p.gather(1, y[:, None])[:, 0] + 1))  # Σ (p − e_y)²
        nucleus.append(nucleus_sizes(p, top_p).double())
    conf_t, correct_t = torch.cat(conf), torch.cat(correct)
    cal = confidence_calibration(conf_t, correct_t, n_bins)
    mean_nll = float(torch.cat(nll).mean())
    out = {"accuracy": float(correct_t.mean()), "perplexity": float(torch.exp(torch.tensor(mean_nll))),
           "nll": mean_nll, "ece": cal["ece"], "sece": cal["sece"], "brier": float(torch.cat(brier).mean()),
           "nucleus": float(torch.cat(nucleus).mean())}
    return out, cal["bins"]


def seq_rep(words: Sequence[str], n: int = 4) -> float:
    """1 − unique n-grams / n-grams of one word sequence (0 when it has no n-gram)."""
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def distinct(sequences: Iterable[Sequence[str]], n: int) -> float:
    """Unique n-grams / n-grams over all ``sequences`` together (0 when there is none)."""
    grams = [tuple(s[i:i + n]) for s in sequences for i in range(len(s) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def nonword_rate(sequences: Iterable[Sequence[str]], vocabulary: set[str]) -> float:
    """The share of the words of ``sequences`` that are not in ``vocabulary`` (0 when no word)."""
    words = [w for s in sequences for w in s]
    return sum(w not in vocabulary for w in words) / len(words) if words else 0.0


def generation_stats(texts: Sequence[str], vocabulary: set[str]) -> dict[str, float]:
    """rep4, distinct1, distinct2 and nonword of generated ``texts`` (module docstring)."""
    seqs = [word_tokens(t) for t in texts]
    return {"rep4": sum(seq_rep(s, 4) for s in seqs) / max(1, len(seqs)), "distinct1": distinct(seqs, 1),
            "distinct2": distinct(seqs, 2), "nonword": nonword_rate(seqs, vocabulary)}


@torch.no_grad()
def sample_continuations(hf_model, prompts: Sequence[Sequence[int]], bos: int, eos: int, max_new_tokens: int,
                         top_p: float, seed: int, samples: int = 1) -> list[list[int]]:
    """``samples`` top-p continuations (temperature 1, no top-k) of each prompt (token ids, without
    the begin token, which is prepended), with transformers' ``generate``: a list of token-id lists,
    prompt by prompt. Generation runs the full ``max_new_tokens``: the end-of-sample token does not
    stop it (a speech's end is followed by the next speech, as in the training windows). Seeded:
    the same seed draws the same uniforms for every model, without moving the caller's RNG."""
    require("transformers", "text", "the LM case study (task=lm)")
    from transformers import GenerationConfig

    from fedcal.text.backbone import _quiet_transformers

    gen_cfg = GenerationConfig(do_sample=True, top_p=top_p, top_k=0, temperature=1.0, max_new_tokens=max_new_tokens,
                               min_new_tokens=0, eos_token_id=None, pad_token_id=eos, bos_token_id=bos)
    out: list[list[int]] = []
    # generate() fills a None of the given config from the model's own generation config, whose
    # eos_token_id would stop at the first end-of-sample token: unset it there for this call
    saved = hf_model.generation_config.eos_token_id
    hf_model.generation_config.eos_token_id = None
    try:
        with torch.random.fork_rng(devices=[]), _quiet_transformers():
            torch.manual_seed(seed)
            for prompt in prompts:
                ids = torch.tensor([[bos, *prompt]], dtype=torch.long)
                for _ in range(samples):
                    seq = hf_model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                            generation_config=gen_cfg)
                    out.append(seq[0, ids.shape[1]:].tolist())
    finally:
        hf_model.generation_config.eos_token_id = saved
    return out
