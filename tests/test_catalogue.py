"""The component catalogue: every named choice declared once (fedcal.catalogue)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fedcal import catalogue
from fedcal.catalogue import Component

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def scratch():
    """The catalogue as it was before the test: components a test registers are removed after it."""
    catalogue.components("rule")  # built-ins loaded first
    saved = {k: dict(v) for k, v in catalogue._REGISTRY.items()}
    yield
    for kind, known in saved.items():
        catalogue._REGISTRY[kind].clear()
        catalogue._REGISTRY[kind].update(known)


def test_the_builtin_rules_and_steps_in_declaration_order():
    assert catalogue.names("rule") == ("fedavg", "fltrust", "foolsgold", "multikrum", "trimmed_mean", "median",
                                       "geometric_median", "median_of_means", "calguard")
    assert catalogue.names("pre-aggregation") == ("nnm", "clip", "arc", "cclip")
    assert catalogue.names("tracker") == ("none", "tensorboard", "mlflow", "wandb")


def test_needing_names_the_components_that_declare_a_need():
    assert catalogue.needing("rule", "root-set") == ("fltrust", "calguard")
    assert catalogue.needing("attack", "rule-aware") == ("opt-alie", "opt-ipm")
    assert set(catalogue.needing("attack", "omniscient")) == {"alie", "ipm", "minmax", "minsum", "fang-trmean",
                                                              "fang-krum", "signflip", "mimic", "inf", "opt-alie",
                                                              "opt-ipm"}
    with pytest.raises(ValueError, match="unknown need 'root'"):
        catalogue.needing("rule", "root")


def test_an_unknown_name_is_a_config_error_naming_kind_name_and_choices():
    from fedcal.config import ConfigError

    with pytest.raises(ConfigError, match=r"unknown rule 'krum'; choose one of fedavg, fltrust, .*calguard$"):
        catalogue.get("rule", "krum")
    with pytest.raises(ValueError, match="unknown component kind 'rules'"):
        catalogue.names("rules")


def test_register_refuses_a_second_component_of_the_same_kind_and_name(scratch):
    toy = Component("rule", "toy", "fedcal.strategies.fedavg:FedAvg")
    assert catalogue.register(toy) is toy
    catalogue.register(toy)  # the same declaration again (a module imported twice) is no second one
    with pytest.raises(ValueError, match="rule 'toy' is declared twice"):
        catalogue.register(Component("rule", "toy", "fedcal.strategies.median:Median"))
    with pytest.raises(ValueError, match="rule 'median' is declared twice"):
        catalogue.register(Component("rule", "median", "fedcal.strategies.fedavg:FedAvg"))
    assert catalogue.names("rule")[-1] == "toy"  # declaration order: after the built-ins
    assert catalogue.load("rule", "toy").__name__ == "FedAvg"


@pytest.mark.parametrize("kwargs, message", [
    (dict(kind="rules", name="x", target="m:a"), "unknown kind 'rules'"),
    (dict(kind="rule", name="a,b", target="m:a"), "without commas"),
    (dict(kind="rule", name="", target="m:a"), "non-empty"),
    (dict(kind="rule", name="x", target="m.a"), "not 'package.module:attribute'"),
    (dict(kind="rule", name="x", target="m:a", needs={"rootset"}), "unknown need 'rootset'"),
])
def test_a_malformed_component_is_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Component(**kwargs)


def test_params_map_a_config_to_the_components_keyword_arguments():
    from fedcal.config import RunConfig

    cfg = RunConfig(strategy="multikrum", krum_f=2, krum_m=0, trim_f=3, pre_f=2, cclip_tau=0.5, cclip_iterations=4)
    assert catalogue.get("rule", "multikrum").kwargs(cfg) == {"num_malicious_nodes": 2, "num_nodes_to_select": None}
    assert catalogue.get("rule", "trimmed_mean").kwargs(cfg) == {"f": 3}
    assert catalogue.get("rule", "median").kwargs(cfg) == {}
    assert catalogue.get("pre-aggregation", "cclip").kwargs(cfg) == {"tau": 0.5, "iterations": 4}
    assert catalogue.get("attack", "alie").kwargs(RunConfig(alie_z=0.0)) == {"z": None}  # 0: the paper's z
    assert catalogue.get("attack", "alie").kwargs(RunConfig(alie_z=1.5)) == {"z": 1.5}


def test_every_builtin_target_loads_and_every_key_is_a_run_config_field():
    from fedcal.config import field_names

    fields = set(field_names())
    for kind in catalogue.KINDS:
        for name, c in catalogue.components(kind).items():
            assert c.load() is not None or (kind, name) == ("tracker", "none"), (kind, name)
            assert set(c.keys) <= fields, (kind, name, set(c.keys) - fields)


def test_the_catalogue_imports_neither_torch_nor_flwr():
    """The config lists its choices from the catalogue: reading it must not load an implementation."""
    code = ("import sys, fedcal.catalogue as c; [c.names(k) for k in c.KINDS]; c.needing('rule', 'root-set'); "
            "print(sorted(m for m in ('torch', 'flwr') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _plugin(tmp_path: Path, body: str) -> Path:
    """A package on a path entry with the entry point ``toy = toyplug:COMPONENTS`` in fedcal.components."""
    (tmp_path / "toyplug.py").write_text(textwrap.dedent(body))
    info = tmp_path / "toyplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{catalogue.ENTRY_POINT_GROUP}]\ntoy = toyplug:COMPONENTS\n")
    return tmp_path


def _run_with(path: Path, code: str) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(ROOT)])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)


def test_an_installed_packages_components_are_known_in_a_fresh_process(tmp_path):
    path = _plugin(tmp_path, """
        from fedcal.catalogue import Component
        COMPONENTS = [Component("rule", "toy_mean", "fedcal.strategies.fedavg:FedAvg", needs={"batchable"}),
                      Component("attack", "toy_attack", "fedcal.attacks.baselines:inf", needs={"omniscient"})]
    """)
    out = _run_with(path, "from fedcal import catalogue as c; print(c.names('rule')[-1], c.needing('attack', "
                          "'omniscient')[-1])")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["toy_mean", "toy_attack"]


def test_a_plugin_that_redeclares_a_builtin_name_is_refused(tmp_path):
    path = _plugin(tmp_path, """
        from fedcal.catalogue import Component
        COMPONENTS = Component("rule", "median", "toyplug:Mine")
    """)
    out = _run_with(path, "from fedcal import catalogue as c; c.names('rule')")
    assert out.returncode != 0
    assert "rule 'median' is declared twice" in out.stderr.strip().splitlines()[-1]

