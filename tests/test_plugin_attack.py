"""An attack is a plug-in: the toy attack of tests/toy_attack.py, defined outside ``fedcal/``,
registered with the catalogue, is a value of the ``attack`` key and poisons a digits run through
``fedcal run`` and the in-process engine.

Its registration lasts for this module's tests only (the catalogue's registry is copied before and
put back after), so that the other tests see fedcal's attacks alone.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from fedcal import catalogue
from fedcal.config import RunConfig
from fedcal.results import POISONING_FILE, load_metrics, run_dir_for


@pytest.fixture(scope="module", autouse=True)
def toy():
    import toy_attack

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(catalogue._REGISTRY, "attack", dict(catalogue.components("attack")))
        catalogue.register(toy_attack.MIRROR)
        yield toy_attack


def test_the_attack_reflects_the_honest_median_by_hand(toy):
    honest = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]])  # coordinate-wise medians 3 and 2
    assert toy.mirror_median(honest, 2).tolist() == [[-3.0, -2.0], [-3.0, -2.0]]


def test_the_plugin_attack_is_an_attack_value_and_poisons_a_digits_run(tmp_path):
    from fedcal.cli import main

    overrides = {"attack": "mirror_median", "strategy": "fedavg", "dataset": "digits", "num-rounds": 2,
                 "num-clients": 6, "clients-per-round": 6, "attacker-ratio": 0.34, "engine": "inprocess",
                 "output-dir": str(tmp_path)}
    assert main(["run", "--no-progress", *(f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}"
                                           for k, v in overrides.items())]) == 0
    run_dir = run_dir_for(RunConfig.from_flower(overrides))
    assert (run_dir / "DONE").exists()
    assert sorted(load_metrics(run_dir)["round"].unique().tolist()) == [0, 1, 2]
    rows = pd.read_csv(run_dir / POISONING_FILE)
    # the two attackers' replies of each round were crafted from the four honest updates
    assert rows.groupby("round").size().tolist() == [2, 2]
    assert set(rows["attack"]) == {"mirror_median"} and rows["crafted"].all() and (rows["honest"] == 4).all()
    with pytest.raises(Exception, match="mirror_median"):  # an unknown name lists the plug-in among the choices
        RunConfig.from_flower({"attack": "mirror_medians"})
