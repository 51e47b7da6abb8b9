"""fedcal.pages.inference_claims: the robust-inference claims computed from hand-made report files."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest


@pytest.fixture()
def audit(tmp_path, monkeypatch):
    """The claims, reading their report files from ``tmp_path``."""
    from fedcal.pages import inference_audit, inference_claims

    monkeypatch.setattr(inference_audit, "RES", tmp_path)
    return inference_claims


def _cells(folder: Path, acc: dict[tuple[str, str, int], float]) -> None:
    folder.mkdir(parents=True)
    rows = [{"aggregator": a, "attack": k, "seed": s, "accuracy": v, "n": 17, "f": 4, "queries": 100}
            for (a, k, s), v in acc.items()]
    pd.DataFrame(rows).to_csv(folder / "cells.csv", index=False)


def _worst(audit, per_seed: dict[str, list[float]]) -> pd.DataFrame:
    cells = pd.DataFrame([{"aggregator": a, "attack": "pgd_cw", "seed": s, "accuracy": v}
                          for a, vs in per_seed.items() for s, v in enumerate(vs)])
    return audit._worst(cells)


def test_the_best_set_aggregator_is_a_tie_when_its_lead_is_inside_the_seed_spread(audit):
    # deepset_tm 0.20 ± 0.02 (seeds 0.18, 0.20, 0.22), deepset 0.19 ± 0.00: a 1-point lead, a 2-point std
    tie = _worst(audit, {"deepset_tm": [0.18, 0.20, 0.22], "deepset": [0.19, 0.19, 0.19], "mean": [0.1] * 3})
    value, _, verdict, difference = audit._best_set_cells(tie, ["mean", "deepset", "deepset_tm"], "seeds 0–2", "gap")
    assert value == "deepset_tm, 1.00 points ahead of deepset"
    assert verdict == "tie: deepset_tm ahead by less than one seed-to-seed std (2.00)" and difference == ""
    # a lead of 5 points over a 1-point spread is a ranking
    clear = _worst(audit, {"deepset_tm": [0.24, 0.25, 0.26], "deepset": [0.20, 0.20, 0.20], "mean": [0.1] * 3})
    assert audit._best_set_cells(clear, ["mean", "deepset", "deepset_tm"], "", "gap")[2:] == ("matches", "")
    other = _worst(audit, {"deepset_tm": [0.10, 0.10, 0.10], "deepset": [0.20, 0.20, 0.20], "mean": [0.1] * 3})
    assert audit._best_set_cells(other, ["mean", "deepset", "deepset_tm"], "", "gap")[2:] == ("contradicts", "gap")


def test_the_pgd_claim_reads_the_fall_from_20_steps_of_the_literatures_attack(audit, tmp_path):
    def run(name: str, acc20: float) -> None:
        _cells(tmp_path / "inference-i35-pgd" / name, {("deepset_tm", "none", 0): 0.6, ("deepset_tm", "pgd_cw", 0): acc20})

    # the literature's: 0.30 at 10 steps (ignored: the claim starts at 20), 0.22 -> 0.20 -> 0.195 from 20 on
    for steps, acc in ((10, 0.30), (20, 0.22), (50, 0.20), (100, 0.195)):
        run(f"literature-{steps}", acc)
    for steps, acc in ((20, 0.34), (50, 0.21)):
        run(f"fedcal-{steps}", acc)
    (claim,) = audit._pgd_claim()
    assert claim[2] == ("literature's PGD-CW: 22.00 → 20.00 → 19.50 % (20 → 50 → 100 steps); "
                        "fedcal's: 34.00 → 21.00 % (20 → 50 steps)")
    assert claim[3] == "seed 0" and claim[4] == "matches"  # 2.5 points from 20 to 100: within 3
    run("literature-200", 0.10)  # not a step count of the table: not read
    assert audit._pgd_claim()[0][4] == "matches"
    (tmp_path / "inference-i35-pgd" / "literature-100" / "cells.csv").unlink()
    (tmp_path / "inference-i35-pgd" / "literature-100").rmdir()
    run("literature-100", 0.15)  # 7 points from 20 to 100
    assert audit._pgd_claim()[0][4] == "contradicts"


def test_the_theorem_regime_shares_by_hand(audit, tmp_path):
    res = tmp_path / "inference-i35-theorem"
    res.mkdir()
    rows = []
    for attack, changed in (("none", (0.0, 0.0, 0.1)), ("sia_whitebox", (0.0, 0.2, 0.6))):
        for (bin_, queries), ch in zip((("[0.5, 1.0)", 10), ("[1.0, 2.0)", 30), ("[2.0, 5.0)", 60)), changed):
            rows.append({"aggregator": "trimmed_mean", "attack": attack, "bin": bin_, "queries": queries,
                         "changed": ch, "wrong": 0.0, "error": 0.0, "margin": 1.0})
            rows.append({"aggregator": "mean", "attack": attack, "bin": bin_, "queries": queries,
                         "changed": 0.9, "wrong": 0.0, "error": 0.0, "margin": 1.0})
    pd.DataFrame(rows).to_csv(res / "theorem_bins.csv", index=False)
    regime = audit._theorem_regime()
    assert regime["ge1"] == pytest.approx(0.9) and regime["ge2"] == pytest.approx(0.6)
    # the trimmed mean's rows only; below 1 nothing changed, at >= 2 60 % of the 60 queries
    assert regime["changed_ge2"] == pytest.approx(0.6) and regime["changed_lt1"] == 0.0
