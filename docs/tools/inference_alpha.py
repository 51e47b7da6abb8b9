"""Robust federated inference across client heterogeneity: one table of every aggregator's clean
accuracy and worst case (over the attacks) at each Dirichlet α, from the reports' ``cells.csv``.

    python docs/tools/inference_alpha.py 0.3=docs/results/inference-cifar10-resnet8-alpha0.3 \\
        0.5=docs/results/inference-cifar10-resnet8 0.8=docs/results/inference-cifar10-resnet8-alpha0.8 \\
        > docs/results/inference-cifar10-resnet8-alpha/table.md

Each argument is ``ALPHA=FOLDER``: a ``fedcal inference`` report of one α (its ``cells.csv``: one row
per aggregator × attack × seed). Per seed, an aggregator's worst case is its lowest accuracy over the
attacks (:func:`fedcal.reports.inference.worst_case`); the table gives its mean ± std over the
folder's seeds, the attack that was the worst in most seeds, and the clean accuracy (attack
``none``). Only the (n, f) cell of ``--nf`` (default 17:4) is read. The literature (Dirichlet α ∈
{0.3, 0.5, 0.8}) reports the same aggregators at each level; a table over seeds per α keeps the
levels' runs apart (each folder is one configuration).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd


def _mean_std(values: pd.Series) -> str:
    return f"{100 * values.mean():.2f}" if len(values) < 2 else f"{100 * values.mean():.2f} ± {100 * values.std():.2f}"


def alpha_table(folders: dict[str, Path], n: int = 17, f: int = 4) -> pd.DataFrame:
    """One row per aggregator; per α: clean accuracy, worst case (mean ± std over seeds, %), the
    most frequent worst attack and the number of seeds."""
    from fedcal.reports.inference import worst_case

    out: dict[str, dict[str, str]] = {}
    for alpha, folder in folders.items():
        cells = pd.read_csv(Path(folder) / "cells.csv")
        cells = cells[(cells["n"] == n) & (cells["f"] == f)]
        if cells.empty:
            raise SystemExit(f"{folder}/cells.csv has no n = {n}, f = {f} rows")
        worst = worst_case(cells, by=("seed", "aggregator"))
        clean = cells[cells["attack"] == "none"]
        for agg, w in worst.groupby("aggregator", sort=False):
            row = out.setdefault(agg, {"aggregator": agg})
            row[f"α={alpha} clean"] = _mean_std(clean.loc[clean["aggregator"] == agg, "accuracy"])
            row[f"α={alpha} worst"] = _mean_std(w["accuracy"])
            row[f"α={alpha} worst attack"] = w["worst_attack"].mode().iloc[0]
            row[f"α={alpha} seeds"] = str(w["seed"].nunique())
    return pd.DataFrame(list(out.values()))


def main(argv: list[str]) -> int:
    from fedcal.reports.markdown import markdown_table

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", metavar="ALPHA=FOLDER")
    ap.add_argument("--nf", default="17:4", help="the (n, f) cell to read, n:f")
    args = ap.parse_args(argv)
    pairs = [a.split("=", 1) for a in args.folders]
    if any(len(p) != 2 for p in pairs):
        ap.error("each folder is given as ALPHA=FOLDER")
    n, f = (int(x) for x in args.nf.split(":"))
    table = alpha_table({a: Path(p) for a, p in pairs}, n=n, f=f)
    sys.stdout.write(f"**n = {n}, f = {f}: clean and worst-case accuracy (%) per Dirichlet α, mean ± std over seeds**\n\n")
    sys.stdout.write(markdown_table(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
