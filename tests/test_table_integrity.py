"""Every committed result table (docs/results/**): one run id names one result; every "n seeds" is the count
averaged, each seed left out named with its reason (fedcal/pages/table_integrity.py)."""

from pathlib import Path

import pandas as pd
import pytest

from fedcal.pages import table_integrity

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def integrity():
    return table_integrity


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


def _runs_of(runs: pd.DataFrame, row: pd.Series, keys: list[str]) -> pd.DataFrame:
    """The runs of a summary row: those equal to it on every key (a missing key value matching a missing one)."""
    mask = pd.Series(True, index=runs.index)
    for k in keys:
        mask &= (runs[k] == row[k]) | (runs[k].isna() & pd.isna(row[k]))
    return runs[mask]


# (summary over seeds, the per-run table it averages, the per-run accuracy column and its scale)
SUMMARIES = (("table_seeds.csv", "table.csv", "accuracy_%", 100), ("robustness.csv", "robustness_runs.csv", "accuracy", 1),
             ("seeds.csv", "cells.csv", "accuracy", 1))
NOT_KEYS = ("seeds", "seeds_in_means", "chance_level", "stalled", "left_out", "replies_rejected_total")


def _summaries():
    for summary, runs, acc, scale in SUMMARIES:
        for path in sorted((ROOT / "docs" / "results").rglob(summary)):
            if (path.parent / runs).exists():
                yield path, path.parent / runs, acc, scale


@pytest.mark.parametrize("summary, runs, acc, scale", list(_summaries()),
                         ids=lambda v: v.parent.name if isinstance(v, Path) else None)
def test_every_seed_count_is_the_count_averaged_and_every_seed_left_out_is_named(summary, runs, acc, scale):
    """Recounted from the per-run table, independently of the builder: a run is averaged when its accuracy is
    a number and its model neither at chance nor stalled; ``seeds`` is how many were, and every other run's
    seed is named with its reason in ``left_out``."""
    s, r = pd.read_csv(summary), pd.read_csv(runs)
    assert "chance_level" in r.columns, f"{runs.relative_to(ROOT)} flags no run at chance"
    keys = [c for c in s.columns if not c.endswith(("_mean", "_std")) and c not in NOT_KEYS and c in r.columns]
    flagged = r["chance_level"].fillna(False).astype(bool)
    if "stalled" in r.columns:
        flagged |= r["stalled"].fillna(False).astype(bool)
    r = r.assign(_in=r[acc].notna() & ~flagged)
    for _, row in s.iterrows():
        group = _runs_of(r, row, keys)
        assert len(group), f"{summary.relative_to(ROOT)}: no runs for {row[keys].to_dict()}"
        assert int(row["seeds"]) == int(group["_in"].sum()), (
            f"{summary.relative_to(ROOT)} {row[keys].to_dict()}: says {row['seeds']} seeds, averages "
            f"{int(group['_in'].sum())}")
        out = group[~group["_in"]]
        named = str(row.get("left_out", "")) if pd.notna(row.get("left_out", "")) else ""
        for seed in out["seed"]:
            assert f"seed {int(seed)}: " in named, f"{summary.relative_to(ROOT)} {row[keys].to_dict()}: seed {seed} " \
                                                   "left out without its reason"
        if len(out):  # and the mean is over the averaged runs only
            averaged = group.loc[group["_in"], acc]
            mean = row[f"{acc}_mean"]
            assert (averaged.empty and pd.isna(mean)) or mean == pytest.approx(averaged.mean())


def test_no_internal_issue_number_in_docs_or_the_package():
    """A reader cannot open "issue 35 §1": history belongs in commit messages, not in docs/ or fedcal/."""
    import re

    pattern = re.compile(r"\bissues? ?#?\d+", re.I)
    hits = []
    for top in ("docs", "fedcal"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in (".md", ".py", ".sh", ".txt", ".csv", ".toml") or not path.is_file():
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits)


def _defense_tables():
    """The committed defense tables: a summary over seeds (``table.csv``, with its ``target`` column)
    beside the per-run table it averages (``runs.csv``)."""
    for path in sorted((ROOT / "docs" / "results").glob("*/table.csv")):
        runs = path.parent / "runs.csv"
        if runs.exists() and {"seeds", "target"} <= set(pd.read_csv(path, nrows=0).columns):
            yield path, runs


#: the per-run columns of a defense table that are results, not the setting a row groups by
DEFENSE_RESULTS = ("seed", "run_dir", "accuracy", "ece", "sece", "detection", "false_positive", "attacker_replies")


@pytest.mark.parametrize("summary, runs", list(_defense_tables()), ids=lambda v: v.parent.name)
def test_every_defense_row_counts_the_seeds_it_averages(summary, runs):
    """Recounted from ``runs.csv`` with a rule of its own (a run is averaged when its accuracy is a number
    and more than twice the 10 classes' chance): each row's ``seeds`` is how many of its runs are, and a
    run left out is named in the row's ``left_out`` — the defense tables' half of the seed-count check."""
    s, r = pd.read_csv(summary), pd.read_csv(runs)
    keys = [c for c in s.columns if c in r.columns and c not in DEFENSE_RESULTS]
    assert "strategy" in keys and "tau" in keys, keys
    for _, row in s.iterrows():
        group = _runs_of(r, row, keys)
        assert len(group), f"{summary.relative_to(ROOT)}: no runs for {row[keys].to_dict()}"
        averaged = group["accuracy"].notna() & (group["accuracy"] > 0.2)
        assert int(row["seeds"]) == int(averaged.sum()), f"{summary.relative_to(ROOT)} {row[keys].to_dict()}"
        for seed in group.loc[~averaged, "seed"]:
            assert f"seed {int(seed)}: " in str(row.get("left_out", "")), (summary, seed)
