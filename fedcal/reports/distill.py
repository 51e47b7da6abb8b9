"""Tables and plots of finished ``distill`` runs (RFD-LoRA and the LoRA baselines), from the run
store only (flwr-free).

:func:`distill_report` writes into ``out_dir``:

* ``runs.csv`` — one row per finished run: its settings and final CA / RA / ASR / flip / control
  flip (last evaluated round) and its mean upload bytes per client per round;
* ``table.csv`` / ``table.md`` — the Table-1-style table: method × partition × ρ (× logit attack;
  × anchor attack and prior correction when some run sets them) → CA, RA, ASR, flip and control
  flip in %, "mean ± std" over seeds, of the runs with the full RFD-LoRA configuration (CAT,
  MMD-KD and DIS on) and every baseline. flip is the trigger's own effect: of the non-target test
  texts the model gets right when clean, the share it predicts as the target once triggered (ASR
  also counts the ones it gets wrong as the target without any trigger); control flip is the same
  rate of a second, benign unknown word (``dst-control``), so flip − control flip is what the
  backdoor adds to prepending any unknown word (runs made before it existed show "–");
* ``ablation.csv`` / ``ablation.md`` — RFD-LoRA runs by variant (full, w/o CAT, w/o MMD-KD,
  w/o DIS, each alone, none), aggregator (mean / median / mom) and M;
* ``communication.csv`` / ``communication.md`` — bytes uploaded per client per round, measured
  (the ``upload_bytes_r<rank>`` metrics: the ArrayRecord payloads the server received), by method
  and rank, averaged over rounds and runs;
* ``rounds.csv`` and ``curves.png`` — CA and ASR against the round, mean over seeds per method ×
  partition × ρ.

Unfinished runs are left out, each named in a warning (:func:`fedcal.reports.runs.finished_only`).
A row averages runs that differ only in their seed and in what its table shows; runs of other
configurations (another M, rank list, number of rounds, …) are rows of their own, named in a
``config`` column (:mod:`fedcal.reports.groups`). A run whose clean accuracy (CA) is within noise of
chance on its test texts is flagged (``chance_level`` in ``runs.csv``, a marker on the CA cell and a
footnote; :mod:`fedcal.reports.chance`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fedcal.reports.chance import ChanceLevel, footnote, labels_chance, marked
from fedcal.reports.groups import CONFIG, config_labels
from fedcal.reports.inference import percent_cell
from fedcal.reports.markdown import markdown_table
from fedcal.reports.runs import finished_only
from fedcal.results import load_config, load_metrics, run_id_of

METRICS = ("ca", "ra", "asr", "flip", "control_flip")
# column names in the tables; "flip" is the trigger's own effect (fedcal.text.TriggeredSet.flip_rate),
# "control flip" the same rate of the control word (dst-control): any unknown prepended word's effect
LABELS = {"ca": "CA", "ra": "RA", "asr": "ASR", "flip": "flip", "control_flip": "control flip"}
SETTINGS = ("dst-method", "dst-partition", "dst-backdoor-ratio", "dst-logit-attack", "dst-aggregator",
            "dst-groups", "dst-cat", "dst-mmd", "dst-dis", "dst-ranks", "dst-corpus", "seed", "dst-anchor-attack",
            "dst-prior-correct", "dst-anchor-frac", "dst-distill-steps", "dst-prior-target", "dst-anchor-attack-frac")
# Settings shown as a table column only where they vary: the anchor attack and the prior correction
# (added after runs were made: a run's config.json may lack them, read as their defaults) when some
# run sets them, the anchor-set share when some run has another than the default, the ranks and the
# student's steps per round when the runs of one method differ in them (the rank sweep, a replay with
# more distillation steps; not FedIT's one rank against RFD-LoRA's four).
OPTIONAL = {"dst-anchor-attack": ("anchor attack", "none"), "dst-prior-correct": ("prior correction", False),
            "dst-anchor-frac": ("anchor share", 0.1), "dst-ranks": ("ranks", None),
            "dst-distill-steps": ("student steps", None), "dst-prior-target": ("prior target", "median"),
            "dst-anchor-attack-frac": ("attacked anchors", 0.1)}
#: RFD-LoRA's ablation switches (:func:`variant`)
SWITCHES = ("dst-cat", "dst-mmd", "dst-dis")
#: the run-config keys shown by the main table (method, RFD-LoRA's aggregator, partition, ρ, logit
#: attack; its RFD-LoRA rows are the full switch setting) and by the ablation (switches, aggregator, M)
MAIN_SHOWN = ("dst_method", "dst_aggregator", "dst_partition", "dst_backdoor_ratio", "dst_logit_attack", "dst_cat",
              "dst_mmd", "dst_dis", "dst_anchor_attack", "dst_prior_correct", "dst_anchor_frac", "dst_ranks",
              "dst_distill_steps", "dst_prior_target", "dst_anchor_attack_frac")  # the last seven: OPTIONAL
# columns, shown where they vary
ABLATION_SHOWN = (*MAIN_SHOWN, "dst_groups")
CHANCE = "chance_level"
#: corpora whose test texts are on this machine without a download (GLUE's are fetched by datasets)
_OFFLINE_CORPORA = ("sentiment", "tweets", "genre", "synthetic")


def text_chance(cfg) -> ChanceLevel | None:
    """The chance level of a distill run's test texts (the corpus subsample it evaluates CA on), or
    None where the corpus is not on this machine (GLUE: networked)."""
    from fedcal.config import ConfigError
    from fedcal.distill.run_data import DistillRunSpec, text_task

    if cfg.dst_corpus not in _OFFLINE_CORPORA:
        return None
    try:
        task = text_task(DistillRunSpec.from_config(cfg))
    except (ConfigError, OSError):
        return None
    return labels_chance(task.test_labels, task.num_classes)


def method_labels() -> dict[str, str]:
    """Each LoRA method's name in its paper (its :attr:`~fedcal.distill.methods.LoraMethod.label`), by ``dst-method``."""
    from fedcal import catalogue
    from fedcal.distill.methods import lora_method

    return {n: lora_method(n).label or n for n in catalogue.names("lora-method")}


def owns(methods: pd.Series, *keys: str) -> pd.Series:
    """Whether each run's ``dst-method`` (a column of them) declares every one of ``keys`` (run-config keys)
    as its own (its catalogue Component's keys: RFD-LoRA's server and ablation keys)."""
    from fedcal import catalogue

    fields = {k.replace("-", "_") for k in keys}
    own = {n: fields <= set(c.keys) for n, c in catalogue.components("lora-method").items()}
    return methods.map(own).fillna(False).astype(bool)


def _a_methods_own(key: str) -> bool:
    """Whether some LoRA method declares run-config key ``key`` as its own: a column "–" in the others' rows."""
    from fedcal import catalogue

    return any(key.replace("-", "_") in c.keys for c in catalogue.components("lora-method").values())


def variant(cat: bool, mmd: bool, dis: bool) -> str:
    """The ablation name of RFD-LoRA's switches: "full", "w/o CAT", …, "CAT only", …, "none"."""
    on = {"CAT": bool(cat), "MMD-KD": bool(mmd), "DIS": bool(dis)}
    off = [k for k, v in on.items() if not v]
    if not off:
        return "full"
    if len(off) == 1:
        return f"w/o {off[0]}"
    if len(off) == 2:
        return f"{next(k for k, v in on.items() if v)} only"
    return "none"


def _bool(v) -> bool:
    return v if isinstance(v, bool) else str(v).lower() == "true"


def run_table(run_dirs: Sequence[str | os.PathLike[str]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, tidy per-round metrics) of the finished runs among ``run_dirs``: one row per run with
    its settings, final ``ca``/``ra``/``asr`` (its last evaluated round) and ``upload_bytes`` (mean
    over its rounds)."""
    dirs = finished_only(run_dirs, "the distill tables")
    metrics = load_metrics(dirs)
    if metrics.empty:
        return pd.DataFrame(), metrics
    cfgs = {run_id_of(d): load_config(d) for d in dirs}  # by run id, as the metrics are (not the folder's name)
    main_label = dict(zip(cfgs, config_labels(list(cfgs.values()), MAIN_SHOWN)))
    ablation_label = dict(zip(cfgs, config_labels(list(cfgs.values()), ABLATION_SHOWN)))
    chances: dict[tuple, ChanceLevel | None] = {}
    rows = []
    for run_id, g in metrics.groupby("run_id", sort=True):
        evaluated = g[g["metric"] == "ca"]
        if evaluated.empty:
            continue
        last = int(evaluated["round"].max())
        final = g[g["round"] == last].set_index("metric")["value"]
        row = {"run_id": run_id, **{k: g[k].iloc[0] for k in SETTINGS if k in g.columns}, "round": last}
        row.update({m: float(final[m]) if m in final else np.nan for m in METRICS})
        up = g[g["metric"] == "upload_bytes"]["value"]
        row["upload_bytes"] = float(up.mean()) if len(up) else np.nan
        cfg = cfgs[run_id]
        key = (cfg.dst_corpus, cfg.data_dir, cfg.seed, cfg.dst_test_size)  # what the test texts depend on
        if key not in chances:
            chances[key] = text_chance(cfg)
        row[CHANCE] = bool(chances[key] is not None and chances[key].flags(row["ca"]))
        row[CONFIG], row["ablation_config"] = main_label[run_id], ablation_label[run_id]
        rows.append(row)
    runs = pd.DataFrame(rows)
    if not runs.empty:
        for key, (_, default) in OPTIONAL.items():
            if default is not None:
                runs[key] = runs[key].where(runs[key].notna(), default) if key in runs else default
        runs["dst-prior-correct"] = [_bool(v) for v in runs["dst-prior-correct"]]
        runs["variant"] = [variant(_bool(c), _bool(m), _bool(d)) for c, m, d in
                           zip(runs["dst-cat"], runs["dst-mmd"], runs["dst-dis"])]
        runs["method"] = runs["dst-method"].map(method_labels()).fillna(runs["dst-method"])
    runs.attrs["chance"] = list(chances.values())
    return runs, metrics


def _summary(runs: pd.DataFrame, by: list[str], config: str = CONFIG) -> pd.DataFrame:
    """CA / RA / ASR / flip "mean ± std" (%) over the seeds of each ``by`` group (and configuration:
    the ``config`` column, first, when the runs have several), with the seed count; a CA cell of a
    group with chance-level runs carries the chance marker."""
    many = config in runs.columns and runs[config].nunique() > 1
    keys = [config, *by] if many else by
    out = []
    for key, g in runs.groupby(keys, sort=True, dropna=False):
        row = dict(zip([CONFIG, *by] if many else by, key if isinstance(key, tuple) else (key,)))
        if "seed" in g and g["seed"].duplicated().any():
            raise ValueError(f"two runs of one seed in the distill row {row}: {', '.join(g['run_id'])}")
        for m in METRICS:
            vals = g[m].dropna()
            row[LABELS[m]] = percent_cell(vals.mean(), vals.std(ddof=1) if len(vals) > 1 else 0.0, len(vals)) \
                if len(vals) else "–"
        k = int(g[CHANCE].sum()) if CHANCE in g else 0
        if k:
            row[LABELS["ca"]] = marked(row[LABELS["ca"]], True) + ("" if k == len(g) else f" ({k}/{len(g)} seeds)")
        row["seeds"] = int(g["seed"].nunique()) if "seed" in g else len(g)
        out.append(row)
    return pd.DataFrame(out)


def _optional(runs: pd.DataFrame) -> list[str]:
    """The :data:`OPTIONAL` settings some run sets, renamed to their column names in ``runs``."""
    cols = []
    for key, (name, default) in OPTIONAL.items():
        if key not in runs:
            continue
        varies = (runs[key] != default).any() if default is not None else \
            runs.groupby("dst-method")[key].nunique().max() > 1
        if varies:
            runs[name] = runs[key].astype(str) if default is None else runs[key]
            if _a_methods_own(key):
                runs[name] = runs[name].where(owns(runs["dst-method"], key), "–")
            cols.append(name)
    return cols


def main_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Table 1: every baseline run and the full-configuration RFD-LoRA runs, by method, partition,
    ρ and logit attack (and aggregator for RFD-LoRA; anchor attack and prior correction when some
    run sets them), CA / RA / ASR / flip / control flip over seeds."""
    full = runs[~owns(runs["dst-method"], *SWITCHES) | (runs["variant"] == "full")].copy()
    full["aggregator"] = np.where(owns(full["dst-method"], "dst-aggregator"), full["dst-aggregator"], "–")
    full = full.rename(columns={"dst-partition": "partition", "dst-backdoor-ratio": "rho",
                                "dst-logit-attack": "logit attack"})
    return _summary(full, ["method", "aggregator", "partition", "rho", "logit attack", *_optional(full)])


def ablation_table(runs: pd.DataFrame) -> pd.DataFrame:
    """RFD-LoRA runs by variant, aggregator and M (and partition, ρ), CA / RA / ASR over seeds."""
    rfd = runs[owns(runs["dst-method"], *SWITCHES)].rename(columns={
        "dst-aggregator": "aggregator", "dst-groups": "M", "dst-partition": "partition", "dst-backdoor-ratio": "rho",
        "dst-logit-attack": "logit attack"})
    if rfd.empty:
        return pd.DataFrame()
    order = ["full", "w/o CAT", "w/o MMD-KD", "w/o DIS", "CAT only", "MMD-KD only", "DIS only", "none"]
    # the logit attack is a shown key (not in the config label): a column where the runs differ in it
    attack = ["logit attack"] if "logit attack" in rfd and rfd["logit attack"].nunique() > 1 else []
    table = _summary(rfd, ["variant", "aggregator", "M", "partition", "rho", *attack, *_optional(rfd)],
                     config="ablation_config")
    table["_o"] = table["variant"].map({v: i for i, v in enumerate(order)})
    first = [CONFIG] if CONFIG in table.columns else []
    return table.sort_values([*first, "_o", "aggregator", "M", "partition", "rho"]).drop(columns="_o") \
        .reset_index(drop=True)


def communication_table(runs: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """Measured bytes uploaded per client per round, by method and rank (and anchor share where the runs
    differ in it; mean over rounds and runs), from the ``upload_bytes_r<rank>`` metrics."""
    per_rank = metrics[metrics["metric"].str.startswith("upload_bytes_r")].copy()
    if per_rank.empty:
        return pd.DataFrame(columns=["method", "rank", "bytes per client per round", "runs"])
    per_rank["rank"] = per_rank["metric"].str.removeprefix("upload_bytes_r").astype(int)
    per_rank["method"] = per_rank["dst-method"].map(method_labels()).fillna(per_rank["dst-method"])
    by = ["method", "rank"]
    # RFD-LoRA uploads one logit row per anchor: runs of other anchor shares (a column of the main table,
    # so not in ablation_config) upload other sizes and are other rows, never one mean
    if "dst-anchor-frac" in runs.columns and runs["dst-anchor-frac"].nunique() > 1:
        per_rank[OPTIONAL["dst-anchor-frac"][0]] = per_rank["run_id"].map(runs.set_index("run_id")["dst-anchor-frac"])
        by = [*by, OPTIONAL["dst-anchor-frac"][0]]
    if "ablation_config" in runs.columns and runs["ablation_config"].nunique() > 1:
        per_rank[CONFIG] = per_rank["run_id"].map(runs.set_index("run_id")["ablation_config"])
        by = [CONFIG, *by]
    g = per_rank.groupby(by).agg(bytes=("value", "mean"), runs=("run_id", "nunique")).reset_index()
    return g.rename(columns={"bytes": "bytes per client per round"})


def round_curves(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per round, CA and ASR mean over seeds per method × partition × ρ (finished runs)."""
    rows = metrics[metrics["metric"].isin(["ca", "asr"])].copy()
    if rows.empty:
        return pd.DataFrame()
    rows["method"] = rows["dst-method"].map(method_labels()).fillna(rows["dst-method"])
    keys = ["method", "dst-partition", "dst-backdoor-ratio", "metric", "round"]
    # a line per configuration (RFD-LoRA's aggregator, switches, M, …): seeds are its only average
    labels = _line_configs(metrics)
    if labels is not None:
        rows[CONFIG] = rows["run_id"].map(labels)
        keys = [CONFIG, *keys]
    return rows.groupby(keys)["value"].agg(["mean", "std", "count"]).reset_index()


def _line_configs(metrics: pd.DataFrame) -> dict[str, str] | None:
    """run id → what sets its curve apart besides method, partition and ρ; None when nothing does."""
    from fedcal.reports.groups import frame_config_labels

    first = metrics.drop_duplicates("run_id")
    labels = frame_config_labels(first, ("dst_method", "dst_partition", "dst_backdoor_ratio"))
    return dict(zip(first["run_id"], labels)) if any(labels) else None


def curves_plot(curves: pd.DataFrame, path: str | Path) -> Path:
    """CA (top row) and ASR (bottom row) against the round, one panel per partition × ρ and one line
    per method (and configuration) in it, a method keeping its colour in every panel and one legend
    beside the grid: a full Table 1 has 36 lines, which one pair of axes cannot show."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    lines = [CONFIG] if CONFIG in curves.columns else []
    panels = sorted(set(zip(curves["dst-partition"], curves["dst-backdoor-ratio"])))
    names = sorted({_line_name(k, lines) for k, _ in curves.groupby([*lines, "method"])})
    colours = {n: plt.get_cmap("tab20" if len(names) > 10 else "tab10")(i % 20) for i, n in enumerate(names)}
    fig, axes = plt.subplots(2, len(panels), figsize=(2.6 * len(panels) + 1.5, 5.2), squeeze=False, sharey=True)
    for col, (partition, rho) in enumerate(panels):
        for row, (metric, label) in enumerate((("ca", "clean accuracy (CA)"), ("asr", "attack success (ASR)"))):
            ax = axes[row, col]
            part = curves[(curves["metric"] == metric) & (curves["dst-partition"] == partition)
                          & (curves["dst-backdoor-ratio"] == rho)]
            for key, g in part.groupby([*lines, "method"]):
                name = _line_name(key, lines)
                ax.plot(g["round"], g["mean"], marker=".", color=colours[name], label=name)
            ax.set(ylim=(0, 1), xlabel="round" if row else "", ylabel=label if col == 0 else "")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(f"{partition}, ρ = {rho:g}", fontsize=9)
    handles = [plt.Line2D([], [], color=colours[n], marker=".") for n in names]
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def _line_name(key, lines: list[str]) -> str:
    key = key if isinstance(key, tuple) else (key,)
    return f"{key[-1]} [{key[0]}]" if lines else str(key[-1])


def distill_report(run_dirs: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str],
                   title: str = "") -> str:
    """Write every distill table and plot (see the module docstring) into ``out_dir``; returns the
    Markdown of the tables."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs, metrics = run_table(run_dirs)
    runs.to_csv(out / "runs.csv", index=False)
    if runs.empty:
        text = "(no finished distill run)\n"
        (out / "table.md").write_text(text)
        return text
    parts = []
    table = main_table(runs)
    table.to_csv(out / "table.csv", index=False)
    note = ("\n" + footnote(runs.attrs.get("chance", []), "clean accuracy (CA)")) if runs[CHANCE].any() else ""
    md = markdown_table(table, title or "CA / RA / ASR / flip (%), mean ± std over seeds") + note
    (out / "table.md").write_text(md)
    parts.append(md)
    ablation = ablation_table(runs)
    if not ablation.empty:
        ablation.to_csv(out / "ablation.csv", index=False)
        md = markdown_table(ablation, "RFD-LoRA ablation: switches, aggregator, M") + note
        (out / "ablation.md").write_text(md)
        parts.append(md)
    comm = communication_table(runs, metrics)
    comm.to_csv(out / "communication.csv", index=False)
    md = markdown_table(comm, "Upload per client per round (measured bytes)",
                        {"bytes per client per round": "{:,.0f}"})
    (out / "communication.md").write_text(md)
    parts.append(md)
    curves = round_curves(metrics)
    curves.to_csv(out / "rounds.csv", index=False)
    if not curves.empty:
        curves_plot(curves, out / "curves.png")
    return "\n".join(parts)
