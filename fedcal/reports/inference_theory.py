"""The literature's analysis of averaging aggregators checked on a run's saved probits (the Theorem-1
plot of docs/inference-results.md; the quantities: :mod:`fedcal.inference.theory`).

For each finished inference run: its clients' test probits (``probits.pt``), the averaging
aggregators rebuilt for the run's f (mean, coordinate-wise median, geometric median, trimmed mean:
no training, so exactly the run's), the run's adversaries per query, and per query the aggregation
error, the honest dissimilarity and the honest mean's top-2 margin, with no attack and under SIA
white-box. Written: ``theorem_bins.csv`` (per aggregator, attack and bin of σ_H / m: queries, the
share whose prediction the adversaries changed, mean error), ``theorem_summary.csv`` (per
aggregator and attack: changed and wrong shares, bound violations — always 0 —, κ_eff quantiles),
``theorem_runs.csv`` (the runs pooled: seed, n, f, α, queries read) and ``theorem.png``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from fedcal.reports.markdown import markdown_table
from fedcal.reports.runs import finished_only
from fedcal.results import UnfinishedRunError, load_config

__all__ = ["theorem_report"]

#: log-spaced bins of σ_H / m (dissimilarity over margin); the ends catch everything outside
BIN_EDGES = (0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, math.inf)


def _frames(run_dirs: Sequence[Path], attacks: Sequence[str], queries: int) -> pd.DataFrame:
    from fedcal.inference.theory import averaging_frame  # torch loads where the analysis runs

    out = []
    for d in run_dirs:
        cfg = load_config(d)
        frame = averaging_frame(d / "probits.pt", cfg.inf_f, attacks, seed=cfg.seed, queries=queries)
        out.append(frame.assign(seed=cfg.seed, n=cfg.num_clients, f=cfg.inf_f,
                                alpha=cfg.dirichlet_alpha, run=d.name))
    return pd.concat(out, ignore_index=True)


def theorem_report(run_dirs: Sequence[str | Path], out_dir: str | Path, *,
                   attacks: Sequence[str] = ("none", "sia_whitebox"), queries: int = 0) -> str:
    """Write the Theorem-1 tables and plot for finished inference runs with saved probits; returns the
    summary as Markdown. Unfinished runs are left out (each named in a warning line)."""
    given = [Path(d) for d in run_dirs]
    dirs = [d for d in finished_only(given, "the Theorem-1 analysis") if (d / "probits.pt").exists()]
    if not dirs:
        raise UnfinishedRunError(f"no finished run with saved probits among the {len(given)} run directories")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df = _frames(dirs, attacks, queries)
    # which runs the tables pool (a reader of the tables alone could not tell the seeds)
    (df.groupby(["run", "seed", "n", "f", "alpha"], sort=True).agg(queries=("query", "nunique")).reset_index()
     .to_csv(out / "theorem_runs.csv", index=False))
    df["ratio"] = df["dissimilarity"] / df["margin"].clip(lower=1e-12)
    df["bin"] = pd.cut(df["ratio"], BIN_EDGES, right=False)
    bins = (df.groupby(["aggregator", "attack", "bin"], observed=True, sort=False)
            .agg(queries=("query", "size"), changed=("changed", "mean"), wrong=("wrong", "mean"),
                 error=("error", "mean"), margin=("margin", "mean")).reset_index())
    bins["bin"] = bins["bin"].astype(str)
    bins.to_csv(out / "theorem_bins.csv", index=False)
    summary = (df.groupby(["aggregator", "attack"], sort=False)
               .agg(queries=("query", "size"), changed=("changed", "mean"), wrong=("wrong", "mean"),
                    violations=("bound_holds", lambda s: int((~s).sum())),
                    kappa_median=("kappa_eff", "median"), kappa_p99=("kappa_eff", lambda s: s.quantile(0.99)),
                    min_ratio_changed=("ratio", lambda s: np.nan))
               .reset_index())
    for i, r in summary.iterrows():  # the smallest σ_H / m at which the adversaries changed a prediction
        sel = df[(df["aggregator"] == r["aggregator"]) & (df["attack"] == r["attack"]) & df["changed"]]
        summary.loc[i, "min_ratio_changed"] = sel["ratio"].min() if len(sel) else np.nan
    summary.to_csv(out / "theorem_summary.csv", index=False)
    _plot(df, bins, out / "theorem.png")
    shown = summary.copy()
    for c in ("changed", "wrong"):
        shown[c] = (100 * shown[c]).map(lambda v: f"{v:.2f}")
    for c in ("kappa_median", "kappa_p99", "min_ratio_changed"):
        shown[c] = shown[c].map(lambda v: "—" if pd.isna(v) else f"{v:.3g}")
    md = markdown_table(shown, "Theorem-1 quantities per aggregator and attack (changed, wrong: % of queries)")
    (out / "theorem_summary.md").write_text(md)
    return md


def _plot(df: pd.DataFrame, bins: pd.DataFrame, path: Path, scattered: str = "trimmed_mean") -> None:
    """The share of changed predictions per bin (every aggregator), and the queries of aggregator
    ``scattered`` against the bound e / m ≥ 1/√2 a changed prediction meets (it holds for any)."""
    from fedcal.reports.plots import plt, _save

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6))
    attacked = [a for a in df["attack"].unique() if a != "none"]
    shown = attacked[0] if attacked else df["attack"].iloc[0]
    for name, g in bins[bins["attack"] == shown].groupby("aggregator", sort=False):
        edges = [BIN_EDGES[i] for i in range(len(BIN_EDGES) - 1)]
        order = {str(pd.Interval(lo, hi, closed="left")): k for k, (lo, hi) in enumerate(zip(BIN_EDGES, BIN_EDGES[1:]))}
        g = g.assign(k=g["bin"].map(order)).sort_values("k")
        left.plot(g["k"], 100 * g["changed"], marker="o", label=name)
        left.set_xticks(range(len(edges)), [f"≥{e:g}" for e in edges], fontsize=7)
    left.set(xlabel="honest dissimilarity / top-2 margin (σ_H / m)", ylabel="prediction changed (%)",
             title=f"{shown}: share of queries whose prediction\nthe adversaries changed, per bin of σ_H / m")
    left.legend(fontsize=7)
    sub = df[(df["attack"] == shown) & (df["aggregator"] == scattered)]
    sub = sub.sample(min(len(sub), 3000), random_state=0)
    for changed, colour in ((False, "#4C72B0"), (True, "#C44E52")):
        s = sub[sub["changed"] == changed]
        right.scatter(s["ratio"].clip(1e-3, 1e3), (s["error"] / s["margin"].clip(lower=1e-12)).clip(1e-3, 1e3),
                      s=4, alpha=0.5, color=colour, label="changed" if changed else "unchanged")
    right.axhline(1 / math.sqrt(2), color="black", lw=1, ls="--", label="e / m = 1/√2")
    right.set(xscale="log", yscale="log", xlabel="σ_H / m", ylabel="aggregation error / margin (e / m)",
              title=f"{scattered.replace('_', ' ')}, {shown}:\na changed query must lie above the dashed line")
    right.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)
