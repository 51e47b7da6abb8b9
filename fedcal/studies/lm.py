"""``fedcal lm``: the language-model case study (task = lm), τ x seed."""

from __future__ import annotations

import argparse
from typing import Any

from fedcal.studies.common import KEYS_EPILOG
from fedcal.studies.taus import add_case_study_options, case_study


#: SPEC §10's language-model federation: 10 clients, 5 per round, 20 rounds, 5 local AdamW steps
#: of B = 64 windows; `fedcal lm` sets these unless given. β = 2·10⁻⁴, not SPEC's 2·10⁻³ (which is
#: for GPT-2 itself): on the small model benign fine-tuning at 2·10⁻³ raised the held-out perplexity
#: from 102.7 to 126.0 in five rounds, at 5·10⁻⁴ to 113.7 in twenty, at 2·10⁻⁴ it held (docs/lm.md)
LM_PRESET = {"num-clients": 10, "clients-per-round": 5, "num-rounds": 20, "local-steps": 5, "batch-size": 64,
             "optimizer": "adamw", "lr": 2e-4, "weight-decay": 0.01, "eval-every": 5}


def cmd_lm(args: argparse.Namespace) -> int:
    from fedcal.reports.lm import lm_report

    return case_study(args, "lm", LM_PRESET, lambda base: base.lm_corpus, lm_report,
                       "tables: {out}/table.md, {out}/continuations.md\nplots: {out}/reliability.png, {out}/nucleus.png")


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("lm", "TSA on a federated GPT-2 language model: next-token calibration, top-p nuclei, sampled text",
            description="Every τ × seed is one Flower run (task = lm, engine = inprocess unless given; τ = 1 is the "
                        "benign run): SPEC §10's federation (10 Shakespeare roles, 5 per round, 20 rounds, 5 local "
                        "AdamW steps, unless overridden) fine-tunes a small GPT-2 pretrained here on the public "
                        "plays. Resumable. Writes table.md, continuations.md, reliability.png and nucleus.png.",
            epilog=KEYS_EPILOG)
    add_case_study_options(p, "0.5,1,2", "fedcal-lm")
    p.set_defaults(func=cmd_lm)
