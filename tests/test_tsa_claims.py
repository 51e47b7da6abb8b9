"""fedcal/pages/tsa_claims.py: the verdict rules by hand, every quote the paper's own words, and the committed
literature table's invariant (every claim that does not match names its protocol difference and its run)."""

from pathlib import Path

import pandas as pd
import pytest

from fedcal.pages import glance, paper_quotes, tsa_claims

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def claims():
    return tsa_claims


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
        assert verdict in ("matches", "direction only", "contradicts", "not tested", "—"), claim
        if verdict != "matches":
            assert reason and run, claim


def test_every_claim_has_a_stated_rule(claims):
    assert set(claims.RULE_OF) == set(claims._literature().index)
    assert set(claims.RULE_OF.values()) <= set(claims.RULES)
    table = claims.claims_table()
    for name in claims.RULES:
        assert f"**{name}**" in table  # each rule is stated on the page


def test_plain_reads_the_papers_markdown_and_math_as_a_reader_does():
    q = paper_quotes
    assert q.plain("overly large  $\\tau$  noticeably (starting around  $\\tau \\approx 10$ ), <b>7.72</b> *x*") == \
        "overly large τ noticeably (starting around τ ≈ 10), 7.72 x"


@pytest.mark.skipif(not (ROOT.parent / "shared" / "seeds").exists(), reason="the source papers are not beside the checkout")
def test_every_quote_is_the_papers_own_words(claims):
    """A quote that paraphrases (the old "accuracy collapses beyond τ ≈ 10") is not in the paper's text."""
    q = paper_quotes
    for claim, quote in claims._literature()["literature"].items():
        for part in quote.split(" … "):
            assert q.quoted("tsa", part), f"{claim}: not the paper's words: {part}"
    assert not q.quoted("tsa", "accuracy collapses beyond τ ≈ 10")


def test_the_bound_onset_and_level_rules_by_hand(claims):
    assert claims._tolerance(0.8) == pytest.approx(0.05) and claims._tolerance(0.85) == pytest.approx(0.005)
    assert claims._tolerance(50) == pytest.approx(5) and claims._tolerance(2) == pytest.approx(0.5)
    # "above ~ 0.8": 0.76 is within the printed precision, 0.74 is not
    assert claims._bound_verdict(pd.Series([0.76, 0.9]), 0.8) == "matches"
    assert claims._bound_verdict(pd.Series([0.74, 0.9]), 0.8) == "direction only"  # mean 0.82
    assert claims._bound_verdict(pd.Series([0.857, 0.86]), 0.93) == "contradicts"
    assert claims._bound_verdict(pd.Series([60.3, 90.4]), 50, above=False) == "contradicts"
    # "starting around τ ≈ 10": first seen at 8 (within x1.5), at 20 (outside), never
    assert claims._onset_verdict([8.0, 10.0, 20.0], 10) == "matches"
    assert claims._onset_verdict([20.0], 10) == "direction only"
    assert claims._onset_verdict([], 10) == "contradicts"
    # 68.55 ± 0.73 against seeds 63.94-67.73: no overlap; against 63.94-67.9: overlap
    assert claims._level_verdict(pd.Series([63.94, 67.73]), 68.55, 0.73) == "contradicts"
    assert claims._level_verdict(pd.Series([63.94, 67.9]), 68.55, 0.73) == "matches"


def test_the_glance_page_is_generated_and_lists_every_claim(claims):
    """docs/glance.md is what fedcal/pages/glance.py makes (so build_results.py --check covers it) and has a row
    for every TSA claim, with the verdict its claims table computes."""
    page = (ROOT / "docs" / "glance.md").read_text()
    assert page == glance.page()
    rows = glance.tsa_rows()
    assert set(rows["claim"]) == set(claims._literature()["name"])
    assert set(rows["verdict"]) <= {"matches", "direction only", "contradicts", "not tested"}
    assert "| extreme τ |" in page
