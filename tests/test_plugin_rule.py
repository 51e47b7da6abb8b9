"""A rule is a plug-in: the toy rule of tests/toy_rule.py, defined outside ``fedcal/``, registered
with the catalogue, is a value of the ``strategy`` key and aggregates a digits run through
``fedcal run`` and the in-process engine.

Its registration lasts for this module's tests only (the catalogue's registry is copied before and
put back after), so that the other tests see fedcal's rules alone.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from fedcal.config import RunConfig
from fedcal.results import AUDIT_FILE, load_metrics, run_dir_for

from tests.plugin_harness import registered


@pytest.fixture(scope="module", autouse=True)
def toy():
    import toy_rule

    with registered("rule", toy_rule.CLOSEST_PAIR):
        yield toy_rule


def test_the_rule_means_the_closest_pair_by_hand(toy):
    rule = toy.ClosestPairMean()
    updates = torch.tensor([[0.0, 0.0], [1.0, 0.0], [10.0, 10.0], [1.5, 0.0]])  # rows 1 and 3: 0.5 apart
    aggregate, weights = rule.aggregate_updates(1, [11, 12, 13, 14], updates, torch.ones(4))
    assert aggregate.tolist() == [1.25, 0.0]
    assert weights.tolist() == [0.0, 1.0, 0.0, 1.0]


def test_the_plugin_rule_is_a_strategy_value_and_runs_a_digits_run(tmp_path, capsys):
    from fedcal.cli import main

    overrides = {"strategy": "closest_pair", "dataset": "digits", "num-rounds": 2, "num-clients": 6,
                 "clients-per-round": 4, "attack": "none", "engine": "inprocess", "output-dir": str(tmp_path)}
    assert main(["run", "--no-progress", *(f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}"
                                           for k, v in overrides.items())]) == 0
    run_dir = run_dir_for(RunConfig.from_flower(overrides))
    assert (run_dir / "DONE").exists()
    assert sorted(load_metrics(run_dir)["round"].unique().tolist()) == [0, 1, 2]
    audit = pd.read_csv(run_dir / AUDIT_FILE)
    # each round aggregated exactly two of its four replies, with equal weights
    kept = audit[audit["weight"] > 0].groupby("round")["weight"]
    assert kept.count().tolist() == [2, 2] and audit.groupby("round").size().tolist() == [4, 4]
    assert ((kept.max() - kept.min()) < 1e-9).all()
    with pytest.raises(Exception, match="closest_pair"):  # an unknown name lists the plug-in among the choices
        RunConfig.from_flower({"strategy": "closest_pairs"})
