"""What the lm task's nodes derive from the run config (flwr-free): the corpus, the model and its
tokenizer, each client's training windows, the held-out windows, the prompts; and the server's
evaluation of a global model.

Every function is a pure function of the config (and the files it names), cached per process, so
the server and every client rebuild the same corpus and tokenizer independently, in simulation and
on real SuperNodes. A node that finds no cached small model builds it (deterministic: the same
config gives the same tokenizer; the weights it starts from are overwritten by the round's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from fedcal.config import ConfigError, ConfigSpec
from fedcal.lm.corpus import LMCorpus, lm_corpus
from fedcal.lm.metrics import generation_stats, sample_continuations, token_metrics
from fedcal.lm.model import CausalLM, LMConfig, LMTokens, fresh_lm, load_lm, pretrained_lm, text_digest, windows

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class LMRunSpec(ConfigSpec):
    """What an lm run's nodes read of the run config: the ``lm-*`` group and the common keys it
    uses (the corpus split, the seed, the data folder, the calibration bins). The task builds it
    with ``LMRunSpec.from_config(cfg)``; it is hashable, so the per-process caches below are keyed
    on these keys only."""

    num_clients: int
    seed: int
    data_dir: str
    n_bins: int
    lm_corpus: str
    lm_partition: str
    lm_model: str
    lm_tokenizer: str
    lm_vocab: int
    lm_layers: int
    lm_hidden: int
    lm_heads: int
    lm_context: int
    lm_pretrain_steps: int
    lm_top_p: float
    lm_prompts: str
    lm_prompt_count: int
    lm_prompt_words: int
    lm_gen_tokens: int
    lm_samples: int
    lm_eval_windows: int


@functools.lru_cache(maxsize=4)
def _corpus(name: str, num_clients: int, partition: str, seed: int, data_dir: str) -> LMCorpus:
    return lm_corpus(name, num_clients, partition, seed, data_dir or None)


def corpus_of(spec: LMRunSpec) -> LMCorpus:
    """The run's corpus (:func:`fedcal.lm.corpus.lm_corpus`)."""
    return _corpus(spec.lm_corpus, spec.num_clients, spec.lm_partition, spec.seed, spec.data_dir)


def lm_config(spec: LMRunSpec, corpus: LMCorpus) -> LMConfig:
    """The small model the run config describes (its cache key)."""
    return LMConfig.from_config(spec, public=text_digest(corpus.public))


def model_source(spec: LMRunSpec) -> str:
    """``lm-model`` if set, else the folder of the small pretrained model (built when absent)."""
    if spec.lm_model:
        return spec.lm_model
    corpus = corpus_of(spec)
    return str(pretrained_lm(lm_config(spec, corpus), corpus.public))


def node_model(spec: LMRunSpec) -> tuple[CausalLM, LMTokens]:
    """The model object this process trains or evaluates (shared per process: callers load the
    round's weights first) and its tokens."""
    return load_lm(model_source(spec))


def positions_of(model: CausalLM) -> int:
    """How many token positions the model takes (GPT-2's ``n_positions``, else the generic name)."""
    return getattr(model.hf.config, "n_positions", None) or model.hf.config.max_position_embeddings


def context_of(model: CausalLM, spec: LMRunSpec) -> int:
    """The window length: ``lm-context``, which must fit the model's positions."""
    positions = positions_of(model)
    if spec.lm_context > positions:
        raise ConfigError(f"run-config key 'lm-context': {spec.lm_context} tokens exceed the model's {positions} "
                          "positions")
    return spec.lm_context


@functools.lru_cache(maxsize=64)
def _client_windows(spec: LMRunSpec, cid: int) -> torch.Tensor:
    model, tokens = node_model(spec)
    corpus = corpus_of(spec)
    if not 0 <= cid < len(corpus.clients):
        raise ConfigError(f"partition-id {cid} outside the {len(corpus.clients)} clients of run-config 'num-clients'")
    return windows(tokens, corpus.train[cid], context_of(model, spec))


def client_windows(spec: LMRunSpec, cid: int) -> torch.Tensor:
    """Client ``cid``'s training text as (n, lm-context) windows."""
    return _client_windows(spec, cid)


@functools.lru_cache(maxsize=8)
def test_windows(spec: LMRunSpec) -> torch.Tensor:
    """The held-out windows (the first ``lm-eval-windows``; 0 = all)."""
    model, tokens = node_model(spec)
    data = windows(tokens, corpus_of(spec).test_texts, context_of(model, spec))
    return data[:spec.lm_eval_windows] if spec.lm_eval_windows else data


def cached_test_targets(spec: LMRunSpec):
    """(every held-out window's next-token targets as a numpy array, the vocabulary size) where the run's
    small model is already cached or given (its tokenizer makes the windows); None otherwise — nothing is
    pretrained for it."""
    from fedcal.lm.model import META_FILE, cache_root

    if spec.lm_model:
        if not (Path(spec.lm_model) / "tokenizer.json").exists():
            return None
    elif not (cache_root() / "lms" / lm_config(spec, corpus_of(spec)).digest() / META_FILE).exists():
        return None
    return test_windows(spec)[:, 1:].flatten().numpy(), node_model(spec)[1].vocab_size


def prompts_of(spec: LMRunSpec) -> list[str]:
    """The prompts of the sampled continuations: ``lm-prompts`` split at "|", else the first
    ``lm-prompt-words`` words of ``lm-prompt-count`` held-out speeches spread evenly over the
    held-out text (speeches with more words than that). Each must leave room for ``lm-gen-tokens``
    in the model's context (:class:`ConfigError` naming the prompt otherwise)."""
    if spec.lm_prompts.strip():
        prompts = [p.strip() for p in spec.lm_prompts.split("|") if p.strip()]
    else:
        long = [t for t in corpus_of(spec).test_texts if len(t.split()) > spec.lm_prompt_words]
        if len(long) < spec.lm_prompt_count:
            raise ConfigError(f"run-config key 'lm-prompt-count': only {len(long)} held-out speeches have more than "
                              f"lm-prompt-words={spec.lm_prompt_words} words")
        step = len(long) / spec.lm_prompt_count
        prompts = [" ".join(long[int(k * step)].split()[:spec.lm_prompt_words]) for k in range(spec.lm_prompt_count)]
    model, tokens = node_model(spec)
    positions = positions_of(model)
    for k, (text, ids) in enumerate(zip(prompts, tokens.encode(prompts))):
        if 1 + len(ids) + spec.lm_gen_tokens > positions:
            raise ConfigError(f"run-config key 'lm-prompts': prompt {k} ({text[:40]!r}…) is {len(ids)} tokens; with the "
                              f"begin token and lm-gen-tokens={spec.lm_gen_tokens} it exceeds the model's context of "
                              f"{positions} positions")
    return prompts


@dataclass
class Evaluation:
    """The server's evaluation of one global model: metrics, reliability bins, and (at the end)
    the sampled continuations (prompt, sample, continuation)."""

    metrics: dict[str, float]
    bins: dict[str, torch.Tensor]
    generations: pd.DataFrame | None = None


class LMEvaluator:
    """The server's evaluation of global models of one run (its own copy of the model)."""

    def __init__(self, spec: LMRunSpec):
        # read from disk, not the process's shared node model: in simulation that object is the
        # clients', and after an earlier run in the same process it holds that run's last client
        self.model, self.tokens = fresh_lm(model_source(spec))
        self.spec = spec
        self.data = test_windows(spec)
        self.prompts = prompts_of(spec)
        self.vocabulary = corpus_of(spec).words()

    def initial_state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def __call__(self, state: dict[str, torch.Tensor], generate: bool) -> Evaluation:
        """Token metrics of ``state`` on the held-out windows; with ``generate`` also the sampled
        continuations and their statistics. Raises FloatingPointError for non-finite logits."""
        import pandas as pd  # lazily: the ClientApp process never loads pandas

        spec = self.spec
        self.model.load_state_dict(state)
        self.model.eval()
        metrics, bins = token_metrics(self.model, self.data, spec.n_bins, spec.lm_top_p)
        if not generate:
            return Evaluation(metrics, bins)
        ids = self.tokens.encode(self.prompts)
        outs = sample_continuations(self.model.hf, ids, self.tokens.bos, self.tokens.eos, spec.lm_gen_tokens,
                                    spec.lm_top_p, spec.seed, spec.lm_samples)
        rows = [{"prompt_id": k // spec.lm_samples, "prompt": self.prompts[k // spec.lm_samples],
                 "sample": k % spec.lm_samples, "continuation": self.tokens.decode(o)} for k, o in enumerate(outs)]
        gens = pd.DataFrame(rows)
        metrics.update(generation_stats(list(gens["continuation"]), self.vocabulary))
        return Evaluation(metrics, bins, gens)
