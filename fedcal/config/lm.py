"""The ``lm`` group (TSA on a federated GPT-2 language model, SPEC §10) and the ``lm`` task's
configuration facts. The task also reads the train and defense groups (rounds, attackers, tau,
local steps, strategy) and the common num-clients, batch-size, lr, weight-decay, optimizer, seed,
n-bins."""

from __future__ import annotations

from fedcal import catalogue
from fedcal.config.schema import RunConfig, Task, check, group, register_task, setting

__all__ = ["LM_CORPORA", "LM_PARTITIONS", "LM_TOKENIZERS"]

# fedcal.lm.corpus and fedcal.lm.model read these.
LM_CORPORA = ("shakespeare", "wikitext2", "synthetic")
LM_PARTITIONS = ("role", "play")
LM_TOKENIZERS = ("bpe", "gpt2")


@group("lm", "TSA on a federated GPT-2 language model (task = lm, SPEC §10)")
class LM:
    lm_corpus: str = setting("shakespeare", "text: shakespeare (../shared/data, one client per role), "
                                            "wikitext2 (Hugging Face datasets, networked), synthetic",
                             choices=LM_CORPORA)
    lm_partition: str = setting("role", "shakespeare's clients: the largest speaking roles (LEAF) or plays",
                                choices=LM_PARTITIONS)
    lm_model: str = setting("", '"" = a small GPT-2 pretrained here on the public text (lm-* size keys, '
                                "cached); else a folder or a Hub name (gpt2, networked)")
    lm_tokenizer: str = setting("bpe", "small model's tokenizer: bpe (trained on the public text, lm-vocab "
                                       "tokens) or gpt2 (GPT-2's exact BPE)", choices=LM_TOKENIZERS)
    lm_vocab: int = setting(4096, "small model: BPE vocabulary size", ge=16)
    lm_layers: int = setting(2, "small model: transformer layers", ge=1)
    lm_hidden: int = setting(128, "small model: hidden size", ge=1)
    lm_heads: int = setting(4, "small model: attention heads (divide lm-hidden)", ge=1)
    lm_context: int = setting(64, "tokens per training / evaluation window (and the small model's "
                                  "positions)", ge=8)
    lm_pretrain_steps: int = setting(1500, "small model: central pretraining steps on the public text "
                                           "(cached)", ge=0, note="0 = random init")
    lm_top_p: float = setting(0.9, "p of top-p (nucleus) sampling and of the measured nucleus size", gt=0,
                              le=1)
    lm_prompts: str = setting("", 'prompts of the sampled continuations, separated by "|"; "" = the first '
                                  "lm-prompt-words words of lm-prompt-count held-out speeches")
    lm_prompt_count: int = setting(8, "prompts taken from held-out text (lm-prompts empty)", ge=1)
    lm_prompt_words: int = setting(8, "words per prompt taken from held-out text", ge=1)
    lm_gen_tokens: int = setting(40, "tokens sampled per continuation", ge=1)
    lm_samples: int = setting(4, "continuations sampled per prompt", ge=1)
    lm_eval_windows: int = setting(0, "held-out windows evaluated (the first ones)", ge=0, note="0 = all")

# ---------------------------------------------------------------------- the lm task
def _lm(c: RunConfig) -> None:
    root_set = catalogue.needing("rule", "root-set")
    check("strategy", c.strategy not in root_set, c.strategy,
          "needs a labelled root set of images; the lm task has none (use "
          + ", ".join(n for n in catalogue.names("rule") if n not in root_set) + ")")
    check("augment", c.augment == "none", c.augment, "is an image augmentation; the lm task takes none")
    check("lm-heads", c.lm_hidden % c.lm_heads == 0, c.lm_heads, f"must divide lm-hidden ({c.lm_hidden})")
    temperature = catalogue.needing("attack", "loss-temperature")  # what the lm clients' step implements
    check("attack", c.attack == "none" or c.attack in temperature, c.attack,
          f"must be none or {' or '.join(temperature)} for the lm task")


def _run_name(cfg: RunConfig, short_hash: str) -> str:
    what = catalogue.get("attack", cfg.attack).run_label(cfg, detail=False)  # TSA: tsa<tau>
    return f"lm-{cfg.lm_corpus}-{cfg.strategy}-{what}-s{cfg.seed}-{short_hash}"


MESSAGE_TYPE = "train.lm"  # a client's round on next-token windows (fedcal.tasks.lm sends it)

TASK = register_task(Task(
    "lm", "fedcal.tasks.lm:run_lm",
    summary="TSA on a federated GPT-2 language model (Shakespeare roles): calibration drives top-p decoding",
    groups=("train", "defense", "lm"), run_name=_run_name, rules=(_lm,),
    schedule=("accuracy", "num_rounds", "eval_every"), handlers={MESSAGE_TYPE: "fedcal.tasks.lm:train_lm"},
    rounds=lambda cfg: cfg.num_rounds, report="fedcal.reports.lm:lm_report", extras=("text",)))
