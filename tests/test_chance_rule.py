"""The chance rule in every table builder: a run whose model is at chance is no result of its setting. Every
builder that averages over seeds leaves it out of the means, counts only the seeds it averaged and names the
one left out with its reason; the case-study builders whose metric at chance is itself the measured effect
(the RFD-LoRA tables, the LM table) keep it in and mark it. Each builder is given the same three seeds,
seed 2 at chance (9.80 %), and checked against the mean of seeds 0 and 1 worked out by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from fedcal.config import RunConfig
from fedcal.reports.chance import MARK

ACC = (0.60, 0.64, 0.098)  # seeds 0, 1 and 2; seed 2 at chance
SOUND = (0.60 + 0.64) / 2
NAMED = "seed 2: at chance (9.80 % †)"


def _taus():
    from fedcal.reports.taus import seed_summary, seeds_markdown

    t = pd.DataFrame([{"strategy": "fedavg", "tau": 5.0, "run": "TSA τ=5", "accuracy_%": 100 * a, "ece_%": 5.0,
                       "sece_%": -5.0, "brier": 0.5, "nll": 1.0, "run_id": f"r{s}", "seed": s,
                       "chance_level": s == 2, "d_accuracy": 0.0, "d_sece": -3.0} for s, a in enumerate(ACC)])
    agg = seed_summary(t)
    return agg["accuracy_%_mean"].iloc[0] / 100, agg, seeds_markdown(agg)


def _sweeps():
    from fedcal.reports.sweeps import seed_markdown, seed_summary

    base = RunConfig().to_flower()
    cells = pd.DataFrame([{**base, "tau": 5.0, "seed": s, "run_id": f"r{s}", "accuracy": a, "ece": 0.05,
                           "sece": -0.05, "brier": 0.5, "nll": 1.0, "chance_level": s == 2} for s, a in enumerate(ACC)])
    agg = seed_summary(cells, pd.DataFrame(), ["tau", "seed"])
    return agg["accuracy_mean"].iloc[0], agg, seed_markdown(agg)


def _robustness():
    from fedcal.reports.robustness import robustness_markdown, summarise_robustness

    t = pd.DataFrame([{"setting": "federated", "dataset": "cifar10", "model": "cnn", "strategy": "fedavg",
                       "training": "benign", "tau": 30.0, "seed": s, "accuracy": a, "ece": 0.3, "sece": -0.3,
                       "fgsm_acc": 0.1, "run": f"r{s}", "chance_level": s == 2} for s, a in enumerate(ACC)])
    agg = summarise_robustness(t)
    return agg["accuracy_mean"].iloc[0], agg, robustness_markdown(agg)


def _defense():
    from fedcal.reports.defense import summarise, to_markdown

    rows = pd.DataFrame([{"dataset": "cifar10", "strategy": "fedavg", "tau": 1.0, "attacker_ratio": 0.25,
                          "dirichlet_alpha": 1.0, "tsa_step_frac": 1.0, "tsa_blend": 1.0, "seed": s, "accuracy": a,
                          "ece": 0.05, "sece": 0.01, "detection": float("nan"), "false_positive": 0.0,
                          "chance_level": s == 2} for s, a in enumerate(ACC)])
    agg = summarise(rows)
    return agg["accuracy"].iloc[0] / 100, agg, to_markdown(agg)


@pytest.mark.parametrize("build", [_taus, _sweeps, _robustness, _defense], ids=lambda f: f.__name__.strip("_"))
def test_a_builder_over_seeds_leaves_a_chance_level_run_out_of_its_means_and_names_it(build):
    mean, agg, md = build()
    assert mean == pytest.approx(SOUND)  # not (0.60 + 0.64 + 0.098) / 3
    assert int(agg["seeds"].iloc[0]) == 2 and int(agg["chance_level"].iloc[0]) == 1
    assert agg["left_out"].iloc[0] == NAMED
    assert "| 2 |" in md and NAMED in md  # the page says the count averaged and who was left out, and why


def test_the_case_study_builders_mark_a_chance_level_run():
    from fedcal.reports.distill import _summary
    from fedcal.reports.lm import lm_table

    runs = pd.DataFrame([{"dst-method": "rfd", "seed": s, "run_id": f"r{s}", "ca": a, "ra": a, "asr": 0.0,
                          "flip": 0.0, "control_flip": 0.0, "chance_level": s == 2} for s, a in enumerate(ACC)])
    assert MARK in _summary(runs, ["dst-method"]).iloc[0].to_string()
    finals = pd.DataFrame([{"tau_eff": 2.0, "seed": s, "run_id": f"r{s}", "accuracy": a,
                            "chance_level": s == 2} for s, a in enumerate(ACC)])
    assert MARK in lm_table(finals).iloc[0]["accuracy %"]
