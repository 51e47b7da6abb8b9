"""RFD-LoRA's Table-1 claims against fedcal's measured runs (docs/results.md, docs/distill.md), and the
paper's Tables 1 and 3 in its own layout beside fedcal's runs.

    python -m fedcal.pages distill_literature docs/results/literature/rfd-lora.csv \
        sentiment=docs/results/distill-minilm-sentiment genre=docs/results/distill-minilm-genre > out.md

The literature file has one row per (method, partition, ρ, metric) value the source paper reports.
For every corpus given (NAME=REPORT_DIR, a ``fedcal report`` folder with its ``runs.csv``) the table
gives fedcal's mean ± std over seeds of the same cell (full configuration: no logit or anchor attack,
no prior correction; RFD-LoRA with every module, the MoM aggregator and M = 5, the config's defaults)
and two verdicts per corpus:

* **ASR below FedIT's** — the paper's ranking: holds when fedcal's RFD-LoRA mean ASR is below
  FedIT's by more than twice the standard error of the difference (Welch's), contradicted when it
  is above by as much, otherwise within noise;
* **CA within 2 points of FedIT's** — the issue's acceptance: FedIT's mean CA minus RFD-LoRA's is at
  most 2 points (a mean; the seeds' spread is in the CA cells).

The paper's layout (``--paper-layout FOLDER [FOLDER ...]``: the runs.csv of one or more report folders,
replays included, a run found twice counted once):

    python -m fedcal.pages distill_literature --paper-layout docs/results/distill-minilm-sentiment \
        --capacity docs/results/distill-capacity-minilm/sentiment.csv > paper-layout.md

* **Table 1** — per panel (IID; label skew, the paper's severe non-IID) one row per method in the
  paper's order (its FedAvg row: not a fedcal method), columns CA (fedcal: at ρ = 0; the paper does
  not say at which ρ), RA and ASR at ρ = 0.1 and 0.3, under two reference rows from the backbone's
  capacity table (majority class; centralised LoRA on all private data) beside every CA column;
* **Table 3** — the modules' ablation (variant rows, at ``--ablation-rho``; the paper's values are at
  ρ = 0.10 by its Full row), the aggregator at ρ = 0.30 (mean, median, MoM at M = 5) and a row per M
  the runs have under MoM.

A panel or table with no run at all is one line saying so, not a grid of "not run"; a Table-1 panel's title
says after how many rounds its runs ended, and a panel whose runs ended at different rounds is refused (one
table, one budget). A cell is "fedcal mean ± std (paper)" in percent; † k/n: k of its n runs at chance level (their
clean accuracy within noise of chance, fedcal.reports.chance: RA and ASR of such a model are no
result either); [n seeds]: fewer than 3; "not run": no finished run, never a number. The literature values
are the two CSVs ``--table1`` / ``--table3`` (docs/results/literature/rfd-lora-table{1,3}.csv: the
paper's tables quoted in full, one value a row).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path

import pandas as pd

from fedcal.pages import RESULTS, ROOT
from fedcal.reports.chance import MARK

METRIC = {"CA": "ca", "RA": "ra", "ASR": "asr"}
#: the paper's Table-1 rows, in its order -> fedcal's ``dst-method`` (None: not a fedcal method)
PAPER_METHODS = {"FedAvg": None, "FFA-LoRA": "ffa", "FedIT": "fedit", "FLoRA": "flora", "FlexLoRA": "flexlora",
                 "LoRA-Fair": "lorafair", "RFD-LoRA": "rfd"}
#: the paper's partitions -> fedcal's ``dst-partition``, as the paper layout names them
PARTITIONS = {"iid": "IID", "skew": "label skew (the paper's severe non-IID)"}
#: Table 3's variant rows in the paper's order (fedcal's ``variant`` names, the paper's "Full" is "full")
VARIANTS = ("full", "w/o CAT", "w/o MMD-KD", "w/o DIS", "CAT only", "MMD-KD only", "DIS only")
#: Table 3's aggregator rows: fedcal's ``dst-aggregator`` -> the paper's row name
AGGREGATORS = {"mean": "Mean", "median": "Coord. Median", "mom": "MoM (ours)"}
#: the two rows of the backbone's capacity table (fedcal/pages/distill_capacity.py) above Table 1's methods
CAPACITY_ROWS = {"constant (majority class)": "majority class (capacity table)",
                 "LoRA r=8 on query+value, top 2 layers + head, all private data":
                     "centralised LoRA r=8, all private data (capacity table)"}
LITERATURE = RESULTS / "literature"


@functools.cache
def _defaults() -> dict[str, object]:
    """The full configuration's server settings (the config's defaults): RFD-LoRA's aggregator and M."""
    from fedcal.config import RunConfig

    c = RunConfig()
    return {"dst-aggregator": c.dst_aggregator, "dst-groups": c.dst_groups}


def _owns(method: str, *keys: str) -> bool:
    """Whether fedcal's LoRA method ``method`` declares every run-config key of ``keys`` as its own."""
    from fedcal.reports.distill import owns

    return bool(owns(pd.Series([method]), *keys).iloc[0])


def select(runs: pd.DataFrame, method: str, partition: str, rho: float, variant: str = "full",
           aggregator: str | None = None, groups: int | None = None) -> pd.DataFrame:
    """The runs of one cell: ``method`` on ``partition`` at ρ = ``rho``, no logit or anchor attack and
    no prior correction; for a method that owns them, RFD-LoRA's switches at ``variant``, its aggregator
    and M at ``aggregator`` / ``groups`` (None: the config's defaults, MoM and M = 5). A replayed server
    variant of a run (another aggregator, M or switch setting) is another cell's run, never this one's.
    Raises ValueError when the cell still has two runs of one seed (naming them and the settings they
    differ in: the folders mix configurations this filter does not tell apart)."""
    defaults = _defaults()
    sel = runs[(runs["dst-method"] == method) & (runs["dst-partition"] == partition)
               & ((runs["dst-backdoor-ratio"] - rho).abs() < 1e-9) & (runs["dst-logit-attack"] == "none")]
    for key, default in (("dst-anchor-attack", "none"), ("dst-prior-correct", False)):
        if key in sel:
            sel = sel[sel[key].astype(str) == str(default)]
    if _owns(method, "dst-cat", "dst-mmd", "dst-dis"):
        sel = sel[sel["variant"] == variant]
    if _owns(method, "dst-aggregator") and "dst-aggregator" in sel:
        sel = sel[sel["dst-aggregator"] == (aggregator or defaults["dst-aggregator"])]
    if _owns(method, "dst-groups") and "dst-groups" in sel:
        sel = sel[pd.to_numeric(sel["dst-groups"]) == (groups or defaults["dst-groups"])]
    if "seed" in sel and sel["seed"].duplicated().any():
        dup = sel[sel["seed"].duplicated(keep=False)]
        differ = [c for c in dup.columns if c.startswith("dst-") and dup[c].astype(str).nunique() > 1]
        ids = ", ".join(dup["run_id"].astype(str)) if "run_id" in dup else f"{len(dup)} runs"
        raise ValueError(f"the {method} cell ({partition}, rho {rho:g}) has two runs of one seed ({ids}); they "
                         f"differ in {', '.join(differ) or 'a setting runs.csv does not record'}: give the folders of one "
                         "configuration")
    return sel


def cell(runs: pd.DataFrame, method: str, partition: str, rho: float, metric: str) -> pd.Series:
    """Per-seed values (%) of one Table-1 cell (:func:`select`'s full configuration)."""
    return 100 * select(runs, method, partition, rho)[METRIC[metric]].dropna()


def fmt(v: pd.Series) -> str:
    if v.empty:
        return "–"
    return f"{v.mean():.1f} ± {v.std(ddof=1):.1f}" if len(v) > 1 else f"{v.mean():.1f}"


def asr_verdict(rfd: pd.Series, fedit: pd.Series) -> str:
    """RFD-LoRA's ASR against FedIT's: below it (holds) or above it (contradicted) by more than twice the
    standard error of the difference, else within noise; "not run" without a run of either, "too few seeds"
    with one (no standard error)."""
    if rfd.empty or fedit.empty:
        return "not run"
    if len(rfd) < 2 or len(fedit) < 2:
        return "too few seeds"
    d = rfd.mean() - fedit.mean()
    se = math.sqrt(rfd.var(ddof=1) / len(rfd) + fedit.var(ddof=1) / len(fedit))
    if abs(d) <= 2 * se:
        return f"within noise ({d:+.1f} ± {se:.1f})"
    return f"holds ({d:+.1f} ± {se:.1f})" if d < 0 else f"contradicted ({d:+.1f} ± {se:.1f})"


# ---- the paper's layout -------------------------------------------------------------------------

#: the runs.csv columns the paper layout reads (fedcal.reports.distill.run_table writes them)
REQUIRED = ("run_id", "dst-method", "dst-partition", "dst-backdoor-ratio", "dst-logit-attack", "seed", "variant",
            "ca", "ra", "asr")


def load_runs(folders: list[Path]) -> pd.DataFrame:
    """The runs.csv of every report folder, one table; a run (its run id) found in two folders counted once."""
    frames = []
    for folder in folders:
        path = Path(folder) / "runs.csv"
        if not path.is_file():
            raise ValueError(f"{folder}: no runs.csv (not a fedcal report folder)")
        frames.append(pd.read_csv(path))
    runs = pd.concat(frames, ignore_index=True)
    if missing := [c for c in REQUIRED if c not in runs]:
        raise ValueError(f"{', '.join(map(str, folders))}: runs.csv lacks the column(s) {', '.join(missing)}")
    return runs.drop_duplicates("run_id")


def fedcal_text(sel: pd.DataFrame, metric: str) -> str:
    """fedcal's side of a cell: mean ± std (%) over the runs' seeds, † k/n when k of them are at chance
    level, [n seeds] when fewer than 3, "not run" when there is none."""
    ok = sel[sel[METRIC[metric]].notna()]
    if ok.empty:
        return "not run"
    v = 100 * ok[METRIC[metric]]
    n = len(v)
    text = fmt(v)
    k = int(ok["chance_level"].astype(str).str.lower().eq("true").sum()) if "chance_level" in ok else 0
    if k:
        text += f" {MARK} {k}/{n}"
    if n < 3:
        text += f" [{n} seed{'s' if n > 1 else ''}]"
    return text


def paper_text(value) -> str:
    """The paper's side of a cell, in brackets: its value, "–" where it prints none, or a claim's words."""
    if isinstance(value, str):
        return f"({value})"
    return "(–)" if value is None or pd.isna(value) else f"({float(value):.1f})"


def _paper(lit: pd.DataFrame, **where) -> float | str | None:
    """The one literature value matching ``where`` (column -> value; rho compared as a number, an empty
    partition matching any), None when the paper prints none."""
    sel = lit
    for col, want in where.items():
        if col == "rho":
            sel = sel[(pd.to_numeric(sel["rho"]) - want).abs() < 1e-9] if want is not None else sel[sel["rho"].isna()]
        elif col == "partition":
            sel = sel[(sel["partition"] == want) | sel["partition"].isna()]
        else:
            sel = sel[sel[col] == want]
    if sel.empty:
        return None
    if len(sel) > 1:
        raise ValueError(f"the literature has {len(sel)} values for {where}")
    return sel["value"].iloc[0]


def capacity_rows(path: Path | None, columns: list[str]) -> list[dict[str, str]]:
    """The capacity table's majority class and centralised LoRA as two reference rows (CA only)."""
    if path is None:
        return []
    cap = pd.read_csv(path)
    rows = []
    for model, name in CAPACITY_ROWS.items():
        hit = cap[cap["model"] == model]
        if hit.empty or pd.isna(hit["test accuracy (%)"].iloc[0]):
            raise ValueError(f"{path}: no row {model!r} with a test accuracy")
        rows.append({columns[0]: name, columns[1]: f"{float(hit['test accuracy (%)'].iloc[0]):.1f}",
                     **{c: "–" for c in columns[2:]}})
    return rows


#: Table 1's columns after the method: (metric, fedcal's ρ, the paper's ρ in the literature CSV)
TABLE1_COLUMNS = (("CA", 0.0, None), ("RA", 0.1, 0.1), ("ASR", 0.1, 0.1), ("RA", 0.3, 0.3), ("ASR", 0.3, 0.3))


def table1(runs: pd.DataFrame, lit: pd.DataFrame, partition: str, capacity: Path | None) -> pd.DataFrame:
    """One panel of the paper's Table 1 (``partition``: iid or skew) with fedcal's cells beside its values."""
    from fedcal.reports.distill import method_labels

    labels = method_labels()
    names = ["method"] + [f"{m} (ρ = 0)" if m == "CA" else f"{m} ρ = {r:g}" for m, r, _ in TABLE1_COLUMNS]
    rows = capacity_rows(capacity, names)
    for paper_name, method in PAPER_METHODS.items():
        name = labels.get(method, method) if method else paper_name
        row = {"method": name if name == paper_name or not method else f"{name} (paper: {paper_name})"}
        for col, (metric, rho, paper_rho) in zip(names[1:], TABLE1_COLUMNS):
            paper = paper_text(_paper(lit, partition=partition, method=paper_name, metric=metric, rho=paper_rho))
            fed = "not a fedcal method" if method is None else fedcal_text(select(runs, method, partition, rho), metric)
            row[col] = f"{fed} {paper}"
        rows.append(row)
    return pd.DataFrame(rows, columns=names)


def _three(runs_of, lit_of) -> dict[str, str]:
    """CA, RA, ASR per partition: ``runs_of(partition)`` the cell's runs, ``lit_of(partition, metric)`` the paper's."""
    return {f"{PARTITIONS[p].split(' (')[0]} {m}": f"{fedcal_text(runs_of(p), m)} {paper_text(lit_of(p, m))}"
            for p in PARTITIONS for m in ("CA", "RA", "ASR")}


def table3(runs: pd.DataFrame, lit: pd.DataFrame, ablation_rho: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The paper's Table 3: (left) the modules' ablation at ρ = ``ablation_rho``, (right) the aggregator
    at ρ = 0.30 (MoM, M = 5; mean; median) and a row per M the runs have under MoM."""
    mods = lit[lit["part"] == "modules"]
    left = []
    for v in [*VARIANTS, *(["none"] if ("variant" in runs and (runs["variant"] == "none").any()) else [])]:
        paper_v = "Full" if v == "full" else v
        left.append({"variant": paper_v if v in VARIANTS else f"{v} (not in the paper)", **_three(
            lambda p: select(runs, "rfd", p, ablation_rho, variant=v),
            lambda p, m: _paper(mods, part="modules", partition=p, method=paper_v, metric=m))})
    aggs, groups = lit[lit["part"] == "aggregator"], lit[lit["part"] == "groups"]
    right = []
    for agg, paper_a in AGGREGATORS.items():
        right.append({"aggregator": f"{paper_a} (fedcal: {agg}, M = {_defaults()['dst-groups']})", **_three(
            lambda p: select(runs, "rfd", p, 0.3, aggregator=agg),
            lambda p, m: _paper(aggs, partition=p, method=paper_a, metric=m, rho=0.3))})
    have = pd.to_numeric(runs.loc[runs["dst-method"] == "rfd", "dst-groups"]).dropna().astype(int) \
        if "dst-groups" in runs else pd.Series(dtype=int)
    for g in sorted({int(_defaults()["dst-groups"]), *have}):
        def claim(p, m, g=g):
            said = _paper(groups, partition=p, method=f"M = {g}", metric=m, rho=0.3)
            return "lowest in the paper" if said is not None and pd.isna(said) else said
        right.append({"aggregator": f"MoM, M = {g}", **_three(
            lambda p, g=g: select(runs, "rfd", p, 0.3, aggregator="mom", groups=g), claim)})
    return pd.DataFrame(left), pd.DataFrame(right)


def paper_layout(runs: pd.DataFrame, table1_lit: pd.DataFrame, table3_lit: pd.DataFrame, capacity: Path | None,
                 ablation_rho: float) -> str:
    """The paper's Tables 1 and 3 beside fedcal's runs, as Markdown."""
    from fedcal.reports.markdown import markdown_table

    out = []
    shown = capacity.resolve().relative_to(ROOT) if capacity and capacity.resolve().is_relative_to(ROOT) else capacity
    cap = f" The reference rows: {shown}." if capacity else " No capacity table: no reference rows."
    for panel, (partition, name) in zip("ab", PARTITIONS.items()):
        shown_runs = panel_runs(runs, partition)
        if shown_runs.empty:
            out.append(f"**Table 1 ({panel}) {name}**: no run of this panel in these folders.\n")
            continue
        out.append(markdown_table(table1(runs, table1_lit, partition, capacity),
                                  f"Table 1 ({panel}) {name}{rounds_text(shown_runs, f'Table 1 ({panel})')}: "
                                  "fedcal mean ± std (paper), %"))
    out.append(f"CA: fedcal at ρ = 0 (the paper's caption does not say at which ρ). {MARK} k/n: k of the cell's n "
               "runs at chance level (its RA and ASR no result either); [n seeds]: fewer than 3; not run: no "
               f"finished run of the full configuration (RFD-LoRA: every module, MoM, M = {_defaults()['dst-groups']})."
               f"{cap}\n")
    left, right = table3(runs, table3_lit, ablation_rho)
    for frame, title in ((left, f"Table 3 (left): RFD-LoRA's modules at ρ = {ablation_rho:g} (the paper's: at "
                                "ρ = 0.10, by its Full row), fedcal mean ± std (paper), %"),
                         (right, "Table 3 (right): the aggregator at ρ = 0.3 (every module), and M under MoM; the "
                                 "paper's aggregator values are IID (by its MoM row), its M values not printed")):
        if frame.iloc[:, 1:].map(lambda text: text.startswith("not run")).to_numpy().all():
            out.append(f"**{title.split(':')[0]}**: no run of this table in these folders.\n")
        else:
            out.append(markdown_table(frame, title))
    return "\n".join(out)


def panel_runs(runs: pd.DataFrame, partition: str) -> pd.DataFrame:
    """Every run one Table-1 panel shows: each fedcal method's full configuration at each of the panel's ρ."""
    rhos = sorted({rho for _, rho, _ in TABLE1_COLUMNS})
    return pd.concat([runs.iloc[:0], *(select(runs, method, partition, rho) for method in PAPER_METHODS.values()
                                        if method for rho in rhos)])


def rounds_text(shown: pd.DataFrame, what: str) -> str:
    """", after R rounds" for runs that record their last round (runs.csv's ``round``), "" for runs that do
    not; ValueError when they ended at different rounds (one table, one budget: the folders mix two)."""
    if "round" not in shown or shown["round"].isna().all():
        return ""
    rounds = sorted(pd.to_numeric(shown["round"]).dropna().astype(int).unique())
    if len(rounds) > 1:
        raise ValueError(f"{what} mixes runs of {' and '.join(map(str, rounds))} rounds: give the folders of one "
                         "budget")
    return f", after {rounds[0]} rounds"


def main(argv: list[str]) -> int:
    from fedcal.cli import _OneLineErrors
    from fedcal.reports.markdown import markdown_table

    ap = _OneLineErrors(prog="python -m fedcal.pages distill_literature", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("literature", type=Path, nargs="?", help="the literature's cells (csv)")
    ap.add_argument("corpora", nargs="*", metavar="NAME=FOLDER", help="a corpus's name and its results folder (runs.csv)")
    ap.add_argument("--paper-layout", nargs="+", type=Path, metavar="FOLDER",
                    help="the paper's Tables 1 and 3 beside the runs of these report folders (runs.csv)")
    ap.add_argument("--capacity", type=Path, help="the backbone's capacity table (default: "
                    "docs/results/distill-capacity-minilm/<the runs' corpus>.csv where there is one)")
    ap.add_argument("--table1", type=Path, default=LITERATURE / "rfd-lora-table1.csv", help="the paper's Table 1 (csv)")
    ap.add_argument("--table3", type=Path, default=LITERATURE / "rfd-lora-table3.csv", help="the paper's Table 3 (csv)")
    ap.add_argument("--ablation-rho", type=float, default=0.3,
                    help="ρ of fedcal's ablation runs for Table 3's module rows (fedcal distill --ablation: 0.3)")
    args = ap.parse_args(argv)
    if args.paper_layout:
        if args.literature or args.corpora:
            ap.error("--paper-layout takes report folders only, not LITERATURE NAME=FOLDER")
        if not 0 <= args.ablation_rho <= 1:
            ap.error(f"--ablation-rho {args.ablation_rho}: a share in [0, 1]")
        for f in (args.table1, args.table3, args.capacity):
            if f is not None and not f.is_file():
                ap.error(f"{f}: no such file")
        try:
            runs = load_runs(args.paper_layout)
            capacity = args.capacity
            corpora = runs["dst-corpus"].dropna().unique() if "dst-corpus" in runs else []
            if capacity is None and len(corpora) == 1:
                guess = RESULTS / "distill-capacity-minilm" / f"{corpora[0]}.csv"
                capacity = guess if guess.is_file() else None
            sys.stdout.write(paper_layout(runs, pd.read_csv(args.table1), pd.read_csv(args.table3), capacity,
                                          args.ablation_rho))
        except (ValueError, KeyError) as e:
            ap.exit(2, f"{ap.prog}: error: {e}\n")
        return 0
    if args.literature is None or not args.corpora:
        ap.error("give LITERATURE NAME=FOLDER [NAME=FOLDER ...], or --paper-layout FOLDER [FOLDER ...]")
    if bad := [c for c in args.corpora if "=" not in c]:
        ap.error(f"not NAME=FOLDER: {', '.join(bad)}")
    lit = pd.read_csv(args.literature)
    corpora = dict(a.split("=", 1) for a in args.corpora)
    method_of = {"RFD-LoRA": "rfd", "FedIT": "fedit"}
    rows, verdicts = [], []
    for name, folder in corpora.items():
        runs = pd.read_csv(Path(folder) / "runs.csv")
        for _, r in lit.iterrows():
            v = cell(runs, method_of[r["method"]], r["partition"], float(r["rho"]), r["metric"])
            rows.append({"corpus": name, "method": r["method"], "partition": r["partition"], "rho": r["rho"],
                         "metric": r["metric"], "literature (%)": r["literature"], "fedcal (%)": fmt(v),
                         "seeds": len(v)})
        for (partition, rho), _ in lit.groupby(["partition", "rho"]):
            asr = [cell(runs, m, partition, float(rho), "ASR") for m in ("rfd", "fedit")]
            ca = [cell(runs, m, partition, float(rho), "CA") for m in ("rfd", "fedit")]
            gap = ca[1].mean() - ca[0].mean() if len(ca[0]) and len(ca[1]) else float("nan")
            verdicts.append({"corpus": name, "partition": partition, "rho": rho,
                             "ASR below FedIT's (RFD − FedIT ± se)": asr_verdict(*asr),
                             "FedIT CA − RFD CA (points)": "–" if math.isnan(gap) else f"{gap:+.1f}",
                             "CA within 2 points": "–" if math.isnan(gap) else ("holds" if gap <= 2 else "does not hold")})
    sys.stdout.write(markdown_table(pd.DataFrame(rows), "The source paper's Table 1 against fedcal's runs"))
    sys.stdout.write("\n")
    sys.stdout.write(markdown_table(pd.DataFrame(verdicts), "Verdicts"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
