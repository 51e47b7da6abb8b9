"""One inference table over seeds from reports made by separate commands: fedcal.reports.inference's
combine_cells / write_inference_tables and fedcal/pages/inference_seeds.py, by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from fedcal.pages import inference_seeds
from fedcal.reports.chance import ChanceLevel
from fedcal.reports.inference import CHANCE, combine_cells, write_inference_tables


def _cells(acc: dict[tuple[int, int, str, str], float], f: int | None = None) -> pd.DataFrame:
    """Rows of accuracy.csv: (seed, n, aggregator, attack) -> accuracy; f = n // 4 unless given."""
    return pd.DataFrame([{"aggregator": a, "attack": k, "f_adv": f or n // 4, "amplification": 2.0, "accuracy": v,
                          "queries": 100, "seed": s, "n": n, "f": f or n // 4} for (s, n, a, k), v in acc.items()])


def test_a_run_reported_twice_is_kept_once_and_seeds_are_filtered():
    grid = _cells({(0, 8, "mean", "none"): 0.6, (0, 8, "mean", "lma"): 0.3,
                   (0, 12, "mean", "none"): 0.5, (0, 12, "mean", "lma"): 0.2})
    seeds = _cells({(s, 12, "mean", k): v + 0.01 * s for s in (0, 1, 2, 3) for k, v in (("none", 0.5), ("lma", 0.2))})
    cells = combine_cells([grid, seeds], seeds=[0, 1, 2], chance=ChanceLevel(classes=10, n=100, majority=0.1))
    # seed 0 of n = 12 is in both reports with the same rows: once; seed 3 is dropped
    assert len(cells) == 2 + 2 * 3
    assert sorted(cells.loc[cells["n"] == 12, "seed"].unique()) == [0, 1, 2]
    assert not cells[CHANCE].any()


def test_two_runs_claiming_one_seed_are_refused():
    a = _cells({(0, 8, "mean", "none"): 0.6})
    b = _cells({(0, 8, "mean", "none"): 0.61})
    with pytest.raises(ValueError, match="two different runs report seed 0 at n = 8, f = 2"):
        combine_cells([a, b], chance=ChanceLevel(classes=10, n=100, majority=0.1))


def test_chance_flags_are_retaken_per_run_or_carried():
    cells = _cells({(0, 8, "mean", "none"): 0.11, (0, 8, "mean", "lma"): 0.10,
                    (0, 8, "median", "none"): 0.7, (0, 8, "median", "lma"): 0.5,
                    (1, 8, "mean", "none"): 0.6, (1, 8, "mean", "lma"): 0.4})
    flagged = combine_cells([cells], chance=ChanceLevel(classes=10, n=100, majority=0.1))
    # 11 % of 100 queries is within noise of 1/10; only seed 0's mean (both of its rows) is flagged
    assert flagged.loc[flagged[CHANCE], ["seed", "aggregator"]].drop_duplicates().values.tolist() == [[0, "mean"]]
    with pytest.raises(ValueError, match="no chance_level column"):
        combine_cells([cells])
    carried = combine_cells([flagged])  # a report that has the flags keeps them
    key = ["seed", "aggregator", "attack"]
    assert carried.set_index(key)[CHANCE].sort_index().equals(flagged.set_index(key)[CHANCE].sort_index())


def test_the_written_scalability_table_is_the_worst_case_per_seed_then_mean(tmp_path):
    cells = _cells({(0, 8, "mean", "none"): 0.6, (0, 8, "mean", "lma"): 0.3, (0, 8, "mean", "sia"): 0.4,
                    (1, 8, "mean", "none"): 0.6, (1, 8, "mean", "lma"): 0.5, (1, 8, "mean", "sia"): 0.1,
                    (0, 12, "mean", "none"): 0.5, (0, 12, "mean", "lma"): 0.2})
    cells = combine_cells([cells], chance=ChanceLevel(classes=10, n=100, majority=0.1))
    write_inference_tables(cells, tmp_path, [None])
    text = (tmp_path / "scalability.md").read_text()
    # n = 8: worst cases 0.3 (seed 0) and 0.1 (seed 1) -> 20.00 ± 14.14; n = 12 one seed: 20.00
    assert "| mean | 20.00 ± 14.14 | 20.00 |" in text
    assert (tmp_path / "table_n8_f2.md").exists() and (tmp_path / "cells.csv").exists()


def test_the_tool_refuses_a_grid_with_a_seed_missing_in_one_cell(tmp_path):
    main = inference_seeds.main
    for name, acc in (("grid", {(0, 8, "mean", "none"): 0.6, (0, 12, "mean", "none"): 0.5}),
                      ("more", {(1, 8, "mean", "none"): 0.6})):
        (tmp_path / name).mkdir()
        _cells(acc).to_csv(tmp_path / name / "cells.csv", index=False)
    args = ["--seeds", "0-1", "--dataset", "cifar10", "--out", str(tmp_path / "out"),
            str(tmp_path / "grid"), str(tmp_path / "more")]
    with pytest.raises(SystemExit, match=r"n = 12, f = 3: seeds \[0\]"):
        main(args)
    _cells({(1, 12, "mean", "none"): 0.55}).to_csv(tmp_path / "more" / "cells.csv", mode="a", header=False, index=False)
    main(args)
    assert "| mean | 60.00 ± 0.00 | 52.50 ± 3.54 |" in (tmp_path / "out" / "scalability.md").read_text()
