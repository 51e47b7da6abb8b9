"""An attack is a plug-in: the toy attack of tests/toy_attack.py, defined outside ``fedcal/``,
registered with the catalogue, is a value of the ``attack`` key and poisons a digits run through
``fedcal run`` and the in-process engine; its own key (``mirror-scale``, declared in its Component) is
accepted, validated, hashed only when set and handed to its crafting function.

Its registration lasts for this module's tests only (the catalogue's registry is copied before and
put back after), so that the other tests see fedcal's attacks alone.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from fedcal.config import RunConfig
from fedcal.results import POISONING_FILE, load_metrics, run_dir_for

from tests.plugin_harness import registered


@pytest.fixture(scope="module", autouse=True)
def toy():
    import toy_attack

    with registered("attack", toy_attack.MIRROR):
        yield toy_attack


def test_the_attack_reflects_the_honest_median_by_hand(toy):
    honest = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]])  # coordinate-wise medians 3 and 2
    assert toy.mirror_median(honest, 2).tolist() == [[-3.0, -2.0], [-3.0, -2.0]]
    assert toy.mirror_median(honest, 1, scale=0.5).tolist() == [[-1.5, -1.0]]


def test_the_plugins_own_key_is_a_run_config_key_read_only_with_its_attack():
    from fedcal.config import setting_of

    cfg = RunConfig.from_flower({"attack": "mirror_median", "mirror-scale": 2.5})
    assert cfg.mirror_scale == 2.5 and cfg.to_flower()["mirror-scale"] == 2.5
    assert RunConfig.from_flower({"attack": "mirror_median"}).mirror_scale == 1.0  # its declared default
    s = setting_of("mirror-scale")
    assert (s.type, s.range_text(), s.only_with_text()) == ("float", "a finite number > 0",
                                                            "attack names mirror_median")
    assert s.read_by(cfg) and not s.read_by(RunConfig(attack="alie"))


@pytest.mark.parametrize("value, message", [
    (0, "run-config key 'mirror-scale' must be a finite number > 0, got 0.0"),
    ("inf", "run-config key 'mirror-scale' must be a finite number > 0, got inf"),
    ("big", "run-config key 'mirror-scale' must be a number, got 'big'"),
])
def test_a_bad_value_of_the_plugins_key_fails_in_one_line(capsys, value, message):
    from fedcal.cli import main

    assert main(["run", "--no-progress", "attack=mirror_median", "dataset=digits", f"mirror-scale={value}"]) == 2
    err = capsys.readouterr().err
    assert err == f"fedcal: error: {message}\n", err


def test_the_plugins_key_counts_in_the_run_hash_only_when_set_and_its_attack_chosen():
    from fedcal.results.identity import config_hash

    def h(**kw):
        return config_hash(RunConfig(dataset="digits", **kw))

    assert h(attack="mirror_median") == h(attack="mirror_median", mirror_scale=1.0)  # at its default: not hashed
    assert h(attack="mirror_median") != h(attack="mirror_median", mirror_scale=2.0)
    assert h(attack="alie") == h(attack="alie", mirror_scale=2.0)  # another attack's run does not read it
    # fedcal's own attacks' keys keep their hashes with the plug-in registered (the value computed before
    # those keys moved from fedcal/config/train.py into their components)
    assert h(attack="tsa", tau=5.0, tsa_blend=0.5) == "e6e15af7bb7e"


def test_the_plugins_key_reaches_its_crafting_function():
    """The colluders (the crafting step both engines share) hand the run's mirror-scale to the attack."""
    from fedcal.tasks.poisoning import Colluders

    cfg = RunConfig.from_flower({"attack": "mirror_median", "mirror-scale": 2.0, "dataset": "digits",
                                 "num-clients": 5, "clients-per-round": 5, "attacker-ratio": 0.4})
    colluders = Colluders(cfg)
    assert colluders.params == {"scale": 2.0}
    honest = [(0, torch.tensor([1.0, 2.0], dtype=torch.float64)), (1, torch.tensor([3.0, 4.0], dtype=torch.float64)),
              (2, torch.tensor([5.0, 0.0], dtype=torch.float64))]  # coordinate-wise medians 3 and 2
    crafted = colluders.craft(1, honest, [(10, 3), (11, 4)])
    assert crafted.tolist() == [[-6.0, -4.0], [-6.0, -4.0]]  # -2 * the median, by hand


def test_the_plugin_attack_is_an_attack_value_and_poisons_a_digits_run(tmp_path):
    from fedcal.cli import main

    overrides = {"attack": "mirror_median", "mirror-scale": 2.0, "strategy": "fedavg", "dataset": "digits",
                 "num-rounds": 2,
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
