"""The literature values the claims tables compare with are the source papers' own numbers (../shared/seeds),
read from the papers' tables, not from a summary of them."""

from pathlib import Path

import pandas as pd
import pytest

from fedcal.pages import inference_audit, paper_quotes

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not (ROOT.parent / "shared" / "seeds").exists(),
                                reason="the source papers are not beside the checkout")


def test_the_rfd_lora_values_are_its_table_1():
    q = paper_quotes
    lit = pd.read_csv(ROOT / "docs" / "results" / "literature" / "rfd-lora.csv")
    column = {("CA", 0.3): 1, ("ASR", 0.3): 5}  # Table 1 (a): method, CA, RA/ASR at ρ = 0.10, RA/ASR at ρ = 0.30
    for r in lit.itertuples():
        assert q.quoted("rfd-lora", r.row), r.row
        assert float(r.row.split()[column[(r.metric, r.rho)]]) == pytest.approx(r.literature), r.claim


def test_the_inference_figures_are_its_table_2():
    q = paper_quotes
    audit = inference_audit
    row = "DeepSet-TM 67.6 ± 0.8 62.6 ± 1.6 61.0 ± 4.4 59.4 ± 4.7 51.4 ± 2.2 48.2 ± 4.2"  # worst case: last column
    best_average = "CWMed 56.7 ± 4.3 53.3 ± 2.0 53.8 ± 2.5 52.3 ± 2.9 49.3 ± 3.2 27.8 ± 4.7"
    assert q.quoted("inference", row) and q.quoted("inference", best_average)
    assert audit.LITERATURE_WORST == pytest.approx(48.2)
    assert audit.LITERATURE_MARGIN == pytest.approx(48.2 - 27.8)
