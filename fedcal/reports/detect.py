"""The detection case study's report (flwr-free), from finished ``detect`` run directories only.

Each run is labelled by its τ (``attack=none`` is τ = 1, "benign"). Written to ``out_dir``:

* ``runs.csv`` — every finished run's last evaluated round (``map50``, ``obj_ece``, ``obj_sece``,
  ``mean_obj_prob``, ``positive_rate``, ``boxes_kept_object`` and ``boxes_kept_class`` at
  ``det-threshold``, ``gt_boxes``);
* ``table.csv`` / ``table.md`` — per τ: mean ± std over seeds (the mean alone for one seed), boxes
  kept under both keep rules (:data:`fedcal.detect.metrics.KEEP_RULES`);
* ``kept.csv`` / ``boxes_kept.png`` — boxes kept per image versus the score threshold (each run's
  final model; mean over seeds per τ), one panel per keep rule, the ground-truth count as a reference
  line;
* ``reliability.csv`` / ``no_object_reliability.png`` — the no-object calibration (confidence 1 − p_∅
  that a query is an object vs whether it matched a box) of each τ's first seed;
* ``examples.csv`` / ``examples.png`` — test scene 0 with its kept boxes (score > ``det-threshold``
  under the runs' ``det-keep`` rule) for each τ, from the first seed (every run of one seed draws the
  same test scenes);
* ``rounds.csv`` / ``curves.png`` — mAP@0.5 and the no-object sECE per round (mean per τ).

A row averages runs that differ only in their seed (and the τ it shows); runs of other
configurations are rows of their own, named in a ``config`` column (:mod:`fedcal.reports.groups`).
Detection has no clean accuracy to hold against chance: a detector that finds nothing scores mAP@0.5
= 0 and keeps no box, which the table shows as such.

A run made before the keep rules existed recorded only ``boxes_kept``, under the class rule, and has
the run name of a default (object-rule) run: it is refused with a line naming it, to be re-run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fedcal.detect import EXAMPLE_FILE, EXAMPLE_IMAGE, KEPT_FILE
from fedcal.reports.groups import CONFIG, config_labels
from fedcal.reports.markdown import markdown_table
from fedcal.reports.runs import finished_only
from fedcal.results import load_config, load_metrics, run_id_of

#: the run-config keys the detection table shows: τ (benign = τ 1) and the attack
SHOWN = ("tau", "attack")

EVALUATED = "map50"  # a detect round that logged this was evaluated
METRICS = ("map50", "obj_ece", "obj_sece", "mean_obj_prob", "positive_rate", "boxes_kept_object",
           "boxes_kept_class", "gt_boxes")
_LABELS = {"map50": "mAP@0.5", "obj_ece": "no-object ECE", "obj_sece": "no-object sECE",
           "mean_obj_prob": "mean P(object)", "positive_rate": "matched queries",
           "boxes_kept_object": "boxes kept / image (object score)", "boxes_kept_class": "boxes kept / image (class score)",
           "gt_boxes": "true boxes / image"}
_COUNTS = ("boxes_kept_object", "boxes_kept_class", "gt_boxes")  # two decimals, the rest three
_RULE_TEXT = {"object": "1 − p(no object)", "class": "max class probability"}


def _run_info(run_dir: Path) -> dict:
    cfg = json.loads((run_dir / "config.json").read_text())["config"]
    tau = 1.0 if cfg["attack"] == "none" else float(cfg["tau"])
    return {"run_dir": str(run_dir), "run_id": run_id_of(run_dir), "tau": tau, "attack": cfg["attack"],
            "seed": int(cfg["seed"]), "det-model": cfg["det-model"], "det-threshold": float(cfg["det-threshold"]),
            "det-keep": cfg.get("det-keep", "object")}


def tau_label(tau: float) -> str:
    return "τ = 1 (benign)" if tau == 1 else f"τ = {tau:g}"


def run_rows(run_dirs: Sequence[Path]) -> pd.DataFrame:
    """One row per finished run: its τ, seed and last evaluated round's metrics."""
    metrics = load_metrics(list(run_dirs))
    labels = config_labels([load_config(d) for d in run_dirs], SHOWN)
    rows = []
    for d, label in zip(run_dirs, labels):
        info = {CONFIG: label, **_run_info(Path(d))}
        m = metrics[metrics["run_id"] == info["run_id"]]
        evaluated = m[m["metric"] == EVALUATED]
        if evaluated.empty:
            continue
        last = int(evaluated["round"].max())
        final = m[m["round"] == last].set_index("metric")["value"]
        if "boxes_kept_object" not in final:
            raise ValueError(f"{d}: made before the keep rules (det-keep) existed, its boxes_kept is the class "
                             f"score's and no object-score count was recorded; re-run it (--force)")
        rows.append({**info, "round": last, **{k: float(final.get(k, np.nan)) for k in METRICS}})
    return pd.DataFrame(rows).sort_values([CONFIG, "tau", "seed"]).reset_index(drop=True) if rows else pd.DataFrame()


def _cell(kind: str):
    def fmt(v) -> str:
        if isinstance(v, str):
            return v
        return f"{v:.3f}" if kind == "frac" else f"{v:.2f}"
    return fmt


def summary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per τ: the number of seeds and mean ± std (mean alone for one seed) of every metric."""
    out = []
    many = CONFIG in runs.columns and runs[CONFIG].nunique() > 1
    for key, g in runs.groupby([CONFIG, "tau"] if many else ["tau"], sort=True):
        tau = key[-1] if isinstance(key, tuple) else key
        if g["seed"].duplicated().any():
            raise ValueError(f"two runs of one seed in the detection row τ = {tau:g}: {', '.join(g['run_id'])}")
        row = ({CONFIG: key[0]} if many else {}) | {"τ": tau_label(tau), "seeds": len(g)}
        for k in METRICS:
            v = g[k].to_numpy(dtype=float)
            fmt = "{:.2f}" if k in _COUNTS else "{:.3f}"
            row[_LABELS[k]] = fmt.format(np.nanmean(v)) + (f" ± {fmt.format(np.nanstd(v, ddof=1))}" if len(v) > 1 else "")
        out.append(row)
    return pd.DataFrame(out)


def detect_report(run_dirs: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str], title: str = "") -> str:
    """Write the tables and plots of the module docstring; return ``table.md``'s Markdown."""
    import matplotlib

    matplotlib.use("Agg")

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    finished = finished_only(list(run_dirs), "the detection report")
    runs = run_rows(finished)
    if runs.empty:
        raise ValueError("no finished detect run with an evaluated round among the given run directories")
    runs.to_csv(out / "runs.csv", index=False)
    table = summary_table(runs)
    table.to_csv(out / "table.csv", index=False)
    thr = float(runs["det-threshold"].iloc[0])
    md = markdown_table(table, title or f"TSA on federated detection ({runs['det-model'].iloc[0]}); boxes kept at "
                                         f"score > {thr:g}, the object score 1 − p(no object) or the class score "
                                         f"max p(class)")
    (out / "table.md").write_text(md)
    runs["line"] = [tau_label(t) + (f" [{c}]" if runs[CONFIG].nunique() > 1 else "")
                    for c, t in zip(runs[CONFIG], runs["tau"])]
    first = runs.sort_values("seed").groupby([CONFIG, "tau"], sort=True).head(1)  # each line's first seed
    _boxes_kept(runs, out)
    _no_object_reliability(first, out)
    _examples(first, thr, out)
    _round_curves(finished, runs, out)
    return md


def _boxes_kept(runs: pd.DataFrame, out: Path) -> None:
    """kept.csv and boxes_kept.png: boxes kept per image against the score threshold, per keep rule."""
    import matplotlib.pyplot as plt

    kept = []
    for _, r in runs.iterrows():
        path = Path(r["run_dir"]) / KEPT_FILE
        if path.exists():
            k = pd.read_csv(path)
            k = k[k["round"] == k["round"].max()]
            kept.append(k.assign(tau=r["tau"], seed=r["seed"], line=r["line"]))
    if not kept:
        return
    curves = pd.concat(kept, ignore_index=True)[["tau", "seed", "round", "rule", "threshold", "kept", "line"]]
    curves.to_csv(out / "kept.csv", index=False)
    rules = [rule for rule in _RULE_TEXT if rule in set(curves["rule"])]
    fig, axes = plt.subplots(1, len(rules), figsize=(5.2 * len(rules), 3.8), squeeze=False, sharey=True)
    for ax, rule in zip(axes[0], rules):
        for line, g in curves[curves["rule"] == rule].groupby("line", sort=True):
            mean = g.groupby("threshold")["kept"].mean()
            ax.plot(mean.index, mean.values, marker="o", ms=3, label=line)
        ax.axhline(float(runs["gt_boxes"].mean()), color="k", ls="--", lw=1, label="true boxes / image")
        ax.set(xlabel=f"threshold on {_RULE_TEXT[rule]}", ylabel="boxes kept per image", yscale="symlog",
               title=f"{rule} score")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "boxes_kept.png", dpi=120)
    plt.close(fig)


def _no_object_reliability(first: pd.DataFrame, out: Path) -> None:
    """reliability.csv and no_object_reliability.png of each line's first seed."""
    from fedcal.reports.plots import reliability_grid

    rel = []
    for _, r in first.iterrows():
        path = Path(r["run_dir"]) / "reliability.csv"
        if path.exists():
            rel.append((r["line"], pd.read_csv(path).assign(tau=r["tau"], seed=r["seed"])))
    if rel:
        pd.concat([t for _, t in rel], ignore_index=True).to_csv(out / "reliability.csv", index=False)
        reliability_grid(rel, out / "no_object_reliability.png")


def _examples(first: pd.DataFrame, thr: float, out: Path) -> None:
    """examples.png and examples.csv: the same test image with its kept boxes, per τ."""
    import matplotlib.patches as patches
    import matplotlib.pyplot as plt

    shown = [(r, Path(r["run_dir"])) for _, r in first.iterrows() if (Path(r["run_dir"]) / EXAMPLE_IMAGE).exists()]
    if not shown:
        return
    ex = []
    fig, axes = plt.subplots(1, len(shown), figsize=(3.0 * len(shown), 3.2), squeeze=False)
    for ax, (r, d) in zip(axes[0], shown):
        img = np.load(d / EXAMPLE_IMAGE)
        boxes = pd.read_csv(d / EXAMPLE_FILE) if (d / EXAMPLE_FILE).exists() else pd.DataFrame()
        ex.append(boxes.assign(tau=r["tau"], seed=r["seed"], rule=r["det-keep"]))
        ax.imshow(img, cmap="gray", vmin=0, vmax=1)
        for _, b in boxes.iterrows():
            ax.add_patch(patches.Rectangle((b["x1"] - 0.5, b["y1"] - 0.5), b["x2"] - b["x1"], b["y2"] - b["y1"],
                                           fill=False, lw=1, color="#e8a33d"))
            ax.text(b["x1"], b["y1"] - 1, f"{int(b['label'])}:{b['score']:.2f}", color="#e8a33d", fontsize=6)
        ax.set_title(f"{r['line']}: {len(boxes)} kept", fontsize=9)
        ax.axis("off")
    scored = " or ".join(_RULE_TEXT[k] for k in dict.fromkeys(r["det-keep"] for r, _ in shown))  # each run's rule
    fig.suptitle(f"test scene 0, boxes with {scored} > {thr:g}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "examples.png", dpi=120)
    plt.close(fig)
    pd.concat(ex, ignore_index=True).to_csv(out / "examples.csv", index=False)


def _round_curves(finished: Sequence[Path], runs: pd.DataFrame, out: Path) -> None:
    """rounds.csv and curves.png: mAP@0.5 and the no-object sECE over the rounds, per line."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    metrics = load_metrics(finished)
    if metrics.empty:
        return
    tau_of = dict(zip(runs["run_id"], runs["tau"]))
    line_of = dict(zip(runs["run_id"], runs["line"]))
    per = metrics[metrics["metric"].isin(["map50", "obj_sece"]) & metrics["run_id"].isin(tau_of)].copy()
    per["tau"] = per["run_id"].map(tau_of)
    per["line"] = per["run_id"].map(line_of)
    rounds = per.groupby(["tau", "line", "metric", "round"])["value"].agg(["mean", "std", "count"]).reset_index()
    rounds.to_csv(out / "rounds.csv", index=False)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, metric in zip(axes, ["map50", "obj_sece"]):
        for line, g in rounds[rounds["metric"] == metric].groupby("line", sort=True):
            ax.plot(g["round"], g["mean"], marker="o", ms=3, label=line)
        ax.set(xlabel="round", ylabel=_LABELS[metric])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)
    plt.close(fig)
