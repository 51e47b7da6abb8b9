"""τ comparisons (flwr-free): a benign run plus TSA at each τ, tables and plots.

``run_tau_comparison`` runs a benign run plus TSA at each τ (same seed, data and clients),
optionally under several strategies, and ``write_report`` summarises the final global model
of each run as one table (with the change against the benign run) and plots, built from the
run store only. Unfinished runs are left out of the table, the diagrams and the trajectories, each
named in a warning line (:func:`fedcal.reports.runs.finished_only`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from fedcal.config import RunConfig
from fedcal.reports.markdown import markdown_table
from fedcal.reports.plots import defense_bars, reliability_grid, trajectories, trajectory_table
from fedcal.reports.runs import final_rows, finished_only
from fedcal.results import UnfinishedRunError, load_config, load_metrics, run_dir_for

TABLE_COLUMNS = ["strategy", "tau", "run", "accuracy_%", "ece_%", "sece_%", "brier", "nll", "run_id", "code"]


def tau_configs(base: RunConfig, taus: Sequence[float], strategies: Sequence[str] | None = None) -> list[RunConfig]:
    """One config per (strategy, τ). τ = 1 is the benign run (no attacker at all); every
    other τ is TSA at that τ. ``strategies`` defaults to the base config's."""
    out = []
    for strategy in strategies or [base.strategy]:
        for tau in taus:
            if tau <= 0:
                raise ValueError(f"tau must be > 0, got {tau}")
            if float(tau) == 1.0:
                out.append(base.replace(attack="none", tau=1.0, strategy=strategy))
            else:
                out.append(base.replace(attack="tsa", tau=float(tau), strategy=strategy))
    return out


def summarise(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Final-round metrics of each finished run (from its store), percentages for accuracy/ECE/sECE,
    and the change of accuracy and sECE against the benign run of the same strategy. Unfinished
    runs are left out, each named in a warning line."""
    rows = []
    for d in finished_only(run_dirs, "the τ table"):
        final = final_rows(load_metrics(d))
        if final.empty:  # no round evaluated
            continue
        cfg = load_config(d)
        last = final.iloc[0]
        rows.append({
            "strategy": cfg.strategy, "tau": cfg.tau, "seed": cfg.seed,
            "run": "benign" if cfg.attack == "none" else f"TSA{'' if cfg.coupled else ' (uncoupled)'}",
            "accuracy_%": 100 * last["accuracy"], "ece_%": 100 * last["ece"], "sece_%": 100 * last["sece"],
            "brier": last["brier"], "nll": last["nll"], "run_id": last["run_id"], "code": last["code"],
        })
    table = pd.DataFrame(rows, columns=[*TABLE_COLUMNS, "seed"])
    benign = table[table["run"] == "benign"].set_index(["strategy", "seed"])
    dupes = benign.index[benign.index.duplicated()].unique().tolist()
    if dupes:
        raise ValueError(f"several benign runs for (strategy, seed) {dupes}: pass one run per cell")
    key = pd.MultiIndex.from_frame(table[["strategy", "seed"]])
    table["d_accuracy"] = table["accuracy_%"].to_numpy() - benign["accuracy_%"].reindex(key).to_numpy()
    table["d_sece"] = table["sece_%"].to_numpy() - benign["sece_%"].reindex(key).to_numpy()
    order = {s: i for i, s in enumerate(dict.fromkeys(table["strategy"]))}
    table["_o"] = table["strategy"].map(order)
    return table.sort_values(["_o", "tau"]).drop(columns="_o").reset_index(drop=True)


def write_report(run_dirs: Sequence[str | Path], out_dir: str | Path, title: str = "") -> pd.DataFrame:
    """Table (CSV + Markdown) and plots of a τ comparison, from the runs' stores only:
    reliability diagrams and trajectories for one strategy, grouped bars for several.

    Only finished runs are reported (each run left out is named in a warning line); with none,
    :class:`fedcal.results.UnfinishedRunError`.
    """
    given = [Path(d) for d in run_dirs]
    run_dirs = finished_only(given, "the τ report")
    if not run_dirs:
        raise UnfinishedRunError(f"no finished run among the {len(given)} run directories: nothing to report")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = summarise(run_dirs)
    table.to_csv(out / "table.csv", index=False)
    seeds = sorted(int(x) for x in table["seed"].unique())
    if len(seeds) > 1:  # one row per (strategy, τ): mean ± std over seeds
        agg = seed_summary(table)
        agg.to_csv(out / "table_seeds.csv", index=False)
        note = f"(mean ± std over seeds {', '.join(map(str, seeds))})"
        (out / "table.md").write_text(seeds_markdown(agg, f"{title} {note}".strip()))
    else:
        (out / "table.md").write_text(to_markdown(table, title))
    if table["strategy"].nunique() > 1:
        defense_bars(table, out / "defenses.png", title)
        return table
    panels = []
    by_tau = sorted(((load_config(d), d) for d in run_dirs if (d / "config.json").exists()),
                    key=lambda cd: cd[0].tau)
    for cfg, d in by_tau:
        if cfg.seed != seeds[0]:  # diagrams of one seed; the table covers all of them
            continue
        rel = d / "reliability.csv"
        if rel.exists():
            name = "benign (τ=1)" if cfg.attack == "none" else f"TSA τ={cfg.tau:g}"
            panels.append((name, pd.read_csv(rel)))
    if panels:  # each figure is written with the table it is drawn from
        pd.concat([bins.assign(run=name) for name, bins in panels]).to_csv(out / "reliability.csv", index=False)
        reliability_grid(panels, out / "reliability.png")
    metrics = load_metrics(run_dirs)
    if not metrics.empty:
        traj = trajectory_table(metrics, "tau")
        traj.to_csv(out / "trajectories.csv", index=False)
        trajectories(traj, "tau", out / "trajectories.png")
    return table


SUMMARY_METRICS = ["accuracy_%", "ece_%", "sece_%", "brier", "nll", "d_accuracy", "d_sece"]


def seed_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds of every metric, per (strategy, τ, run)."""
    g = table.groupby(["strategy", "tau", "run"], sort=False)[SUMMARY_METRICS]
    out = g.mean().add_suffix("_mean").join(g.std(ddof=1).add_suffix("_std")).join(g.size().rename("seeds"))
    return out.reset_index()


def seeds_markdown(agg: pd.DataFrame, title: str = "") -> str:
    """Markdown of :func:`seed_summary` as "mean ± std" cells."""
    show_strategy = agg["strategy"].nunique() > 1
    cols = (["strategy"] if show_strategy else []) + ["tau", "run", *SUMMARY_METRICS, "seeds"]
    cells = agg.assign(**{c: [f"{m:.{d}f} ± {s:.{d}f}" for m, s in zip(agg[c + "_mean"], agg[c + "_std"])]
                          for c, d in ((c, SEED_DIGITS.get(c, 2)) for c in SUMMARY_METRICS)})
    return markdown_table(cells[cols], title, formats={"tau": "{:g}"})


SEED_DIGITS = {"brier": 4, "nll": 4}  # decimals of "mean ± std" cells (2 for every other metric)
TABLE_FORMATS = {"tau": "{:g}", "accuracy_%": "{:.2f}", "ece_%": "{:.2f}", "sece_%": "{:+.2f}", "brier": "{:.4f}",
                 "nll": "{:.4f}", "d_accuracy": "{:+.2f}", "d_sece": "{:+.2f}"}


def to_markdown(table: pd.DataFrame, title: str = "") -> str:
    """The τ table of :func:`summarise` in Markdown (``run_id``, ``code`` and single-valued
    strategy/seed left out)."""
    cols = [c for c in table.columns
            if c not in ("run_id", "code") and not (c in ("strategy", "seed") and table[c].nunique() <= 1)]
    return markdown_table(table[cols], title, formats=TABLE_FORMATS)


def run_tau_comparison(base: RunConfig, taus: Sequence[float], out_dir: str | Path,
                       run_fn: Callable[[RunConfig], object], title: str = "",
                       strategies: Sequence[str] | None = None) -> pd.DataFrame:
    """Run (or skip, if finished) each (strategy, τ) with ``run_fn`` and write the report."""
    configs = tau_configs(base, taus, strategies)
    for cfg in configs:
        run_fn(cfg)
    return write_report([run_dir_for(c) for c in configs], out_dir, title)
