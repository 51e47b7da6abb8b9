"""Small experiment drivers shared by the CLI, benchmarks and docs (flwr-free).

``tau_table`` runs a benign run plus TSA at each τ (same seed, data and clients) and
summarises the final global model of each as one table, built from the run store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from fedcal.config import RunConfig
from fedcal.plots import defense_bars, reliability_grid, trajectories
from fedcal.results import load_metrics, run_dir_for

TABLE_COLUMNS = ["strategy", "tau", "run", "accuracy_%", "ece_%", "sece_%", "brier", "nll", "run_id"]


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


def summarise(configs: Sequence[RunConfig]) -> pd.DataFrame:
    """Final-round metrics of each run, percentages for accuracy/ECE/sECE."""
    rows = []
    for cfg in configs:
        df = load_metrics(run_dir_for(cfg))
        if df.empty:
            continue
        last = df[df["round"] == df["round"].max()].set_index("metric")["value"]
        rows.append({
            "strategy": cfg.strategy, "tau": cfg.tau,
            "run": "benign" if cfg.attack == "none" else f"TSA{'' if cfg.coupled else ' (uncoupled)'}",
            "accuracy_%": 100 * last["accuracy"], "ece_%": 100 * last["ece"], "sece_%": 100 * last["sece"],
            "brier": last["brier"], "nll": last["nll"], "run_id": df["run_id"].iloc[0],
        })
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    order = {s: i for i, s in enumerate(dict.fromkeys(c.strategy for c in configs))}
    table["_o"] = table["strategy"].map(order)
    return table.sort_values(["_o", "tau"]).drop(columns="_o").reset_index(drop=True)


def write_report(configs: Sequence[RunConfig], out_dir: str | Path, title: str = "") -> pd.DataFrame:
    """Table (CSV + Markdown), reliability diagrams and trajectories of a τ comparison."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = summarise(configs)
    table.to_csv(out / "table.csv", index=False)
    (out / "table.md").write_text(to_markdown(table, title))
    if table["strategy"].nunique() > 1:
        defense_bars(table, out / "defenses.png", title)
        return table
    panels = []
    for cfg in sorted(configs, key=lambda c: c.tau):
        rel = run_dir_for(cfg) / "reliability.csv"
        if rel.exists():
            name = "benign (τ=1)" if cfg.attack == "none" else f"TSA τ={cfg.tau:g}"
            panels.append((name, pd.read_csv(rel)))
    if panels:
        reliability_grid(panels, out / "reliability.png")
    metrics = load_metrics([run_dir_for(c) for c in configs])
    if not metrics.empty:
        trajectories(metrics, "tau", out / "trajectories.png")
    return table


def to_markdown(table: pd.DataFrame, title: str = "") -> str:
    """A plain Markdown table (no optional dependency such as tabulate)."""
    cols = [c for c in table.columns if c != "run_id" and not (c == "strategy" and table[c].nunique() <= 1)]
    fmt = {"tau": "{:g}", "accuracy_%": "{:.2f}", "ece_%": "{:.2f}", "sece_%": "{:+.2f}", "brier": "{:.4f}",
           "nll": "{:.4f}"}
    lines = ([f"**{title}**", ""] if title else []) + ["| " + " | ".join(cols) + " |",
                                                       "|" + "---|" * len(cols)]
    for _, r in table.iterrows():
        lines.append("| " + " | ".join(fmt.get(c, "{}").format(r[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def run_tau_comparison(base: RunConfig, taus: Sequence[float], out_dir: str | Path,
                       run_fn: Callable[[RunConfig], object], title: str = "",
                       strategies: Sequence[str] | None = None) -> pd.DataFrame:
    """Run (or skip, if finished) each (strategy, τ) with ``run_fn`` and write the report."""
    configs = tau_configs(base, taus, strategies)
    for cfg in configs:
        run_fn(cfg)
    return write_report(configs, out_dir, title)
