"""Small experiment drivers shared by the CLI, benchmarks and docs (flwr-free).

``run_tau_comparison`` runs a benign run plus TSA at each τ (same seed, data and clients),
optionally under several strategies, and ``write_report`` summarises the final global model
of each run as one table (with the change against the benign run) and plots, built from the
run store only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from fedcal.config import RunConfig
from fedcal.plots import defense_bars, reliability_grid, trajectories, trajectory_table
from fedcal.results import load_config, load_metrics, run_dir_for

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


def summarise(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Final-round metrics of each run (from its store), percentages for accuracy/ECE/sECE,
    and the change of accuracy and sECE against the benign run of the same strategy."""
    rows = []
    for d in map(Path, run_dirs):
        df = load_metrics(d)
        if df.empty:  # not started (or no round finished yet)
            continue
        cfg = load_config(d)
        final = df[df["metric"] == "accuracy"]["round"].max()  # last evaluated round
        last = df[df["round"] == final].set_index("metric")["value"]
        rows.append({
            "strategy": cfg.strategy, "tau": cfg.tau, "seed": cfg.seed,
            "run": "benign" if cfg.attack == "none" else f"TSA{'' if cfg.coupled else ' (uncoupled)'}",
            "accuracy_%": 100 * last["accuracy"], "ece_%": 100 * last["ece"], "sece_%": 100 * last["sece"],
            "brier": last["brier"], "nll": last["nll"], "run_id": df["run_id"].iloc[0],
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
    reliability diagrams and trajectories for one strategy, grouped bars for several."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run_dirs = [Path(d) for d in run_dirs]
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
    digits = {"brier": 4, "nll": 4}
    lines = ([f"**{title}**", ""] if title else []) + ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in agg.iterrows():
        cells = []
        for c in cols:
            if c in SUMMARY_METRICS:
                d = digits.get(c, 2)
                cells.append(f"{r[c + '_mean']:.{d}f} ± {r[c + '_std']:.{d}f}")
            elif c == "tau":
                cells.append(f"{r[c]:g}")
            else:
                cells.append(str(r[c]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def to_markdown(table: pd.DataFrame, title: str = "") -> str:
    """A plain Markdown table (no optional dependency such as tabulate)."""
    cols = [c for c in table.columns
            if c != "run_id" and not (c in ("strategy", "seed") and table[c].nunique() <= 1)]
    fmt = {"tau": "{:g}", "accuracy_%": "{:.2f}", "ece_%": "{:.2f}", "sece_%": "{:+.2f}", "brier": "{:.4f}",
           "nll": "{:.4f}", "d_accuracy": "{:+.2f}", "d_sece": "{:+.2f}"}
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
    return write_report([run_dir_for(c) for c in configs], out_dir, title)


def inference_configs(base: RunConfig, nf: Sequence[tuple[int, int]], seeds: Sequence[int]) -> list[RunConfig]:
    """One robust-federated-inference config per (n, f) and seed."""
    return [base.replace(task="inference", num_clients=n, clients_per_round=min(base.clients_per_round, n),
                         inf_f=f, seed=s) for n, f in nf for s in seeds]


def _read_cells(run_dirs: Sequence[str | Path], name: str) -> pd.DataFrame:
    frames = [pd.read_csv(Path(d) / name) for d in run_dirs if (Path(d) / name).exists()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def inference_report(run_dirs: Sequence[str | Path], out_dir: str | Path, title: str = "") -> str:
    """Tables and plots of finished inference runs (their ``accuracy.csv`` and curves).

    Writes ``cells.csv`` (every run's rows), ``table_n<n>_f<f>.md/.csv`` (aggregators ×
    attacks + worst case, mean ± std over seeds) per (n, f), ``scalability.md`` (worst case
    per (n, f)), and ``acc_vs_f.png`` / ``acc_vs_amplification.png`` from the curves. Returns
    the Markdown of all tables.
    """
    from fedcal.inference.evaluate import percent_cell, seed_table, worst_case
    from fedcal.plots import inference_curve

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells = _read_cells(run_dirs, "accuracy.csv")
    if cells.empty:
        raise FileNotFoundError(f"no accuracy.csv in {len(run_dirs)} run directories: no finished inference run")
    cells.to_csv(out / "cells.csv", index=False)
    parts = [f"**{title}**\n"] if title else []
    for (n, f), g in cells.groupby(["n", "f"]):
        table = seed_table(g)
        table.to_csv(out / f"table_n{n}_f{f}.csv")
        md = _frame_markdown(table.reset_index(), f"n = {n}, f = {f}: accuracy (%) per attack, {_over_seeds(g)}")
        (out / f"table_n{n}_f{f}.md").write_text(md)
        parts.append(md)
    worst = worst_case(cells, by=("n", "f", "seed", "aggregator"))
    scal = worst.groupby(["n", "f", "aggregator"])["accuracy"].agg(["mean", "std", "count"]).reset_index()
    scal["cell"] = [percent_cell(m, s, k) for m, s, k in zip(scal["mean"], scal["std"], scal["count"])]
    wide = scal.pivot(index="aggregator", columns=["n", "f"], values="cell")
    wide.columns = [f"n={n}, f={f}" for n, f in wide.columns]
    from fedcal.inference.evaluate import AGGREGATOR_NAMES

    wide = wide.loc[[a for a in AGGREGATOR_NAMES if a in wide.index]]
    md = _frame_markdown(wide.reset_index(), f"worst-case accuracy (%) over attacks per (n, f), {_over_seeds(cells)}")
    (out / "scalability.md").write_text(md)
    parts.append(md)
    for name, x, png in (("curve_f.csv", "f_adv", "acc_vs_f.png"),
                         ("curve_amp.csv", "amplification", "acc_vs_amplification.png")):
        curve = _read_cells(run_dirs, name)
        for (n, f), g in (curve.groupby(["n", "f"]) if not curve.empty else []):
            suffix = "" if curve[["n", "f"]].drop_duplicates().shape[0] == 1 else f"_n{n}_f{f}"
            g.to_csv(out / f"{Path(png).stem}{suffix}.csv", index=False)
            inference_curve(g, x, out / f"{Path(png).stem}{suffix}.png",
                            f"n = {n}, aggregators built for f = {f}, {_over_seeds(g, spread=False)}")
    clients = client_accuracies(run_dirs)
    if not clients.empty:
        clients.to_csv(out / "clients.csv", index=False)
    text = "\n".join(parts)
    (out / "tables.md").write_text(text)
    return text


def client_accuracies(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Each client's own test accuracy (its probits' argmax, on the queries it answered validly)
    in each inference run, from the saved probits."""
    from fedcal.inference.evaluate import ProbitData

    rows = []
    for d in map(Path, run_dirs):
        if not (d / "probits.pt").exists():
            continue
        cfg = load_config(d)
        data = ProbitData.load(d / "probits.pt")
        hit = (data.test_probits.argmax(-1) == data.test_labels[:, None]) & data.test_valid
        acc = hit.sum(0) / data.test_valid.sum(0).clamp_min(1)
        rows += [{"seed": cfg.seed, "n": cfg.num_clients, "f": cfg.inf_f, "client": c, "accuracy": float(a)}
                 for c, a in zip(data.clients, acc)]
    return pd.DataFrame(rows)


def _over_seeds(rows: pd.DataFrame, spread: bool = True) -> str:
    """Which seeds ``rows`` cover, for titles: "seed 0", or "(mean ± std over) 5 seeds"."""
    seeds = sorted(int(s) for s in rows["seed"].unique())
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"mean ± std over {len(seeds)} seeds" if spread else f"{len(seeds)} seeds"


def _frame_markdown(frame: pd.DataFrame, title: str) -> str:
    cols = list(frame.columns)
    lines = [f"**{title}**", "", "| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines) + "\n"
