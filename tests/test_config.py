import tomllib
from pathlib import Path

import pytest

from fedcal.cli import main as cli_main
from fedcal.config import ConfigError, RunConfig, parse_override

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_run_config_equals_typed_defaults():
    app_cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert RunConfig.from_flower(app_cfg) == RunConfig()
    assert set(app_cfg) == set(RunConfig().to_flower())


def test_paper_defaults():
    cfg = RunConfig()
    assert (cfg.num_clients, cfg.clients_per_round, cfg.num_attackers) == (50, 5, 13)
    assert (cfg.lr, cfg.batch_size, cfg.local_steps, cfg.num_rounds, cfg.dirichlet_alpha) == (0.01, 64, 5, 100, 1.0)


@pytest.mark.parametrize("ratio,k,expected", [(0.25, 50, 13), (0.1, 50, 5), (0.3, 50, 15), (0.2, 50, 10),
                                              (0.4, 50, 20), (0.0, 50, 0), (0.3, 10, 3)])
def test_attacker_count_rounds_half_up(ratio, k, expected):
    assert RunConfig.from_flower({"attacker-ratio": ratio, "num-clients": k, "clients-per-round": 1}).num_attackers == expected


@pytest.mark.parametrize("overrides,key", [
    ({"tau": 0}, "tau"), ({"tau": -1.0}, "tau"), ({"attacker-ratio": 1.0}, "attacker-ratio"),
    ({"attacker-ratio": -0.1}, "attacker-ratio"), ({"num-clients": 4, "clients-per-round": 5}, "clients-per-round"),
    ({"dataset": "imagenet"}, "dataset"), ({"model": "vit"}, "model"), ({"lr": 0}, "lr"),
    ({"num-rounds": "ten"}, "num-rounds"), ({"coupled": "maybe"}, "coupled"), ({"local-steps": 0}, "local-steps"),
    ({"dirichlet-alpha": 0}, "dirichlet-alpha"),
    ({"task": "serve"}, "task"), ({"task": "inference", "num-clients": 8, "inf-f": 4}, "inf-f"),
    ({"inf-attacks": "none,pgd"}, "inf-attacks"), ({"inf-attacks": ""}, "inf-attacks"),
    ({"inf-amp-curve": "1,x"}, "inf-amp-curve"), ({"inf-server-frac": 1.0}, "inf-server-frac"),
    ({"task": "inference", "inf-f": 0}, "inf-f"), ({"agg-adv-epochs": -1}, "agg-adv-epochs"),
])
def test_invalid_values_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        RunConfig.from_flower(overrides)


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match="'temprature'"):
        RunConfig.from_flower({"temprature": 5})


def test_snake_and_kebab_overrides_and_coercion():
    cfg = RunConfig.from_flower({"num-rounds": 3.0}, local_steps=2, **{"coupled": "false"})
    assert cfg.num_rounds == 3 and isinstance(cfg.num_rounds, int)
    assert cfg.local_steps == 2 and cfg.coupled is False


def test_parse_override_toml_values():
    assert parse_override("tau=5") == ("tau", 5)
    assert parse_override("coupled=false") == ("coupled", False)
    assert parse_override('dataset="cifar10"') == ("dataset", "cifar10")
    assert parse_override("dataset=digits") == ("dataset", "digits")
    with pytest.raises(ConfigError):
        parse_override("tau")


def test_hash_ignores_where_it_runs_but_not_what_it_computes():
    a = RunConfig()
    assert a.config_hash() == a.replace(device="cpu", output_dir="elsewhere").config_hash()
    assert a.config_hash() != a.replace(tau=5.0).config_hash()


def test_tsa_hashes_predate_the_inference_keys():
    """Run directories written before the inference task existed keep their names (and are
    recognised as finished): a TSA hash ignores task and the inference-only keys."""
    cfg = RunConfig.from_flower({"dataset": "cifar10", "model": "cnn", "lr": 0.05, "eval-every": 10, "tau": 0.2})
    assert cfg.default_run_name() == "cifar10-cnn-fedavg-tsa0.2-s0-df591996"  # a directory made by the older code
    assert cfg.config_hash() == cfg.replace(inf_f=2, agg_epochs=3).config_hash()
    inf = cfg.replace(task="inference", num_clients=17)
    assert inf.config_hash() != inf.replace(inf_f=2).config_hash()
    assert inf.config_hash() == inf.replace(inf_timeout=5.0, inf_query_batch=7).config_hash()
    assert inf.default_run_name().startswith("cifar10-cnn-inference-n17-f4-s0-")


def test_cli_rejects_bad_config_before_running(capsys):
    assert cli_main(["run", "tau=0", "dataset=digits"]) == 2
    assert "'tau'" in capsys.readouterr().err
    assert cli_main(["run", "clients-per-round=60"]) == 2
    assert "'clients-per-round'" in capsys.readouterr().err
    assert cli_main(["run", "bogus=1"]) == 2
    assert "'bogus'" in capsys.readouterr().err


def test_missing_dataset_fails_at_once_naming_the_key(tmp_path, monkeypatch, capsys):
    # No npz in data-dir and (here) no network: the CLI stops before starting Ray.
    import fedcal.data.datasets as dsmod

    def offline(*a, **k):
        raise OSError("network unreachable")

    monkeypatch.setattr("torchvision.datasets.MNIST.__init__", offline)
    dsmod._load_cached.cache_clear()
    # output-dir in tmp_path: a finished run of this config under the working directory's runs/
    # would be skipped without loading anything
    assert cli_main(["run", "dataset=mnist", f"data-dir={str(tmp_path)!r}".replace("'", '"'),
                     f"output-dir={str(tmp_path / 'runs')!r}".replace("'", '"')]) == 2
    assert "'dataset'" in capsys.readouterr().err


def test_strategy_parameters_are_checked_against_the_round_size():
    with pytest.raises(ConfigError, match="'krum-f'"):
        RunConfig.from_flower({"strategy": "multikrum", "krum-f": 3})  # needs M >= f + 3 = 6
    with pytest.raises(ConfigError, match="'trim-f'"):
        RunConfig.from_flower({"strategy": "trimmed_mean", "trim-f": 3})
    with pytest.raises(ConfigError, match="'strategy'"):
        RunConfig.from_flower({"strategy": "krum"})
    assert RunConfig.from_flower({"strategy": "multikrum"}).krum_f == 1


def test_every_key_is_documented():
    doc = (ROOT / "docs" / "configuration.md").read_text()
    assert [k for k in RunConfig().to_flower() if f"`{k}`" not in doc] == []
