import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fedcal.cli import main as cli_main
from fedcal.config import ConfigError, RunConfig, describe, groups, parse_override, setting_of

GROUPS = groups()
from fedcal.results import config_hash, default_run_name

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_run_config_equals_typed_defaults():
    """The Flower App's defaults are RunConfig's but for FLOWER_APP_DEFAULTS: a plain `flwr run .`
    on Flower's default local federation (2 SuperNodes), on digits (no download)."""
    from fedcal.config.pyproject import FLOWER_APP_DEFAULTS

    app_cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert FLOWER_APP_DEFAULTS == {"dataset": "digits", "num-clients": 2, "clients-per-round": 2, "num-rounds": 3}
    assert RunConfig.from_flower(app_cfg) == RunConfig().replace(**FLOWER_APP_DEFAULTS)
    assert {k: v for k, v in app_cfg.items() if v != RunConfig().to_flower()[k]} == FLOWER_APP_DEFAULTS
    assert set(app_cfg) == set(RunConfig().to_flower())


def test_the_committed_pyproject_block_is_the_generated_one():
    """`python -m fedcal.config --check-pyproject` in a fresh process (built-in groups only) passes
    on the committed file; its keys are to_flower()'s, in that order."""
    out = subprocess.run([sys.executable, "-m", "fedcal.config", "--check-pyproject"], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    app_cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    builtin = [k for k in RunConfig().to_flower() if k in app_cfg]  # a plug-in test's group may be registered here
    assert list(app_cfg) == builtin


def _pyproject(block: str) -> str:
    return f'[project]\nname = "x"\n\n[tool.flwr.app.config]\n{block}\n[tool.other]\nkeep = "me"  # as is\n'


def test_write_pyproject_rewrites_only_the_block_and_check_names_what_is_stale(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text(_pyproject('# --- a hand-written block\ntau = 5.0\nold-key = 1\nseed = 0\n'))
    run = lambda *a: subprocess.run([sys.executable, "-m", "fedcal.config", *a, str(path)], cwd=ROOT,  # noqa: E731
                                    capture_output=True, text=True)
    out = run("--check-pyproject")
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1
    assert "unknown old-key" in out.stderr and "tau = 5.0 (default 1.0)" in out.stderr
    assert "missing dataset" in out.stderr and "--write-pyproject" in out.stderr
    assert run("--write-pyproject").returncode == 0
    text = path.read_text()
    assert text.startswith('[project]\nname = "x"\n\n[tool.flwr.app.config]\n# Generated')
    assert text.endswith('\n\n[tool.other]\nkeep = "me"  # as is\n')  # the rest as it was
    parsed = tomllib.loads(text)
    from fedcal.config.pyproject import FLOWER_APP_DEFAULTS

    assert RunConfig.from_flower(parsed["tool"]["flwr"]["app"]["config"]) == RunConfig().replace(**FLOWER_APP_DEFAULTS)
    assert parsed["tool"]["other"] == {"keep": "me"}
    assert run("--check-pyproject").returncode == 0
    assert run("--write-pyproject").stdout.strip().endswith("already current") and path.read_text() == text
    path.write_text(text.replace("\nseed = 0\n", "\n").replace("num-rounds = 3", "num-rounds = 3\nseed = 0"))
    out = run("--check-pyproject")  # the same keys and values in another order
    assert out.returncode == 1 and "order" in out.stderr


def test_the_committed_run_config_stub_is_the_generated_one():
    """`python -m fedcal.config --check-stub` in a fresh process (built-in groups only) passes on
    the committed stub."""
    out = subprocess.run([sys.executable, "-m", "fedcal.config", "--check-stub"], cwd=ROOT, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr


def _stub_class():
    import ast

    tree = ast.parse((ROOT / "fedcal" / "config" / "run_config.pyi").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert cls.name == "RunConfigFields"
    return cls


def test_the_stub_lists_every_field_with_its_type_and_every_property_with_its_return_type():
    """Read back from the committed file: exactly field_names() of the built-in groups, each annotated with the Python type of its setting
    and of its default; the groups' properties with their return annotations."""
    import ast
    import json

    cls = _stub_class()
    fields = {n.target.id: ast.unparse(n.annotation) for n in cls.body if isinstance(n, ast.AnnAssign)}
    builtin = json.loads(subprocess.run(  # a fresh process: the built-in groups only (a plug-in test's may be here)
        [sys.executable, "-c", "import json, fedcal.config as c; print(json.dumps(c.field_names()))"], cwd=ROOT,
        capture_output=True, text=True, check=True).stdout)
    assert len(fields) == sum(isinstance(n, ast.AnnAssign) for n in cls.body)  # no field twice
    assert sorted(fields) == sorted(builtin) and len(builtin) > 150
    for name, annotation in fields.items():
        assert annotation == setting_of(name).type and type(setting_of(name).default).__name__ == annotation, name
    props = {n.name: ast.unparse(n.returns) for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert props["distill_ranks"] == "tuple[int, ...]" and props["num_backdoor_clients"] == "int"
    assert props["num_attackers"] == "int" and props["lora_targets"] == "tuple[str, ...]"
    for name, annotation in props.items():  # each is RunConfig's property, of the value it returns
        value = getattr(RunConfig(), name)
        assert isinstance(value, eval(annotation.split("[")[0])), name


def test_stale_stub_says_what_to_run(tmp_path):
    path = tmp_path / "run_config.pyi"
    run = lambda *a: subprocess.run([sys.executable, "-m", "fedcal.config", *a, str(path)], cwd=ROOT,  # noqa: E731
                                    capture_output=True, text=True)
    out = run("--check-stub")
    assert out.returncode == 1 and out.stderr.strip().endswith("missing: run python -m fedcal.config --write-stub")
    assert run("--write-stub").returncode == 0 and run("--check-stub").returncode == 0
    path.write_text(path.read_text().replace("    tau: float\n", "    tau: str\n"))
    out = run("--check-stub")
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1 and "not generated" in out.stderr
    assert run("--write-stub").stdout.strip().endswith("written") and run("--check-stub").returncode == 0


def test_a_wrong_key_or_type_is_a_type_error(tmp_path):
    """mypy (where installed) on code reading a RunConfig: a mistyped key and a value used as the
    wrong type are errors, the right reads (a field, a group's property, a method) are not."""
    pytest.importorskip("mypy")
    probe = tmp_path / "probe.py"
    probe.write_text("from fedcal.config import RunConfig\n\n\n"
                     "def reads(cfg: RunConfig) -> None:\n"
                     "    rounds: int = cfg.num_rounds\n"
                     "    ranks: tuple[int, ...] = cfg.distill_ranks\n"
                     "    again: RunConfig = cfg.replace(tau=2.0)\n"
                     "    cfg.num_roundz\n"
                     "    name: int = cfg.dataset\n")
    out = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports",
                          "--no-incremental", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary",
                          str(probe)], cwd=ROOT, capture_output=True, text=True)
    errors = [line.split(": error: ", 1)[1] for line in out.stdout.splitlines() if ": error: " in line]
    assert [line.split(":")[1] for line in out.stdout.splitlines() if ": error: " in line] == ["8", "9"], out.stdout
    assert '"RunConfig" has no attribute "num_roundz"' in errors[0]
    assert 'expression has type "str", variable has type "int"' in errors[1]


@pytest.mark.parametrize("value,type_name", [
    ("plain", "str"), ('say "hi" \\ C:\\x', "str"), ("σ = 0.1, τ ≥ 1\tand\n", "str"), ("", "str"),
    (0.01, "float"), (1e-05, "float"), (1.0, "float"), (3e38, "float"), (float("inf"), "float"), (-0.0, "float"),
    (0, "int"), (-7, "int"), (True, "bool"), (False, "bool")])
def test_every_default_survives_its_toml_form(value, type_name):
    from fedcal.config.pyproject import toml_value

    back = tomllib.loads(f"k = {toml_value(value, type_name)}")["k"]
    assert back == value and type(back) is type(value)


def test_paper_defaults():
    cfg = RunConfig()
    assert (cfg.num_clients, cfg.clients_per_round, cfg.num_attackers) == (50, 5, 13)
    assert (cfg.lr, cfg.batch_size, cfg.local_steps, cfg.num_rounds, cfg.dirichlet_alpha) == (0.01, 64, 5, 100, 1.0)


@pytest.mark.parametrize("ratio,k,expected", [(0.25, 50, 13), (0.1, 50, 5), (0.3, 50, 15), (0.2, 50, 10),
                                              (0.4, 50, 20), (0.0, 50, 0), (0.3, 10, 3)])
def test_attacker_count_rounds_half_up(ratio, k, expected):
    assert RunConfig.from_flower({"attacker-ratio": ratio, "num-clients": k, "clients-per-round": 1}).num_attackers == expected


@pytest.mark.parametrize("overrides,key", [
    ({"tau": 0}, "tau"), ({"tau": -1.0}, "tau"), ({"attacker-ratio": 1.5}, "attacker-ratio"),
    ({"attacker-ratio": -0.1}, "attacker-ratio"), ({"num-clients": 4, "clients-per-round": 5}, "clients-per-round"),
    ({"dataset": "imagenet"}, "dataset"), ({"model": "vit"}, "model"), ({"lr": 0}, "lr"),
    ({"num-rounds": "ten"}, "num-rounds"), ({"coupled": "maybe"}, "coupled"), ({"local-steps": 0}, "local-steps"),
    ({"dirichlet-alpha": 0}, "dirichlet-alpha"),
    ({"task": "serve"}, "task"), ({"task": "inference", "num-clients": 8, "inf-f": 4}, "inf-f"),
    ({"inf-attacks": "none,pgd"}, "inf-attacks"), ({"inf-attacks": ""}, "inf-attacks"),
    ({"inf-amp-curve": "1,x"}, "inf-amp-curve"), ({"inf-server-frac": 1.0}, "inf-server-frac"),
    ({"task": "inference", "inf-f": 0}, "inf-f"), ({"agg-adv-epochs": -1}, "agg-adv-epochs"),
    # accepted before, and nothing trained (a norm bound below float32's resolution of the weights) or a
    # round never ended (10^8 centred-clipping passes); an empty pre-aggregation step was skipped
    ({"pre-aggregation": "clip", "clip-c": 1e-300}, "clip-c"),
    ({"pre-aggregation": "cclip", "cclip-tau": 1e-300}, "cclip-tau"),
    ({"pre-aggregation": "cclip", "cclip-iterations": 10**8}, "cclip-iterations"),
    ({"pre-aggregation": "nnm,,clip"}, "pre-aggregation"), ({"pre-aggregation": ",nnm"}, "pre-aggregation"),
    ({"calibration-metrics": "mce,ece2"}, "calibration-metrics"), ({"calibration-metrics": "all,mce"}, "calibration-metrics"),
    ({"calibration-bootstrap": -1}, "calibration-bootstrap"), ({"fed-eval-clients": 51}, "fed-eval-clients"),
    ({"fed-eval-clients": -1}, "fed-eval-clients"),
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
    assert config_hash(a) == config_hash(a.replace(device="cpu", output_dir="elsewhere"))
    assert config_hash(a) != config_hash(a.replace(tau=5.0))


def test_tsa_hashes_predate_the_inference_keys():
    """Run directories written before the inference task existed keep their names (and are
    recognised as finished): a TSA hash ignores task and the inference-only keys."""
    cfg = RunConfig.from_flower({"dataset": "cifar10", "model": "cnn", "lr": 0.05, "eval-every": 10, "tau": 0.2})
    assert default_run_name(cfg) == "cifar10-cnn-fedavg-tsa0.2-s0-df591996"  # a directory made by the older code
    assert config_hash(cfg) == config_hash(cfg.replace(inf_f=2, agg_epochs=3))
    inf = cfg.replace(task="inference", num_clients=17)
    assert config_hash(inf) != config_hash(inf.replace(inf_f=2))
    assert config_hash(inf) == config_hash(inf.replace(inf_timeout=5.0, inf_query_batch=7))
    assert default_run_name(inf).startswith("cifar10-cnn-inference-n17-f4-s0-")


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


# ---------------------------------------------------------------------- tasks, groups, declarations
def test_task_train_is_the_default_and_tsa_a_legacy_alias():
    """Old run directories' config.json say task = "tsa": they load, as the train task, with
    the hash and run name they were written under."""
    assert RunConfig().task == "train"
    legacy = RunConfig.from_flower({"task": "tsa", "tau": 0.2, "dataset": "cifar10", "model": "cnn", "lr": 0.05,
                                    "eval-every": 10})
    assert legacy.task == "train" and legacy == legacy.replace(task="train")
    assert RunConfig(task="tsa") == RunConfig()
    assert default_run_name(legacy) == "cifar10-cnn-fedavg-tsa0.2-s0-df591996"
    assert RunConfig().to_flower()["task"] == "train"


def test_every_field_is_declared_with_a_group_and_help():
    infos = describe()
    assert sorted(i.key for i in infos) == sorted(RunConfig().to_flower())
    assert {i.group for i in infos} <= set(GROUPS)
    assert all(i.help for i in infos)
    assert [i.group for i in infos] == sorted((i.group for i in infos), key=list(GROUPS).index)  # grouped
    by_key = {i.key: i for i in infos}
    assert by_key["krum-f"][:5] == ("krum-f", 1, "int", "defense", ">= 0")
    assert by_key["attacker-ratio"].range == "in [0, 1]"
    assert by_key["tau"].range == "a finite number > 0"
    assert by_key["inf-server-frac"].range == "in (0, 1)"
    assert by_key["krum-m"].range == ">= 0 (0 = n - f)"
    assert by_key["dataset"].range.startswith("one of digits, mnist")
    assert by_key["task"].range == "one of train, inference, distill, lm, detect"
    assert [i.key for i in describe("defense")] == ["strategy", "krum-f", "krum-m", "trim-f", "root-size",
                                                    "mom-groups", "foolsgold-kappa", "calguard-kappa",
                                                    "calguard-window", "calguard-strikes", "calguard-mode",
                                                    "calguard-cusum", "calguard-cusum-signal", "calguard-cusum-k",
                                                    "calguard-cusum-h-low", "calguard-cusum-h-high", "pre-aggregation", "pre-f",
                                                    "clip-c", "cclip-tau", "cclip-iterations", "calguard-signal"]
    assert setting_of("inf-timeout").hashed is False and setting_of("tau").hashed is True


@pytest.mark.parametrize("key,value,message", [
    ("tau", float("inf"), "run-config key 'tau' must be a finite number > 0, got inf"),
    ("tau", float("nan"), "run-config key 'tau' must be a finite number > 0, got nan"),
    ("lr", 0, "run-config key 'lr' must be a finite number > 0, got 0.0"),
    ("attacker-ratio", 1.5, "run-config key 'attacker-ratio' must lie in [0, 1], got 1.5"),
    ("momentum", 1.0, "run-config key 'momentum' must lie in [0, 1), got 1.0"),
    ("inf-server-frac", 0.0, "run-config key 'inf-server-frac' must lie in (0, 1), got 0.0"),
    ("num-rounds", 0, "run-config key 'num-rounds' must be >= 1, got 0"),
    ("krum-m", -1, "run-config key 'krum-m' must be >= 0 (0 = n - f), got -1"),
    ("foolsgold-kappa", 0, "run-config key 'foolsgold-kappa' must be a finite number > 0, got 0.0"),
    ("client-cpus", 0, "run-config key 'client-cpus' must be a finite number > 0, got 0.0"),
    ("noise-sigma", float("inf"), "run-config key 'noise-sigma' must be a finite number >= 0, got inf"),
    ("weight-decay", float("inf"), "run-config key 'weight-decay' must be a finite number >= 0, got inf"),
    ("dirichlet-alpha", float("inf"), "run-config key 'dirichlet-alpha' must be a finite number > 0, got inf"),
    ("foolsgold-kappa", float("inf"), "run-config key 'foolsgold-kappa' must be a finite number > 0, got inf"),
    ("inf-amplification", float("inf"),
     "run-config key 'inf-amplification' must be a finite number > 0, got inf"),
    ("inf-amp-curve", "1,inf", "run-config key 'inf-amp-curve' values must be finite numbers > 0, got '1,inf'"),
    ("engine", "dask", "run-config key 'engine': unknown value 'dask'; choose one of ray, inprocess, batched"),
    ("num-clients", 1.5, "run-config key 'num-clients' must be an integer, got 1.5"),
    ("seed", True, "run-config key 'seed' must be an integer, got True"),
    ("run-name", 3, "run-config key 'run-name' must be a string, got 3"),
])
def test_one_line_errors_keep_their_wording(key, value, message):
    with pytest.raises(ConfigError) as err:
        RunConfig.from_flower({key: value})
    assert str(err.value) == message


def test_every_declared_bound_is_enforced():
    """Each numeric field's declared lower bound: the bound itself passes (>=) or fails (>),
    one step past it fails naming the key."""
    for info in describe():
        s = setting_of(info.key)
        for bound, inclusive in ((s.ge, True), (s.gt, False)):
            if bound is None:
                continue
            outside = bound - (1 if info.type == "int" else 0.5) if inclusive else bound
            with pytest.raises(ConfigError, match=f"'{info.key}'"):
                RunConfig.from_flower({info.key: outside})


def test_every_real_valued_key_must_be_finite():
    """No float key gives infinity a meaning: inf, -inf and nan are refused for each, whichever
    way they arrive (a float, TOML's inf/nan in an override, a string), in one line naming it."""
    floats = [i.key for i in describe() if i.type == "float"]
    assert {"noise-sigma", "weight-decay", "dirichlet-alpha", "foolsgold-kappa", "inf-amplification"} <= set(floats)
    for key in floats:
        for value in (float("inf"), float("-inf"), float("nan"), "inf", parse_override(f"{key}=inf")[1],
                      parse_override(f"{key}=nan")[1]):
            with pytest.raises(ConfigError, match=f"^run-config key '{key}' must "):
                RunConfig.from_flower({key: value})
        s = setting_of(key)
        if s.lt is None and s.le is None:  # finiteness, not a new upper bound: a huge finite value passes
            assert getattr(RunConfig.from_flower({key: 1e300}), key.replace("-", "_")) == 1e300


@pytest.mark.parametrize("overrides,key", [
    ({"strategy": "multikrum", "krum-m": 6}, "krum-m"),
    ({"task": "inference", "inf-f": 0, "agg-adv-epochs": 0}, None),  # plain DeepSet: f = 0 is fine
    ({"task": "inference", "num-clients": 9, "clients-per-round": 5, "inf-f": 4}, None),
    ({"inf-amp-curve": "1,-2"}, "inf-amp-curve"), ({"inf-amp-curve": ""}, None),
    ({"inf-attacks": " lma , cpa "}, None),
    ({"num-clients": 5, "clients-per-round": 5}, None),
])
def test_cross_field_rules(overrides, key):
    if key is None:
        RunConfig.from_flower(overrides)
    else:
        with pytest.raises(ConfigError, match=f"'{key}'"):
            RunConfig.from_flower(overrides)


def test_docs_list_each_key_under_its_group():
    doc = (ROOT / "docs" / "configuration.md").read_text()
    sections = {part.split("\n", 1)[0].split()[0]: part for part in doc.split("\n## ")[1:]}
    for group in GROUPS:
        missing = [i.key for i in describe(group) if f"`{i.key}`" not in sections[group]]
        assert missing == [], group


def test_a_number_list_key_takes_one_bare_number():
    """`dst-ranks=8` (the shell strips the quotes of dst-ranks="8") is the list of one rank; other
    string keys still refuse numbers."""
    from fedcal.config import parse_override

    key, value = parse_override('dst-ranks=8')
    assert value == 8
    assert RunConfig.from_flower({"task": "distill", key: value}).dst_ranks == "8"
    assert RunConfig.from_flower({"inf-amp-curve": 2.0}).amplification_curve == (2.0,)
    with pytest.raises(ConfigError, match="'run-name' must be a string"):
        RunConfig.from_flower({"run-name": 3})



@pytest.mark.parametrize("targets", ["query,bias", "", "value,value"])
def test_lora_targets_must_be_distinct_known_module_names(targets):
    with pytest.raises(ConfigError, match="dst-lora-targets"):
        RunConfig.from_flower({"task": "distill", "dst-lora-targets": targets})


def test_lora_targets_parse_to_module_suffixes():
    assert RunConfig().lora_targets == ("query", "value")  # the literature's setting, for the pretrained default
    assert RunConfig.from_flower({"dst-lora-targets": "query, value, word_embeddings"}).lora_targets == (
        "query", "value", "word_embeddings")


# ---------------------------------------------------------------------- hostile values (issue 30)
@pytest.mark.parametrize("name", ["../../x", "../x", "..", ".", "a/b", "/tmp/elsewhere", "a\\b", "runs/../x", "x\0y"])
def test_a_run_name_that_leads_outside_output_dir_is_refused(name):
    with pytest.raises(ConfigError, match="^run-config key 'run-name' must be one directory name inside output-dir"):
        RunConfig.from_flower({"run-name": name})


@pytest.mark.parametrize("name", ["my-run", "a..b", "run.1", "s0-df591996"])
def test_an_ordinary_run_name_passes(name):
    assert RunConfig.from_flower({"run-name": name}).run_name == name


def test_a_refused_run_name_touches_nothing_outside_output_dir(tmp_path, capsys):
    """`run-name=../victim` used to make <output-dir>/../victim the run directory: starting the run
    cleared the metrics.csv and model.pt a finished run kept there. Now nothing starts."""
    victim = tmp_path / "victim"
    victim.mkdir()
    for f in ("metrics.csv", "model.pt", "config.json"):
        (victim / f).write_text("someone else's")
    argv = ["run", "dataset=digits", "num-clients=2", "clients-per-round=2", "num-rounds=1", "local-steps=1",
            "attack=none", "engine=inprocess", f'output-dir="{tmp_path / "runs"}"', 'run-name="../victim"',
            "--no-progress"]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'run-name'" in err[0]
    assert sorted(p.name for p in victim.iterdir()) == ["config.json", "metrics.csv", "model.pt"]
    assert all((victim / f).read_text() == "someone else's" for f in ("metrics.csv", "model.pt", "config.json"))


@pytest.mark.parametrize("width,ok", [(5, False), (6, False), (10, False), (4, True), (12, True), (64, True)])
def test_detr_width_must_split_into_sine_cosine_pairs_per_axis(width, ok):
    """DETR's 2-D sine position embedding gives each axis d_model / 2 channels of sin/cos pairs:
    det-d-model=5 (or 6, 10) failed in the first forward pass. The grid detector and pretrained
    DETRs do not read the key, so their configs (and finished runs) stay valid."""
    cfg = {"task": "detect", "det-model": "detr", "det-d-model": width}
    if ok:
        RunConfig.from_flower(cfg)
    else:
        with pytest.raises(ConfigError, match="^run-config key 'det-d-model' must be a multiple of 4"):
            RunConfig.from_flower(cfg)
    RunConfig.from_flower({**cfg, "det-model": "grid"})


def test_detr_widths_the_rule_allows_build_and_run():
    """The rule is DETR's own: a width it allows gives a working forward pass, one it refuses does not."""
    pytest.importorskip("transformers")
    import torch

    from fedcal.detect.model import DetectorSpec, build_detector

    logits, boxes = build_detector(DetectorSpec(name="detr", d_model=12, queries=4))(torch.rand(1, 1, 32, 32))
    assert logits.shape == (1, 4, 11) and boxes.shape == (1, 4, 4)
    with pytest.raises(RuntimeError):
        build_detector(DetectorSpec(name="detr", d_model=10, queries=4))(torch.rand(1, 1, 32, 32))


def test_hub_names_are_checked_with_one_request_at_most(tmp_path, monkeypatch):
    """fedcal.hub.check_hub_name: a folder or a cached name passes without a request; offline a
    model name is refused without one (a dataset is left to datasets' own offline cache); online,
    one metadata request with a timeout decides, and its refusal is one ConfigError naming the key."""
    import huggingface_hub

    from fedcal import hub

    calls = []

    def probe(self, name, timeout=None):
        calls.append((name, timeout))
        raise RuntimeError("404 Client Error: Repository Not Found for url: https://huggingface.co/api/models/x")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", probe)
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", probe)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    hub.check_hub_name("lm-model", str(tmp_path))  # a folder
    with pytest.raises(ConfigError, match=r"^run-config key 'det-model': 'org/x' .* \(RuntimeError: 404 Client Error"):
        hub.check_hub_name("det-model", "org/x")
    assert calls == [("org/x", hub.PROBE_TIMEOUT_S)]
    with pytest.raises(ConfigError, match="'lm-corpus'"):
        hub.check_hub_name("lm-corpus", "wikitext", repo_type="dataset")
    assert len(calls) == 2
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *a, **k: str(tmp_path / "config.json"))
    hub.check_hub_name("det-model", "org/cached")  # cached: no request
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *a, **k: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="offline"):
        hub.check_hub_name("det-model", "org/y")
    hub.check_hub_name("lm-corpus", "wikitext", repo_type="dataset")
    assert len(calls) == 2
    with pytest.raises(ConfigError, match="not a valid Hub name|offline"):
        hub.check_hub_name("dst-backbone", "not a/valid//name")
