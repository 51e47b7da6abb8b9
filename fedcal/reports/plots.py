"""Matplotlib figures built from run-store tables (never from live objects)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # files only: works on headless machines
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402


from fedcal.reports.markdown import SECE_SIGN  # noqa: E402 - said once on every figure showing sECE


def bins_ece_sece(bins: pd.DataFrame) -> tuple[float, float]:
    """(ECE, sECE) of a ``reliability.csv`` table, as :func:`fedcal.metrics.calibration_metrics`
    computes them from the same bins (empty bins weigh 0): what a panel prints is the run's metric."""
    count = bins["count"].to_numpy(dtype=float)
    gap = np.nan_to_num((bins["accuracy"] - bins["confidence"]).to_numpy(dtype=float))
    weight = count / max(count.sum(), 1.0)
    return float((weight * np.abs(gap)).sum()), float((weight * gap).sum())


def reliability_legend() -> list:
    """The legend entries of :func:`reliability_panel`, all three always (a panel without
    under-confident bins would otherwise show a blank default entry for them)."""
    from matplotlib.patches import Patch

    return [Patch(facecolor="#4C72B0", edgecolor="black", label="accuracy"),
            Patch(fill=False, hatch="///", edgecolor="#C44E52", label="gap to confidence: over-confident"),
            Patch(fill=False, hatch="\\\\", edgecolor="#DD8452", label="gap to confidence: under-confident")]


def reliability_panel(ax_rel, ax_hist, bins: pd.DataFrame, title: str, legend: bool = True) -> None:
    """Reliability diagram (accuracy per confidence bin, in %, vs the diagonal) above a confidence
    histogram, from a ``reliability.csv`` table, with the panel's ECE and sECE printed on it.

    Accuracy is a solid bar up to its value in every bin. The gap to the bin's mean confidence is
    drawn as an unfilled hatched box between the two: above the accuracy bar where the model is
    over-confident, and inside it — hatch only, the bar's fill and its top edge still showing —
    where it is under-confident, so the height of the blue bar is the accuracy in either case (a
    filled gap bar used to cover the top of the accuracy bar in under-confident bins)."""
    width = 100 * (bins["upper"] - bins["lower"]).to_numpy()
    centre = 100 * ((bins["upper"] + bins["lower"]) / 2).to_numpy()
    acc = 100 * bins["accuracy"].to_numpy(dtype=float)
    conf = 100 * bins["confidence"].to_numpy(dtype=float)
    ok = bins["count"].to_numpy() > 0
    ax_rel.bar(centre[ok], acc[ok], width=width[ok], edgecolor="black", lw=0.8, color="#4C72B0", label="accuracy",
               zorder=2)
    over, under = ok & (conf >= acc), ok & (conf < acc)
    ax_rel.bar(centre[over], (conf - acc)[over], bottom=acc[over], width=width[over], fill=False, hatch="///",
               edgecolor="#C44E52", lw=0.8, label="gap: over-confident", zorder=3)
    ax_rel.bar(centre[under], (acc - conf)[under], bottom=conf[under], width=width[under], fill=False, hatch="\\\\",
               edgecolor="#DD8452", lw=0.8, label="gap: under-confident", zorder=3)
    ax_rel.plot([0, 100], [0, 100], "k--", lw=1, zorder=4)
    ax_rel.set(xlim=(0, 100), ylim=(0, 100), title=title, ylabel="accuracy (%)")
    ece, sece = bins_ece_sece(bins)
    ax_rel.text(0.97, 0.04, f"ECE {100 * ece:.2f}%\nsECE {100 * sece:+.2f}%", transform=ax_rel.transAxes,
                ha="right", va="bottom", fontsize=8, bbox={"facecolor": "white", "edgecolor": "grey", "alpha": 0.9})
    if legend:
        ax_rel.legend(handles=reliability_legend(), loc="upper left", fontsize=7.5)
    frac = 100 * bins["count"].to_numpy() / max(1.0, bins["count"].sum())
    ax_hist.bar(centre, frac, width=width, color="grey", edgecolor="black", lw=0.6)
    ax_hist.set(xlim=(0, 100), xlabel="confidence (%)", ylabel="share of\nsamples (%)")


def reliability_grid(tables: Sequence[tuple[str, pd.DataFrame]], path: str | Path, caption: str = "") -> Path:
    """One column per (title, bins) pair; writes a PNG and returns its path. ``caption`` is a line
    of small print under the panels (above the sECE sign note), e.g. which seed the panels show."""
    n = len(tables)
    fig, axes = plt.subplots(2, n, figsize=(3.8 * n, 5.2), gridspec_kw={"height_ratios": [3, 1]}, squeeze=False)
    for j, (title, bins) in enumerate(tables):
        reliability_panel(axes[0, j], axes[1, j], bins, title, legend=False)
    # one legend for the figure, above the panels: inside a panel it covered an under-confident
    # model's tall bars on the left
    fig.legend(handles=reliability_legend(), loc="upper center", ncol=3, fontsize=8, frameon=False)
    return _save(fig, path, note="\n".join(filter(None, [caption, SECE_SIGN])), top=0.35)


#: how figures name the metrics (the run store's names are lower-case identifiers)
DISPLAY = {"accuracy": "accuracy", "ece": "ECE", "sece": "sECE", "brier": "Brier", "nll": "NLL"}


def trajectory_table(metrics: pd.DataFrame, label_col: str | Sequence[str],
                     metric_names: Sequence[str] = ("accuracy", "sece")) -> pd.DataFrame:
    """The table behind :func:`trajectories`: per line (a value of ``label_col``, or a combination of
    the ``label_col`` columns), round and metric, the mean and standard deviation over the runs
    (seeds) of that line, and their count. A line whose run count changes from round to round would
    average runs of different lengths (a jump where the short runs end): a ValueError names it."""
    by = [label_col] if isinstance(label_col, str) else list(label_col)
    sub = metrics[metrics["metric"].isin(metric_names)]
    g = sub.groupby([*by, "metric", "round"], sort=True)["value"]
    out = g.agg(mean="mean", std="std", runs="size").reset_index()
    out["std"] = out["std"].fillna(0.0)
    uneven = out.groupby([*by, "metric"])["runs"].nunique()
    if (uneven > 1).any():
        line = uneven[uneven > 1].index[0]
        raise ValueError(f"trajectory {dict(zip([*by, 'metric'], line))} averages runs of different lengths: "
                         "group runs by configuration first")
    return out


def _line_name(key) -> str:
    parts = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{p:g}" if isinstance(p, float) else str(p) for p in parts if str(p) != "")


def trajectories(table: pd.DataFrame, label_col: str | Sequence[str], path: str | Path) -> Path:
    """Per-round curves (in %) of each metric of a :func:`trajectory_table`, one line per value of
    ``label_col`` (or combination of its columns; the mean over its runs, a band of ± one standard
    deviation)."""
    by = [label_col] if isinstance(label_col, str) else list(label_col)
    names = list(dict.fromkeys(table["metric"]))
    lines = sorted(table[by].drop_duplicates().itertuples(index=False, name=None))
    # An ordered key (τ) gets an ordered colour map, so nine lines stay readable.
    colours = dict(zip(lines, plt.get_cmap("coolwarm")(np.linspace(0, 1, len(lines))))) if len(lines) > 3 else {}
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names) + 1.0, 3.4), squeeze=False)
    for ax, name in zip(axes[0], names):
        for key, g in table[table["metric"] == name].groupby(by, sort=True):
            key = key if isinstance(key, tuple) else (key,)
            mean, std = 100 * g["mean"].to_numpy(), 100 * g["std"].to_numpy()
            (line,) = ax.plot(g["round"], mean, label=_line_name(key if len(by) > 1 else key[0]),
                              color=colours.get(key))
            if (g["runs"] > 1).any():
                ax.fill_between(g["round"], mean - std, mean + std, color=line.get_color(), alpha=0.15, lw=0)
        ax.set(xlabel="round", ylabel=f"{DISPLAY.get(name, name)} (%)", title=DISPLAY.get(name, name))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
        if name == "sece":
            ax.axhline(0, color="black", lw=0.8)
    axes[0, -1].legend(title=", ".join(by), fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return _save(fig, path, note=SECE_SIGN if "sece" in names else "")


def defense_bars(table: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Grouped bars of accuracy and sECE (%) per strategy, one bar per τ (a τ table)."""
    strategies = list(dict.fromkeys(table["strategy"]))
    taus = sorted(table["tau"].unique())
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.8 / len(taus)
    x = np.arange(len(strategies))
    for ax, col, label in zip(axes, ["accuracy_%", "sece_%"], ["accuracy (%)", "sECE (%)"]):
        for i, tau in enumerate(taus):
            sub = table[table["tau"] == tau].set_index("strategy").reindex(strategies)
            name = "benign (τ=1)" if tau == 1 else f"TSA τ={tau:g}"
            ax.bar(x + (i - (len(taus) - 1) / 2) * width, sub[col].to_numpy(), width, label=name)
        ax.set_xticks(x, strategies)
        ax.set_ylabel(label)
        if col == "sece_%":
            ax.axhline(0, color="black", lw=0.8)
    axes[1].legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path, note=SECE_SIGN)


def _save(fig, path: str | Path, note: str = "", top: float = 0.0) -> Path:
    """Lay out, write (PNG, 120 dpi) and close ``fig``; ``note`` is small print under the axes (one
    line, e.g. :data:`SECE_SIGN`, or several separated by newlines), kept clear of the x labels;
    ``top`` inches are kept free above the axes (a figure legend)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    height = fig.get_figheight()
    if note:
        fig.text(0.5, 0.01, note, ha="center", va="bottom", fontsize=8, color="#444444")
    # ~0.3 inch at the bottom for a one-line note whatever the figure's height, 0.15 more per extra line
    bottom = 0.3 + 0.15 * note.count("\n") if note else 0.0
    fig.tight_layout(rect=(0, bottom / height, 1, 1 - top / height))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def posthoc_curves(table: pd.DataFrame, path: str | Path) -> Path:
    """sECE (%) after each post-hoc calibrator vs the calibration-set size, a panel per run."""
    runs = list(dict.fromkeys(table["run"]))
    fig, axes = plt.subplots(1, len(runs), figsize=(4 * len(runs), 3.4), squeeze=False, sharey=True)
    for ax, run in zip(axes[0], runs):
        sub = table[table["run"] == run]
        for method, g in sub.groupby("method", sort=False):
            g = g.groupby("n_cal")["sece"].mean()
            ax.plot(g.index, 100 * g.to_numpy(), marker="o", label=method, ls="--" if method == "none" else "-")
        ax.axhline(0, color="black", lw=0.8)
        ax.set(xscale="log", xlabel="calibration samples", title=run)
    axes[0, 0].set_ylabel("sECE after calibration (%)")
    axes[0, -1].legend(fontsize=7)
    return _save(fig, path)


def triage_plot(table: pd.DataFrame, path: str | Path) -> Path:
    """Unnecessary and missed verifications (rates) vs γ, and their change vs benign (the mean
    over seeds when the table holds several)."""
    if "seed" in table.columns:
        table = table.drop(columns="seed").groupby(["run", "gamma"], sort=False).mean(numeric_only=True).reset_index()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for run, g in table.groupby("run", sort=False):
        axes[0].plot(g["gamma"], 100 * g["unnecessary_rate"], label=f"{run}: unnecessary")
        axes[0].plot(g["gamma"], 100 * g["missed_rate"], ls="--", label=f"{run}: missed")
        if run != "benign":
            axes[1].plot(g["gamma"], g["unnecessary_change"], label=f"{run}: unnecessary")
            axes[1].plot(g["gamma"], g["missed_change"], ls="--", label=f"{run}: missed")
    axes[0].set(xlabel="threshold γ", ylabel="% of test samples", title="verifications")
    axes[1].set(xlabel="threshold γ", ylabel="change in count vs benign", title="change vs benign model")
    axes[1].axhline(0, color="black", lw=0.8)
    for ax in axes:
        ax.legend(fontsize=6)
    return _save(fig, path)


def similarity_scatter(table: pd.DataFrame, path: str | Path) -> Path:
    """Linear CKA vs logit cosine of each model pair, coloured by pair type."""
    fig, ax = plt.subplots(figsize=(5, 4))
    for pair, g in table.groupby("pair", sort=False):
        ax.scatter(g["logit_cosine"], g["cka"], label=pair, s=30)
    ax.set(xlabel="logit cosine similarity", ylabel="linear CKA (penultimate)")
    ax.legend(fontsize=7)
    return _save(fig, path)


def stealth_plot(table: pd.DataFrame, path: str | Path) -> Path:
    """Cosine similarity to the benign reference vs local step, one line per variant (the mean over
    runs), one panel per protocol (start round, reference, compared vectors) when the table has
    several; a reference of other clients also draws the benign client's own line."""
    keys = [k for k in ("start_round", "reference", "compare") if k in table.columns]
    panels = list(table.groupby(keys, sort=False)) if keys else [((), table)]
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4 * rows), squeeze=False, sharey=True)
    palette = plt.cm.tab20.colors  # 12+ variants: the default 10-colour cycle would repeat
    colour = {v: palette[i % len(palette)] for i, v in enumerate(v for v in table["variant"].unique() if v != "benign")}
    colour["benign"] = "black"  # one colour per variant in every panel
    for ax, (key, part) in zip(axes.flat, panels):
        key = key if isinstance(key, tuple) else (key,)
        protocol = dict(zip(keys, key))
        for variant, g in part.groupby("variant", sort=False):
            if variant == "benign" and protocol.get("reference") != "others":
                continue  # its own reference: 1 at every step
            style = "-" if variant.startswith("tsa_coupled") or variant == "benign" else \
                ":" if variant.startswith("tsa") else "--"
            mean = g.groupby("step")["cosine"].mean()
            ax.plot(mean.index, mean.values, style, marker=".", label=variant, color=colour[variant])
        ax.set(xlabel="local SGD step", ylabel="cosine to the benign reference", ylim=(-1.05, 1.05),
               title=", ".join(f"{k} {v}" for k, v in protocol.items()))
        ax.legend(fontsize=6, ncol=2)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    return _save(fig, path)


def sweep_curves(cells: pd.DataFrame, x: str, path: str | Path, hue: str | None = None,
                 metric_names: Sequence[str] = ("accuracy", "sece")) -> Path:
    """Final accuracy and sECE (%) against a swept key ``x``, one line per ``hue`` value and per
    configuration (any other hashed key that varies: its line is labelled with it), each point the
    mean over the seeds of its cells — never over other settings —, with a ± 1 standard deviation bar
    where it has several seeds (a single seed's point hides how far the next seed lands). A cell whose
    model is at chance (``chance_level``) or stalled (``stalled``: its last round accepted no reply) is
    drawn alone as a cross and left out of its line's mean: a diverged seed is no point of the trend,
    and it is not hidden either."""
    from fedcal.reports.groups import frame_config_labels

    labels = frame_config_labels(cells, [x, *([hue] if hue else [])])
    from fedcal.reports.sweeps import left_out

    chance = left_out(cells).to_numpy()
    # the columns plotted only, as one new frame: a cells.csv read back holds 200+ config columns,
    # one block each, and adding a column to it is what pandas' PerformanceWarning is about
    cells = cells[list(dict.fromkeys([x, *([hue] if hue else []), *metric_names]))].copy()
    cells["_config"] = labels
    at_chance, cells = cells[chance], cells[~chance]
    outside = not at_chance.empty  # the legend beside the last axes: a cross far below the lines is where it goes
    fig, axes = plt.subplots(1, len(metric_names), figsize=(4.6 * len(metric_names) + 2.6 * outside, 3.5),
                             squeeze=False)
    by = [hue, "_config"] if hue else ["_config"]
    groups = list(cells.groupby(by, sort=True))
    labelled = hue or cells["_config"].nunique() > 1
    bars = False
    for ax, name in zip(axes[0], metric_names):
        for key, g in groups:
            key = key if isinstance(key, tuple) else (key,)
            label = ", ".join(filter(None, [f"{hue}={key[0]}" if hue else "", key[-1]]))
            m = g.groupby(x)[name].agg(["mean", "std", "size"]).sort_index()
            spread = bool((m["size"] > 1).any())
            bars |= spread
            ax.errorbar(m.index, 100 * m["mean"].to_numpy(), marker="o", capsize=3, label=label or None,
                        yerr=100 * m["std"].fillna(0).to_numpy() if spread else None)
        if not at_chance.empty:
            ax.scatter(at_chance[x], 100 * at_chance[name], marker="x", color="red", zorder=3,
                       label="a chance-level or stalled cell (not in the means)")
        ax.set(xlabel=x, ylabel=f"final {DISPLAY.get(name, name)} (%)")
        values = pd.to_numeric(pd.concat([cells[x], at_chance[x]]), errors="coerce")
        if values.notna().all() and values.min() > 0 and values.max() / values.min() > 10:
            ax.set_xscale("log")  # Dirichlet α 0.1–10, τ 1–20: a linear axis crowds the small values
            ax.minorticks_off()
        if values.notna().all() and values.nunique() <= 12:  # tick the values swept, not values never run
            ax.set_xticks(sorted(values.unique()), [f"{v:g}" for v in sorted(values.unique())])
        if name == "sece":
            ax.axhline(0, color="black", lw=0.8)
        if outside:
            if ax is axes[0][-1]:
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        elif labelled:
            ax.legend(fontsize=8)
    note = "; ".join(filter(None, [SECE_SIGN if "sece" in metric_names else "",
                                   "points: mean over seeds, bars: ± 1 std" if bars else ""]))
    return _save(fig, path, note=note)


def inference_curve(curve: pd.DataFrame, x: str, path: str | Path, title: str = "",
                    highlight: str = "deepset_tm") -> Path:
    """Worst-case accuracy over attacks (%) per aggregator against ``x`` (``f_adv`` or
    ``amplification``): mean over seeds, ±1 std band; aggregator ``highlight``'s line drawn bold."""
    worst = curve.groupby(["aggregator", "seed", x])["accuracy"].min().reset_index()
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    for name, g in worst.groupby("aggregator", sort=False):
        s = g.groupby(x)["accuracy"].agg(["mean", "std"]).fillna(0.0).sort_index()
        ax.plot(s.index, 100 * s["mean"], marker="o", label=name, lw=2.2 if name == highlight else 1.2)
        ax.fill_between(s.index, 100 * (s["mean"] - s["std"]), 100 * (s["mean"] + s["std"]), alpha=0.15)
    label = {"f_adv": "adversarial clients per query", "amplification": "logit-flip amplification a"}.get(x, x)
    ax.set(xlabel=label, ylabel="worst-case accuracy (%)" if x == "f_adv" else "accuracy (%)", title=title)
    if x == "amplification":
        ax.set_xscale("log", base=2)
    ax.legend(fontsize=7)
    return _save(fig, path)


def robustness_curves(summary: pd.DataFrame, path: str | Path, metrics: dict[str, str],
                      raw: Sequence[str] = ()) -> Path:
    """Each metric of a robustness summary (mean ± std over seeds) against τ on a log axis, one
    line per (setting, dataset, strategy, training arm), each arm through the benign run at τ = 1:
    the τ study's figure. ``metrics``: column stem
    → axis name; those in ``raw`` are plotted as they are, the others as percentages."""
    metric_names = list(metrics)
    ncols = min(4, len(metric_names))
    nrows = -(-len(metric_names) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 2.9 * nrows), squeeze=False)
    lines = []  # (label, rows): each arm (a non-benign training) drawn through its benign point at τ = 1
    summary = summary.assign(config=summary["config"] if "config" in summary.columns else "")
    for (config, setting, dataset, strategy), block in summary.groupby(["config", "setting", "dataset", "strategy"],
                                                                       sort=False):
        benign = block[block["training"] == "benign"]
        arms = [t for t in dict.fromkeys(block["training"]) if t != "benign"]
        for arm in arms or ["benign"]:
            rows = benign if arm == "benign" else pd.concat([benign, block[block["training"] == arm]])
            lines.append((f"{setting}, {dataset}, {strategy}: {arm}" + (f" [{config}]" if config else ""),
                          rows.sort_values("tau")))
    for ax, name in zip(axes.flat, metric_names):
        scale = 1.0 if name in raw else 100.0
        for label, g in lines:
            ax.errorbar(g["tau"], scale * g[f"{name}_mean"], yerr=scale * g[f"{name}_std"], marker="o", ms=3,
                        capsize=2, label=label)
        ax.set_xscale("log")
        taus = sorted(summary["tau"].unique())
        ax.set_xticks(taus, [f"{t:g}" for t in taus])
        ax.minorticks_off()
        ax.set(xlabel="training τ", ylabel=metrics[name] + ("" if name in raw else " (%)"))
        if name == "sece":
            ax.axhline(0, color="black", lw=0.8)
    for ax in list(axes.flat)[len(metric_names):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    return _save(fig, path)
