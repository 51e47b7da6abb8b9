"""A task is a plug-in: the toy task of tests/toy_task.py, defined outside ``fedcal/``, parses,
validates, hashes, runs end to end through ``fedcal run`` and the in-process engine, and reports.

Its registration (config group and Task) lasts for this module's tests only: the
registries are copied before it is imported and put back after, so that the other tests see the
built-in tasks alone.
"""

from __future__ import annotations

import importlib
import sys

import pytest

from fedcal.config import RunConfig, schema
from fedcal.results import load_metrics, run_dir_for


@pytest.fixture(scope="module", autouse=True)
def toy():
    """Import (and so register) the toy task into copies of the registries; restore them after."""
    from fedcal import catalogue

    with pytest.MonkeyPatch.context() as mp:
        for name in ("_GROUPS", "_SETTINGS"):
            mp.setattr(schema, name, dict(getattr(schema, name)))
        mp.setitem(catalogue._REGISTRY, "task", dict(catalogue.components("task")))
        mp.setattr(schema, "_ORDER_CACHE", [])
        yield importlib.import_module("toy_task")
        sys.modules.pop("toy_task", None)
    schema._ORDER_CACHE.clear()



def _overrides(tmp_path, **more):
    return {"task": "toy", "num-clients": 3, "toy-scale": 2.0, "engine": "inprocess",
            "output-dir": str(tmp_path / "runs"), **more}


def test_the_plugin_config_parses_validates_and_hashes_like_a_builtin():
    from fedcal.config import describe
    from fedcal.results import config_hash, default_run_name, hashed_keys

    cfg = RunConfig.from_flower({"task": "toy", "toy-rounds": 3, "toy-scale": 0.5})
    assert (cfg.toy_rounds, cfg.toy_scale) == (3, 0.5)
    assert [i.key for i in describe("toy")] == ["toy-rounds", "toy-scale"]
    assert {"toy_rounds", "toy_scale", "task", "seed"} <= hashed_keys("toy")
    assert not hashed_keys("toy") & {"tau", "strategy", "inf_f", "dst_rounds"}
    assert default_run_name(cfg) == f"toy-x0.5-s0-{config_hash(cfg)[:8]}"
    # the built-in keys keep their order: the plug-in's keys follow them
    assert list(cfg.to_flower())[-2:] == ["toy-rounds", "toy-scale"]
    assert list(RunConfig().to_flower())[:3] == ["dataset", "data-dir", "model"]
    # the group's own rule, and its fields' declared ranges, fail naming the key
    with pytest.raises(Exception, match="'toy-scale'"):
        RunConfig.from_flower({"task": "toy", "toy-rounds": 1, "toy-scale": 500.0})
    with pytest.raises(Exception, match="'toy-rounds'"):
        RunConfig.from_flower({"task": "toy", "toy-rounds": 0})


def test_the_plugin_task_runs_through_fedcal_run_and_reports(tmp_path, capsys):
    from fedcal.cli import main

    overrides = _overrides(tmp_path)
    assert main(["run", "--no-progress", *(f"{k}={v}" if not isinstance(v, str) else f'{k}="{v}"'
                                           for k, v in overrides.items())]) == 0
    run_dir = run_dir_for(RunConfig.from_flower(overrides))
    assert (run_dir / "DONE").exists()
    metrics = load_metrics(run_dir)
    # clients 0, 1, 2 answer 0, 2, 4: the mean is 2 in every round (0, 1, 2)
    assert metrics["round"].tolist() == [0, 1, 2] and metrics["value"].tolist() == [2.0, 2.0, 2.0]
    assert "files:" in capsys.readouterr().out
    assert main(["report", str(run_dir), "--out", str(tmp_path / "rep"), "--title", "toy"]) == 0
    assert "## toy" in capsys.readouterr().out


def test_the_plugin_task_runs_on_the_in_process_engine(tmp_path):
    from fedcal.app.engine import simulate

    cfg = RunConfig.from_flower(_overrides(tmp_path, **{"toy-scale": 3.0, "toy-rounds": 1}))
    run_dir = simulate(cfg, progress=False)
    assert load_metrics(run_dir)["value"].tolist() == [3.0, 3.0]  # clients answer 0, 3, 6


def test_design_md_shows_this_test_s_task():
    from pathlib import Path

    from fedcal.pages import include_tables as tool

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "design.md").read_text()
    assert "<!-- example: tests/toy_task.py -->" in page
    assert tool.refreshed(page) == page, "run python -m fedcal.pages include_tables docs/design.md"
