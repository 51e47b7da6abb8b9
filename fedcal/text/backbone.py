"""A small RoBERTa-style encoder pretrained offline by masked-language modelling, cached on disk.

RFD-LoRA fine-tunes a frozen pretrained transformer. Offline there is no ``roberta-large`` to
download, so :func:`pretrained_backbone` builds a small one: a :class:`transformers.RobertaForMaskedLM`
from :class:`BackboneConfig`, pretrained on public text (:func:`pretraining_texts`) with RoBERTa's
MLM objective (15 % of tokens chosen; of those 80 % → ``<mask>``, 10 % → a random token, 10 % kept;
transformers' ``DataCollatorForLanguageModeling`` with its own seeded generator), and saved with
``save_pretrained`` under ``<cache>/backbones/<config hash>/`` (``<cache>`` = ``$FEDCAL_CACHE_DIR``,
else ``~/.cache/fedcal``: outside the repository, so weights are never committed). The next call
with the same config loads the folder instead of training. :func:`classifier_from_backbone` turns
it (or, for networked users, a Hub model such as ``roberta-large``) into a
``RobertaForSequenceClassification`` with a new classification head.

Default size (hidden 128, 2 layers, 2 heads, FFN 512, 64-token windows, 8,192-token BPE), chosen
for 2 CPU cores: 1.45 M parameters (1.05 M of them the word embeddings, 0.40 M the two layers).
Measured on this machine (2 cores shared with another job, one torch thread, batch 32 × 64):
0.145 s per MLM step, so the default 2000 steps take about 5 minutes; 4 layers / 4 heads took
0.37 s per step (12 minutes), and every client's forward pass in RFD-LoRA scales the same way.
With two torch threads on the loaded machine a step took 5× longer than with one (the threads
spin-wait for the busy core): :func:`pretrained_backbone` takes ``num_threads`` for that.

Pretraining text (``sources``), public and disjoint from every test split by construction:

* ``shakespeare``: every work of the Shakespeare folder except the genre task's held-out test
  plays (:func:`fedcal.text.corpora.genre_split`): the training plays, Pericles and the poems;
* ``plots``: the Rotten Tomatoes plot summaries of the sentiment task's training split
  (:func:`fedcal.text.corpora.plot_summaries`) — unlabelled in the binary task, movie-domain text.

No critic's snippet (the sentiment clients' private data) is used. On top of the construction, any
pretraining passage whose exact text occurs in a test split of the genre or either sentiment task is
dropped (stock lines recur across plays), and a test checks the intersection is empty.

Passages are packed (RoBERTa's "full-sentences" input): their tokens are concatenated with
``</s>`` between them and cut into windows of ``max_length`` tokens, so no step is spent on
padding (the passages average ~30 tokens against 64-token windows).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from fedcal.config import ConfigError
from fedcal.config.lm import LM_TOKENIZERS
from fedcal.extras import require
from fedcal.progress import steps as progress_steps

from .cache import cache_root
from .corpora import (
    genre_corpus,
    genre_split,
    play_passages,
    plot_summaries,
    sentiment_corpus,
    shakespeare_works,
)
from .tokenizer import (
    as_transformers,
    gpt2_tokenizer,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)

SOURCES = ("shakespeare", "plots")
TOKENIZERS = LM_TOKENIZERS  # a trained BPE or GPT-2's: the config's choices, declared there once
META_FILE = "fedcal_backbone.json"  # written last: a folder without it is an unfinished build


@dataclass(frozen=True)
class BackboneConfig:
    """Everything that determines a pretrained backbone; its hash names the cache folder.

    ``texts``, when given, replaces ``sources`` as the whole pretraining text (tiny test configs).
    """

    hidden: int = 128
    layers: int = 2
    heads: int = 2
    intermediate: int = 512
    max_length: int = 64  # tokens per window, <s> and </s> included; also the classifier's longest input
    tokenizer: str = "bpe"  # "bpe": trained on the pretraining text; "gpt2": GPT-2's 50k BPE
    vocab_size: int = 8192  # of the trained BPE ("gpt2" ignores it)
    steps: int = 2000  # 32 × 62 tokens each: ~4 M tokens, ~4 passes over the ~1.07 M-token text
    batch_size: int = 32
    lr: float = 5e-4
    warmup: float = 0.06  # share of steps with a linearly rising learning rate, then linear decay to 0
    weight_decay: float = 0.01
    mlm_probability: float = 0.15
    dropout: float = 0.1
    seed: int = 0
    sources: tuple[str, ...] = SOURCES
    texts: tuple[str, ...] | None = None
    # the task splits the pretraining text must avoid (the tasks' defaults)
    genre_test_frac: float = 0.25
    genre_seed: int = 0
    sentiment_test_frac: float = 0.2
    sentiment_seed: int = 0

    def __post_init__(self):
        if self.tokenizer not in TOKENIZERS:
            raise ConfigError(f"backbone tokenizer {self.tokenizer!r}: choose one of {TOKENIZERS}")
        bad = sorted(set(self.sources) - set(SOURCES))
        if bad:
            raise ConfigError(f"backbone sources {bad}: unknown; choose from {SOURCES}")
        if self.hidden % self.heads:
            raise ConfigError(f"backbone hidden {self.hidden} is not a multiple of heads {self.heads}")
        for name in ("hidden", "layers", "heads", "intermediate", "steps", "batch_size", "vocab_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"backbone {name} must be ≥ 1, got {getattr(self, name)}")
        if self.max_length < 8:
            raise ConfigError(f"backbone max_length must be ≥ 8, got {self.max_length}")
        if not 0 < self.mlm_probability < 1:
            raise ConfigError(f"backbone mlm_probability must lie in (0, 1), got {self.mlm_probability}")

    def digest(self) -> str:
        """16 hex digits of the SHA-256 of the config as sorted JSON: the cache folder's name."""
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def backbone_dir(cfg: BackboneConfig) -> Path:
    """The cache folder of ``cfg``: ``<cache_root()>/backbones/<cfg.digest()>``."""
    return cache_root() / "backbones" / cfg.digest()


def held_out_texts(cfg: BackboneConfig, data_dir: str | os.PathLike[str] | None = None) -> set[str]:
    """Every test text of the offline tasks that ``cfg``'s pretraining text must avoid: the genre
    task's test split (needs the Shakespeare folder) and both sentiment tasks' test splits."""
    out: set[str] = set()
    if "shakespeare" in cfg.sources:
        out.update(genre_corpus(data_dir, cfg.genre_test_frac, cfg.genre_seed).test_texts)
    if "plots" in cfg.sources:
        out.update(sentiment_corpus(True, cfg.sentiment_test_frac, cfg.sentiment_seed, data_dir).test_texts)
    return out


def pretraining_texts(cfg: BackboneConfig, data_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The public pretraining passages of ``cfg`` in a fixed order (see the module docstring):
    ``cfg.texts`` if given, else its ``sources`` minus every text of :func:`held_out_texts`."""
    if cfg.texts is not None:
        return list(cfg.texts)
    texts: list[str] = []
    if "shakespeare" in cfg.sources:
        _, test_plays = genre_split(cfg.genre_test_frac, cfg.genre_seed)
        for stem in sorted(shakespeare_works(data_dir)):
            if stem not in test_plays:  # the held-out plays are never read
                texts += play_passages(stem, data_dir=data_dir)
    if "plots" in cfg.sources:
        texts += plot_summaries(cfg.sentiment_seed, cfg.sentiment_test_frac, data_dir)
    forbidden = held_out_texts(cfg, data_dir)
    return [t for t in texts if t not in forbidden]


def model_config(cfg: BackboneConfig, vocab_size: int):
    """The ``transformers.RobertaConfig`` of ``cfg`` with RoBERTa's special ids (<s>=0, <pad>=1,
    </s>=2: both tokenisers number them so)."""
    require("transformers", "text")
    from transformers import RobertaConfig

    ids = (0, 1, 2)
    return RobertaConfig(
        vocab_size=vocab_size, hidden_size=cfg.hidden, num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
        intermediate_size=cfg.intermediate, hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.dropout,
        # RoBERTa numbers positions from padding_idx + 1, so max_length tokens need max_length + 2 rows
        max_position_embeddings=cfg.max_length + 2, type_vocab_size=1,
        bos_token_id=ids[0], pad_token_id=ids[1], eos_token_id=ids[2],
    )


def pack(token_lists: Sequence[Sequence[int]], max_length: int, bos: int, eos: int) -> torch.Tensor:
    """Concatenate the passages' tokens (without their own <s>/</s>) with ``</s>`` after each,
    cut the stream into windows of ``max_length - 2`` and frame each by ``<s> … </s>``: a
    (windows, max_length) tensor, no padding (the incomplete last window is dropped)."""
    stream = [t for ids in token_lists for t in (*ids, eos)]
    width = max_length - 2
    n = len(stream) // width
    if n == 0:
        raise ValueError(f"{len(stream)} pretraining tokens do not fill one {max_length}-token window")
    body = torch.tensor(stream[: n * width], dtype=torch.long).view(n, width)
    return torch.cat([torch.full((n, 1), bos), body, torch.full((n, 1), eos)], dim=1)


def mlm_loss(model, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``RobertaForMaskedLM``'s loss (mean cross-entropy over the positions whose label is not
    -100), computing the vocabulary logits at those positions only: the same value as
    ``model(input_ids, labels=labels).loss`` for a third of the step's time at the default size,
    where the output layer over all positions cost as much as the encoder (windows have no padding,
    so no attention mask is needed)."""
    hidden = model.roberta(input_ids=input_ids).last_hidden_state
    chosen = labels != -100
    return torch.nn.functional.cross_entropy(model.lm_head(hidden[chosen]), labels[chosen])


def warmup_linear_decay(opt: torch.optim.Optimizer, steps: int, warmup: float):
    """A LambdaLR of ``steps`` steps: linear warm-up over the first ``warmup`` share (at least one
    step), then linear decay to 0 — the pretraining schedule of the small encoder and the small LM."""
    warm = max(1, int(warmup * steps))
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else max(0.0, (steps - s) / max(1, steps - warm)))


def shuffled_batches(n: int, steps: int, batch_size: int, gen: torch.Generator):
    """``steps`` index batches of ``batch_size`` over epochs of seeded permutations of ``n`` items;
    a batch may straddle two epochs (a permutation is appended when fewer than a batch remain)."""
    order = torch.empty(0, dtype=torch.long)
    for _ in range(steps):
        if len(order) < batch_size:
            order = torch.cat([order, torch.randperm(n, generator=gen)])
        idx, order = order[:batch_size], order[batch_size:]
        yield idx


def _train_mlm(model, windows: torch.Tensor, collator, cfg: BackboneConfig) -> list[float]:
    """Pretrain ``model`` in place: ``cfg.steps`` AdamW steps on batches of windows drawn with a
    generator seeded by ``cfg.seed``, masked by ``collator``; returns the loss of every step."""
    gen = torch.Generator().manual_seed(cfg.seed)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embeddings.LayerNorm" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embeddings.LayerNorm" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6)  # RoBERTa's β₂ and ε
    sched = warmup_linear_decay(opt, cfg.steps, cfg.warmup)
    model.train()
    losses = []
    for idx in progress_steps(shuffled_batches(len(windows), cfg.steps, cfg.batch_size, gen),
                              "backbone pretraining (MLM)", cfg.steps):
        batch = collator([{"input_ids": w} for w in windows[idx]])
        loss = mlm_loss(model, batch["input_ids"], batch["labels"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def pretrained_backbone(cfg: BackboneConfig = BackboneConfig(), data_dir: str | os.PathLike[str] | None = None,
                        rebuild: bool = False, num_threads: int | None = None) -> Path:
    """The folder of ``cfg``'s pretrained backbone (``save_pretrained`` weights, ``tokenizer.json``
    and ``fedcal_backbone.json`` with the config, losses and timings), built first when absent or
    when ``rebuild``. Deterministic: the same config gives the same weights (on one machine and
    thread count: float sums may round differently across them). ``num_threads`` sets torch's
    intra-op threads for the build only (not part of the config: it changes speed, not the recipe).

    Building is written to a temporary folder and renamed into place, so an interrupted build
    leaves no half-written backbone and two processes building at once both end with a whole one.
    """
    final = backbone_dir(cfg)
    if (final / META_FILE).exists() and not rebuild:
        return final
    require("transformers", "text")
    from transformers import DataCollatorForLanguageModeling, RobertaForMaskedLM

    t0 = time.perf_counter()
    texts = pretraining_texts(cfg, data_dir)
    tok = train_tokenizer(texts, cfg.vocab_size) if cfg.tokenizer == "bpe" else gpt2_tokenizer()
    mcfg = model_config(cfg, tok.get_vocab_size())
    bos, eos = mcfg.bos_token_id, mcfg.eos_token_id
    windows = pack([e.ids[1:-1] for e in tok.encode_batch(texts)], cfg.max_length, bos, eos)
    hf_tok = as_transformers(tok, cfg.max_length)
    collator = DataCollatorForLanguageModeling(hf_tok, mlm=True, mlm_probability=cfg.mlm_probability,
                                               mask_replace_prob=0.8, random_replace_prob=0.1, seed=cfg.seed)
    threads = torch.get_num_threads()
    try:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        with torch.random.fork_rng(devices=[]):  # seed the init (and dropout) without moving the caller's RNG
            torch.manual_seed(cfg.seed)
            model = RobertaForMaskedLM(mcfg)
            t1 = time.perf_counter()
            losses = _train_mlm(model, windows, collator, cfg)
            t2 = time.perf_counter()
            used_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)
    emb = model.roberta.embeddings.word_embeddings.weight.numel()
    meta = {
        "config": dataclasses.asdict(cfg), "digest": cfg.digest(), "texts": len(texts),
        "tokens": int(windows.numel()), "windows": len(windows), "vocab_size": tok.get_vocab_size(),
        "parameters": {"total_encoder": sum(p.numel() for p in model.roberta.parameters()), "word_embeddings": emb},
        "losses": losses, "seconds_prepare": t1 - t0, "seconds_train": t2 - t1,
        "seconds_per_step": (t2 - t1) / max(1, cfg.steps), "torch_threads": used_threads,
    }
    return publish_folder(final, META_FILE, meta, model, tok)


def publish_folder(final: Path, meta_file: str, meta: dict, model, tok) -> Path:
    """Write ``model`` (``save_pretrained``), ``tok`` and ``meta`` (as ``meta_file``, last) into a
    temporary folder beside ``final`` and rename it into place: an interrupted build leaves no
    half-written folder, and of two processes building at once both end with a whole one."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        with _quiet_transformers():
            model.save_pretrained(tmp)
        save_tokenizer(tok, tmp)
        (tmp / meta_file).write_text(json.dumps(meta, indent=1, default=list))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except OSError:
        if (final / meta_file).exists():  # another process finished the same build first
            return final
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


@contextlib.contextmanager
def _quiet_transformers():
    """Silence transformers' progress bars and load report (the MLM head's weights go unused and
    the classifier's head is new, as intended) for one call, restoring the caller's settings."""
    require("transformers", "text")
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def backbone_meta(path: str | os.PathLike[str]) -> dict:
    """The ``fedcal_backbone.json`` of a cached backbone (config, losses, timings)."""
    return json.loads((Path(path) / META_FILE).read_text())


def classifier_from_backbone(path_or_name: str | os.PathLike[str], num_classes: int, seed: int | None = None):
    """A sequence classifier whose encoder is the backbone at ``path_or_name`` and whose
    classification head is new, initialised under ``seed`` when given (without moving the caller's
    RNG). ``path_or_name`` is a local folder — a :func:`pretrained_backbone` folder (RoBERTa), the
    cached all-MiniLM-L6-v2 of :func:`fedcal.text.pretrained.minilm_dir`, or any BERT / RoBERTa folder
    with config.json, weights and tokenizer.json — or a Hugging Face Hub name such as ``roberta-large``
    (networked users). Local folders load with ``local_files_only=True``. The MiniLM folder gives a
    :class:`fedcal.text.pretrained.MeanPoolClassifier` (the checkpoint's own mean pooling); every other
    backbone transformers' ``AutoModelForSequenceClassification`` (RoBERTa's ``<s>`` head, BERT's
    pooler). Raises :class:`ConfigError` naming the file or name when it cannot be loaded.
    """
    from .pretrained import MeanPoolClassifier, encoder_config, pooling_of

    if num_classes < 2:
        raise ConfigError(f"num_classes must be ≥ 2, got {num_classes}")
    local = Path(path_or_name).expanduser()
    if local.is_dir():
        encoder_config(local)  # a missing config.json or another architecture: one line naming the file
    require("transformers", "text")
    from transformers import AutoModel, AutoModelForSequenceClassification

    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        if local.is_dir():
            try:
                with _quiet_transformers():
                    if pooling_of(local) == "mean":
                        enc = AutoModel.from_pretrained(local, local_files_only=True, add_pooling_layer=False)
                        return MeanPoolClassifier(enc, num_classes)
                    return AutoModelForSequenceClassification.from_pretrained(local, num_labels=num_classes,
                                                                              local_files_only=True)
            except Exception as exc:  # noqa: BLE001 — truncated / unreadable weights (safetensors' own error type too)
                raise ConfigError(f"run-config key 'dst-backbone': {local}: its weights cannot be loaded "
                                  f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from exc
        try:
            return AutoModelForSequenceClassification.from_pretrained(str(path_or_name), num_labels=num_classes)
        except Exception as exc:  # offline: OSError / huggingface_hub errors
            raise ConfigError(f"backbone {str(path_or_name)!r}: not a local backbone folder, and the Hugging Face Hub "
                              f"model of that name cannot be loaded (offline?): {exc}") from exc


def backbone_tokenizer(path_or_name: str | os.PathLike[str]):
    """The ``tokenizers.Tokenizer`` of a backbone: the folder's ``tokenizer.json``, or a Hub model's
    fast tokenizer (networked users); :class:`ConfigError` when it cannot be loaded."""
    local = Path(path_or_name).expanduser()
    if local.is_dir():
        return load_tokenizer(local)
    require("transformers", "text")  # outside the try: a missing extra is not a bad backbone name
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path_or_name)).backend_tokenizer
    except Exception as exc:
        raise ConfigError(f"backbone {str(path_or_name)!r}: cannot load its tokenizer (offline?): {exc}") from exc


def parameter_counts(model) -> dict[str, int]:
    """Parameters of a classifier's encoder (RoBERTa or BERT): word embeddings, the rest of the
    embeddings, the transformer layers (what the tokenizer choice trades off)."""
    from .pretrained import encoder_of

    enc = encoder_of(model)
    emb = enc.embeddings
    word = emb.word_embeddings.weight.numel()
    return {"word_embeddings": word,
            "other_embeddings": sum(p.numel() for p in emb.parameters()) - word,
            "layers": sum(p.numel() for p in enc.encoder.parameters())}


__all__ = [
    "SOURCES",
    "TOKENIZERS",
    "BackboneConfig",
    "backbone_dir",
    "backbone_meta",
    "backbone_tokenizer",
    "cache_root",
    "classifier_from_backbone",
    "held_out_texts",
    "model_config",
    "pack",
    "parameter_counts",
    "pretrained_backbone",
    "pretraining_texts",
    "publish_folder",
]

