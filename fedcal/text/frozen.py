"""LoRA on the top k layers only: the frozen layers below are computed once per text and cached.

When an adapter sits on the top k transformer layers only (``dst-lora-layers=k``), everything
below them — the embeddings and the lower n − k layers — is frozen and the same in every round,
for every client and for the server's student. Its output for a text is therefore a constant:
:func:`split_classifier` cuts a classifier into

* a **prefix** (the encoder with its lower n − k layers, no pooler, always in eval mode: no
  dropout, no gradient), whose last hidden states :func:`prefix_features` computes once per text,
  and
* a **top model**: the same classifier with the top k layers only and its embeddings replaced by
  :class:`PassThroughEmbeddings`, called with ``inputs_embeds`` = those cached hidden states.

The top model runs transformers' own encoder forward (attention-mask preparation, the layers, the
pooling and the head), so it computes what the whole classifier computes when the lower layers run
without dropout — the setting this shortcut defines: frozen lower layers are a fixed feature
extractor. ``tests/test_backbone_pretrained.py`` checks that the logits and the LoRA gradients of a
top model on cached features equal those of the whole model (LoRA on the same layers, lower layers
in eval mode) to float tolerance. What changes is time: a training step runs k of n layers
forward and backward instead of n, and the lower layers run once per text instead of once per
epoch, round and client — once per machine, with :func:`cached_prefix_features`: a per-text store
under ``<cache>/hidden/`` (``$FEDCAL_CACHE_DIR``, else ``~/.cache/fedcal``), one folder per backbone
weights, layer, tokenizer and length limit (:func:`store_key`), shared by every client, round,
method, seed and run of the machine. The cache is an execution detail: no run-config key names it,
so a run's name and hash are the same with a cold or a warm cache, and its results equal to float
tolerance.

Padding is the other cost the top layers can skip: the cache holds each text at its own length,
but a training batch is padded to its longest text (~55 of 64 tokens for a random batch of 64
Rotten-Tomatoes texts averaging ~27), and transformers' BERT has no unpadded (varlen) path on the
CPU — sdpa and eager attention, and the linear layers around them, compute every padded position.
Every forward of :func:`fedcal.distill.clients.forward_logits` (top model over cached states or
whole classifier) therefore runs inside :func:`fedcal.text.unpad.skip_padding`: the encoder
layers' linear modules compute the attended positions only, exactly (the same dropout draws, the
same logits and gradients to float rounding). :func:`prefix_features` batches equal-length texts,
so it has no padding to skip (the hooks act there only on a mask with holes).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

import torch

from .cache import cache_root, files_digest
from .pretrained import encoder_of
from .unpad import skip_padding

log = logging.getLogger(__name__)


class PassThroughEmbeddings(torch.nn.Module):
    """Stands in for a top model's embeddings: returns the ``inputs_embeds`` it is given (the
    cached hidden states of the frozen lower layers) unchanged."""

    def forward(self, input_ids=None, inputs_embeds=None, **_):
        if inputs_embeds is None:
            raise ValueError("a top-layers model takes the frozen layers' cached hidden states (inputs_embeds), "
                             "not token ids: compute them with fedcal.text.frozen.prefix_features")
        return inputs_embeds


def num_layers(model) -> int:
    """Transformer layers of a classifier's encoder."""
    return len(encoder_of(model).encoder.layer)


def split_classifier(model, top: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(prefix, top model) of a classifier of :func:`fedcal.text.classifier_from_backbone` (see the
    module docstring), both deep copies: ``model`` is not changed. ``top`` must lie in [1, n]
    (n = the encoder's layers; ``top = n`` leaves the embeddings alone in the prefix). The prefix
    is in eval mode with ``requires_grad=False`` everywhere; the top model keeps ``model``'s
    ``requires_grad`` flags and mode."""
    n = num_layers(model)
    if not 1 <= top <= n:
        raise ValueError(f"top layers must lie in [1, {n}] (the encoder has {n} layers), got {top}")
    prefix = copy.deepcopy(encoder_of(model))
    prefix.encoder.layer = torch.nn.ModuleList(list(prefix.encoder.layer)[:n - top])
    if getattr(prefix, "pooler", None) is not None:
        prefix.pooler = None
    prefix.config.num_hidden_layers = n - top
    prefix.eval()
    for p in prefix.parameters():
        p.requires_grad_(False)
    head = copy.deepcopy(model)
    enc = encoder_of(head)
    enc.embeddings = PassThroughEmbeddings()
    enc.encoder.layer = torch.nn.ModuleList(list(enc.encoder.layer)[n - top:])
    enc.config.num_hidden_layers = top
    return prefix, head


@torch.no_grad()
def prefix_features(prefix, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    batch_size: int = 128) -> torch.Tensor:
    """The prefix's last hidden states of every text, (N, L, hidden) float32 on the CPU, computed
    in eval mode over **batches of equal-length texts**: the rows are grouped by their attended
    length and each group cut into batches of at most ``batch_size``, so no batch computes a padding
    position (and a text's features do not depend on which other texts share its batch, beyond
    float noise). Rows are zero-padded back to L in their own order: the positions beyond a text's
    length are masked out of every attention and pooling above, so their values never matter."""
    ids, mask = torch.as_tensor(input_ids), torch.as_tensor(attention_mask)
    device = next(prefix.parameters()).device
    out = torch.zeros((*ids.shape, prefix.config.hidden_size), dtype=torch.float32)
    lengths = mask.sum(1)
    was_training = prefix.training
    prefix.eval()
    try:
        for length in torch.unique(lengths).tolist():
            rows = torch.nonzero(lengths == length).flatten()
            for i in range(0, len(rows), batch_size):
                r = rows[i:i + batch_size]
                m = mask[r]
                # right-padded rows of one length: the width is that length (a mask with holes is cut at its
                # last attended position, and the holes stay masked)
                attended = torch.nonzero(m.any(0)).flatten()
                width = int(attended.max()) + 1 if len(attended) else 1
                m = m[:, :width].to(device)
                with skip_padding(prefix, m):  # acts only on a mask with holes: the rest has no padding here
                    h = prefix(input_ids=ids[r, :width].to(device), attention_mask=m)
                out[r, :width] = h.last_hidden_state.float().cpu()
    finally:
        prefix.train(was_training)
    return out


# ------------------------------------------------------------------ the per-text cache of a machine
#: the layout of a cache segment; part of every store key (a new layout never reads old files)
FORMAT = "fedcal-hidden-v1"
#: the files of a local backbone folder whose bytes name its weights
_WEIGHT_SUFFIXES = (".safetensors", ".bin")
_DIGESTS: dict[tuple, str] = {}  # weights digest per (folder, its weight files' names and stat)
_SEGMENTS: dict[Path, dict[str, tuple[torch.Tensor, int]]] = {}  # segment file → {text key: (its h, row)}


def backbone_id(backbone: str | os.PathLike[str]) -> str:
    """What names a backbone's weights in a cache key: for a local folder, its name and the SHA-256 of
    its ``config.json`` and weight files' bytes (read once per process while the files' stat is
    unchanged: another checkpoint under the same name, or a file rewritten with its size and
    modification time kept, is another id);
    for a Hub name, the name."""
    local = Path(backbone).expanduser()
    if not local.is_dir():
        return str(backbone)
    files = sorted(f for f in local.iterdir()
                   if f.is_file() and (f.suffix in _WEIGHT_SUFFIXES or f.name == "config.json"))
    stats = [(f.name, f.stat()) for f in files]
    # a rewrite changes the inode's change time even when the size and modification time are kept
    state = (str(local.resolve()), *((n, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for n, st in stats))
    if state not in _DIGESTS:
        _DIGESTS[state] = files_digest(files)
    return f"{local.name}:{_DIGESTS[state]}"


def tokenizer_id(tokenizer) -> str:
    """SHA-256 of a ``tokenizers.Tokenizer``'s serialised form (vocabulary, normaliser, special tokens,
    post-processor): another tokenizer is another cache key even where it gives the same ids."""
    return hashlib.sha256(tokenizer.to_str().encode()).hexdigest()


def store_key(backbone: str | os.PathLike[str], layers: int, tokenizer: str, max_length: int) -> str:
    """24 hex digits naming a cache folder: the hidden states after the first ``layers`` layers of
    ``backbone`` (:func:`backbone_id`) for texts tokenised by ``tokenizer`` (:func:`tokenizer_id`) at
    most ``max_length`` tokens long. Any change of them is another folder, so a cached file is never
    stale."""
    ident = {"format": FORMAT, "backbone": backbone_id(backbone), "layers": int(layers), "tokenizer": str(tokenizer),
             "max_length": int(max_length)}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24]


def hidden_store(backbone: str | os.PathLike[str], layers: int, tokenizer: str, max_length: int) -> Path:
    """``<cache>/hidden/<store_key>/``: the folder of :func:`cached_prefix_features`."""
    return cache_root() / "hidden" / store_key(backbone, layers, tokenizer, max_length)


def text_keys(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[str]:
    """One key per row: the SHA-256 (32 hex digits) of its attended token ids — the text as the
    frozen layers see it, wherever it sits in a batch and however far that batch is padded."""
    ids, mask = torch.as_tensor(input_ids).to(torch.int64), torch.as_tensor(attention_mask).bool()
    return [hashlib.sha256(row[m].numpy().tobytes()).hexdigest()[:32] for row, m in zip(ids, mask)]


def _segment(path: Path, hidden: int) -> dict[str, tuple[torch.Tensor, int]]:
    """The texts of one segment file, read once per process (memory-mapped: only the rows used are
    read). A file that cannot be read, or holds another layout or width, gives nothing (its texts are
    computed again and written to a new segment)."""
    if path not in _SEGMENTS:
        found: dict[str, tuple[torch.Tensor, int]] = {}
        try:
            seg = torch.load(path, weights_only=True, mmap=True)
            keys, offsets, h = seg["keys"], seg["offsets"], seg["h"]
            if (seg.get("format") == FORMAT and h.dim() == 2 and h.shape[1] == hidden and h.dtype == torch.float32
                    and len(offsets) == len(keys) + 1 and int(offsets[-1]) == h.shape[0]):
                found = {k: (h[int(offsets[i]):int(offsets[i + 1])], i) for i, k in enumerate(keys)}
        except Exception:  # noqa: BLE001 — unreadable (torch raises UnpicklingError, RuntimeError, ...)
            log.warning("fedcal: hidden-state cache segment %s cannot be read: its texts are computed again", path)
        _SEGMENTS[path] = found
    return _SEGMENTS[path]


def _write_segment(folder: Path, keys: list[str], states: list[torch.Tensor]) -> Path:
    """A new segment holding ``states`` (each (length, hidden)) under ``keys``, written to a temporary
    file and renamed into place, so a reader (or a concurrent writer of the same texts, whose file has
    the same name and content) never sees half a file."""
    offsets = torch.zeros(len(keys) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.tensor([s.shape[0] for s in states]), 0)
    name = hashlib.sha256("".join(keys).encode()).hexdigest()[:24]
    path = folder / f"{name}.pt"
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        torch.save({"format": FORMAT, "keys": keys, "offsets": offsets, "h": torch.cat(states).contiguous()}, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def cached_prefix_features(prefix, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                           backbone: str | os.PathLike[str], tokenizer: str = "", max_length: int = 0,
                           batch_size: int = 128) -> torch.Tensor:
    """:func:`prefix_features`, kept **per text** on disk: the frozen layers give a text the same
    hidden states in every client, round, method, seed and run of a machine, so each text's are
    computed once. The folder (:func:`hidden_store`) is keyed by the backbone's weights, the layer
    whose output is kept (the prefix's layer count, n − k for LoRA on the top k), the tokenizer and ``max_length``;
    inside it a text is found by its attended token ids (:func:`text_keys`). The texts not found
    are computed (in batches of equal length) and written as one new segment file; padding is
    zero-filled. Segments are immutable and written through a temporary file and a rename, so any
    number of processes can read and write one folder at once. Equal to the uncached forward to
    float tolerance (tests/test_backbone_pretrained.py)."""
    ids, mask = torch.as_tensor(input_ids), torch.as_tensor(attention_mask)
    hidden = prefix.config.hidden_size
    folder = hidden_store(backbone, len(prefix.encoder.layer), tokenizer, max_length)
    keys = text_keys(ids, mask)
    index: dict[str, torch.Tensor] = {}
    if folder.is_dir():
        for path in sorted(folder.glob("*.pt")):
            for k, (h, _) in _segment(path, hidden).items():
                index.setdefault(k, h)
    first = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    missing = [k for k in first if k not in index]
    if missing:
        rows = [first[k] for k in missing]
        fresh = prefix_features(prefix, ids[rows], mask[rows], batch_size=batch_size)
        states = [fresh[j][mask[r].bool()].clone() for j, r in enumerate(rows)]
        path = _write_segment(folder, missing, states)
        _SEGMENTS[path] = {k: (s, j) for j, (k, s) in enumerate(zip(missing, states))}
        index.update(zip(missing, states))
    out = torch.zeros((*ids.shape, hidden), dtype=torch.float32)
    for i, k in enumerate(keys):
        out[i][mask[i].bool()] = index[k]
    return out


__all__ = ["FORMAT", "PassThroughEmbeddings", "backbone_id", "cached_prefix_features", "hidden_store", "num_layers",
           "prefix_features", "split_classifier", "store_key", "text_keys", "tokenizer_id"]
