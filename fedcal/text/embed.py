"""Text as fixed vectors: a frozen encoder's sentence embeddings, computed once per text and kept on disk.

Robust federated inference (:mod:`fedcal.inference`) needs clients that answer queries with probit
vectors; what a client is does not matter to it. The literature's second domain is text (AG-News,
DistilBERT clients). fedcal's text analogue keeps the encoder **frozen**: every client shares
all-MiniLM-L6-v2 (:func:`fedcal.text.pretrained.minilm_dir`) and trains only its own head on the
sentence embeddings. A frozen encoder maps a text to the same vector in every client, every run and
every seed, so the embedding is a property of the text: computed once, it turns a text corpus into
a :class:`fedcal.data.Dataset` of (N, hidden) float tensors, and the whole inference task (the
server's split, the Dirichlet partition, the clients' training, the queries, the aggregators, the
attacks on the probits) runs on it unchanged, as on images. What this costs in fidelity to the
literature (a linear head on frozen features, not a fine-tuned transformer) is said in
docs/inference-results.md (the text section).

Why embed once: on 2 CPU cores MiniLM encodes about 86 texts/s at length 64, so 17 clients each
embedding their share (and the server its queries) every run would spend minutes per run on the
same forward passes. :func:`cached_embeddings` keeps them under ``<cache>/embeddings/`` (the cache of
:mod:`fedcal.text.cache`, ``$FEDCAL_CACHE_DIR``), keyed on the SHA-256 of the encoder's files (read
each time, not trusted from a name), the pooling, the length limit and the texts themselves: another
checkpoint, tokenizer, limit or corpus split is another file, so a cached file is never stale; a
file whose stored key or shape disagrees, or that cannot be read, is computed again.

**Pooling**: the mean of the last hidden states over the attention mask — all-MiniLM-L6-v2's own
(sentence-transformers' ``pooling_mode_mean_tokens``; see :mod:`fedcal.text.pretrained`), without
sentence-transformers' final L2 normalisation: the dataset standardises each coordinate with the
training split's statistics instead (:func:`text_dataset`), as the image datasets are normalised per
channel, so that the clients' SGD sees unit-scale inputs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from fedcal.config import ConfigError
from fedcal.data.datasets import Dataset

from .cache import cache_root, files_digest
from .corpora import Text, TextTask, sentiment_corpus
from .pretrained import minilm_dir
from .tokenizer import encode, load_tokenizer

log = logging.getLogger(__name__)

#: what the stored vectors are; part of every key (a change of pooling must not read old files)
POOLING = "mean-last-hidden-v1"
#: the files of an encoder folder whose bytes key its embeddings
_KEYED_SUFFIXES = (".safetensors", ".bin", ".json")


@dataclass(frozen=True)
class TextDatasetSpec:
    """How a text dataset of the run config (``dataset``) is built: its corpus (``data_dir`` →
    :class:`TextTask`), its frozen encoder's folder (config.json, weights, tokenizer.json) and the
    tokens kept per text."""

    corpus: Callable[[str | None], TextTask]
    encoder: Callable[[], Path]
    max_length: int = 64


#: the text datasets ``load_dataset`` knows (``dataset=<name>``): Rotten Tomatoes critics' snippets,
#: rotten (0) / fresh (1), through all-MiniLM-L6-v2 at 64 tokens (the snippets average 18.5 words)
TEXT_DATASETS: dict[str, TextDatasetSpec] = {
    "rt-sentiment": TextDatasetSpec(corpus=lambda data_dir: sentiment_corpus(data_dir=data_dir), encoder=minilm_dir),
}


def encoder_digest(folder: str | os.PathLike[str]) -> str:
    """SHA-256 over the names and bytes of an encoder folder's weights, config and tokenizer files
    (``*.safetensors``, ``*.bin``, ``*.json``), read now: a replaced or retrained checkpoint gives
    another digest even under the same folder name."""
    root = Path(folder).expanduser()
    files = sorted(f for f in root.iterdir() if f.is_file() and f.suffix in _KEYED_SUFFIXES)
    if not any(f.suffix in (".safetensors", ".bin") for f in files):
        raise ConfigError(f"run-config key 'dataset': encoder folder {root} holds no weights (*.safetensors / *.bin)")
    return files_digest(files)


def embedding_key(digest: str, texts: Sequence[Text], max_length: int) -> str:
    """The SHA-256 naming the embeddings of ``texts`` (in this order) under the encoder of
    ``digest`` (:func:`encoder_digest`), :data:`POOLING` and ``max_length``."""
    h = hashlib.sha256(json.dumps([POOLING, digest, int(max_length), len(texts)]).encode())
    for t in texts:
        h.update(json.dumps(t if isinstance(t, str) else list(t)).encode() + b"\n")
    return h.hexdigest()


@torch.no_grad()
def mean_pool_embeddings(encoder: torch.nn.Module, tokenizer, texts: Sequence[Text], max_length: int,
                         batch_size: int = 64) -> torch.Tensor:
    """(len(texts), hidden) float32: the encoder's last hidden states averaged over each text's
    tokens (its attention mask), in eval mode, texts truncated to ``max_length`` tokens. Texts are
    encoded in order of length so that each batch is cut to its own longest text (padding is masked
    out of attention and pooling, so this changes the cost, not the vectors beyond float noise)."""
    if not len(texts):
        raise ValueError("no texts to embed")
    batch = encode(tokenizer, list(texts), max_length=max_length)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    order = torch.argsort(mask.sum(1), stable=True)
    out = torch.empty(len(texts), encoder.config.hidden_size, dtype=torch.float32)
    was_training = encoder.training
    encoder.eval()
    try:
        for i in range(0, len(order), batch_size):
            rows = order[i:i + batch_size]
            m = mask[rows]
            width = max(1, int(m.sum(1).max()))
            m = m[:, :width]
            h = encoder(input_ids=ids[rows, :width], attention_mask=m).last_hidden_state.float()
            w = m.unsqueeze(-1).to(h.dtype)
            out[rows] = (h * w).sum(1) / w.sum(1).clamp_min(1.0)
    finally:
        encoder.train(was_training)
    return out


def load_encoder(folder: str | os.PathLike[str]) -> torch.nn.Module:
    """The bare encoder (no pooler, no head) of a local BERT / RoBERTa folder, offline."""
    from fedcal.extras import require

    from .backbone import _quiet_transformers
    from .pretrained import encoder_config

    encoder_config(folder)  # a missing config.json or another architecture: one line naming the file
    require("transformers", "text")
    from transformers import AutoModel

    try:
        with _quiet_transformers():
            return AutoModel.from_pretrained(Path(folder).expanduser(), local_files_only=True, add_pooling_layer=False)
    except Exception as exc:  # noqa: BLE001 — truncated / unreadable weights
        raise ConfigError(f"run-config key 'dataset': encoder {folder}: its weights cannot be loaded "
                          f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from exc


def cached_embeddings(folder: str | os.PathLike[str], texts: Sequence[Text], max_length: int,
                      batch_size: int = 64) -> torch.Tensor:
    """:func:`mean_pool_embeddings` of the encoder in ``folder``, kept on disk under
    ``<cache>/embeddings/<key[:24]>.pt`` (key: :func:`embedding_key`; the file stores the whole key
    and is used only when it and the shape match). Written through a temporary file and a rename,
    so a concurrent reader never sees half a file. The encoder is loaded only on a miss."""
    key = embedding_key(encoder_digest(folder), texts, max_length)
    path = cache_root() / "embeddings" / f"{key[:24]}.pt"
    if path.is_file():
        try:
            stored = torch.load(path, weights_only=True)
            x = stored["x"]
            if stored["key"] == key and tuple(x.shape[:1]) == (len(texts),) and x.dtype == torch.float32:
                return x
            log.warning("fedcal: %s holds other embeddings than its name says: computing them again", path)
        except Exception:  # noqa: BLE001 — unreadable (torch raises UnpicklingError too): computed again
            log.warning("fedcal: %s cannot be read: computing the embeddings again", path)
    log.info("fedcal: embedding %d texts with %s (max length %d) into %s", len(texts), folder, max_length, path)
    x = mean_pool_embeddings(load_encoder(folder), load_tokenizer(folder), texts, max_length, batch_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".pt", dir=path.parent)
    os.close(fd)
    try:
        torch.save({"key": key, "x": x}, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return x


def text_dataset(name: str, data_dir: str | os.PathLike[str] | None = None) -> Dataset:
    """The text dataset ``name`` of :data:`TEXT_DATASETS` as a :class:`Dataset` of sentence
    embeddings: its corpus's train and test texts through its frozen encoder
    (:func:`cached_embeddings`, one file for both splits), each coordinate standardised with the
    training split's mean and standard deviation (the test split with the same), labels as the
    corpus gives them. ConfigError naming ``dataset`` for an unknown name."""
    if name not in TEXT_DATASETS:
        raise ConfigError(f"run-config key 'dataset': unknown text dataset {name!r}; choose one of "
                          f"{', '.join(TEXT_DATASETS)}")
    spec = TEXT_DATASETS[name]
    task = spec.corpus(None if data_dir is None else str(data_dir))
    texts = (*task.train_texts, *task.test_texts)
    x = cached_embeddings(spec.encoder(), texts, spec.max_length)
    n = len(task.train_texts)
    mean, std = x[:n].mean(0), x[:n].std(0).clamp_min(1e-6)
    x = (x - mean) / std
    return Dataset(name=name, x_train=x[:n].contiguous(), y_train=torch.as_tensor(task.train_labels, dtype=torch.int64),
                   x_test=x[n:].contiguous(), y_test=torch.as_tensor(task.test_labels, dtype=torch.int64),
                   num_classes=task.num_classes)


__all__ = ["POOLING", "TEXT_DATASETS", "TextDatasetSpec", "cached_embeddings", "embedding_key", "encoder_digest",
           "load_encoder", "mean_pool_embeddings", "text_dataset"]
