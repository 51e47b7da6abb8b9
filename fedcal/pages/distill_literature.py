"""RFD-LoRA's Table-1 claims against fedcal's measured runs (docs/results.md, docs/distill.md).

    python -m fedcal.pages distill_literature docs/results/literature/rfd-lora.csv \
        sentiment=docs/results/distill-minilm-sentiment genre=docs/results/distill-minilm-genre > out.md

The literature file has one row per (method, partition, ρ, metric) value the source paper reports.
For every corpus given (NAME=REPORT_DIR, a ``fedcal report`` folder with its ``runs.csv``) the table
gives fedcal's mean ± std over seeds of the same cell (full RFD-LoRA configuration, no logit or
anchor attack, no prior correction) and two verdicts per corpus:

* **ASR below FedIT's** — the paper's ranking: holds when fedcal's RFD-LoRA mean ASR is below
  FedIT's by more than twice the standard error of the difference (Welch's), contradicted when it
  is above by as much, otherwise within noise;
* **CA within 2 points of FedIT's** — the issue's acceptance: FedIT's mean CA minus RFD-LoRA's is at
  most 2 points (a mean; the seeds' spread is in the CA cells).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

METRIC = {"CA": "ca", "ASR": "asr"}


def cell(runs: pd.DataFrame, method: str, partition: str, rho: float, metric: str) -> pd.Series:
    """Per-seed values (%) of one Table-1 cell."""
    sel = runs[(runs["dst-method"] == method) & (runs["dst-partition"] == partition)
               & ((runs["dst-backdoor-ratio"] - rho).abs() < 1e-9) & (runs["dst-logit-attack"] == "none")]
    if method == "rfd":
        sel = sel[sel["variant"] == "full"]
    for key, default in (("dst-anchor-attack", "none"), ("dst-prior-correct", False)):
        if key in sel:
            sel = sel[sel[key].astype(str) == str(default)]
    return 100 * sel[METRIC[metric]].dropna()


def fmt(v: pd.Series) -> str:
    if v.empty:
        return "–"
    return f"{v.mean():.1f} ± {v.std(ddof=1):.1f}" if len(v) > 1 else f"{v.mean():.1f}"


def asr_verdict(rfd: pd.Series, fedit: pd.Series) -> str:
    if len(rfd) < 2 or len(fedit) < 2:
        return "too few seeds"
    d = rfd.mean() - fedit.mean()
    se = math.sqrt(rfd.var(ddof=1) / len(rfd) + fedit.var(ddof=1) / len(fedit))
    if abs(d) <= 2 * se:
        return f"within noise ({d:+.1f} ± {se:.1f})"
    return f"holds ({d:+.1f} ± {se:.1f})" if d < 0 else f"contradicted ({d:+.1f} ± {se:.1f})"


def main(argv: list[str]) -> int:
    from fedcal.reports.markdown import markdown_table

    ap = argparse.ArgumentParser(prog="python -m fedcal.pages distill_literature", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("literature", type=Path, help="the literature's cells (csv)")
    ap.add_argument("corpora", nargs="+", metavar="NAME=FOLDER", help="a corpus's name and its results folder (runs.csv)")
    args = ap.parse_args(argv)
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
