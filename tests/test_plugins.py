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
from fedcal.config import RunConfig, schema

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
    monkeypatch.setattr(catalogue, "_STATE", {"loaded": False})
    for name in ("_GROUPS", "_SETTINGS"):
        monkeypatch.setattr(schema, name, dict(getattr(schema, name)))
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
