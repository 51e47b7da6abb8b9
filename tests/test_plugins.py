"""Plug-ins through the catalogue's entry-point group (``fedcal.components``): an installed package's
components are loaded the first time a process asks the catalogue for a kind, so its rule, attack or
task is known to every process (the command, the ServerApp and ClientApp processes of ``flwr run``,
SuperNodes, Ray workers), not only to the one that imported it; a broken entry point is left out
with one warning naming its distribution, and the others still load.

The fast tests here replace ``importlib.metadata.entry_points`` (what the catalogue reads); the slow
one installs a real package into a virtual environment and runs ``fedcal run`` in a fresh process.
"""

from __future__ import annotations

import importlib.metadata
import logging
import sys
import textwrap
from types import SimpleNamespace

import pytest

from fedcal import catalogue
from fedcal.config import RunConfig, component_keys, schema

PLUGIN = '''
from fedcal.catalogue import Component
from fedcal.config import Task, group, setting


@group("eptoy", "an entry-point task's keys")
class EpToy:
    eptoy_rounds: int = setting(1, "rounds of the entry-point task", ge=1)


TASK = Task("eptoy", "fedcal.tasks.train:run_train", summary="an entry-point task", groups=("eptoy",),
            handlers={"query.eptoy": "fedcal.tasks.nodes:identity"})
RULE = Component("rule", "eptoy_rule", "fedcal.strategies.median:Median", summary="an entry-point rule")
COMPONENTS = [TASK, RULE]
'''


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A process whose catalogue has not read its entry points yet (its built-ins loaded, a copy of
    them), whose config registries are copies, and on whose path the module ``eptoy_plugin`` is."""
    for kind in catalogue.KINDS:
        catalogue.components(kind)
    monkeypatch.setattr(catalogue, "_REGISTRY", {k: dict(v) for k, v in catalogue._REGISTRY.items()})
    monkeypatch.setattr(catalogue, "_STATE", {**catalogue._STATE, "loaded": False})
    for name in ("_GROUPS", "_SETTINGS"):
        monkeypatch.setattr(schema, name, dict(getattr(schema, name)))
    # the config's record of the components' keys it made fields, a copy too (and synced afresh: the
    # registries above are new dicts), so what a test's plug-in adds leaves with the test
    monkeypatch.setattr(component_keys, "_STATE", {**component_keys._STATE, "owned": dict(component_keys._STATE["owned"]),
                                                   "seen": None})
    monkeypatch.setattr(schema, "_ORDER_CACHE", [])
    (tmp_path / "eptoy_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("eptoy_plugin", None)
    schema._ORDER_CACHE.clear()


def _entry_points(monkeypatch, *eps: tuple[str, str, str]) -> None:
    """Make ``importlib.metadata.entry_points(group=...)`` answer ``(distribution, name, value)`` entries."""
    made = []
    for dist, name, value in eps:
        ep = importlib.metadata.EntryPoint(name, value, catalogue.ENTRY_POINT_GROUP)
        made.append(ep._for(SimpleNamespace(name=dist)))

    real = importlib.metadata.entry_points

    def entry_points(**select):  # other groups (torch's backends) as installed
        return made if select == {"group": catalogue.ENTRY_POINT_GROUP} else real(**select)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_an_entry_points_task_and_rule_are_known_the_first_time_a_kind_is_asked_for(fresh, monkeypatch):
    _entry_points(monkeypatch, ("eptoy-dist", "eptoy", "eptoy_plugin:COMPONENTS"))
    assert "eptoy_plugin" not in sys.modules  # nothing imported it: the catalogue will
    # the first question to the config loads the catalogue with its plug-ins: the task's keys are keys
    cfg = RunConfig.from_flower({"task": "eptoy", "eptoy-rounds": 3})
    assert (cfg.task, cfg.eptoy_rounds) == ("eptoy", 3)
    assert catalogue.names("task")[-1] == "eptoy" and catalogue.names("rule")[-1] == "eptoy_rule"
    assert catalogue.load("rule", "eptoy_rule").__name__ == "Median"
    with pytest.raises(schema.ConfigError, match="'eptoy-rounds'"):
        RunConfig.from_flower({"task": "eptoy", "eptoy-rounds": 0})


def test_the_client_app_answers_an_entry_points_task(fresh, monkeypatch):
    _entry_points(monkeypatch, ("eptoy-dist", "eptoy", "eptoy_plugin:COMPONENTS"))
    from flwr.app import Context, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from fedcal.app.client import build_client_app
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 1
    app = build_client_app()  # what a SuperNode or a Ray worker builds, in its own process
    ctx = Context(run_id=1, node_id=7, node_config={"partition-id": 2, "num-partitions": 3}, state=RecordDict(),
                  run_config={})
    # the plug-in's handler (here the identity answer) is registered under its declared message type
    reply = app(Message(content=RecordDict(), message_type="query.eptoy", dst_node_id=7), ctx)
    assert int(reply.content["identity"]["partition-id"]) == 2


@pytest.mark.parametrize("value, error", [
    ("eptoy_no_such_module:COMPONENTS", "ModuleNotFoundError: No module named 'eptoy_no_such_module'"),
    ("eptoy_plugin:__name__", "TypeError: it must load to a Component or an iterable of them, got str"),
    ("eptoy_plugin:NOTHING", "AttributeError"),
])
def test_a_broken_entry_point_is_one_warning_naming_its_distribution_and_the_rest_loads(fresh, monkeypatch, caplog,
                                                                                        value, error):
    _entry_points(monkeypatch, ("broken-dist", "broken", value), ("eptoy-dist", "eptoy", "eptoy_plugin:COMPONENTS"))
    with caplog.at_level(logging.WARNING, logger="fedcal.catalogue"):
        assert catalogue.names("rule")[-1] == "eptoy_rule"  # the good plug-in loaded
        assert "broken" not in catalogue.names("rule")
        catalogue.names("task")  # asked again: loaded once, warned once
    (record,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    message = record.getMessage()
    assert "broken-dist" in message and error in message and "\n" not in message, message
    assert RunConfig.from_flower({"strategy": "median"}).strategy == "median"  # runs without the plug-in work


def test_a_plug_in_redeclaring_a_name_is_left_out_whole(fresh, monkeypatch, tmp_path, caplog):
    (tmp_path / "eptoy_clash.py").write_text(textwrap.dedent('''
        from fedcal.catalogue import Component
        COMPONENTS = [Component("attack", "eptoy_attack", "fedcal.attacks.ipm:ipm"),
                      Component("rule", "median", "fedcal.strategies.fedavg:FedAvg")]
    '''))
    _entry_points(monkeypatch, ("clash-dist", "clash", "eptoy_clash:COMPONENTS"))
    with caplog.at_level(logging.WARNING, logger="fedcal.catalogue"):
        assert catalogue.get("rule", "median").target == "fedcal.strategies.median:Median"
    assert "eptoy_attack" not in catalogue.names("attack")  # none of the entry point, not half of it
    assert "clash-dist" in caplog.text and "rule 'median' is declared already" in caplog.text
    sys.modules.pop("eptoy_clash", None)


# ---------------------------------------------------------------------- an installed package, fresh processes
ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def _example(path) -> str:
    """The marked example region of a test module (docs/design.md shows the same code)."""
    import re

    return re.search(r"^# --- example: [^\n]* ---\n(.*?)^# --- end of example ---$", path.read_text(),
                     re.S | re.M).group(1)


def _install_toy_package(tmp_path):
    """tests/toy_rule.py's rule and tests/toy_attack.py's attack as the package ``fedcal-toyplug``,
    declared in the entry-point group, installed (offline: no dependencies, no build isolation) into a
    virtual environment that sees this interpreter's packages. Returns the environment's python."""
    import subprocess

    src = tmp_path / "src"
    src.mkdir()
    (src / "fedcal_toyplug.py").write_text(
        '"""A package of fedcal components: a rule and an attack."""\n\n'
        + _example(TESTS / "toy_rule.py") + "\n" + _example(TESTS / "toy_attack.py")
        + "\nCOMPONENTS = [CLOSEST_PAIR, MIRROR]\n")
    (src / "pyproject.toml").write_text(textwrap.dedent(f'''
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "fedcal-toyplug"
        version = "0.1"

        [project.entry-points."{catalogue.ENTRY_POINT_GROUP}"]
        toy = "fedcal_toyplug:COMPONENTS"

        [tool.setuptools]
        py-modules = ["fedcal_toyplug"]
    '''))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    # this interpreter's pip (seen through the system site), installing into the environment
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", str(src)], check=True, cwd=tmp_path, capture_output=True)
    return python


def _fedcal_run(python, tmp_path, engine: str, **env_more):
    """``python -m fedcal run`` of the plug-in rule and attack on digits, in a fresh process whose only
    way to know them is the installed package's entry point. Returns (the process, its run directory)."""
    import os
    import subprocess

    overrides = {"strategy": "closest_pair", "attack": "mirror_median", "mirror-scale": 2.0, "dataset": "digits",
                 "num-rounds": 2,
                 "num-clients": 6, "clients-per-round": 6, "attacker-ratio": 0.34, "engine": engine,
                 "output-dir": str(tmp_path / f"runs-{engine}")}
    args = [f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}" for k, v in overrides.items()]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    env.update(PYTHONPATH=str(ROOT), **env_more)  # this checkout's fedcal; not tests/ (no toy_rule there)
    proc = subprocess.run([str(python), "-m", "fedcal", "run", "--no-progress", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    return proc, tmp_path / f"runs-{engine}"


def _check_toy_run(proc, runs) -> None:
    import pandas as pd

    from fedcal.results import AUDIT_FILE, POISONING_FILE, load_metrics
    from fedcal.results.identity import load_run_config

    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    assert (run_dir / "DONE").exists()
    assert sorted(load_metrics(run_dir)["round"].unique().tolist()) == [0, 1, 2]
    audit = pd.read_csv(run_dir / AUDIT_FILE)  # the rule: two of the six replies aggregated each round
    assert audit[audit["weight"] > 0].groupby("round").size().tolist() == [2, 2]
    poisoning = pd.read_csv(run_dir / POISONING_FILE)  # the attack: both colluders crafted each round
    assert poisoning.groupby("round").size().tolist() == [2, 2]
    assert set(poisoning["attack"]) == {"mirror_median"} and poisoning["crafted"].all()
    # the attack's own key, declared in its Component, came in through the entry point as a key of the run
    assert load_run_config(run_dir)["config"]["mirror-scale"] == 2.0


@pytest.fixture(scope="module")
def toy_python(tmp_path_factory):
    """The python of a virtual environment with tests/toy_rule.py's rule and tests/toy_attack.py's
    attack installed as the package fedcal-toyplug."""
    return _install_toy_package(tmp_path_factory.mktemp("toyplug"))


@pytest.mark.slow  # about 15 s of CPU: the install, and a 2-round digits run
def test_an_installed_packages_rule_and_attack_run_in_a_fresh_fedcal_run(toy_python, tmp_path):
    """The package's rule and attack are choices of a fresh ``fedcal run`` process, which has nothing
    but the entry point to find them (tests/ is not on its path)."""
    _check_toy_run(*_fedcal_run(toy_python, tmp_path, "inprocess"))


@pytest.mark.slow  # about 15 s of CPU, over a minute of wall time: Ray's start
def test_an_installed_packages_rule_and_attack_reach_the_ray_workers(toy_python, tmp_path):
    """Under the Ray engine each ClientApp runs in a Ray worker process, which rebuilds the run config
    from its messages (``strategy=closest_pair`` among its keys) and so must know the plug-in too."""
    import tempfile

    ray_tmp = tempfile.mkdtemp(prefix="fcp", dir="/tmp")  # Ray's own temp dir: short, and this test's alone
    _check_toy_run(*_fedcal_run(toy_python, tmp_path, "ray", RAY_TMPDIR=ray_tmp))
