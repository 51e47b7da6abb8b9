"""fedcal/pages/distill_literature.py: RFD-LoRA's Tables 1 and 3 in the paper's layout beside a hand-made
runs.csv (every expected cell computed by hand in the comments), the full-configuration filter of the
claims (a replayed server variant never enters Table 1), and the literature CSVs against the paper's text
(docs/results/literature/rfd-lora-table{1,3}.csv; skipped when the papers are not beside the checkout)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
LIT = ROOT / "docs" / "results" / "literature"
SEED = ROOT.parent / "shared" / "seeds" / "003_b3a743978aa28556.txt"


@pytest.fixture(scope="module")
def dl():
    from fedcal.pages import distill_literature

    return distill_literature


def run(method, partition, rho, seed, ca, ra, asr, *, variant="full", aggregator="mom", groups=5, attack="none",
        chance=False, steps=16, tag=""):
    return {"run_id": f"distill-{method}-{partition}-bd{rho}-s{seed}-{variant}-{aggregator}{groups}-{attack}{tag}",
            "dst-method": method, "dst-partition": partition, "dst-backdoor-ratio": rho, "dst-logit-attack": attack,
            "dst-aggregator": aggregator, "dst-groups": groups, "dst-corpus": "sentiment", "seed": seed,
            "dst-anchor-attack": "none", "dst-prior-correct": False, "dst-distill-steps": steps, "ca": ca, "ra": ra,
            "asr": asr, "chance_level": chance, "variant": variant}


def three(method, partition, rho, cas, ras, asrs, **kw):
    chance = kw.pop("chance", (False, False, False))
    return [run(method, partition, rho, s, ca, ra, asr, chance=c, **kw)
            for s, (ca, ra, asr, c) in enumerate(zip(cas, ras, asrs, chance))]


RUNS = pd.DataFrame([
    # RFD-LoRA, full configuration, IID, ρ = 0.3: ASR 10, 20, 30 → 20.0 ± 10.0; RA 90, 80, 70 → 80.0 ± 10.0
    *three("rfd", "iid", 0.3, (0.70, 0.72, 0.74), (0.90, 0.80, 0.70), (0.10, 0.20, 0.30)),
    # its replays on the same seeds: the mean aggregator (ASR 50 each), M = 3 (ASR 40 each), w/o CAT (ASR 60 each)
    # and the logit attack (ASR 90 each) — none of them is a Table-1 run
    *three("rfd", "iid", 0.3, (0.6,) * 3, (0.5,) * 3, (0.5,) * 3, aggregator="mean"),
    *three("rfd", "iid", 0.3, (0.6,) * 3, (0.6,) * 3, (0.4,) * 3, groups=3),
    *three("rfd", "iid", 0.3, (0.65,) * 3, (0.4,) * 3, (0.6,) * 3, variant="w/o CAT"),
    *three("rfd", "iid", 0.3, (0.6,) * 3, (0.1,) * 3, (0.9,) * 3, attack="flip"),
    # RFD-LoRA CA at ρ = 0: 70, 72, 74 → 72.0 ± 2.0
    *three("rfd", "iid", 0.0, (0.70, 0.72, 0.74), (0.9,) * 3, (0.1,) * 3),
    # FedIT CA at ρ = 0 with seed 0 at chance: 50, 60, 70 → 60.0 ± 10.0 † 1/3
    *three("fedit", "iid", 0.0, (0.50, 0.60, 0.70), (0.9,) * 3, (0.1,) * 3, chance=(True, False, False)),
    # FLoRA RA at ρ = 0.1 over two seeds only: 80, 90 → 85.0 ± 7.1 [2 seeds] (std of 80, 90: √50 = 7.07)
    run("flora", "iid", 0.1, 0, 0.7, 0.80, 0.20), run("flora", "iid", 0.1, 1, 0.7, 0.90, 0.10),
    # RFD-LoRA on label skew at ρ = 0.3: one seed → 55.0 [1 seed]
    run("rfd", "skew", 0.3, 0, 0.55, 0.50, 0.50),
])


def test_a_replayed_server_variant_never_enters_the_table_1_cell(dl):
    """The claims' cell is the full configuration only: the mean-aggregator, M = 3, w/o CAT and
    logit-attack replays of the same three seeds stay out (the filter once took every variant-full
    run, whatever its aggregator or M: six ASR values where there are three)."""
    assert sorted(dl.cell(RUNS, "rfd", "iid", 0.3, "ASR")) == pytest.approx([10.0, 20.0, 30.0])
    assert dl.fmt(dl.cell(RUNS, "rfd", "iid", 0.3, "ASR")) == "20.0 ± 10.0"
    # a baseline owns no aggregator: its runs' recorded dst-aggregator does not filter them
    assert sorted(dl.cell(RUNS, "fedit", "iid", 0.0, "CA")) == pytest.approx([50.0, 60.0, 70.0])


def test_two_runs_of_one_seed_in_a_cell_name_the_setting_they_differ_in(dl):
    doubled = pd.concat([RUNS, pd.DataFrame([run("rfd", "iid", 0.3, 0, 0.7, 0.9, 0.1, steps=32, tag="-long")])])
    with pytest.raises(ValueError, match="two runs of one seed.*dst-distill-steps"):
        dl.cell(doubled, "rfd", "iid", 0.3, "ASR")


@pytest.fixture
def capacity(tmp_path):
    path = tmp_path / "capacity.csv"
    pd.DataFrame({"model": ["constant (majority class)", "TF-IDF 1-2-grams + logistic regression",
                            "LoRA r=8 on query+value, top 2 layers + head, all private data"],
                  "test accuracy (%)": [50.0, 66.0, 80.0], "note": ["", "", ""]}).to_csv(path, index=False)
    return path


def test_table_1_in_the_papers_layout_by_hand(dl, capacity):
    lit = pd.read_csv(LIT / "rfd-lora-table1.csv")
    a = dl.table1(RUNS, lit, "iid", capacity).set_index("method")
    # the two reference rows, CA only
    assert a.loc["majority class (capacity table)"].tolist() == ["50.0", "–", "–", "–", "–"]
    assert a.loc["centralised LoRA r=8, all private data (capacity table)"].tolist() == ["80.0", "–", "–", "–", "–"]
    # methods in the paper's order, under fedcal's names
    assert list(a.index[2:]) == ["FedAvg", "FFA-LoRA", "FedIT", "FLoRA", "FlexLoRA", "LoRA-FAIR (paper: LoRA-Fair)",
                                 "RFD-LoRA"]
    rfd = a.loc["RFD-LoRA"]
    assert rfd["CA (ρ = 0)"] == "72.0 ± 2.0 (90.6)"
    assert rfd["RA ρ = 0.3"] == "80.0 ± 10.0 (86.8)"
    assert rfd["ASR ρ = 0.3"] == "20.0 ± 10.0 (10.7)"
    assert rfd["ASR ρ = 0.1"] == "not run (5.1)"
    assert a.loc["FedIT", "CA (ρ = 0)"] == "60.0 ± 10.0 † 1/3 (89.0)"
    assert a.loc["FLoRA", "RA ρ = 0.1"] == f"85.0 ± {math.sqrt(50):.1f} [2 seeds] (86.5)" == "85.0 ± 7.1 [2 seeds] (86.5)"
    assert a.loc["FLoRA", "ASR ρ = 0.1"] == "15.0 ± 7.1 [2 seeds] (11.9)"
    assert a.loc["FedAvg"].tolist() == [f"not a fedcal method ({v})" for v in ("88.2", "84.0", "18.5", "78.3", "35.2")]
    assert a.loc["FlexLoRA"].tolist() == [f"not run ({v})" for v in ("89.7", "87.2", "9.8", "83.0", "19.6")]
    b = dl.table1(RUNS, lit, "skew", capacity).set_index("method")
    assert b.loc["RFD-LoRA", "CA (ρ = 0)"] == "not run (90.0)"
    assert b.loc["RFD-LoRA", "RA ρ = 0.3"] == "50.0 [1 seed] (85.0)"
    assert b.loc["FedIT", "ASR ρ = 0.3"] == "not run (28.2)"
    # no cell without a finished run carries a number of fedcal's
    for frame in (a, b):
        for text in frame.iloc[2:].to_numpy().ravel():
            assert re.fullmatch(r"(not run|not a fedcal method|\d+\.\d( ± \d+\.\d)?( † \d/\d)?( \[\d seeds?\])?) "
                                r"\(\d+\.\d\)", text), text


def test_table_3_in_the_papers_layout_by_hand(dl):
    lit = pd.read_csv(LIT / "rfd-lora-table3.csv")
    left, right = dl.table3(RUNS, lit, 0.3)
    left, right = left.set_index("variant"), right.set_index("aggregator")
    assert list(left.index) == ["Full", "w/o CAT", "w/o MMD-KD", "w/o DIS", "CAT only", "MMD-KD only", "DIS only"]
    assert left.loc["Full", "IID ASR"] == "20.0 ± 10.0 (5.1)"
    assert left.loc["w/o CAT", "IID CA"] == "65.0 ± 0.0 (90.1)"
    assert left.loc["w/o CAT", "label skew ASR"] == "not run (10.2)"
    assert left.loc["DIS only", "IID RA"] == "not run (87.6)"
    assert right.loc["Mean (fedcal: mean, M = 5)", "IID ASR"] == "50.0 ± 0.0 (22.8)"
    assert right.loc["Mean (fedcal: mean, M = 5)", "label skew ASR"] == "not run (–)"
    assert right.loc["Coord. Median (fedcal: median, M = 5)", "IID CA"] == "not run (89.7)"
    assert right.loc["MoM (ours) (fedcal: mom, M = 5)", "IID RA"] == "80.0 ± 10.0 (86.8)"
    # an M row per groups value the runs have under MoM (3 and the default 5); the paper prints only a claim
    assert right.loc["MoM, M = 3", "IID ASR"] == "40.0 ± 0.0 (–)"
    assert right.loc["MoM, M = 5", "IID ASR"] == "20.0 ± 10.0 (lowest in the paper)"
    assert right.loc["MoM, M = 5", "IID CA"] == "72.0 ± 2.0 (–)"


def test_the_command_writes_both_tables_and_refuses_in_one_line(dl, tmp_path, capacity, capsys):
    first, second = tmp_path / "main", tmp_path / "replays"
    first.mkdir(), second.mkdir()
    RUNS.iloc[:3].to_csv(first / "runs.csv", index=False)  # the full runs, in both folders: counted once
    RUNS.to_csv(second / "runs.csv", index=False)
    assert dl.main(["--paper-layout", str(first), str(second), "--capacity", str(capacity)]) == 0
    out = capsys.readouterr().out
    assert "| RFD-LoRA | 72.0 ± 2.0 (90.6) | not run (89.1) | not run (5.1) | 80.0 ± 10.0 (86.8) | 20.0 ± 10.0 (10.7) |" \
        in out
    assert "**Table 1 (b) label skew (the paper's severe non-IID)" in out and "**Table 3 (left)" in out
    for argv, words in ((["--paper-layout", str(tmp_path)], "no runs.csv"),
                        (["--paper-layout", str(first), "--ablation-rho", "2"], "--ablation-rho"),
                        (["--paper-layout", str(first), "--capacity", str(tmp_path / "no.csv")], "no such file"),
                        ([], "--paper-layout FOLDER")):
        with pytest.raises(SystemExit) as done:
            dl.main(argv)
        err = capsys.readouterr().err
        assert done.value.code == 2 and len(err.strip().splitlines()) == 1 and words in err, err


# ---- the literature CSVs against the paper's text ----------------------------------------------------

paper_present = pytest.mark.skipif(not SEED.exists(), reason="the source papers are not beside the checkout")


def _numbers_after(line: str, names) -> dict[str, list[list[float]]]:
    """Each row name of ``names`` on a tab-separated line of the paper -> the numbers that follow it."""
    fields = [f.strip() for f in line.split("\t")]
    found: dict[str, list[list[float]]] = {}
    for i, f in enumerate(fields):
        if f in names:
            nums = []
            for g in fields[i + 1:]:
                if not re.fullmatch(r"\d+\.\d", g):
                    break
                nums.append(float(g))
            found.setdefault(f, []).append(nums)
    return found


@paper_present
def test_every_table_1_value_is_on_the_papers_row_line():
    """The paper's Table-1 lines hold panel (a) then panel (b) of one method: CA, RA/ASR at 0.10, RA/ASR at 0.30."""
    from fedcal.pages import paper_quotes

    lit = pd.read_csv(LIT / "rfd-lora-table1.csv")
    names = set(lit["method"])
    printed = {}
    for line in SEED.read_text().splitlines():
        for name, rows in _numbers_after(line, names).items():
            if [len(r) for r in rows] == [5, 5]:
                printed[("iid", name)], printed[("skew", name)] = rows
    assert len(printed) == 14 and len(lit) == 70
    column = {("CA", None): 0, ("RA", 0.1): 1, ("ASR", 0.1): 2, ("RA", 0.3): 3, ("ASR", 0.3): 4}
    for r in lit.itertuples():
        rho = None if pd.isna(r.rho) else r.rho
        assert printed[(r.partition, r.method)][column[(r.metric, rho)]] == r.value, r
        assert paper_quotes.quoted("rfd-lora", r.row), r.row
        assert "caption does not say at which ρ" in r.source


@paper_present
def test_every_table_3_value_is_on_the_papers_row_line():
    from fedcal.pages import paper_quotes

    lit = pd.read_csv(LIT / "rfd-lora-table3.csv")
    variants = set(lit.loc[lit["part"] == "modules", "method"])
    aggregators = set(lit.loc[lit["part"] == "aggregator", "method"])
    printed = {}
    for line in SEED.read_text().splitlines():
        for name, rows in _numbers_after(line, variants | aggregators).items():
            if name in variants and [len(r) for r in rows] == [6]:
                printed[("iid", name)], printed[("skew", name)] = rows[0][:3], rows[0][3:]
            elif name in aggregators and [len(r) for r in rows] == [3]:
                printed[("iid", name)] = rows[0]
    assert len(printed) == 17
    values = lit[lit["value"].notna()]
    assert len(values) == 7 * 2 * 3 + 3 * 3
    for r in values.itertuples():
        assert printed[(r.partition, r.method)][["CA", "RA", "ASR"].index(r.metric)] == r.value, r
    for text in lit["row"]:
        assert paper_quotes.quoted("rfd-lora", text), text
    claim = lit[lit["part"] == "groups"]
    assert claim["value"].isna().all() and claim["method"].tolist() == ["M = 5"]


def test_the_claims_file_is_table_1s_own_values():
    """docs/results/literature/rfd-lora.csv (the glance page's and the claims' four values) is derivable
    from the full Table 1: the same value and row text (its CA compared at ρ = 0.3 by the claim's choice)."""
    t1 = pd.read_csv(LIT / "rfd-lora-table1.csv")
    for r in pd.read_csv(LIT / "rfd-lora.csv").itertuples():
        hit = t1[(t1["method"] == r.method) & (t1["partition"] == r.partition) & (t1["metric"] == r.metric)
                 & ((t1["rho"] == r.rho) | (t1["rho"].isna() & (r.metric == "CA")))]
        assert len(hit) == 1 and hit["value"].iloc[0] == r.literature and hit["row"].iloc[0] == r.row, r


def test_the_glance_claims_quote_each_panel_and_say_not_run_for_an_empty_cell(tmp_path, monkeypatch):
    """The glance page's RFD-LoRA rows quote the paper's own panel for each partition (Table 1 (b) for
    label skew, not (a)'s values) and a cell without a finished run reads "not run", never a verdict."""
    from fedcal.pages import glance

    (tmp_path / "literature").mkdir()
    (tmp_path / "literature" / "rfd-lora.csv").write_text((LIT / "rfd-lora.csv").read_text())
    rows = (three("rfd", "iid", 0.3, (0.72, 0.73, 0.71), (0.7, 0.7, 0.7), (0.30, 0.25, 0.35))
            + three("fedit", "iid", 0.3, (0.73, 0.74, 0.72), (0.4, 0.4, 0.4), (0.60, 0.62, 0.58))
            + three("rfd", "skew", 0.3, (0.70, 0.70, 0.70), (0.8, 0.8, 0.8), (0.2, 0.2, 0.2)))
    (tmp_path / "runs-here").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "runs-here" / "runs.csv", index=False)
    monkeypatch.setattr(glance, "RESULTS", tmp_path)
    monkeypatch.setattr(glance, "RFD_CORPORA", {"sentiment": "runs-here"})
    got = glance.rfd_rows().set_index("claim")
    iid = got.loc["ASR below FedIT's (sentiment, iid, ρ = 0.3)"]
    assert iid["the paper"] == "Table 1 (a): RFD-LoRA 10.7 against FedIT 25.1"
    assert iid["verdict"] == "matches"  # 30 ± 2.9 against 60 ± 1.2 (hand: difference −30, se 3.1)
    skew = got.loc["ASR below FedIT's (sentiment, skew, ρ = 0.3)"]
    assert skew["the paper"] == "Table 1 (b): RFD-LoRA 12.9 against FedIT 28.2"
    assert skew["verdict"] == "not run"  # no FedIT run under skew
    assert got.loc["clean accuracy within 2 points of FedIT's (sentiment, skew, ρ = 0.3)", "verdict"] == "not run"
    assert "nan" not in got.loc["clean accuracy within 2 points of FedIT's (sentiment, skew, ρ = 0.3)", "fedcal"]
    assert got.loc["clean accuracy within 2 points of FedIT's (sentiment, skew, ρ = 0.3)",
                   "the paper"] == "Table 1 (b): RFD-LoRA 90.0 against FedIT 87.9"


def test_the_glance_claims_read_each_partition_from_its_own_folder(tmp_path, monkeypatch):
    """Sentiment's label-skew half has its own store (twice the rounds): its claims read that folder, the IID
    claims the other; a skew run left in the IID folder (the 6-round budget's) never enters a skew claim."""
    from fedcal.pages import glance

    (tmp_path / "literature").mkdir()
    (tmp_path / "literature" / "rfd-lora.csv").write_text((LIT / "rfd-lora.csv").read_text())
    (tmp_path / "iid").mkdir(), (tmp_path / "skew").mkdir()
    pd.DataFrame(three("rfd", "iid", 0.3, (0.72,) * 3, (0.7,) * 3, (0.30, 0.25, 0.35))
                 + three("fedit", "iid", 0.3, (0.73,) * 3, (0.4,) * 3, (0.60, 0.62, 0.58))
                 + three("rfd", "skew", 0.3, (0.5,) * 3, (0.0,) * 3, (1.0,) * 3)).to_csv(tmp_path / "iid" / "runs.csv")
    pd.DataFrame(three("rfd", "skew", 0.3, (0.70,) * 3, (0.2,) * 3, (0.80, 0.78, 0.82))
                 + three("fedit", "skew", 0.3, (0.72,) * 3, (0.1,) * 3, (0.90, 0.91, 0.89))).to_csv(
        tmp_path / "skew" / "runs.csv")
    monkeypatch.setattr(glance, "RESULTS", tmp_path)
    monkeypatch.setattr(glance, "RFD_CORPORA", {"sentiment": {"iid": "iid", "skew": "skew"}})
    got = glance.rfd_rows().set_index("claim")
    skew = got.loc["ASR below FedIT's (sentiment, skew, ρ = 0.3)"]
    # hand: 80.0 ± 2.0 against 90.0 ± 1.0: difference −10, se √(4/3 + 1/3) = 1.3 → beyond twice it
    assert skew["fedcal"] == "RFD-LoRA 80.0 ± 2.0 against FedIT 90.0 ± 1.0" and skew["verdict"] == "matches"
    assert skew["read from"] == "`skew/runs.csv`"
    assert got.loc["ASR below FedIT's (sentiment, iid, ρ = 0.3)", "read from"] == "`iid/runs.csv`"
    # a partition whose folder is not there yet has no row (not a row read from the other folder)
    monkeypatch.setattr(glance, "RFD_CORPORA", {"sentiment": {"iid": "iid", "skew": "absent"}})
    assert not glance.rfd_rows()["claim"].str.contains("skew").any()

def test_a_panel_without_runs_is_one_line_and_a_panels_title_says_its_rounds(dl, capacity):
    """A store of label-skew runs only (the skew half remade at more rounds) shows panel (b) after its
    rounds, and panel (a) and Table 3's module rows each as one line — never a grid of "not run" cells."""
    skew = pd.DataFrame([{**r, "round": 12} for r in three("rfd", "skew", 0.3, (0.7,) * 3, (0.8,) * 3, (0.2,) * 3)
                         + three("fedit", "skew", 0.0, (0.7,) * 3, (0.9,) * 3, (0.1,) * 3)])
    text = dl.paper_layout(skew, pd.read_csv(LIT / "rfd-lora-table1.csv"), pd.read_csv(LIT / "rfd-lora-table3.csv"),
                           capacity, 0.1)
    assert "**Table 1 (a) IID**: no run of this panel in these folders." in text
    assert "Table 1 (b) label skew (the paper's severe non-IID), after 12 rounds: fedcal mean ± std (paper), %" in text
    assert "**Table 3 (left)**: no run of this table in these folders." in text
    # Table 3 (right)'s MoM rows are the Table 1 cell itself: its label-skew columns show it
    assert "**Table 3 (right)**: no run" not in text
    assert "| MoM (ours) (fedcal: mom, M = 5) | not run (90.6) | not run (86.8) | not run (10.7) | 70.0 ± 0.0 (–) |" \
        in text
    assert "| RFD-LoRA | not run (90.0) | not run (88.5) | not run (6.4) | 80.0 ± 0.0 (85.0) | 20.0 ± 0.0 (12.9) |" in text
    # the full IID runs of the module's table (no round column) still make their panel, without a rounds clause
    assert "Table 1 (a) IID: fedcal mean ± std (paper), %" in dl.paper_layout(
        RUNS, pd.read_csv(LIT / "rfd-lora-table1.csv"), pd.read_csv(LIT / "rfd-lora-table3.csv"), capacity, 0.3)


def test_a_panel_mixing_two_budgets_is_refused(dl, capacity):
    mixed = pd.DataFrame([{**r, "round": 12} for r in three("rfd", "skew", 0.3, (0.7,) * 3, (0.8,) * 3, (0.2,) * 3)]
                         + [{**r, "round": 6} for r in three("fedit", "skew", 0.3, (0.7,) * 3, (0.6,) * 3, (0.4,) * 3)])
    with pytest.raises(ValueError, match=r"Table 1 \(b\) mixes runs of 6 and 12 rounds"):
        dl.paper_layout(mixed, pd.read_csv(LIT / "rfd-lora-table1.csv"), pd.read_csv(LIT / "rfd-lora-table3.csv"),
                        capacity, 0.3)


def test_asr_verdict_by_its_rule():
    """Twice the standard error of the difference decides (hand-computed: means 10 and 30, variances 4 and
    4 over 3 seeds each, se = sqrt(4/3 + 4/3) = 1.63); no run of a side is "not run", one run "too few seeds"."""
    from fedcal.pages.distill_literature import asr_verdict

    low, high = pd.Series([8.0, 10.0, 12.0]), pd.Series([28.0, 30.0, 32.0])
    assert asr_verdict(low, high) == "holds (-20.0 ± 1.6)"
    assert asr_verdict(high, low) == "contradicted (+20.0 ± 1.6)"
    assert asr_verdict(low, low + 1.0).startswith("within noise")
    assert asr_verdict(pd.Series(dtype=float), high) == "not run"
    assert asr_verdict(low, pd.Series(dtype=float)) == "not run"
    assert asr_verdict(low.iloc[:1], high) == "too few seeds"
