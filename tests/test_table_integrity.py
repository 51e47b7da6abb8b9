"""Every committed result table (docs/results/**): one run id names one result; every "n seeds" is the count
averaged, each seed left out named with its reason (docs/tools/table_integrity.py)."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def integrity():
    return _tool("table_integrity")


def _write(path: Path, frame: pd.DataFrame) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return path


RID = "cifar10-cnn-fedavg-tsa5-s1-527b1ed5"


def test_the_scan_finds_one_run_id_with_two_values(integrity, tmp_path):
    # the same run in percent in one table, as a fraction (under its run directory) in another
    _write(tmp_path / "a" / "table.csv", pd.DataFrame({"run_id": [RID], "accuracy_%": [48.16], "sece_%": [-7.99]}))
    _write(tmp_path / "b" / "runs.csv", pd.DataFrame({"run_dir": [f"runs/x/{RID}"], "accuracy": [0.4804],
                                                      "sece": [-0.0799]}))
    # a post-hoc calibrator's reading of the run is another measurement, never compared with the run's own
    _write(tmp_path / "c" / "posthoc.csv", pd.DataFrame({"run_dir": [f"runs/x/{RID}"], "method": ["temperature"],
                                                         "accuracy": [0.47], "sece": [0.01]}))
    bad = integrity.two_valued(integrity.readings(root=tmp_path))
    assert list(bad["metric"]) == ["accuracy"]  # sECE agrees to the printed precision (-7.99 either way)
    assert "0.4804 (b/runs.csv)" in bad["values"].iloc[0] and "0.4816 (a/table.csv)" in bad["values"].iloc[0]


def test_a_remade_copy_gets_its_own_id(integrity, tmp_path, monkeypatch):
    _write(tmp_path / "a" / "table.csv", pd.DataFrame({"run_id": [RID], "accuracy_%": [48.16]}))
    _write(tmp_path / "b" / "runs.csv", pd.DataFrame({"run_dir": [f"runs/x/{RID}"], "accuracy": [0.4804],
                                                      "seeds": [1]}))
    monkeypatch.setattr(integrity, "REMADE", {"b": ("x", "another run store")})
    assert integrity.tag(tmp_path) == [tmp_path / "b" / "runs.csv"]
    assert integrity.tag(tmp_path) == []  # once
    assert pd.read_csv(tmp_path / "b" / "runs.csv")["run_dir"].tolist() == [f"runs/x/{RID}@x"]
    assert (tmp_path / "b" / "runs.csv").read_text().splitlines()[1].endswith(",0.4804,1")  # other cells as they were
    assert integrity.two_valued(integrity.readings(root=tmp_path)).empty


def test_no_committed_run_id_names_two_values(integrity):
    bad = integrity.two_valued(integrity.readings())
    assert bad.empty, "run ids with two values:\n" + "\n".join(
        f"{b.run_id} {b.metric}: {b.values}" for b in bad.itertuples())
