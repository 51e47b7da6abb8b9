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
    (dict(kind="rule", name="x", target="m:a", keys=("x_f",), f_key="f"), "f_key 'f' is not one of its keys"),
    (dict(kind="rule", name="x", target="m:a", modules=("fedcal/pages/x.py",)), "not 'package.module'"),
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
                          "'omniscient')[-1]); from fedcal.config import setting_of; "
                          "print('toy_mean' in setting_of('strategy').options)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["toy_mean", "toy_attack", "True"]


def test_a_plugin_that_fails_to_import_is_one_warning_naming_it_and_every_read_goes_on(tmp_path):
    path = _plugin(tmp_path, """
        raise ImportError("no module named 'torch_geometric'")
    """)
    out = _run_with(path, "from fedcal import catalogue as c\n"
                          "for _ in range(2):\n"
                          "    print(c.names('rule')[0])")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["fedavg", "fedavg"]  # fedcal's own components, at every read
    (warning,) = out.stderr.strip().splitlines()  # once per process, on one line
    assert "toyplug" in warning and "entry point 'toy'" in warning and "torch_geometric" in warning


def test_a_plugin_that_redeclares_a_builtin_name_is_left_out_with_one_warning(tmp_path):
    path = _plugin(tmp_path, """
        from fedcal.catalogue import Component
        COMPONENTS = [Component("rule", "toy_mean", "toyplug:Mine"), Component("rule", "median", "toyplug:Mine")]
    """)
    out = _run_with(path, "from fedcal import catalogue as c; print(c.get('rule', 'median').target, "
                          "'toy_mean' in c.names('rule'))")
    assert out.returncode == 0, out.stderr
    # the built-in stays, and the whole entry point is left out (not half of it)
    assert out.stdout.split() == ["fedcal.strategies.median:Median", "False"]
    (warning,) = out.stderr.strip().splitlines()
    assert "toyplug" in warning and "rule 'median' is declared already" in warning



# ---------------------------------------------------------------------- no branch on a component's name
PACKAGE = ROOT / "fedcal"
#: the last name of an expression holding one or several config values of each kind (``cfg.attack``,
#: ``row["strategy"]``, ``runs["dst-method"]``: a column's key spelt with hyphens is read with underscores,
#: ``aggs``); a bare ``name`` or ``kind`` is compared with every kind's names
KIND_WORDS = {"rule": {"strategy", "rule", "strategies", "rules"},
              "pre-aggregation": {"pre_aggregation", "step", "pre_aggregations", "steps"},
              "attack": {"attack", "attacks"}, "inference-attack": {"attack", "inf_attack", "attacks", "inf_attacks"},
              "inference-aggregator": {"aggregator", "agg", "aggregators", "aggs", "inf_aggregators",
                                       "inference_aggregators"},
              "tracker": {"tracker", "trackers"}, "lora-method": {"method", "dst_method", "methods"}}
#: kinds whose names are words of no other vocabulary: ANY comparison with one of their names is a branch,
#: whatever the other side is called (``m == "ffa"``)
STRICT = {"lora-method"}
#: ``none`` (attack, inference attack, tracker) is no component's behaviour but the absence of one: asking
#: whether a run has an attack at all is no branch on a component
ABSENT = "none"


def _literals(node) -> list[str]:
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _last_name(node) -> str | None:
    import ast

    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    return None


def _own_names(kind: str, rel: str) -> set[str]:
    """The components of ``kind`` whose own module ``rel`` is: their implementation's, or one their
    declaration lists as theirs (``Component.modules``: a sibling form, their study, their results page)."""
    def module_files(c: Component) -> set[str]:
        bases = [m.replace(".", "/") for m in c.own_modules()]
        return {f for b in bases for f in (b + ".py", b + "/__init__.py")}
    return {n for n, c in catalogue.components(kind).items() if rel in module_files(c)}


def component_branches(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """``file:line: names: code`` for each comparison in ``path`` of an expression holding a kind's
    config value (KIND_WORDS) with literal names of that kind's components (``cfg.attack == "alie"``,
    ``strategy in ("fedavg", "median")``, ``df["strategy"].isin(["fedavg"])``; any comparison with a
    name of a STRICT kind), outside those components' own modules."""
    import ast

    rel = str(path.relative_to(root))
    own = {n for kind in KIND_WORDS for n in _own_names(kind, rel)}
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                 for op in node.ops):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "isin":
            operands = [node.func.value, *node.args]  # pandas' membership test
        else:
            continue
        held = {n.replace("-", "_") for n in map(_last_name, operands) if n is not None}
        literals = [lit for o in operands for lit in _literals(o)]
        named = sorted({lit for kind, words in KIND_WORDS.items() if kind in STRICT or held & (words | {"name", "kind"})
                        for lit in literals if lit in catalogue.names(kind) and lit not in own | {ABSENT}})
        if named:
            hits.append(f"{rel}:{node.lineno}: {', '.join(named)}: {ast.unparse(node)}")
    return hits


def _scanned(root: Path) -> list[Path]:
    return [p for p in sorted(root.rglob("*.py")) if p.relative_to(root).parts[0] not in ("catalogue",)]


def test_no_component_is_branched_on_outside_its_own_modules():
    """What differs per rule, step, attack, inference attack or aggregator, LoRA method and tracker is a fact of its
    Component or a method of its implementation, not a branch on its name elsewhere."""
    hits = []
    for path in _scanned(PACKAGE):
        hits += component_branches(path)
    assert not hits, f"{len(hits)} branches on a component's name outside its own modules:\n" + "\n".join(hits)


def test_the_branch_scan_finds_its_forms(tmp_path):
    """The scan catches a comparison of a config value with a component's name in its forms, and leaves
    alone a value of another key, the absence of a component and a name's own module."""
    for code in ('if cfg.attack == "alie": pass', 'if cfg.strategy in ("fedavg", "median"): pass',
                 'x = row["strategy"] != "calguard"', 'if name == "trimmed_mean": pass',
                 'if "tsa" == spec.attack: pass', 'x = runs[runs["dst-method"] == "rfd"]', 'if "deepset" in aggs: pass',
                 'x = t[t["strategy"].isin(["foolsgold", "multikrum"])]', 'if m == "ffa": pass', 'x = "flora" != m',
                 'y = m not in ["rfd"]'):
        (tmp_path / "m.py").write_text(code)
        assert component_branches(tmp_path / "m.py", tmp_path), code
    for code in ('if cfg.attack == "none": pass', 'if cfg.augment == "crop-flip": pass', 'if direction == "sign": pass',
                 'attack = cfg.attack', 'NAMES = {"rfd": "RFD-LoRA"}', 'x = t[t["seed"].isin(["median"])]',
                 'if m == "mom": pass'):
        (tmp_path / "m.py").write_text(code)
        assert not component_branches(tmp_path / "m.py", tmp_path), code


# ---------------------------------------------------------------------- a new rule, declared outside fedcal/
def test_a_rule_declared_outside_fedcal_is_a_choice_and_is_built(scratch):
    """What a new rule takes: its class and its Component (here in this file; in a package, the same two
    plus an entry point). The config accepts it, the builder builds it, the batched gate and the
    line-search attacks ask its needs and its class, and nothing else names it."""
    import torch

    from fedcal.config import ConfigError, RunConfig
    from fedcal.strategies import UpdateAggregationStrategy, strategy_from_config

    class CoordinateMax(UpdateAggregationStrategy):  # a toy rule: the coordinate-wise maximum
        def aggregate_updates(self, server_round, node_ids, updates, weights):
            return updates.max(0).values, torch.ones(updates.shape[0])

    module = sys.modules[__name__]
    module.CoordinateMax = CoordinateMax
    with pytest.raises(ConfigError, match="'strategy'"):
        RunConfig.from_flower({"strategy": "toy_max", "dataset": "digits"})
    catalogue.register(Component("rule", "toy_max", f"{__name__}:CoordinateMax", needs={"batchable"}))
    cfg = RunConfig.from_flower({"strategy": "toy_max", "dataset": "digits", "num-clients": 5, "batch-size": 16})
    from fedcal import strategies

    assert strategies.STRATEGIES["toy_max"] is CoordinateMax  # read from the catalogue when asked
    s = strategy_from_config(cfg)
    x = torch.tensor([[1.0, -2.0], [3.0, 0.0], [2.0, 5.0]])
    assert torch.equal(s.aggregate_updates(1, [1, 2, 3], x, torch.ones(3))[0], torch.tensor([3.0, 5.0]))
    from fedcal.app.batched import batched_unsupported

    assert batched_unsupported(cfg) is None
    with pytest.raises(ValueError, match="'toy_max' is not one the line-search attacks can evaluate"):
        from fedcal.tasks.poisoning import attack_rule

        attack_rule(cfg, 1)  # no unweighted() view of its own



def test_the_byzantine_study_gives_f_to_each_chosen_components_declared_key(scratch):
    """The study's f goes to the key each chosen rule and step declares (``f_key``), a plug-in's too, and
    to no key of a component that declares none."""
    from fedcal.studies.byzantine import _rules_f

    assert _rules_f("multikrum", "nnm,clip", 3) == {"krum_f": 3, "pre_f": 3}
    assert _rules_f("trimmed_mean", "", 2) == {"trim_f": 2}
    assert _rules_f("median", "clip,cclip", 2) == {}
    catalogue.register(Component("rule", "toy_trim", "fedcal.strategies.trimmed_mean:TrimmedMean", keys=("trim_f",),
                                 f_key="trim_f"))
    assert _rules_f("toy_trim", "arc", 4) == {"trim_f": 4, "pre_f": 4}


def test_a_preset_is_named_in_the_study_and_its_tables_from_one_declaration(monkeypatch):
    """A preset (a rule with some keys set, under its own name) is parsed by the study and named by
    the table from the one PRESETS entry: one added here is both."""
    from fedcal.catalogue import rules
    from fedcal.config import RunConfig
    from fedcal.reports.byzantine import spec_of
    from fedcal.studies.byzantine import parse_spec

    monkeypatch.setitem(rules.PRESETS, "tm1", ("trimmed_mean", {"trim_f": 1}))
    strategy, pre, keys = parse_spec("clip+tm1")
    assert (strategy, pre, keys) == ("trimmed_mean", "clip", {"trim_f": 1})
    assert spec_of(RunConfig(strategy="trimmed_mean", pre_aggregation="clip", trim_f=1)) == "clip+tm1"
    assert spec_of(RunConfig(strategy="trimmed_mean", trim_f=2)) == "trimmed_mean"
    assert spec_of(RunConfig(strategy="multikrum", krum_m=1)) == "krum"


def test_the_averaging_aggregators_take_f_where_their_constructor_does():
    from fedcal.inference.aggregators import AGGREGATORS, TrimmedMean, averaging_aggregator

    built = {name: averaging_aggregator(name, 3) for name in AGGREGATORS}
    assert isinstance(built["trimmed_mean"], TrimmedMean) and built["trimmed_mean"].f == 3
    assert {type(a).__name__ for n, a in built.items() if n != "trimmed_mean"} == {"Mean", "CoordinateMedian",
                                                                                  "GeometricMedian"}


def test_the_keys_choosing_components_are_read_from_the_settings():
    """Which run-config key chooses which kind is what the settings declare (``ComponentNames`` as
    choices, or as the values other keys are read with: pre-aggregation's comma-separated list); the
    tracker chooses nothing a run computes (its key is not hashed)."""
    from fedcal.results.identity import choosing_keys

    assert choosing_keys() == {"strategy": "rule", "pre_aggregation": "pre-aggregation", "attack": "attack",
                               "dst_method": "lora-method"}


def test_each_adapter_federating_method_names_its_strategy_and_rfd_has_none():
    from fedcal.distill.methods import lora_method
    from fedcal.strategies.lora import LoraStrategy

    for name in catalogue.names("lora-method"):
        m = lora_method(name)
        if name == "rfd":
            with pytest.raises(ValueError, match="no adapter strategy"):
                m.strategy_class()
        else:
            assert issubclass(m.strategy_class(), LoraStrategy), name
    assert lora_method("flexlora").strategy_class().__name__ == "FlexLoRA"


# ---------------------------------------------------------------------- a plug-in's own keys are hashed
def test_a_plugin_rules_own_key_changes_the_run_hash_only_when_the_rule_is_chosen():
    """A plug-in rule's key lives in the plug-in's own config group, which no task's hashed groups
    name: two runs differing only in it must not share a run directory (one would be reused for the
    other). In a fresh process, so the group registered here stays out of the other tests."""
    import subprocess
    import textwrap

    code = textwrap.dedent('''
        import torch
        from fedcal import catalogue
        from fedcal.catalogue import Component
        from fedcal.config import RunConfig, group, setting
        from fedcal.results.identity import config_hash

        @group("toyscale", "a toy rule's own key")
        class ToyScale:
            toy_scale_c: float = setting(1.0, "the factor the toy rule scales the mean by", gt=0)

        catalogue.register(Component("rule", "toy_scaled", "fedcal.strategies.fedavg:FedAvg", keys=("toy_scale_c",)))
        def h(**kw):
            return config_hash(RunConfig(dataset="digits", **kw))
        assert h(strategy="toy_scaled") != h(strategy="toy_scaled", toy_scale_c=2.0)
        # a run of a rule that does not read the key: the key does not enter its hash
        assert h(strategy="median") == h(strategy="median", toy_scale_c=2.0)
        print("ok")
    ''')
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_fedcals_own_components_leave_every_run_hash_as_it_was():
    """The chosen components' keys enter a hash only where no task hashes them: a train run's hash
    stays the one its committed run directory is named by (here a cross-silo benign run of
    docs/results/byzantine-mnist-cross-silo), although the default dst-method's keys are RFD-LoRA's."""
    from fedcal.config import RunConfig
    from fedcal.results.identity import config_hash

    cfg = RunConfig.from_flower({"num-clients": 13, "clients-per-round": 13, "num-rounds": 30, "dirichlet-alpha": 0.5,
                                 "attack": "none", "lr": 0.1, "momentum": 0.9, "engine": "inprocess"})
    assert config_hash(cfg) == "b3fc16b1009d"
    assert config_hash(cfg.replace(dst_rho=0.9)) == "b3fc16b1009d"


# ---------------------------------------------------------------------- a component's own keys
_KEYED = """
    from fedcal.catalogue import Component
    from fedcal.config import setting
    def craft(honest, f, epsilon):
        return -epsilon * honest.mean(0).expand(f, -1)
    COMPONENTS = [Component("attack", "toy_keyed", "toyplug:craft", needs={"omniscient"},
                            settings={"toy_eps": setting(0.5, "the toy's epsilon", gt=0, hash_when_set=True)},
                            params=lambda spec: {"epsilon": spec.toy_eps})]
"""


def test_the_generated_pyproject_block_and_stub_leave_an_installed_plugins_keys_out(tmp_path):
    """fedcal's committed pyproject block and RunConfig stub hold fedcal's own keys: written with a keyed
    plug-in installed, they stay as they are (a process without the plug-in would refuse its key), and
    the checks pass; the plug-in's key is a key of that process all the same."""
    import shutil

    (tmp_path / "plug").mkdir()
    path = _plugin(tmp_path / "plug", _KEYED)
    copy = tmp_path / "pyproject.toml"
    shutil.copy(ROOT / "pyproject.toml", copy)
    out = _run_with(path, "import sys; from fedcal.config.__main__ import main; "
                          f"print(main(['--write-pyproject', {str(copy)!r}]), "
                          f"main(['--check-pyproject', {str(copy)!r}]), "
                          "main(['--check-stub'])); from fedcal.config import RunConfig; "
                          "print(RunConfig.from_flower({'attack': 'toy_keyed', 'toy-eps': 2.0}).toy_eps)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-2:] == ["0 0 0", "2.0"], out.stdout
    assert copy.read_text() == (ROOT / "pyproject.toml").read_text()
    assert "toy" not in (ROOT / "fedcal/config/run_config.pyi").read_text()


@pytest.mark.parametrize("settings, message", [
    ('{"tau": setting(2.0, "a second tau")}', "key 'tau' is a key of group 'train' already"),
    ('{"toy_eps": setting(0.5, "in the train group", group="train")}', "not group 'train'"),
    ('{"toy_eps": setting(None, "no default")}', "default None is none of bool, int, float, str"),
    ('{"toy_eps": 0.5}', "must be declared with fedcal.config.setting(...)"),
    ('{"toy-eps": setting(0.5, "kebab")}', "must be a snake_case field name"),
    ('{"minmax_direction": setting("sign", "another default")}', "declared otherwise by attack 'minmax'"),
])
def test_a_plugin_whose_own_key_cannot_be_one_is_left_out_with_one_warning(tmp_path, settings, message):
    path = _plugin(tmp_path, _KEYED.replace('{"toy_eps": setting(0.5, "the toy\'s epsilon", gt=0, hash_when_set=True)}',
                                            settings))
    out = _run_with(path, "from fedcal import catalogue as c; from fedcal.config import RunConfig, setting_of; "
                          "print('toy_keyed' in c.names('attack'), RunConfig().tau, "
                          "setting_of('minmax_direction').default)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "1.0", "unit"]  # fedcal's own keys as they were
    (warning,) = out.stderr.strip().splitlines()
    assert "toyplug" in warning and message in warning, warning


def test_a_component_registered_in_process_brings_its_keys_and_takes_them_when_it_goes(scratch):
    from fedcal.config import ConfigError, RunConfig, field_names, setting
    from fedcal.config.schema import _SETTINGS

    keyed = Component("attack", "toy_keyed", "fedcal.attacks.ipm:ipm", needs={"omniscient"},
                      settings={"toy_eps": setting(0.5, "the toy's epsilon", gt=0)})
    with pytest.raises(ConfigError, match="unknown run-config key 'toy-eps'"):
        RunConfig.from_flower({"toy-eps": 1.0})
    catalogue.register(keyed)
    assert keyed.keys == ("toy_eps",) and field_names()[-1] == "toy_eps"
    assert RunConfig.from_flower({"attack": "toy_keyed", "toy-eps": 1.0}).toy_eps == 1.0
    with pytest.raises(ConfigError, match="key 'tau' is a key of group 'train' already"):
        catalogue.register(Component("attack", "toy_tau", "fedcal.attacks.ipm:ipm",
                                     settings={"tau": setting(2.0, "a second tau")}))
    catalogue._REGISTRY["attack"].pop("toy_keyed")  # what the scratch fixture does after a test
    assert "toy_eps" not in field_names() and "toy_eps" not in _SETTINGS


@pytest.mark.parametrize("overrides, name", [
    # computed before the attacks' keys and their run labels moved into their components
    ({"attack": "tsa", "tau": 0.2, "coupled": False, "tsa-step-frac": 0.5, "tsa-duty": 0.5},
     "mnist-mlp-fedavg-tsa0.2u-f0.5-d0.5-s0-c5386426"),
    ({"task": "lm", "attack": "tsa", "tau": 5.0, "tsa-blend": 0.5}, "lm-shakespeare-fedavg-tsa5-s0-f7d1d38f"),
    ({"task": "detect", "attack": "tsa", "tau": 5.0, "coupled": False, "tsa-step-frac": 0.5},
     "detect-grid-tsa5u-s0-89e30d78"),
    ({"task": "detect", "attack": "none"}, "detect-grid-benign-s0-7223ba15"),
    ({"attack": "alie", "alie-z": 1.5, "strategy": "trimmed_mean", "trim-f": 2},
     "mnist-mlp-trimmed_mean-alie-s0-caadb844"),
])
def test_run_names_and_hashes_of_fedcals_attacks_are_as_they_were(overrides, name):
    """The train, lm and detect tasks name a run after its attack's own words (TSA: tsa<tau>, u when
    uncoupled, and on the train task its adaptive knobs): byte for byte the names of before."""
    from fedcal.config import RunConfig
    from fedcal.results.identity import default_run_name

    assert default_run_name(RunConfig.from_flower(overrides)) == name


def test_an_attacks_name_part_names_its_runs(scratch):
    from fedcal.config import RunConfig
    from fedcal.results.identity import default_run_name

    catalogue.register(Component("attack", "toy_labelled", "fedcal.attacks.ipm:ipm", needs={"omniscient"},
                                 name_part=lambda cfg: [f"lab{cfg.num_clients}", "detail"]))
    cfg = RunConfig.from_flower({"attack": "toy_labelled", "num-clients": 7, "clients-per-round": 7})
    assert default_run_name(cfg).startswith("mnist-mlp-fedavg-lab7-detail-s0-")
    assert catalogue.get("attack", "toy_labelled").run_label(cfg, detail=False) == "lab7"
    assert catalogue.get("attack", "alie").run_label(cfg) == "alie"  # default: its name
