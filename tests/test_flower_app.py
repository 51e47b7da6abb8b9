"""The Flower App as a package: what `flwr build` / `flwr run .` bundle, the LICENSE the metadata
names, the folders the README's commands leave behind, and where a `flwr run` run directory goes."""

import argparse
import hashlib
import io
import logging
import re
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pathspec

ROOT = Path(__file__).resolve().parents[1]


def _fab_names() -> list[str]:
    from flwr.cli.build import build_fab_from_disk

    return zipfile.ZipFile(io.BytesIO(build_fab_from_disk(ROOT))).namelist()


def test_the_fab_holds_the_package_and_its_metadata_only():
    """What a SuperLink runs (every module of fedcal) and what pyproject.toml names (README,
    LICENSE); no tests, docs, benchmarks or examples (1.66 MB before fab-include, most of it docs)."""
    names = _fab_names()
    assert not [n for n in names if n.split("/")[0] in ("tests", "docs", "benchmarks", "examples", ".ci")], names
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "fedcal").rglob("*.py") if "__pycache__" not in p.parts}
    assert {n for n in names if n.startswith("fedcal/")} == modules
    assert {n for n in names if not n.startswith("fedcal/")} == {"pyproject.toml", "README.md", "LICENSE", ".info/CONTENT"}


def test_license_is_the_apache_2_0_text_pyproject_names():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_bytes()
    # apache.org's LICENSE-2.0.txt, byte for byte (its well-known MD5)
    assert hashlib.md5(text).hexdigest() == "3b83ef96387f14655fc854ddc3c6bd57"


def _default_output_folders() -> set[str]:
    """The folders fedcal's commands write by default (--report / --out / --output, output-dir)
    and those the README's commands name (--report report/..., --out ...)."""
    from fedcal.cli import build_parser
    from fedcal.config import RunConfig

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    folders = {a.default for p in sub.choices.values() for a in p._actions
               if a.dest in ("report", "out", "output") and isinstance(a.default, str)}
    folders.add(RunConfig().output_dir)
    readme = (ROOT / "README.md").read_text()
    folders |= {m.split("/")[0] for m in re.findall(r"--(?:report|out|output) (\S+)", readme)}
    return folders


def test_gitignore_covers_every_default_output_folder():
    spec = pathspec.GitIgnoreSpec.from_lines((ROOT / ".gitignore").read_text().splitlines())
    folders = _default_output_folders()
    assert {"runs", "report", "fedcal-demo", "fedcal-defense", "fedcal-sweep"} <= folders
    missing = sorted(f for f in folders if not spec.match_file(f"{f}/table.md"))
    assert not missing, f".gitignore does not cover {missing}"
    assert not spec.match_file("fedcal/config.py") and not spec.match_file("docs/results/x/table.md")


def test_a_flower_run_says_where_its_run_directory_is(tmp_path, monkeypatch, caplog):
    """Under `flwr run` the ServerApp's working directory is the local SuperLink's (wherever the
    first `flwr run` started it): a relative output-dir is resolved there and logged as a warning
    with the fix; an absolute one is logged as it is."""
    from fedcal.app.server import announce_run_dir
    from fedcal.config import RunConfig
    from fedcal.results import run_dir_for

    monkeypatch.chdir(tmp_path)
    cfg = RunConfig(dataset="digits", output_dir="runs")
    with caplog.at_level(logging.INFO, logger="flwr"):
        got = announce_run_dir(cfg)
    assert got == tmp_path / "runs" / run_dir_for(cfg).name
    warning = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and str(got) in warning[0].getMessage() and str(tmp_path) in warning[0].getMessage()
    assert "output-dir='$PWD/runs'" in warning[0].getMessage()
    caplog.clear()
    absolute = cfg.replace(output_dir=str(tmp_path / "elsewhere"))
    with caplog.at_level(logging.INFO, logger="flwr"):
        assert announce_run_dir(absolute) == run_dir_for(absolute)
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert not (tmp_path / "runs").exists()  # saying where is not creating it


def _serve(tmp_path, caplog, supernodes: int, **run_config):
    """fedcal's ServerApp and ClientApp (the Flower App) on the in-process engine with ``run_config``
    as Flower hands it (the pyproject block plus the overrides): (ERROR lines, run directory state)."""
    from fedcal.app.client import app as client_app
    from fedcal.app.inprocess import run_inprocess
    from fedcal.app.server import app as server_app
    from fedcal.config.pyproject import FLOWER_APP_DEFAULTS
    from fedcal.results import run_state

    defaults = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert {k: defaults[k] for k in FLOWER_APP_DEFAULTS} == FLOWER_APP_DEFAULTS
    config = {**defaults, "output-dir": str(tmp_path / "runs"), **run_config}
    with caplog.at_level(logging.INFO, logger="flwr"):
        run_inprocess(server_app, client_app, num_supernodes=supernodes, run_config=config, seed=0)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    runs = sorted((tmp_path / "runs").iterdir()) if (tmp_path / "runs").exists() else []
    return errors, [run_state(d) for d in runs]


def test_the_flower_apps_defaults_run_on_flowers_default_federation(tmp_path, caplog):
    """The pyproject block as it is (what a plain `flwr run .` gets) on 2 SuperNodes, Flower's
    default local federation: digits (no download), 2 clients, 3 rounds, finished."""
    errors, states = _serve(tmp_path, caplog, 2)
    assert not errors and len(states) == 1 and states[0].status == "finished", (errors, states)
    assert states[0].last_round == 3


def test_a_federation_of_another_size_fails_in_one_line_naming_the_mismatch(tmp_path, caplog, monkeypatch):
    """num-clients=3 on 2 SuperNodes: after NODE_WAIT_S the ServerApp gives up with one error line
    naming both numbers and both fixes (no traceback, no exception out of the ServerApp), and the
    run directory says failed, with that reason, to `fedcal runs`."""
    from fedcal.tasks import nodes

    monkeypatch.setattr(nodes, "NODE_WAIT_S", 0.2)
    errors, states = _serve(tmp_path, caplog, 2, **{"num-clients": 3})
    assert len(errors) == 1 and "\n" not in errors[0], errors
    assert "waited 0 s for 3 SuperNodes (run-config 'num-clients'), 2 connected: start 3 (`flwr run`: " \
           "--federation-config \"num-supernodes=3\") or set num-clients=2" in errors[0]
    assert len(states) == 1 and states[0].status == "failed" and "waited 0 s for 3 SuperNodes" in states[0].reason


def test_a_dataset_that_is_not_there_fails_in_one_line_with_a_failed_run_directory(tmp_path, caplog):
    """dataset='mnist' whose data-dir holds unreadable files: the preflight's one line (naming the
    key), before any round; the run directory is made to say failed (nothing else had made it)."""
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        np.savez(data / f"mnist_{split}.npz", images=np.zeros((1, 28, 28)))
    errors, states = _serve(tmp_path, caplog, 2, dataset="mnist", **{"data-dir": str(data)})
    assert len(errors) == 1 and "run-config key 'data-dir'" in errors[0] and "lacks arrays" in errors[0], errors
    assert len(states) == 1 and states[0].status == "failed" and "lacks arrays" in states[0].reason, states
