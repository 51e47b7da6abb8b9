"""Temperature as a robustness knob (SPEC §9): the τ study's runs, their robustness, tables, plots.

* :func:`temperature_configs` — the training runs of the study: every client trains at τ
  (the TSA client code path with ``attacker-ratio = 1``; τ = 1 is the plain benign run), in
  federation and centralised (one client holding all the training data, with the federation's
  total number of client steps);
* the robustness of each finished run's final model comes from
  :func:`fedcal.robustness.runs.evaluate_runs` (cached in the run directory as
  ``robustness/<spec key>.json``, so no model is attacked twice): this module computes nothing;
* :func:`robustness_table` / :func:`summarise_robustness` / :func:`robustness_report` — one row
  per run, then mean ± std over seeds per (setting, strategy, training, τ), Markdown, CSV and plots.

The same evaluation serves the bridge to TSA: ``fedcal robustness --runs`` evaluates finished
TSA runs (25 % attackers) without retraining.

A summary row holds runs that differ only in their seed or in what the table shows (setting,
dataset, model, strategy, training, τ); runs of other configurations are rows of their own, named in
a ``config`` column. A model whose clean accuracy is within noise of chance is flagged
(``chance_level``, :mod:`fedcal.reports.chance`): its "robustness" is a constant answer's.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from fedcal.config import RunConfig
from fedcal.reports.chance import cfg_chance, footnote
from fedcal.reports.groups import CONFIG, config_labels
from fedcal.reports.markdown import SECE_SIGN, markdown_table
from fedcal.reports.plots import robustness_curves
from fedcal.reports.runs import finished_only
from fedcal.results import UnfinishedRunError, load_config, load_metrics
from fedcal.robustness import RobustnessSpec
from fedcal.robustness.runs import evaluate_runs

log = logging.getLogger(__name__)

SETTINGS = ("federated", "centralised")

# The report's metric columns (fractions in the data, percentages in the Markdown), in order.
METRICS = {
    "accuracy": "clean acc", "ece": "ECE", "sece": "sECE", "fgsm_acc": "FGSM acc", "pgd_acc": "PGD acc",
    "pgd_targeted_success": "targeted PGD success", "cw_acc": "CW acc", "corruption_acc": "corruption acc",
    "zero_grad_frac": "zero CE gradient", "proto_var": "proto var", "proto_cv2": "proto CV²",
    "rejected_rounds": "rounds all rejected",
}
_RAW = ("proto_var", "proto_cv2", "rejected_rounds")  # not percentages


COUPLINGS = ("fixed", "coupled")


def setting_of(cfg: RunConfig) -> str:
    """``centralised`` for a one-client run, else ``federated``."""
    return "centralised" if cfg.num_clients == 1 else "federated"


def training_of(cfg: RunConfig) -> str:
    """How the run's clients trained, in words: benign, every client at τ, or TSA attackers."""
    if cfg.attack == "none":
        return "benign"
    if cfg.attack == "tsa" and cfg.num_attackers == cfg.num_clients:
        return "all clients at τ, " + ("η=β·τ" if cfg.coupled else "η=β")
    if cfg.attack == "tsa":
        return f"TSA, {cfg.num_attackers}/{cfg.num_clients} attackers, " + ("η=β·τ" if cfg.coupled else "η=β")
    return f"{cfg.attack}, {cfg.num_attackers}/{cfg.num_clients} attackers"


def rejected_rounds(run_dir: str | os.PathLike[str]) -> float:
    """Rounds of a finished run in which the server rejected every reply and kept the global model
    (e.g. clients whose training diverged to NaN): the final model is then an earlier round's, which
    a table of that run must say."""
    metrics = load_metrics(run_dir)
    received = metrics[metrics["metric"] == "replies_received"].set_index("round")["value"]
    accepted = metrics[metrics["metric"] == "replies_accepted"].set_index("round")["value"]
    if received.empty:  # a run from before the reply accounting
        return float("nan")
    return float(((received > 0) & (accepted.reindex(received.index) == 0)).sum())


def robustness_table(run_dirs: Sequence[str | os.PathLike[str]], spec: RobustnessSpec, device: str = "auto",
                     progress: Callable | None = None, force: bool = False, jobs: int = 1) -> pd.DataFrame:
    """One row per finished run: its identity (setting, dataset, model, strategy, training, τ,
    seed, run directory) and every metric of :func:`fedcal.robustness.runs.evaluate_run`. Unfinished runs, and runs
    whose evaluation failed (e.g. a diverged model with non-finite logits), are left out, each
    named in a warning line."""
    dirs = finished_only([Path(d) for d in run_dirs], "the robustness table")
    metrics, failures = evaluate_runs(dirs, spec, device, jobs, force, progress)
    for d, reason in failures.items():
        log.warning("robustness of %s left out of the table: %s", d, reason)
    rows = []
    runs = [(d, load_config(d)) for d in dirs if str(d) not in failures]
    stored = _stored_finals([d for d, _ in runs])
    labels: dict[Path, str] = {}
    for setting in SETTINGS:  # the setting column shows what sets a centralised run apart (one client)
        own = [(d, c) for d, c in runs if setting_of(c) == setting]
        labels.update(zip((d for d, _ in own), config_labels([c for _, c in own], SHOWN)))
    for d, cfg in runs:
        chance = cfg_chance(cfg)
        m = {**metrics[str(d)], **stored.get(d.name, {})}  # the run's own final metrics where it has them
        rows.append({CONFIG: labels[d], "setting": setting_of(cfg), "dataset": cfg.dataset, "model": cfg.model,
                     "strategy": cfg.strategy, "training": training_of(cfg), "tau": cfg.tau, "seed": cfg.seed,
                     **m, "rejected_rounds": rejected_rounds(d), "run": d.name,
                     CHANCE: bool(chance is not None and chance.flags(float(m["accuracy"])))})
    table = pd.DataFrame(rows)
    table.attrs["chance"] = [cfg_chance(c) for _, c in runs]
    table.attrs["failed"] = failures  # the command's exit code reflects them
    return table


#: the whole-test-set metrics a run stores itself (its final evaluation): the table reads them from the run
STORED = ("accuracy", "ece", "sece", "brier", "nll")


def _stored_finals(dirs: Sequence[Path]) -> dict[str, dict[str, float]]:
    """Per run directory name: the run's own final metrics (:data:`STORED`) when its last evaluated round is its
    last round (so they are the model this report attacks). One run, one number: a table that reads a run
    reports the result the run stored, not a second evaluation of its model (another batch order or thread
    count moves the fourth decimal)."""
    from fedcal.reports.runs import final_metrics

    if not dirs:
        return {}
    finals = final_metrics(dirs, "the robustness table")
    out = {}
    for d in dirs:
        row = finals[finals["run_id"] == d.name]
        if len(row) and int(row["round"].iloc[0]) == load_config(d).num_rounds:
            out[d.name] = {k: float(row[k].iloc[0]) for k in STORED if k in row and pd.notna(row[k].iloc[0])}
    return out


GROUP = [CONFIG, "setting", "dataset", "model", "strategy", "training", "tau"]
#: the run-config keys the table shows (its training column: attack, attacker ratio, coupling)
SHOWN = ("dataset", "model", "strategy", "attack", "attacker_ratio", "coupled", "tau")
CHANCE = "chance_level"


def summarise_robustness(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and std (ddof 1; 0 for one seed) over seeds of every metric per
    (setting, dataset, model, strategy, training, τ); ``seeds`` is the number of seeds averaged: a run
    whose model is at chance (``chance_level``) or whose metrics are NaN is left out of the means — a
    constant answer is "robust" to every attack — counted in ``chance_level`` and named with its
    reason in ``left_out`` (:func:`fedcal.reports.sweeps.left_out_reasons`)."""
    from fedcal.reports.sweeps import left_out_names, left_out_reasons

    table = table.assign(**{CONFIG: table[CONFIG] if CONFIG in table.columns else ""})
    metrics = [m for m in table.columns if m not in (*GROUP, "seed", "run", CHANCE)]
    twice = table[table.duplicated([*GROUP, "seed"], keep=False)]
    if not twice.empty:
        raise ValueError(f"two runs of one seed in one robustness row: {', '.join(twice['run'])}")
    reasons = left_out_reasons(table)
    g = table.groupby(GROUP, sort=False)
    sound = table[reasons.eq("")].groupby(GROUP, sort=False)
    out = pd.DataFrame(index=g.size().index)
    out = out.join(sound[metrics].mean().add_suffix("_mean"))
    out = out.join(sound[metrics].std(ddof=1).fillna(0.0).add_suffix("_std"))
    out = out.join(sound.size().rename("seeds"))
    out["seeds"] = out["seeds"].fillna(0).astype(int)
    if CHANCE in table.columns:
        out = out.join(g[CHANCE].sum().astype(int))
    out = out.join(left_out_names(table, reasons, GROUP))
    order = {s: i for i, s in enumerate(SETTINGS)}
    out = out.reset_index()
    out["_o"] = out["setting"].map(order)
    out = out.sort_values(["_o", CONFIG, "dataset", "model", "strategy", "tau", "training"]).drop(columns="_o") \
        .reset_index(drop=True)
    return out if out[CONFIG].ne("").any() else out.drop(columns=CONFIG)


def _cell(mean: float, std: float, seeds: int, raw: bool) -> str:
    if raw:
        text = f"{mean:.4g}"
        return text + (f" ± {std:.2g}" if seeds > 1 else "")
    text = f"{100 * mean:.1f}"
    return text + (f" ± {100 * std:.1f}" if seeds > 1 else "")


def robustness_markdown(summary: pd.DataFrame, title: str = "") -> str:
    """The summary as one Markdown table per (setting, dataset, model, strategy): τ, training,
    seeds and every metric as mean ± std (percentages, except the prototype statistics)."""
    parts = []
    configs = CONFIG in summary.columns
    for key, block in summary.groupby([*([CONFIG] if configs else []), "setting", "dataset", "model", "strategy"],
                                      sort=False):
        rows = []
        for _, r in block.iterrows():
            row = {"τ": f"{r['tau']:g}", "training": r["training"], "seeds": int(r["seeds"])}
            for m, name in METRICS.items():
                if f"{m}_mean" in r:
                    row[name + ("" if m in _RAW else " %")] = "—" if not int(r["seeds"]) else \
                        _cell(r[f"{m}_mean"], r[f"{m}_std"], int(r["seeds"]), m in _RAW)
            if block.get("left_out", pd.Series(dtype=object)).fillna("").ne("").any():
                row["left out of the means"] = r["left_out"] if isinstance(r["left_out"], str) else ""
            rows.append(row)
        head = (f"{key[1]}, {key[2]}–{key[3]}, {key[4]} ({key[0]})" if configs
                else f"{key[0]}, {key[1]}–{key[2]}, {key[3]}")
        parts.append(f"### {head}\n\n" + markdown_table(pd.DataFrame(rows)))
    return (f"## {title}\n\n" if title else "") + "\n\n".join(parts) + "\n"


def robustness_report(run_dirs: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str],
                      spec: RobustnessSpec, device: str = "auto", title: str = "",
                      progress: Callable | None = None, force: bool = False, jobs: int = 1) -> tuple[str, int]:
    """Evaluate every finished run (cached), write ``robustness_runs.csv`` (one row per run),
    ``robustness.csv`` (mean ± std over seeds), ``robustness.md`` and ``robustness.png`` (each
    metric against τ, log axis) to ``out_dir``; returns the Markdown and the number of runs whose
    evaluation failed (each named in a warning line)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = robustness_table(run_dirs, spec, device, progress, force, jobs)
    if table.empty:
        from fedcal.results import RunFailed

        if table.attrs["failed"]:
            run, reason = next(iter(table.attrs["failed"].items()))
            raise RunFailed(f"no model could be evaluated ({len(table.attrs['failed'])} failed; {run}: {reason})")
        raise UnfinishedRunError(f"no finished run among the {len(run_dirs)} run directories: nothing to evaluate")
    table.to_csv(out / "robustness_runs.csv", index=False)
    summary = summarise_robustness(table)
    summary.to_csv(out / "robustness.csv", index=False)
    text = robustness_markdown(summary, title)
    spec_line = (f"Evaluated at τ = 1 on the first {spec.n_test} test images: L∞ ε = {spec.eps:.4g} "
                 f"(step {spec.step:.4g}, {spec.steps} PGD steps, random start); corruptions at severity "
                 f"{spec.severity}: {', '.join(spec.corruptions)}; accuracy, ECE and sECE on the whole test set.")
    text = text + "\n" + spec_line + "\n" + (f"{SECE_SIGN}\n" if "sece_mean" in summary.columns else "")
    if table[CHANCE].any():
        text += "\n" + footnote(table.attrs["chance"], "clean accuracy")
    (out / "robustness.md").write_text(text)
    robustness_curves(summary, out / "robustness.png",
                      {m: name for m, name in METRICS.items() if f"{m}_mean" in summary.columns
                       and m != "rejected_rounds"}, _RAW)  # bookkeeping, in the tables only
    return text, len(table.attrs["failed"])
