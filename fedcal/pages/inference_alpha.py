"""Robust federated inference across client heterogeneity: one table of every aggregator's clean
accuracy and worst case (over the attacks) at each Dirichlet α, from the reports' ``cells.csv``.

    python -m fedcal.pages inference_alpha 0.3=docs/results/inference-cifar10-resnet8-alpha0.3 \\
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


#: α → its report folder under docs/results (α = 0.5 is the five-seed ResNet-8 table)
ALPHA_FOLDERS = {"0.3": "inference-cifar10-resnet8-alpha0.3", "0.5": "inference-cifar10-resnet8",
                 "0.8": "inference-cifar10-resnet8-alpha0.8"}
ALPHA_KEYS = ("dataset=cifar10 model=resnet8 lr=0.05 momentum=0.9 weight-decay=5e-4 inf-augment=crop-flip "
              "inf-local-epochs=20 data-dir=../shared/data engine=inprocess output-dir=runs/inference-alpha "
              "agg-adv-epochs=25 inf-pgd-steps=20 inf-curve-queries=1000")
#: the robust averages DeepSet-TM's margin is taken against (the literature's comparison)
ROBUST_AVERAGES = ("median", "geometric_median", "trimmed_mean")


def alpha_section(results: Path) -> list[str]:
    """docs/inference-results.md's section on heterogeneity, once a report of another α than 0.5 exists: the
    commands, the table this tool writes, and per α the best worst case and DeepSet-TM's margin over
    the best robust average, computed from the cells (a constant predictor is never "robust")."""
    from fedcal.reports.inference import without_chance, worst_case

    have = {a: results / f for a, f in ALPHA_FOLDERS.items() if (results / f / "cells.csv").exists()}
    table = results / "inference-cifar10-resnet8-alpha" / "table.md"
    if set(have) <= {"0.5"} or not table.exists():
        return []
    all_cells = {a: pd.read_csv(folder / "cells.csv") for a, folder in have.items()}
    span = lambda v: f"{v[0]}" if len(v) == 1 else f"{v[0]}-{v[-1]}"  # noqa: E731
    cmds = [f"fedcal inference --nf 17:4 --seeds {span(sorted(c['seed'].unique()))} --report "
            f"docs/results/{ALPHA_FOLDERS[a]} dirichlet-alpha={a} {ALPHA_KEYS}" for a, c in all_cells.items() if a != "0.5"]
    cmds.append("python -m fedcal.pages inference_alpha " + " ".join(f"{a}=docs/results/{ALPHA_FOLDERS[a]}" for a in have)
                + " > docs/results/inference-cifar10-resnet8-alpha/table.md")
    prose, by_alpha = [], {}
    for a, cells in all_cells.items():
        cells = cells[(cells["n"] == 17) & (cells["f"] == 4)]
        mean = worst_case(without_chance(cells), by=("seed", "aggregator")).groupby("aggregator")["accuracy"].mean()
        by_alpha[float(a)] = mean
        best = mean.idxmax()
        avg = mean.reindex(list(ROBUST_AVERAGES)).dropna()
        text = f"α = {a} ({cells['seed'].nunique()} seed{'s' if cells['seed'].nunique() > 1 else ''}): the highest " \
               f"mean worst case is {best}'s ({100 * mean[best]:.2f} %)"
        if "deepset_tm" in mean and len(avg):
            text += (f"; DeepSet-TM {100 * mean['deepset_tm']:.2f} %, "
                     f"{100 * (mean['deepset_tm'] - avg.max()):+.2f} points from the best robust average "
                     f"({avg.idxmax()}, {100 * avg.max():.2f} %)")
        prose.append(text + ".")
    if len(by_alpha) > 2:  # the direction over the levels: which worst cases grow as the clients grow alike
        w = pd.DataFrame(by_alpha).dropna()
        w = w[sorted(w.columns)]
        rising = [g for g, r in w.iterrows() if r.is_monotonic_increasing and r.iloc[-1] > r.iloc[0]]
        other = [g for g in w.index if g not in rising]
        prose.append(f"Worst case rising with α ({w.columns[0]:g} → {w.columns[-1]:g}, less heterogeneous clients): "
                     + ", ".join(rising) + "; not rising: " + (", ".join(other) if other else "none") + ".")
    return ["## Heterogeneity: Dirichlet α ∈ {0.3, 0.5, 0.8} (ResNet-8 clients, n = 17, f = 4)", "",
            "The literature's other heterogeneity levels, at the protocol of the five-seed α = 0.5 table above "
            "(the same keys; a smaller α gives each client fewer classes). Each α's clients are trained anew "
            "(about 26 minutes a seed on 2 CPU cores); the seeds each level has are in the table:", "",
            "```bash", *cmds, "```", "", table.read_text().split("\n", 2)[2].rstrip("\n"), "",
            " ".join(prose), ""]


def main(argv: list[str]) -> int:
    from fedcal.reports.markdown import markdown_table

    ap = argparse.ArgumentParser(prog="python -m fedcal.pages inference_alpha", description=__doc__.split("\n\n")[0])
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
