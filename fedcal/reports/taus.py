"""τ comparisons (flwr-free): the tables and plots of a benign run plus TSA at each τ.

The runs (a benign run plus TSA at each τ, same seed, data and clients, optionally under several
strategies) are :mod:`fedcal.studies.taus`'s; ``write_report`` summarises the final global model
of each run as one table (with the change against the benign run) and plots, built from the
run store only. Unfinished runs are left out of the table, the diagrams and the trajectories, each
named in a warning line (:func:`fedcal.reports.runs.finished_only`).

A row holds runs that differ only in their seed; the table's own columns are the strategy, τ and
the run (benign, ``TSA τ=5``, ``TSA τ=5 (uncoupled)``, another attack). Runs of other
configurations (another number of rounds, clients, …) are other rows, told apart by a ``config``
column naming the keys that differ (:mod:`fedcal.reports.groups`); each run's change is measured
against the benign run of its own configuration, strategy and seed, and a row without one says
"no benign run in this set". A model whose accuracy is within noise of chance is flagged
(``chance_level``, :mod:`fedcal.reports.chance`), a run whose last round accepted none of its replies
above chance as ``stalled`` (:func:`fedcal.reports.runs.stalled_runs`); over seeds, such a run and one whose
metrics are NaN are left out of the means and named with their reason (:func:`seed_summary`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from fedcal.config import RunConfig
from fedcal.reports.chance import cfg_chance, footnote, marked
from fedcal.reports.groups import CONFIG, config_labels
from fedcal.reports.intervals import (INTERVAL_METRICS, RESOLVED, attach_intervals, delta_text, seed_cell, seed_delta,
                                      seed_intervals, with_interval)
from fedcal.reports.markdown import SECE_SIGN, UNITS_NOTE, markdown_table
from fedcal.reports.plots import defense_bars, reliability_grid, trajectories, trajectory_table
from fedcal.reports.runs import STALLED, STALLED_NOTE, final_rows, finished_only, run_stalled
from fedcal.results import UnfinishedRunError, load_config, load_metrics, run_id_of

TABLE_COLUMNS = ["strategy", "tau", "run", "accuracy_%", "ece_%", "sece_%", "brier", "nll", "run_id", "code"]
#: the run-config keys a τ table shows as its own columns (strategy, tau, and the run label's attack
#: and coupling): runs that differ in any other hashed key but the seed are rows of another config
SHOWN = ("strategy", "tau", "attack", "coupled")
CHANCE = "chance_level"
#: what a Δ cell says when its row has no benign run of the same configuration, strategy and seed
NO_BENIGN = "no benign run in this set"


def run_label(cfg: RunConfig) -> str:
    """The ``run`` column: ``benign``, ``TSA τ=5`` (``(uncoupled)`` for the η = β ablation; τ named at
    every τ, 1 included, so a TSA run at τ = 1 is never read as the benign run) or another attack."""
    if cfg.attack == "none":
        return "benign"
    if cfg.attack == "tsa":
        return f"TSA τ={cfg.tau:g}" + ("" if cfg.coupled else " (uncoupled)")
    return cfg.attack


def summarise(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Final-round metrics of each finished run (from its store), percentages for accuracy/ECE/sECE,
    the change of accuracy and sECE against the benign run of the same configuration, strategy and
    seed (NaN without one), and ``chance_level``. With runs of several configurations a ``config``
    column (first) names each run's differing keys. Unfinished runs are left out, each named in a
    warning line."""
    runs = [(d, load_config(d)) for d in finished_only(run_dirs, "the τ table")]
    labels = config_labels([c for _, c in runs], SHOWN)
    rows = []
    for (d, cfg), label in zip(runs, labels):
        final = final_rows(load_metrics(d))
        if final.empty:  # no round evaluated
            continue
        last = final.iloc[0]
        chance = cfg_chance(cfg)
        rows.append({
            CONFIG: label, "strategy": cfg.strategy, "tau": cfg.tau, "seed": cfg.seed, "run": run_label(cfg),
            "accuracy_%": 100 * last["accuracy"], "ece_%": 100 * last["ece"], "sece_%": 100 * last["sece"],
            "brier": last["brier"], "nll": last["nll"], "run_id": last["run_id"], "code": last["code"],
            CHANCE: (at_chance := bool(chance is not None and chance.flags(float(last["accuracy"])))),
            STALLED: run_stalled(d) and not at_chance,
        })
    table = pd.DataFrame(rows, columns=[CONFIG, *TABLE_COLUMNS, "seed", CHANCE, STALLED])
    benign = table[table["run"] == "benign"].set_index([CONFIG, "strategy", "seed"])
    dupes = benign.index[benign.index.duplicated()].unique().tolist()
    if dupes:
        raise ValueError(f"several benign runs for (config, strategy, seed) {dupes}: pass one run per cell")
    key = pd.MultiIndex.from_frame(table[[CONFIG, "strategy", "seed"]])
    table["d_accuracy"] = table["accuracy_%"].to_numpy() - benign["accuracy_%"].reindex(key).to_numpy()
    table["d_sece"] = table["sece_%"].to_numpy() - benign["sece_%"].reindex(key).to_numpy()
    table = attach_intervals(table, [d for d, _ in runs], [CONFIG, "strategy", "seed"])
    table["_c"] = table[CONFIG].map({c: i for i, c in enumerate(dict.fromkeys(labels))})
    table["_o"] = table["strategy"].map({s: i for i, s in enumerate(dict.fromkeys(table["strategy"]))})
    table = table.sort_values(["_c", "_o", "tau", "run"], kind="stable").drop(columns=["_c", "_o"])
    if table[CONFIG].nunique() <= 1:  # one configuration: the table keeps its one-config format
        table = table.drop(columns=CONFIG)
    return table.reset_index(drop=True)


def _line_labels(table: pd.DataFrame) -> dict[str, str]:
    """run id → the label of its line in the diagrams and trajectories (its run label, with its
    strategy and config when the table has several)."""
    out = {}
    for _, r in table.iterrows():
        name = "benign (τ=1)" if r["run"] == "benign" and r["tau"] == 1 else r["run"]
        if table["strategy"].nunique() > 1:
            name = f"{r['strategy']}: {name}"
        if CONFIG in table.columns:
            name = f"[{r[CONFIG]}] {name}"
        out[r["run_id"]] = name
    return out


def task_report(run_dirs: Sequence[str | Path], out_dir: str | Path, title: str = "") -> str:
    """The train task's report (:func:`write_report`); returns the table's Markdown."""
    write_report(run_dirs, out_dir, title)
    return (Path(out_dir) / "table.md").read_text()


def write_report(run_dirs: Sequence[str | Path], out_dir: str | Path, title: str = "") -> pd.DataFrame:
    """Table (CSV + Markdown) and plots of a τ comparison, from the runs' stores only:
    reliability diagrams and trajectories for one strategy, grouped bars for several.

    Only finished runs are reported (each run left out is named in a warning line); with none,
    :class:`fedcal.results.UnfinishedRunError`. Runs of several configurations are rows of their
    own (``config`` column); the diagrams and trajectories draw one line per (config, run), so runs
    of different lengths are never averaged into one line.
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
    chances = [cfg_chance(load_config(d)) for d in run_dirs]
    if len(seeds) > 1:  # one row per (config, strategy, τ, run): mean ± std over seeds
        agg = seed_summary(table)
        agg.to_csv(out / "table_seeds.csv", index=False)
        note = f"(mean ± std over seeds {', '.join(map(str, seeds))})"
        md = seeds_markdown(agg, f"{title} {note}".strip())
    else:
        md = to_markdown(table, title)
    if table[CHANCE].any():
        md += "\n" + footnote(chances)
    if table[STALLED].any():
        md += "\n" + STALLED_NOTE
    md += f"\n{UNITS_NOTE}; {SECE_SIGN}\n"
    (out / "table.md").write_text(md)
    if table["strategy"].nunique() > 1:
        bars = table if CONFIG not in table.columns else \
            table.assign(strategy=[f"{s} [{c}]" for s, c in zip(table["strategy"], table[CONFIG])])
        defense_bars(bars, out / "defenses.png", title)
        return table
    lines = _line_labels(table)
    panels, shown = [], []
    first = table.sort_values("seed", kind="stable").drop_duplicates([c for c in (CONFIG, "tau", "run")
                                                                      if c in table.columns])
    by_id = {run_id_of(d): d for d in run_dirs}  # the run's id, not its folder's name (a copy may be renamed)
    for _, r in first.sort_values("tau", kind="stable").iterrows():  # one seed per line; the table covers all
        rel = by_id[r["run_id"]] / "reliability.csv"
        if rel.exists():
            panels.append((lines[r["run_id"]], pd.read_csv(rel)))
            shown.append(int(r["seed"]))
    if panels:  # each figure is written with the table it is drawn from
        pd.concat([bins.assign(run=name, seed=seed) for (name, bins), seed in zip(panels, shown)]).to_csv(
            out / "reliability.csv", index=False)
        caption = one_seed_caption(sorted(set(shown)), seeds)
        titled = [(f"{name} (seed {seed})" if caption else name, bins) for (name, bins), seed in zip(panels, shown)]
        reliability_grid(titled, out / "reliability.png", caption=caption)
        if caption:
            with open(out / "table.md", "a") as f:
                f.write(f"reliability.png: {caption}; trajectories.png: mean ± std over the seeds.\n")
    metrics = load_metrics(run_dirs)
    if not metrics.empty:
        keys = table.set_index("run_id")
        metrics["run"] = metrics["run_id"].map(keys["run"])
        by = ["tau", "run"]
        if CONFIG in table.columns:
            metrics[CONFIG] = metrics["run_id"].map(keys[CONFIG])
            by = [CONFIG, *by]
        traj = trajectory_table(metrics[metrics["run"].notna()], by)
        traj.to_csv(out / "trajectories.csv", index=False)
        trajectories(traj, by, out / "trajectories.png")
    return table


def one_seed_caption(shown: Sequence[int], seeds: Sequence[int]) -> str:
    """What a figure drawn from one seed per panel says when the table beside it averages several
    (``""`` with one seed: the figure and the table show the same runs)."""
    if len(seeds) <= 1:
        return ""
    which = f"seed {shown[0]}" if len(shown) == 1 else f"the first seed of each run ({', '.join(map(str, shown))})"
    return f"one run per panel: {which}, not the mean over seeds {', '.join(map(str, seeds))} that the table shows"


SUMMARY_METRICS = ["accuracy_%", "ece_%", "sece_%", "brier", "nll", "d_accuracy", "d_sece"]


def seed_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds of every metric, per (config, strategy, τ, run); ``seeds``
    is the number of seeds averaged, and every seed left out of the means — its metrics NaN (a
    diverged model), its model at chance or stalled (:func:`fedcal.reports.sweeps.left_out_reasons`) —
    is named with its reason in ``left_out`` (and counted in ``chance_level`` / ``stalled``). A row never
    holds two runs of one seed (a ValueError names them)."""
    from fedcal.reports.sweeps import left_out_names, left_out_reasons

    by = [c for c in (CONFIG, "strategy", "tau", "run") if c in table.columns]
    twice = table[table.duplicated([*by, "seed"], keep=False)]
    if not twice.empty:
        raise ValueError(f"two runs of one seed in one row: {', '.join(twice['run_id'])}; pass one run per seed")
    reasons = left_out_reasons(table, "accuracy_%", 100)
    g = table.groupby(by, sort=False)
    sound = table[reasons.eq("")].groupby(by, sort=False)
    out = pd.DataFrame(index=g.size().index)
    out = out.join(sound[SUMMARY_METRICS].mean().add_suffix("_mean"))
    out = out.join(sound[SUMMARY_METRICS].std(ddof=1).add_suffix("_std"))
    out = out.join(sound.size().rename("seeds")).fillna({"seeds": 0})
    out["seeds"] = out["seeds"].astype(int)
    if RESOLVED in table.columns:  # the runs recorded bootstrap intervals (the seeds averaged: left-out ones not)
        out = out.join(seed_intervals(table[reasons.eq("")], by))
    for flag in (CHANCE, STALLED):
        if flag in table.columns:
            out = out.join(g[flag].sum().astype(int))
    out = out.join(left_out_names(table, reasons, by))
    return out.reset_index()


def _pm(mean: float, std: float, digits: int, seeds: int) -> str:
    if pd.isna(mean):
        return NO_BENIGN
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if seeds > 1 else f"{mean:.{digits}f}"


def seeds_markdown(agg: pd.DataFrame, title: str = "") -> str:
    """Markdown of :func:`seed_summary` as "mean ± std" cells (the mean alone for one seed); a row
    without a benign reference says so in its Δ cells; ``seeds`` is the number averaged, and a table
    with seeds left out of its means names each with its reason in a last column."""
    show_strategy = agg["strategy"].nunique() > 1
    cols = ([CONFIG] if CONFIG in agg.columns else []) + (["strategy"] if show_strategy else []) + \
        ["tau", "run", *SUMMARY_METRICS, "seeds"]
    cells = agg.assign(**{c: [_pm(m, s, d, k) if c.startswith("d_") else
                              (f"{m:.{d}f} ± {s:.{d}f}" if k > 1 else f"{m:.{d}f}")
                              for m, s, k in zip(agg[c + "_mean"], agg[c + "_std"], agg["seeds"])]
                          for c, d in ((c, SEED_DIGITS.get(c, 2)) for c in SUMMARY_METRICS)})
    if RESOLVED in agg.columns:
        for m in INTERVAL_METRICS:
            cells[f"{m}_%"] = [seed_cell(c, h) for c, h in zip(cells[f"{m}_%"], agg[f"{m}_hw"])]
        cells["d_sece"] = [seed_delta(c, r, n) for c, r, n in zip(cells["d_sece"], agg[RESOLVED], agg["sece_compared"])]
    cells = cells.assign(**{c: ["—" if k == 0 else t for t, k in zip(cells[c], agg["seeds"])]
                            for c in SUMMARY_METRICS})  # every seed of the row left out: no mean
    if "left_out" in agg.columns and agg["left_out"].fillna("").ne("").any():
        cells["left out of the means"] = agg["left_out"].fillna("")
        cols.append("left out of the means")
    return markdown_table(cells[cols], title, formats={"tau": "{:g}"})


SEED_DIGITS = {"brier": 4, "nll": 4}  # decimals of "mean ± std" cells (2 for every other metric)
TABLE_FORMATS = {"tau": "{:g}", "accuracy_%": "{:.2f}", "ece_%": "{:.2f}", "sece_%": "{:+.2f}", "brier": "{:.4f}",
                 "nll": "{:.4f}", "d_accuracy": "{:+.2f}", "d_sece": "{:+.2f}"}


def _delta(fmt: str):
    return lambda v: NO_BENIGN if pd.isna(v) else fmt.format(v)


def to_markdown(table: pd.DataFrame, title: str = "") -> str:
    """The τ table of :func:`summarise` in Markdown (``run_id``, ``code`` and single-valued
    strategy/seed left out; the chance marker on a chance-level model's accuracy)."""
    cols = [c for c in table.columns
            if c not in ("run_id", "code", CHANCE, STALLED, RESOLVED) and not c.endswith(("_lo_%", "_hi_%"))
            and not (c in ("strategy", "seed") and table[c].nunique() <= 1)]
    formats = {**TABLE_FORMATS, "d_accuracy": _delta("{:+.2f}"), "d_sece": _delta("{:+.2f}")}
    shown = table[cols].copy()
    if RESOLVED in table.columns:  # the estimate with its interval; a Δ inside the intervals marked
        for m, fmt in (("ece", "{:.2f}"), ("sece", "{:+.2f}")):
            shown[f"{m}_%"] = [with_interval(v, lo, hi, fmt) for v, lo, hi in
                               zip(table[f"{m}_%"], table[f"{m}_lo_%"], table[f"{m}_hi_%"])]
            formats[f"{m}_%"] = str
        shown["d_sece"] = [delta_text(formats["d_sece"](v), r) for v, r in zip(table["d_sece"], table[RESOLVED])]
        formats["d_sece"] = str
    if CHANCE in table.columns:
        shown["accuracy_%"] = [marked(f"{v:.2f}", bool(f)) for v, f in zip(table["accuracy_%"], table[CHANCE])]
        formats["accuracy_%"] = str
    if STALLED in table.columns:
        shown["accuracy_%"] = [f"{v} (stalled)" if f else v for v, f in zip(shown["accuracy_%"], table[STALLED])]
    return markdown_table(shown, title, formats=formats)


