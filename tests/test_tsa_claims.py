"""docs/tools/tsa_claims.py: the verdict rules by hand, and the committed literature table's invariant
(issue 35's acceptance: every claim that does not match names its protocol difference and its run)."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def claims():
    spec = importlib.util.spec_from_file_location("tsa_claims", ROOT / "docs" / "tools" / "tsa_claims.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_direction_rule_by_hand(claims):
    assert claims._sign_verdict(pd.Series([0.5, 1.0, 2.0]), +1) == "matches"
    assert claims._sign_verdict(pd.Series([-0.5, 1.0, 2.0]), +1) == "direction only"  # mean +0.83
    assert claims._sign_verdict(pd.Series([-3.0, 1.0, 1.0]), +1) == "contradicts"  # mean -0.33
    assert claims._worse("matches", "contradicts", "direction only") == "contradicts"


def _cells(rows):
    return pd.DataFrame(rows, columns=["dirichlet-alpha", "tau", "seed", "sece", "run_id", "chance_level"])


def test_sensitivity_row_counts_cells_against_their_own_seed_and_drops_chance_runs(claims):
    rows = []
    for a in (0.1, 1.0):
        for s in (0, 1):
            rows += [(a, 1.0, s, 0.02 * s, f"b{a}{s}", False), (a, 0.2, s, 0.02 * s + 0.05, f"l{a}{s}", False),
                     (a, 5.0, s, 0.02 * s - 0.05, f"h{a}{s}", False)]
    # seed 1 at alpha 0.1: tau 5 ends above its benign run (wrong side) -> not every cell, but every mean
    rows[3 + 2] = (0.1, 5.0, 1, 0.02 + 0.01, "h0.11", False)
    row = claims._sensitivity_row("dirichlet-alpha", "sens-alpha", _cells(rows))
    assert "τ = 0.2 in the claimed direction in 4 of 4" in row[1]
    assert "τ = 5 in the claimed direction in 3 of 4" in row[1]
    assert row[3] == "direction only" and row[4]  # a non-match names its reason
    # the same cell at chance is left out (and counted), and then every remaining cell agrees
    rows[3 + 2] = (0.1, 5.0, 1, -0.9, "h0.11", True)
    row = claims._sensitivity_row("dirichlet-alpha", "sens-alpha", _cells(rows))
    assert "τ = 5 in the claimed direction in 3 of 3" in row[1] and "1 run(s) at chance" in row[1]
    assert row[3] == "matches" and row[4] == ""


def test_every_committed_claim_is_answered(claims):
    """Each claim of the literature CSV has a row; a row that does not match names a difference and a run."""
    lit = claims._literature()
    rows = [r for make in claims.ROWS for r in make()]
    assert set(lit.index) == {r[0] for r in rows}
    for claim, fedcal, seeds, verdict, reason, run in rows:
        assert verdict in ("matches", "direction only", "contradicts", "—"), claim
        if verdict != "matches":
            assert reason and run, claim
