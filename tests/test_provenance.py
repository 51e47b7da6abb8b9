"""Provenance: every run records the code and packages that made it, final tables name it, and a
finished run made by other code is never reused silently."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from fedcal import provenance as prov
from fedcal.app.sweep import SweepGrid, run_sweep
from fedcal.reports import final_metrics
from fedcal.results import CONFIG_FILE, UNRECORDED, RunStore, code_of, reuse_note, run_dir_for, warn_reused

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A git checkout with a package file, a docs file and one commit."""
    root = tmp_path / "repo"
    (root / "fedcal").mkdir(parents=True)
    (root / "fedcal" / "core.py").write_text("X = 1\n")
    (root / "README.md").write_text("docs\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    return root


@needs_git
def test_code_identity_is_the_commit_plus_a_hash_of_uncommitted_package_changes(repo):
    head = _git(repo, "rev-parse", "HEAD")
    assert prov._code(repo) == (head[:12], head, False)
    (repo / "README.md").write_text("edited docs\n")  # not code: still the clean commit
    assert prov._code(repo) == (head[:12], head, False)
    (repo / "fedcal" / "core.py").write_text("X = 2\n")
    first, _, dirty = prov._code(repo)
    assert dirty and first.startswith(head[:12] + "+")
    assert prov._code(repo)[0] == first  # the same edit, the same identity
    (repo / "fedcal" / "core.py").write_text("X = 3\n")
    second = prov._code(repo)[0]
    assert second != first and second.startswith(head[:12] + "+")
    (repo / "fedcal" / "core.py").write_text("X = 1\n")
    (repo / "fedcal" / "new.py").write_text("Y = 1\n")  # an untracked module is code too
    third, _, dirty = prov._code(repo)
    assert dirty and third not in (head[:12], first, second)


def test_outside_a_checkout_the_version_names_the_code():
    from fedcal import __version__

    assert prov._code(None) == (f"fedcal {__version__}", None, None)


@needs_git
def test_this_process_records_the_checkout_it_imports_fedcal_from():
    p = prov.provenance()
    root = Path(prov.__file__).resolve().parents[1]
    if prov._checkout() is None:
        pytest.skip("fedcal is not imported from a git checkout here")
    assert p["git_commit"] == _git(root, "rev-parse", "HEAD")
    assert p["code"].startswith(p["git_commit"][:12])
    import torch

    assert torch.__version__.startswith(p["packages"]["torch"])


def test_the_machine_is_recorded_but_another_machine_is_no_reason_to_warn(tmp_path):
    import os

    import torch

    m = prov.provenance()["machine"]
    assert m["cpus"] == os.cpu_count() and m["torch_threads"] >= 1
    assert m["cuda"] == ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                         if torch.cuda.is_available() else [])
    run = run_dir_for(_finished_sweep(tmp_path, seeds=(0,))[0])
    _rewrite_provenance(run, machine={"cpus": 16, "torch_threads": 2, "cuda": ["NVIDIA H100 80GB HBM3"]})
    assert reuse_note(run) is None  # the same computation on other hardware: recorded, not warned about


def _finished_sweep(tmp_path, seeds=(0, 1)):
    grid = SweepGrid({"dataset": "synthetic", "num-rounds": 2, "output-dir": str(tmp_path / "runs")},
                     {"seed": list(seeds)})
    cfgs = grid.configs()
    for c in cfgs:
        store = RunStore(run_dir_for(c), c)
        store.start()
        for r in range(3):
            store.log_round(r, {"accuracy": 0.5 + r / 10, "ece": 0.1, "sece": -0.1, "brier": 0.4, "nll": 1.0})
        store.finish()
    return cfgs


def _rewrite_provenance(run_dir: Path, **changes):
    path = run_dir / CONFIG_FILE
    stored = json.loads(path.read_text())
    if changes.pop("drop", False):
        del stored["provenance"]
    else:
        stored["provenance"].update(changes)
    path.write_text(json.dumps(stored))


def test_a_run_records_its_provenance_and_final_tables_name_the_code(tmp_path):
    cfgs = _finished_sweep(tmp_path)
    stored = json.loads((run_dir_for(cfgs[0]) / CONFIG_FILE).read_text())["provenance"]
    assert stored == json.loads(json.dumps(prov.provenance()))
    _rewrite_provenance(run_dir_for(cfgs[1]), drop=True)  # a run from before provenance was recorded
    table = final_metrics([run_dir_for(c) for c in cfgs]).set_index("seed")
    assert table.loc[0, "code"] == prov.provenance()["code"]
    assert table.loc[1, "code"] == UNRECORDED
    assert table.loc[0, "accuracy"] == pytest.approx(0.7)  # the metrics are untouched by the new column


def test_reuse_note_names_what_differs(tmp_path):
    run = run_dir_for(_finished_sweep(tmp_path, seeds=(0,))[0])
    assert reuse_note(run) is None and warn_reused([run]) == []
    here = prov.provenance()
    _rewrite_provenance(run, code="0123456789ab", packages={**here["packages"], "torch": "0.0.1"})
    note = reuse_note(run)
    assert note == f"code 0123456789ab there, {here['code']} here; torch 0.0.1 there, {here['packages']['torch']} here"
    assert code_of(run) == "0123456789ab"
    _rewrite_provenance(run, drop=True)
    assert reuse_note(run) == f"code {UNRECORDED} there, {here['code']} here"


def test_a_sweep_never_reuses_a_finished_run_of_other_code_silently(tmp_path, caplog):
    cfgs = _finished_sweep(tmp_path)
    with caplog.at_level(logging.WARNING, logger="fedcal.results"):
        assert run_sweep(cfgs, progress=False) == {}
    assert not [r for r in caplog.records if "reusing" in r.getMessage()]  # same code: nothing to say
    _rewrite_provenance(run_dir_for(cfgs[1]), code="0123456789ab")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fedcal.results"):
        assert run_sweep(cfgs, progress=False) == {}  # still reused (resumable sweeps) ...
    (record,) = [r for r in caplog.records if "reusing" in r.getMessage()]  # ... but said, once
    message = record.getMessage()
    assert "reusing 1 finished run(s)" in message and str(run_dir_for(cfgs[1])) in message
    assert "0123456789ab there" in message and "--force" in message
    assert str(run_dir_for(cfgs[0])) not in message


def test_sweep_cells_and_the_tau_table_carry_the_code(tmp_path):
    from fedcal.reports import write_results
    from fedcal.reports.taus import summarise

    cfgs = _finished_sweep(tmp_path)
    _rewrite_provenance(run_dir_for(cfgs[1]), code="0123456789ab")
    write_results(cfgs, tmp_path / "report")
    cells = pd.read_csv(tmp_path / "report" / "cells.csv").set_index("seed")
    assert cells.loc[0, "code"] == prov.provenance()["code"] and cells.loc[1, "code"] == "0123456789ab"
    table = summarise([run_dir_for(c) for c in cfgs]).set_index("seed")
    assert list(table["code"]) == [prov.provenance()["code"], "0123456789ab"]
