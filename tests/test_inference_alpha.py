"""fedcal/pages/inference_alpha.py: worst cases per Dirichlet α from the reports' cells, by hand."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fedcal.pages import inference_alpha


def _cells(folder: Path, acc: dict[tuple[str, str, int], float], n: int = 17, f: int = 4) -> Path:
    folder.mkdir(parents=True)
    rows = [{"aggregator": a, "attack": k, "seed": s, "accuracy": v, "n": n, "f": f} for (a, k, s), v in acc.items()]
    pd.DataFrame(rows).to_csv(folder / "cells.csv", index=False)
    return folder


def test_worst_case_per_seed_then_mean_and_std(tmp_path):
    alpha_table = inference_alpha.alpha_table
    low = _cells(tmp_path / "a03", {
        ("mean", "none", 0): 0.60, ("mean", "pgd", 0): 0.30, ("mean", "sia", 0): 0.20,
        ("mean", "none", 1): 0.62, ("mean", "pgd", 1): 0.10, ("mean", "sia", 1): 0.40,
        ("median", "none", 0): 0.50, ("median", "pgd", 0): 0.45, ("median", "sia", 0): 0.35,
        ("median", "none", 1): 0.54, ("median", "pgd", 1): 0.41, ("median", "sia", 1): 0.39,
    })
    high = _cells(tmp_path / "a08", {("mean", "none", 0): 0.70, ("mean", "pgd", 0): 0.25,
                                     ("median", "none", 0): 0.66, ("median", "pgd", 0): 0.5})
    _cells(tmp_path / "other-nf", {("mean", "none", 0): 0.1}, n=10, f=3)
    t = alpha_table({"0.3": low, "0.8": high}).set_index("aggregator")
    # mean: worst cases 0.20 (sia) and 0.10 (pgd) -> 15.00 ± 7.07; clean 61.00 ± 1.41
    assert t.loc["mean", "α=0.3 worst"] == "15.00 ± 7.07" and t.loc["mean", "α=0.3 clean"] == "61.00 ± 1.41"
    assert t.loc["median", "α=0.3 worst"] == "37.00 ± 2.83" and t.loc["median", "α=0.3 worst attack"] == "sia"
    assert t.loc["mean", "α=0.8 worst"] == "25.00" and t.loc["mean", "α=0.8 seeds"] == "1"
    assert t.loc["median", "α=0.3 seeds"] == "2"
    with pytest.raises(SystemExit, match="no n = 17, f = 4"):
        alpha_table({"0.5": tmp_path / "other-nf"})


def test_the_docs_section_appears_with_a_second_alpha_and_computes_deepset_tms_margin(tmp_path):
    res = tmp_path / "results"
    half = {("deepset_tm", "none", 0): 0.6, ("deepset_tm", "pgd", 0): 0.30,
            ("median", "none", 0): 0.55, ("median", "pgd", 0): 0.25,
            ("trimmed_mean", "none", 0): 0.56, ("trimmed_mean", "pgd", 0): 0.28}
    _cells(res / "inference-cifar10-resnet8", half)
    assert inference_alpha.alpha_section(res) == []  # α = 0.5 alone: nothing new to show
    low = {k: v - 0.1 for k, v in half.items()} | {("deepset_tm", "pgd", 0): 0.12}
    _cells(res / "inference-cifar10-resnet8-alpha0.3", low)
    (res / "inference-cifar10-resnet8-alpha").mkdir()
    (res / "inference-cifar10-resnet8-alpha" / "table.md").write_text("**title**\n\n| a |\n|---|\n| 1 |\n")
    text = "\n".join(inference_alpha.alpha_section(res))
    # α = 0.3: DeepSet-TM's worst 12 %, the best robust average the trimmed mean's 18 % -> -6.00 points
    assert "α = 0.3 (1 seed): the highest mean worst case is trimmed_mean's (18.00 %); DeepSet-TM 12.00 %, " \
           "-6.00 points from the best robust average (trimmed_mean, 18.00 %)." in text
    assert "α = 0.5 (1 seed): the highest mean worst case is deepset_tm's (30.00 %); DeepSet-TM 30.00 %, " \
           "+2.00 points" in text
    assert "--seeds 0 --report docs/results/inference-cifar10-resnet8-alpha0.3 dirichlet-alpha=0.3" in text
    assert "Worst case rising" not in text  # two levels give no direction
    _cells(res / "inference-cifar10-resnet8-alpha0.8", {k: v + (0.1 if k[0] == "median" else -0.3 * (k[1] == "pgd"))
                                                          for k, v in half.items()})
    text = "\n".join(inference_alpha.alpha_section(res))
    # median 15 -> 25 -> 35 rises; DeepSet-TM 12 -> 30 -> 0 and the trimmed mean 18 -> 28 -> -2 do not
    assert "Worst case rising with α (0.3 → 0.8, less heterogeneous clients): median; not rising: deepset_tm, " \
           "trimmed_mean." in text
