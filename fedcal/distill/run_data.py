"""What a distill run's server and clients derive from the run config alone (flwr-free).

:func:`distill_data` builds, and caches per process, the corpus (subsampled), the public anchor set
and its id, the clients' private shards, the backdoor clients, the backbone (built and cached on
first use) and the encoded anchor, test and triggered-test batches; :func:`client_batch` a client's
encoded (and, for a backdoor client, poisoned) shard. Every node and the server call these with the
same config and get the same data, so nothing but the config travels. The Flower side is
:mod:`fedcal.tasks.distill`.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import torch

from fedcal.config import ConfigError, ConfigSpec


@dataclass(frozen=True)
class DistillData:
    """Everything a run's server and clients derive from the config alone (each rebuilds it)."""

    num_classes: int
    backbone: str  # a backbone folder or Hub name
    lora_layers: int  # dst-lora-layers: 0, or the top k layers whose input the batches' "inputs_embeds" cache
    train_texts: tuple
    train_labels: np.ndarray
    anchors: np.ndarray  # indices into the (subsampled) training split
    anchor_id: str
    shards: tuple[np.ndarray, ...]  # one per client, indices into the training split
    backdoor: frozenset[int]  # backdoor client ids
    anchor_batch: dict
    test_batch: dict
    test_labels: np.ndarray
    triggered: object  # fedcal.text.TriggeredSet
    triggered_batch: dict
    # the control word's copy of the non-target test texts (None without dst-control): its flip rate
    # is what prepending any unknown word does, beside the trigger's
    control: object = None
    control_batch: dict | None = None
    # positions in the anchor set that carry the trigger (dst-anchor-attack=trigger), else empty
    anchor_attack_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass(frozen=True)
class DistillRunSpec(ConfigSpec):
    """What a distill run's nodes read of the run config (every function below): the ``dst-*`` keys
    they use and the common ones (seed, K, data folder, device, evaluation batch). The task builds it
    with ``DistillRunSpec.from_config(cfg)``."""

    seed: int
    num_clients: int
    data_dir: str
    device: str
    eval_batch_size: int
    dst_aggregator: str
    dst_alpha: float
    dst_anchor_attack: str
    dst_anchor_attack_frac: float
    dst_anchor_frac: float
    dst_backbone: str
    dst_backdoor_ratio: float
    dst_bb_heads: int
    dst_bb_hidden: int
    dst_bb_intermediate: int
    dst_bb_layers: int
    dst_bb_steps: int
    dst_bb_vocab: int
    dst_cat: bool
    dst_clip: float
    dst_control: str
    dst_corpus: str
    dst_dis: bool
    dst_distill_batch: int
    dst_distill_lr: float
    dst_distill_steps: int
    dst_eval_every: int
    dst_groups: int
    dst_kappa: float
    dst_lambda: float
    dst_lora_layers: int
    dst_max_length: int
    dst_method: str
    dst_min_replies: int
    dst_mmd: bool
    dst_partition: str
    dst_poison_frac: float
    dst_prior_correct: bool
    dst_prior_target: str
    dst_rho: float
    dst_rounds: int
    dst_student_rank: int
    dst_t0: float
    dst_target: int
    dst_tau: float
    dst_test_size: int
    dst_train_size: int
    dst_trigger: str
    lora_targets: tuple[str, ...]  # dst-lora-targets, split
    num_backdoor_clients: int  # round-half-up(dst-backdoor-ratio · K)


def anchor_set_id(anchors: np.ndarray) -> str:
    """16 hex digits of the SHA-256 of the anchor indices (int64): what server and clients compare
    to know they mean the same anchors in the same order."""
    return hashlib.sha256(np.asarray(anchors, np.int64).tobytes()).hexdigest()[:16]


def backdoor_clients(cfg: DistillRunSpec) -> frozenset[int]:
    """The backdoor clients: ``round-half-up(dst-backdoor-ratio · K)`` ids drawn with the seed."""
    rng = np.random.default_rng([cfg.seed, 0xB4D])
    return frozenset(int(k) for k in rng.permutation(cfg.num_clients)[:cfg.num_backdoor_clients])


def _subsample(n: int, k: int, seed: int, salt: int) -> np.ndarray:
    if k <= 0 or k >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng([seed, salt]).permutation(n)[:k])


def text_task(cfg: DistillRunSpec):
    """The corpus of ``dst-corpus`` (:mod:`fedcal.text.corpora`), subsampled to ``dst-train-size`` /
    ``dst-test-size`` when set."""
    from fedcal.text import (
        TextTask,
        genre_corpus,
        glue_corpus,
        sentiment_corpus,
        synthetic_corpus,
        tweets_corpus,
    )

    name = cfg.dst_corpus
    if name == "sentiment":
        task = sentiment_corpus(data_dir=cfg.data_dir or None)
    elif name == "tweets":
        task = tweets_corpus(data_dir=cfg.data_dir or None)
    elif name == "genre":
        task = genre_corpus(cfg.data_dir or None)
    elif name == "synthetic":
        task = synthetic_corpus(seed=cfg.seed)
    else:
        task = glue_corpus(name)
    tr = _subsample(len(task.train_labels), cfg.dst_train_size, cfg.seed, 0x7A)
    te = _subsample(len(task.test_labels), cfg.dst_test_size, cfg.seed, 0x7E)
    return TextTask(name=task.name, train_texts=tuple(task.train_texts[i] for i in tr),
                    train_labels=task.train_labels[tr], test_texts=tuple(task.test_texts[i] for i in te),
                    test_labels=task.test_labels[te], num_classes=task.num_classes, class_names=task.class_names)


def check_data_sizes(cfg: DistillRunSpec, task) -> None:
    """One :class:`ConfigError` naming the key whose value leaves part of the run empty, once the
    corpus (``task``, after ``dst-train-size`` / ``dst-test-size``) is known: the public anchor set
    (round(``dst-anchor-frac`` · N) texts, :func:`fedcal.text.anchor_split`'s count) must hold at
    least one text and leave one private; every client needs a private text; the test split must
    hold every class (CA is over all classes; ASR needs texts outside ``dst-target``). Checked on
    the server before anything runs, so a run never fails — or worse, averages nothing — later."""
    n = len(task.train_labels)
    anchors = round(cfg.dst_anchor_frac * n)
    if not 0 < anchors < n:
        key = "dst-train-size" if cfg.dst_train_size else "dst-anchor-frac"
        raise ConfigError(f"run-config key {key!r}: dst-anchor-frac = {cfg.dst_anchor_frac:g} of the {n} training "
                          f"texts of dst-corpus={cfg.dst_corpus} gives {anchors} anchors; the distillation needs at "
                          "least one anchor and one private text")
    if cfg.num_clients > n - anchors:
        key = "dst-train-size" if cfg.dst_train_size else "num-clients"
        raise ConfigError(f"run-config key {key!r}: {cfg.num_clients} clients but {n - anchors} private training texts "
                          f"(dst-corpus={cfg.dst_corpus}, {anchors} anchors): every client needs one")
    missing = sorted(set(range(task.num_classes)) - {int(c) for c in np.unique(task.test_labels)})
    if missing:
        key = "dst-test-size" if cfg.dst_test_size else "dst-corpus"
        raise ConfigError(f"run-config key {key!r}: the test split ({len(task.test_labels)} texts) holds no text of "
                          f"class(es) {missing}; CA covers every class and ASR needs texts outside the target")


def backbone_config(cfg: DistillRunSpec):
    """The small backbone's :class:`fedcal.text.BackboneConfig` from the ``dst-bb-*`` keys; for the
    synthetic corpus it pretrains on the toy task's public texts instead of the offline corpora.
    Its seed is fixed (0): runs of every seed share one cached backbone, as they would share a
    downloaded pretrained model."""
    from fedcal.text import BackboneConfig, synthetic_public_texts

    texts = tuple(synthetic_public_texts()) if cfg.dst_corpus == "synthetic" else None
    return BackboneConfig(hidden=cfg.dst_bb_hidden, layers=cfg.dst_bb_layers, heads=cfg.dst_bb_heads,
                          intermediate=cfg.dst_bb_intermediate, max_length=cfg.dst_max_length,
                          vocab_size=cfg.dst_bb_vocab, steps=cfg.dst_bb_steps, texts=texts,
                          batch_size=min(32, 8 if texts else 32))


def backbone_of(cfg: DistillRunSpec) -> str:
    """The folder (or Hub name) of ``dst-backbone``: ``minilm`` — all-MiniLM-L6-v2 copied from the
    installed wheel into the cache (:func:`fedcal.text.pretrained.minilm_dir`); another non-empty
    value — a folder or a Hub name, as given; ``""`` — the small backbone's cached folder (built on
    first use: :func:`fedcal.text.pretrained_backbone`)."""
    from fedcal.text.pretrained import MINILM, minilm_dir

    if cfg.dst_backbone == MINILM:
        return str(minilm_dir())
    if cfg.dst_backbone:
        from fedcal.hub import check_hub_name

        check_hub_name("dst-backbone", cfg.dst_backbone)  # one request at most, not a minute of retries
        return cfg.dst_backbone
    from fedcal.text import pretrained_backbone

    return str(pretrained_backbone(backbone_config(cfg), data_dir=cfg.data_dir or None,
                                   num_threads=torch.get_num_threads()))


# Keys that do not change the data a run derives (so a cached setup can be shared between them).
_DATA_KEYS = ("dst_corpus", "data_dir", "seed", "num_clients", "dst_train_size", "dst_test_size", "dst_anchor_frac",
              "dst_partition", "dst_backdoor_ratio", "dst_poison_frac", "dst_trigger", "dst_target", "dst_backbone",
              "dst_bb_hidden", "dst_bb_layers", "dst_bb_heads", "dst_bb_intermediate", "dst_bb_vocab", "dst_bb_steps",
              "dst_max_length", "dst_lora_layers", "dst_control", "dst_anchor_attack", "dst_anchor_attack_frac")


_DATA_CACHE: OrderedDict[tuple, DistillData] = OrderedDict()  # the last two setups of this process


def data_key(cfg: DistillRunSpec) -> tuple:
    """The values of the keys that determine :class:`DistillData` (runs that differ only in the
    method, the server's rules or the training schedule share one setup)."""
    return tuple((k, getattr(cfg, k)) for k in _DATA_KEYS)


def distill_data(cfg: DistillRunSpec) -> DistillData:
    """:class:`DistillData` of ``cfg``, cached per process on :func:`data_key` (a node builds it
    once, not every round)."""
    key = data_key(cfg)
    if key not in _DATA_CACHE:
        _DATA_CACHE[key] = _build_data(cfg)
        while len(_DATA_CACHE) > 2:
            _DATA_CACHE.popitem(last=False)
    return _DATA_CACHE[key]


def _build_data(cfg: DistillRunSpec) -> DistillData:
    from fedcal.text import (
        anchor_split,
        backbone_tokenizer,
        encode,
        iid_clients,
        label_skew_clients,
        triggered_test_set,
    )
    from fedcal.text.splits import skew_patterns

    task = text_task(cfg)
    check_data_sizes(cfg, task)  # before the backbone (minutes to build): a size that leaves nothing is a config error
    anchors, private = anchor_split(len(task.train_labels), cfg.dst_anchor_frac, cfg.seed, task.train_labels)
    if cfg.dst_partition == "iid":
        shards = iid_clients(task.train_labels, cfg.num_clients, cfg.seed, private)
    else:  # every pattern held by ⌈K / patterns⌉ clients; the first K shards are used
        per = -(-cfg.num_clients // len(skew_patterns(task.num_classes)))
        shards = label_skew_clients(task.train_labels, per, seed=cfg.seed, indices=private)[0][:cfg.num_clients]
    path = backbone_of(cfg)
    tok = backbone_tokenizer(path)
    enc = functools.partial(_encode_batch, cfg, path, task.num_classes, tok)
    trig = triggered_test_set(task.test_texts, task.test_labels, cfg.dst_trigger, cfg.dst_target)
    control = cfg.dst_control.strip()
    ctrl = triggered_test_set(task.test_texts, task.test_labels, control, cfg.dst_target) if control else None
    anchor_texts = [task.train_texts[i] for i in anchors]
    rows = np.zeros(0, np.int64)
    if cfg.dst_anchor_attack == "trigger":  # the adversary's texts in the public pool carry the trigger
        from fedcal.distill.anchor_attack import trigger_anchor_rows
        from fedcal.text.splits import add_trigger

        rows = trigger_anchor_rows(task.train_labels[anchors], cfg.dst_anchor_attack_frac, cfg.dst_target, cfg.seed)
        for i in rows:
            anchor_texts[i] = add_trigger(anchor_texts[i], cfg.dst_trigger)
    return DistillData(
        num_classes=task.num_classes, backbone=path, lora_layers=cfg.dst_lora_layers, train_texts=task.train_texts,
        train_labels=task.train_labels, anchors=anchors, anchor_id=anchor_set_id(anchors), shards=tuple(shards),
        backdoor=backdoor_clients(cfg), anchor_batch=enc(anchor_texts),
        test_batch=enc(list(task.test_texts)), test_labels=task.test_labels, triggered=trig,
        triggered_batch=enc(list(trig.texts)), control=ctrl, control_batch=enc(list(ctrl.texts)) if ctrl else None,
        anchor_attack_rows=rows)


def _encode_batch(cfg: DistillRunSpec, path: str, num_classes: int, tok, texts: list) -> dict:
    """``input_ids`` / ``attention_mask`` of ``texts`` and, under ``dst-lora-layers`` = k > 0,
    ``inputs_embeds``: the frozen lower layers' hidden states, computed once per machine
    (:func:`fedcal.text.frozen.cached_prefix_features`) and fed to the top-layers model by every
    client round and evaluation."""
    from fedcal.text import encode

    batch = encode(tok, texts, max_length=cfg.dst_max_length)
    if cfg.dst_lora_layers:
        from fedcal.text.frozen import cached_prefix_features, tokenizer_id
        from fedcal.local_training import resolve_device

        prefix = frozen_prefix(path, num_classes, str(resolve_device(cfg.device)), cfg.dst_lora_layers)
        batch["inputs_embeds"] = cached_prefix_features(prefix, batch["input_ids"], batch["attention_mask"],
                                                        backbone=path, tokenizer=tokenizer_id(tok),
                                                        max_length=cfg.dst_max_length, batch_size=cfg.eval_batch_size)
    return batch


def inputs_of(batch: dict) -> torch.Tensor:
    """What a model of this run takes from an encoded batch: the cached hidden states
    (``inputs_embeds``) under ``dst-lora-layers`` > 0, else the token ids."""
    return batch["inputs_embeds"] if "inputs_embeds" in batch else batch["input_ids"]


@functools.lru_cache(maxsize=2)
def _classifier_parts(path: str, num_classes: int, device: str, top_layers: int):
    """(frozen prefix or None, the classifier clients and the server wrap), built once per process."""
    from fedcal.config import ConfigError
    from fedcal.text import classifier_from_backbone
    from fedcal.text.frozen import num_layers, split_classifier

    model = classifier_from_backbone(path, num_classes, seed=0).to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if not top_layers:
        return None, model
    n = num_layers(model)
    if top_layers > n:
        raise ConfigError(f"run-config key 'dst-lora-layers': {top_layers} exceeds the backbone's {n} layers")
    return split_classifier(model, top_layers)


def base_classifier(path: str, num_classes: int, device: str, top_layers: int = 0):
    """The frozen classifier every client and the server wrap (built once per process; wrappers
    deep-copy it). Its new head is initialised with seed 0, so all share one starting head. With
    ``top_layers`` = k > 0 it is the top-layers model of :func:`fedcal.text.frozen.split_classifier`
    (the top k layers and the head, fed the cached ``inputs_embeds``), so LoRA lands on those k
    layers only."""
    return _classifier_parts(path, num_classes, device, top_layers)[1]


def frozen_prefix(path: str, num_classes: int, device: str, top_layers: int):
    """The frozen lower layers of :func:`base_classifier` (``top_layers`` > 0): what
    :func:`_encode_batch` caches the hidden states of."""
    return _classifier_parts(path, num_classes, device, top_layers)[0]


_BATCH_CACHE: OrderedDict[tuple, tuple] = OrderedDict()  # a node's encoded shard, per setup and client


def client_batch(cfg: DistillRunSpec, cid: int) -> tuple[dict, torch.Tensor, int]:
    """(encoded texts, labels, poisoned count) of client ``cid``'s private shard, poisoned when it
    is a backdoor client (:func:`fedcal.text.poison`, seeded per client); cached per process."""
    key = (data_key(cfg), cid)
    if key not in _BATCH_CACHE:
        _BATCH_CACHE[key] = _client_batch(cfg, cid)
        while len(_BATCH_CACHE) > 16:
            _BATCH_CACHE.popitem(last=False)
    return _BATCH_CACHE[key]


def _client_batch(cfg: DistillRunSpec, cid: int) -> tuple[dict, torch.Tensor, int]:
    from fedcal.text import poison

    data = distill_data(cfg)
    idx = data.shards[cid]
    texts, labels = [data.train_texts[i] for i in idx], data.train_labels[idx]
    poisoned = 0
    if cid in data.backdoor:
        p = poison(texts, labels, cfg.dst_poison_frac, cfg.dst_trigger, cfg.dst_target, seed=cfg.seed * 1000 + cid)
        texts, labels, poisoned = list(p.texts), p.labels, len(p.indices)
    from fedcal.text import backbone_tokenizer

    batch = _encode_batch(cfg, data.backbone, data.num_classes, backbone_tokenizer(data.backbone), texts)
    return batch, torch.as_tensor(labels, dtype=torch.long), poisoned


def adapted_layers(model) -> list[str]:
    """Names of the modules that carry the ``default`` LoRA adapter (linear and embedding layers)."""
    from fedcal.distill.clients import is_lora_layer

    return [name for name, m in model.named_modules() if is_lora_layer(m)]


def evaluate_backdoor(model, data: DistillData, batch_size: int = 256) -> dict[str, float]:
    """CA on ``data``'s test split and, when it has triggered texts, RA, ASR and the trigger's flip
    rate on its triggered copy (:mod:`fedcal.distill.student` and
    :meth:`fedcal.text.TriggeredSet.flip_rate` have the definitions), and ``control_flip``, the
    same flip rate of the control word (``dst-control``): what prepending an unknown word does to
    the model's predictions, so that flip − control_flip is the backdoor's own part. A model with non-finite
    logits gets NaN for every one of them (:func:`nonfinite_evaluation`): never a number — an
    all-NaN model "predicts" class 0 everywhere, which would read as CA 0.5 and ASR 1.0."""
    from fedcal.distill.student import clean_accuracy, predict

    try:
        return _evaluate_backdoor(model, data, batch_size, clean_accuracy, predict)
    except FloatingPointError:
        return nonfinite_evaluation(data)


def nonfinite_evaluation(data: DistillData) -> dict[str, float]:
    """The metrics :func:`evaluate_backdoor` reports for a model with non-finite logits: all NaN."""
    keys = ("ca", "ra", "asr", "flip") if len(data.triggered.labels) else ("ca",)
    if len(data.triggered.labels) and getattr(data, "control", None) is not None:
        keys += ("control_flip",)
    return {k: float("nan") for k in keys}


def is_finite_evaluation(metrics: dict[str, float]) -> bool:
    """Whether an evaluation of :func:`evaluate_backdoor` measured a model (its CA is a number)."""
    return math.isfinite(metrics.get("ca", float("nan")))


def _evaluate_backdoor(model, data: DistillData, batch_size: int, clean_accuracy, predict) -> dict[str, float]:
    pred = predict(model, inputs_of(data.test_batch), data.test_batch["attention_mask"], batch_size=batch_size)
    out = {"ca": clean_accuracy(pred, torch.as_tensor(data.test_labels))}
    if len(data.triggered.labels):
        pt = predict(model, inputs_of(data.triggered_batch), data.triggered_batch["attention_mask"],
                     batch_size=batch_size).numpy()
        out["ra"] = data.triggered.robust_accuracy(pt)
        out["asr"] = data.triggered.attack_success_rate(pt)
        out["flip"] = data.triggered.flip_rate(pt, pred.numpy())
        if getattr(data, "control", None) is not None:
            pc = predict(model, inputs_of(data.control_batch), data.control_batch["attention_mask"],
                         batch_size=batch_size).numpy()
            out["control_flip"] = data.control.flip_rate(pc, pred.numpy())
    return out


def is_eval_round(cfg: DistillRunSpec, server_round: int) -> bool:
    """Whether CA / RA / ASR / flip are evaluated after ``server_round``: round 0, the last round
    and every ``dst-eval-every``-th."""
    return server_round in (0, cfg.dst_rounds) or server_round % cfg.dst_eval_every == 0


def server_round(model, optimizer, uploads: list, data: DistillData, cfg: DistillRunSpec,
                 server_round: int) -> dict[str, float] | None:
    """RFD-LoRA's server in round ``server_round``: from the valid ``uploads`` (one (anchors ×
    classes) tensor per client, in client order) the consensus of ``cfg``'s aggregator (MoM over
    min(M, n) groups drawn from a generator seeded by the seed and the round) and
    ``dst-distill-steps`` steps of the student on the anchors. Returns the round's metrics
    (``distill_loss``, ``mom_groups``), or None — the student untouched — when there are fewer than
    ``dst-min-replies`` uploads. The live server and :mod:`fedcal.distill.replay` both call this,
    so a replay takes exactly the live server's steps."""
    from fedcal.distill.student import build_consensus, distill_step

    if len(uploads) < cfg.dst_min_replies:
        return None
    gen = torch.Generator().manual_seed(cfg.seed * 100_003 + server_round)
    groups = min(cfg.dst_groups, len(uploads))
    consensus = build_consensus(uploads, clip=cfg.dst_clip, method=cfg.dst_aggregator,
                                num_groups=groups if cfg.dst_aggregator == "mom" else None, generator=gen,
                                prior_correct=cfg.dst_prior_correct, prior_target=cfg.dst_prior_target)
    stats = distill_step(model, inputs_of(data.anchor_batch), data.anchor_batch["attention_mask"], consensus,
                         optimizer, steps=cfg.dst_distill_steps, batch_size=cfg.dst_distill_batch or None,
                         generator=gen, cat=cfg.dst_cat, mmd=cfg.dst_mmd, dis=cfg.dst_dis, t0=cfg.dst_t0,
                         kappa=cfg.dst_kappa, tau=cfg.dst_tau, lam=cfg.dst_lambda, rho=cfg.dst_rho)
    return {"distill_loss": stats.mean_loss, "mom_groups": groups if cfg.dst_aggregator == "mom" else 0}


def student_and_optimizer(base, cfg: DistillRunSpec):
    """The server's student (:func:`fedcal.distill.student.student_model` of ``cfg``) and its AdamW."""
    from fedcal.distill.student import student_model

    model = student_model(base, cfg.dst_student_rank, alpha=cfg.dst_alpha, target_modules=cfg.lora_targets,
                          seed=cfg.seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.dst_distill_lr)
    return model, optimizer
