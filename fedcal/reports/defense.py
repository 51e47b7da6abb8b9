"""The defense comparison of docs/defense.md, from the run store only: final accuracy / ECE / sECE
per strategy and attack setting (mean ± std over seeds), each rule's detection rate on the
attackers and false-positive rate on benign clients (from every run's ``aggregation.csv``), the
post-hoc baselines (FedAvg's final model temperature-scaled on the server's root set, and — in runs
with federated calibration, ``fed-eval-clients`` > 0 — by the federated temperature its clients'
held-out data gave, :mod:`fedcal.temperature`), and CalGuard's audit plot.

A reply counts as *flagged* when the rule gave it weight 0 (MultiKrum not selecting it, FLTrust
trust 0, FoolsGold weight 0, CalGuard dropping it) or, for CalGuard in ``audit`` mode, when it
would have dropped it. Detection rate = flagged attacker replies / attacker replies; false
positives = flagged benign replies / benign replies ("benign clients flagged in x % of their
rounds").

Rows hold runs that differ only in their seed or in the columns the table shows (dataset, strategy,
τ, the attack setting, CalGuard's parameters); runs of other configurations are rows of their own,
named in a ``config`` column, and each row's Δ is taken against the benign FedAvg run of its own
configuration ("no benign FedAvg run in this set" where there is none). A row whose models are at
chance level is flagged and never meets the target (:mod:`fedcal.reports.chance`); so is a row with a
*stalled* run above chance (its last round accepted none of its replies, :func:`fedcal.reports.runs.stalled_runs`:
the model it ends with is one kept from an earlier round). Both stay in the row's mean — under attack
a broken model is the attack's result — and the row says how many seeds they are.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from fedcal.attacks import AttackSpec, attackers_of
from fedcal.calibrate.posthoc import root_temperature_metrics
from fedcal.config import RunConfig
from fedcal.reports.chance import cfg_chance, footnote
from fedcal.reports.groups import CONFIG, config_labels
from fedcal.reports.markdown import SECE_SIGN, UNITS_NOTE, markdown_table
from fedcal.reports.runs import STALLED, STALLED_NOTE, finished_only, run_stalled
from fedcal.reports.sweeps import LEFT_OUT, left_out_names, left_out_reasons
from fedcal.results import AUDIT_FILE, load_config, load_model

#: the rule whose benign run is the reference of the Δ columns, and whose final model the post-hoc
#: baselines calibrate (FedAvg: no defense)
REFERENCE = "fedavg"
#: the post-hoc baseline's name in the tables
POSTHOC = "fedavg + TS(root)"
#: the federated-temperature baseline's name: FedAvg's final model divided by the clients' median temperature
FEDTEMP = "fedavg + TS(fed)"
#: the attack settings a row is identified by, besides dataset and strategy
SETTING = ["tau", "attacker_ratio", "dirichlet_alpha", "tsa_step_frac", "tsa_blend", "tsa_duty"]
#: CalGuard's own parameters (NaN in the rows of other strategies)
GUARD = ["calguard_kappa", "calguard_strikes", "calguard_window", "calguard_cusum", "calguard_cusum_signal",
         "calguard_cusum_k", "calguard_cusum_h_low", "calguard_cusum_h_high", "calguard_signal"]
#: the target of docs/defense.md: |Δ sECE| (points) and |Δ accuracy| under attack; without attack
TARGET_SECE, TARGET_ACC, TARGET_BENIGN = 2.0, 1.0, 1.0
FP_TARGET = 0.05
#: the run-config keys the defense table shows as columns (or as its benign τ = 1 row)
SHOWN = ("dataset", "strategy", "attack", *SETTING, *GUARD)
CHANCE = "chance_level"
NO_BENIGN = "no benign FedAvg run in this set"


def flag_rates(run_dir: str | os.PathLike[str], cfg: RunConfig) -> tuple[float, float, int]:
    """(detection rate, false-positive rate, attacker replies) of one run's aggregation table
    (NaN, NaN, 0 when the run wrote none; a rate is NaN when the run had no reply of its kind)."""
    run_dir = Path(run_dir)
    path = run_dir / AUDIT_FILE
    if not path.exists():
        return float("nan"), float("nan"), 0
    audit = pd.read_csv(path)
    flagged = audit["weight"] <= 0
    if "flagged" in audit.columns:
        flagged = flagged | audit["flagged"].astype(bool)
    attacker = audit["partition_id"].isin(attackers_of(AttackSpec.from_config(cfg)))
    det = float(flagged[attacker].mean()) if attacker.any() else float("nan")
    fp = float(flagged[~attacker].mean()) if (~attacker).any() else float("nan")
    return det, fp, int(attacker.sum())


def run_rows(run_dirs: Sequence[str | Path], posthoc: bool = True) -> pd.DataFrame:
    """One row per finished run (left-out unfinished runs are named in a warning): dataset,
    strategy, the :data:`SETTING` columns (τ = 1 for benign runs), seed, final accuracy / ECE /
    sECE (fractions), detection and false-positive rates; with ``posthoc``, one more row per
    FedAvg run for :data:`POSTHOC` and, where the run recorded a federated temperature (its final
    ``fedtemp_*`` metrics), one for :data:`FEDTEMP`."""
    from fedcal.reports.runs import final_metrics

    rows = []
    runs = [(d, load_config(d)) for d in finished_only(run_dirs, "the defense table")]
    labels = config_labels([c for _, c in runs], SHOWN)
    for (d, cfg), label in zip(runs, labels):
        last = final_metrics(d).iloc[0]
        chance = cfg_chance(cfg)
        at_chance = bool(chance is not None and chance.flags(float(last["accuracy"])))
        setting = {"tau": cfg.tau if cfg.attack == "tsa" else 1.0, "attacker_ratio": cfg.attacker_ratio,
                   "dirichlet_alpha": cfg.dirichlet_alpha, "tsa_step_frac": cfg.tsa_step_frac,
                   "tsa_blend": cfg.tsa_blend, "tsa_duty": cfg.tsa_duty}
        if cfg.attack == "none":
            setting.update(attacker_ratio=np.nan, tsa_step_frac=1.0, tsa_blend=1.0, tsa_duty=1.0)
        det, fp, n_att = flag_rates(d, cfg)
        base = {CONFIG: label, "dataset": cfg.dataset, **setting, "seed": cfg.seed, "run_dir": str(d),
                CHANCE: at_chance, STALLED: run_stalled(d) and not at_chance}
        guard = {k: getattr(cfg, k) if cfg.strategy == "calguard" else np.nan for k in GUARD}
        rows.append({**base, **guard, "strategy": cfg.strategy, "accuracy": last["accuracy"], "ece": last["ece"],
                     "sece": last["sece"], "detection": det, "false_positive": fp, "attacker_replies": n_att})
        if posthoc and cfg.strategy == REFERENCE:
            _, model, ds = load_model(d)
            m = root_temperature_metrics(model, ds, root_size=cfg.root_size, seed=cfg.seed,
                                         batch_size=cfg.eval_batch_size, n_bins=cfg.n_bins)
            rows.append({**base, **{k: np.nan for k in GUARD}, "strategy": POSTHOC, "accuracy": m["accuracy"],
                         "ece": m["ece"], "sece": m["sece"], "detection": np.nan, "false_positive": np.nan,
                         "attacker_replies": n_att})
            if pd.notna(last.get("fedtemp_accuracy", np.nan)):
                rows.append({**base, **{k: np.nan for k in GUARD}, "strategy": FEDTEMP,
                             **{k: last[f"fedtemp_{k}"] for k in ("accuracy", "ece", "sece")}, "detection": np.nan,
                             "false_positive": np.nan, "attacker_replies": n_att})
    return pd.DataFrame(rows)


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per (config, dataset, strategy, setting) in percent, the seeds' std of accuracy
    and sECE, Δ accuracy / Δ sECE against the benign FedAvg run of the same config, dataset and α
    (same seeds), how many seeds' models are at chance (``chance_level``; with stalled runs and NaN metrics left
    out of the means and named in ``left_out``; ``seeds`` is the number averaged), and whether the row meets
    the target (|Δ sECE| ≤ 2 and |Δ acc| ≤ 1 under attack, both ≤ 1 without, benign clients flagged
    in < 5 % of their replies, no model at chance)."""
    if rows.empty:
        return pd.DataFrame()
    r = rows.copy()
    for k in GUARD:  # tables written before these columns existed
        if k not in r.columns:
            r[k] = np.nan
    if "tsa_duty" not in r.columns:
        r["tsa_duty"] = 1.0
    for k, v in ((CONFIG, ""), (CHANCE, False), (STALLED, False)):  # runs.csv written before these columns existed
        if k not in r.columns:
            r[k] = v
    r[CONFIG] = r[CONFIG].fillna("")
    keys = [CONFIG, "dataset", "strategy", *SETTING, *GUARD]
    for c in ("accuracy", "ece", "sece"):
        r[c] = 100 * r[c]
    # a run at chance, stalled or with NaN metrics is no result of its setting: left out of the means, named
    reasons = left_out_reasons(r, "accuracy", 100)
    ok_runs = r[reasons.eq("")]
    ref = ok_runs[(ok_runs["strategy"] == REFERENCE) & (ok_runs["tau"] == 1.0)].groupby(
        [CONFIG, "dataset", "dirichlet_alpha"])[["accuracy", "sece"]].mean()
    g = r.groupby(keys, dropna=False, sort=False)
    counts = g.agg(runs=("seed", "size"), distinct=("seed", "nunique"), chance_level=(CHANCE, "sum"),
                   stalled=(STALLED, "sum"))
    twice = counts[counts["runs"] > counts["distinct"]].reset_index()
    if not twice.empty:
        raise ValueError(f"two runs of one seed in the defense row {twice.iloc[0][keys].dropna().to_dict()}: "
                         "pass one run per seed")
    sound = ok_runs.groupby(keys, dropna=False, sort=False)
    means = sound.agg(seeds=("seed", "nunique"), accuracy=("accuracy", "mean"), accuracy_std=("accuracy", "std"),
                      ece=("ece", "mean"), sece=("sece", "mean"), sece_std=("sece", "std"),
                      detection=("detection", "mean"), false_positive=("false_positive", "mean"))
    out = counts[["chance_level", "stalled"]].join(means).join(left_out_names(r, reasons, keys))
    out["seeds"] = out["seeds"].fillna(0).astype(int)
    out = out.reset_index()[[*keys, "seeds", "accuracy", "accuracy_std", "ece", "sece", "sece_std", "detection",
                             "false_positive", CHANCE, STALLED, LEFT_OUT]]
    out[CHANCE], out[STALLED] = out[CHANCE].astype(int), out[STALLED].astype(int)
    d_acc, d_sece = [], []
    for _, row in out.iterrows():
        k = (row[CONFIG], row["dataset"], row["dirichlet_alpha"])
        d_acc.append(row["accuracy"] - ref.loc[k, "accuracy"] if k in ref.index else np.nan)
        d_sece.append(row["sece"] - ref.loc[k, "sece"] if k in ref.index else np.nan)
    out["d_accuracy"], out["d_sece"] = d_acc, d_sece
    attacked = out["tau"] != 1.0
    ok = np.where(attacked, (out["d_sece"].abs() <= TARGET_SECE) & (out["d_accuracy"].abs() <= TARGET_ACC),
                  (out["d_sece"].abs() <= TARGET_BENIGN) & (out["d_accuracy"].abs() <= TARGET_BENIGN))
    ok = ok & ~(out["false_positive"] >= FP_TARGET) & (out[CHANCE] == 0) & (out[STALLED] == 0)
    # a row whose every seed was left out (at chance, stalled) has no mean and misses the target
    out["target"] = np.where(out["seeds"] == 0, "no", np.where(out["d_sece"].isna(), "", np.where(ok, "yes", "no")))
    out["_c"] = out[CONFIG].map({c: i for i, c in enumerate(dict.fromkeys(out[CONFIG]))})
    return out.sort_values(["_c", "dataset", "dirichlet_alpha", "attacker_ratio", "tsa_step_frac", "tsa_blend", "tsa_duty",
                            "strategy", *GUARD, "tau"], na_position="first", kind="stable").drop(columns="_c") \
        .reset_index(drop=True)


def _knob(v) -> str:
    """A setting's value in a table or legend: numbers as %g, words as they are, NaN empty."""
    if isinstance(v, str):
        return v
    return "" if pd.isna(v) else f"{v:g}"


def _pct(v: float) -> str:
    return "" if pd.isna(v) else f"{100 * v:.1f}"


def _pm(mean: float, std: float) -> str:
    return f"{mean:.2f}" + ("" if pd.isna(std) else f" ± {std:.2f}")


def to_markdown(table: pd.DataFrame, title: str = "") -> str:
    """The summary as Markdown: one row per (dataset, strategy, setting); the setting columns
    that never vary are left out."""
    t = table.copy()
    t["accuracy_%"] = [_pm(m, s) for m, s in zip(t["accuracy"], t["accuracy_std"])]
    t["accuracy_%"] = ["—" if not n else a for a, n in zip(t["accuracy_%"], t["seeds"])]
    t["sece_%"] = [_pm(m, s) for m, s in zip(t["sece"], t["sece_std"])]
    t["ece_%"] = t["ece"].map("{:.2f}".format)
    t["d_acc"] = t["d_accuracy"].map(lambda v: NO_BENIGN if pd.isna(v) else f"{v:+.2f}")
    t["d_sece"] = t["d_sece"].map(lambda v: NO_BENIGN if pd.isna(v) else f"{v:+.2f}")
    t["detected_%"] = t["detection"].map(_pct)
    t["benign_flagged_%"] = t["false_positive"].map(_pct)
    t["tau"] = t["tau"].map(lambda v: "benign" if v == 1.0 else f"{v:g}")
    varying = [c for c in (CONFIG, "dataset", "dirichlet_alpha", "attacker_ratio", "tsa_step_frac", "tsa_blend",
                           "tsa_duty", *GUARD)
               if c in t.columns and t[c].dropna().nunique() > 1]
    for c in ("attacker_ratio", "dirichlet_alpha", "tsa_step_frac", "tsa_blend", "tsa_duty", *GUARD):
        if c in t.columns:
            t[c] = t[c].map(_knob)
    cols = [*varying, "strategy", "tau", "seeds", "accuracy_%", "ece_%", "sece_%", "d_acc", "d_sece", "detected_%",
            "benign_flagged_%", "target"]
    if LEFT_OUT in t.columns and t[LEFT_OUT].fillna("").ne("").any():
        t["left out of the means"] = t[LEFT_OUT].fillna("")
        cols.append("left out of the means")
    return markdown_table(t[cols], title)


def defense_plot(table: pd.DataFrame, path: str | Path) -> Path:
    """sECE (%) vs τ per strategy (mean over seeds), one panel per dataset and α; one line per
    strategy and setting that varies (attacker ratio, adaptive knobs, CalGuard's parameters), each
    joined to its strategy's benign run at τ = 1; the band is the benign FedAvg run's sECE ± 2
    points (the target)."""
    from fedcal.reports.plots import SECE_SIGN, _save, plt

    table = table.assign(**{CONFIG: table[CONFIG] if CONFIG in table.columns else ""})
    panels = list(table.groupby([CONFIG, "dataset", "dirichlet_alpha"], sort=False).groups)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), squeeze=False)
    knobs = ["attacker_ratio", "tsa_step_frac", "tsa_blend", "tsa_duty", *[c for c in GUARD if c in table.columns]]
    for ax, (config, ds, alpha) in zip(axes[0], panels):  # a panel per configuration: lines never mix them
        sub = table[(table[CONFIG] == config) & (table["dataset"] == ds) & (table["dirichlet_alpha"] == alpha)]
        ref = sub[(sub["strategy"] == REFERENCE) & (sub["tau"] == 1.0)]["sece"]
        if len(ref):
            ax.axhspan(float(ref.iloc[0]) - TARGET_SECE, float(ref.iloc[0]) + TARGET_SECE, color="grey", alpha=0.2,
                       label="benign FedAvg ± 2")
        attacked, benign = sub[sub["tau"] != 1.0], sub[sub["tau"] == 1.0]
        taus = sorted(sub["tau"].unique())
        varying = [c for c in knobs if attacked[c].dropna().nunique() > 1]
        for key, g in attacked.groupby(["strategy", *varying], sort=False, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            strategy = key[0]
            own = benign[benign["strategy"] == strategy]
            for c in GUARD:  # the benign run of the same CalGuard parameters
                if c in own.columns and c in varying:
                    own = own[own[c] == g[c].iloc[0]]
            g = pd.concat([g, own.iloc[:1]]).drop_duplicates("tau").set_index("tau")
            # every τ of the panel, NaN where this line has no run: matplotlib breaks the line there
            # instead of drawing it through a τ that was never run (e.g. a strategy without its benign run)
            g = g.reindex(taus).rename_axis("tau").reset_index()
            label = strategy + "".join(f" {c.replace('calguard_', '').replace('tsa_', '')}={_knob(v)}"
                                       for c, v in zip(varying, key[1:]) if isinstance(v, str) or not pd.isna(v))
            ax.plot(g["tau"], g["sece"], marker="o", label=label, lw=2.2 if strategy == "calguard" else 1.2)
        ax.set(xscale="log", xlabel="attackers' τ (1 = benign run)", ylabel="final sECE (%)",
               title=f"{ds}, α = {alpha:g}" + (f"\n{config}" if config else ""))
        ax.minorticks_off()  # log-scale minor labels (2×10⁻¹, …) collide; label the τ values run instead
        ax.set_xticks(taus, [f"{t:g}" for t in taus])
        ax.axhline(0, color="black", lw=0.6)
        ax.legend(fontsize=7)
    return _save(fig, path, note=SECE_SIGN)


def audit_plot(run_dir: str | Path, path: str | Path, kappa: float | None = None) -> Path:
    """CalGuard's audit of one run: every reply's robust score per round, attackers (known to the
    simulation, not to the server) in red, the ±κ thresholds dashed, dropped replies as crosses."""
    from matplotlib.ticker import MaxNLocator

    from fedcal.reports.plots import _save, plt

    cfg = load_config(run_dir)
    audit = pd.read_csv(Path(run_dir) / AUDIT_FILE)
    attackers = attackers_of(AttackSpec.from_config(cfg))
    kappa = cfg.calguard_kappa if kappa is None else kappa
    fig, axes = plt.subplots(2, 1, figsize=(8, 5.2), sharex=True)
    att = audit["partition_id"].isin(attackers)
    flagged = audit["flagged"].astype(bool)
    z = audit["score"].clip(-4 * kappa, 4 * kappa)
    # the signal the rule scored: the root set's logit-scale shift, or the clients' reported confidence shift
    signal = ("scale_shift", "logit-scale shift") if "scale_shift" in audit.columns else \
        ("conf_shift", "reported confidence shift")
    for ax, col, label in ((axes[0], None, "robust score z (clipped at ±4κ)"), (axes[1], *signal)):
        y = z if col is None else audit[col]
        for mask, colour, name in ((~att, "#4C72B0", "benign"), (att, "#C44E52", "attacker")):
            ax.scatter(audit["round"][mask & ~flagged], y[mask & ~flagged], s=9, color=colour, label=f"{name}, kept")
            ax.scatter(audit["round"][mask & flagged], y[mask & flagged], s=22, marker="x", color=colour,
                       label=f"{name}, flagged")
        ax.set_ylabel(label)
    for s in (-kappa, kappa):
        axes[0].axhline(s, color="black", ls="--", lw=0.8)
    axes[1].set_xlabel("round")
    axes[1].xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
    what = "benign" if cfg.attack == "none" else f"TSA τ={cfg.tau:g}"
    axes[0].set_title(f"CalGuard audit ({cfg.calguard_mode}): {cfg.dataset}, {what}, seed {cfg.seed}")
    axes[0].legend(fontsize=8, ncol=2)
    return _save(fig, path)


def defense_report(run_dirs: Sequence[str | Path], out: str | Path, title: str = "", posthoc: bool = True) -> str:
    """Write ``runs.csv``, ``table.csv``, ``table.md``, ``defense.png`` and, per attackers' τ,
    ``audit-tau<τ>.png`` (:func:`audit_runs`) into ``out``; returns the table's Markdown with one
    line per dataset on the largest calibration damage left under CalGuard."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = run_rows(run_dirs, posthoc)
    if rows.empty:
        raise ValueError("no finished run to report")
    rows.to_csv(out / "runs.csv", index=False)
    table = summarise(rows)
    table.to_csv(out / "table.csv", index=False)
    md = to_markdown(table, title)
    if table[CHANCE].any():
        md += "\n" + footnote([cfg_chance(load_config(d)) for d in dict.fromkeys(rows["run_dir"])])
    if table[STALLED].any():
        md += "\n" + STALLED_NOTE.rstrip("\n") + " Kept in the row's mean; the row does not meet the target.\n"
    lines = worst_lines(table)
    md += ("\n" + "\n".join(lines) + "\n") if lines else ""
    md += f"\n{UNITS_NOTE}; {SECE_SIGN}\n"
    (out / "table.md").write_text(md)
    defense_plot(table, out / "defense.png")
    for tau, run_dir in audit_runs(rows).items():
        audit_plot(run_dir, out / f"audit-tau{tau:g}.png")
    return md


def worst_lines(table: pd.DataFrame) -> list[str]:
    """One line per dataset: the attacked CalGuard row of :func:`summarise` with the largest
    |Δ sECE|, named by its setting. The duty share and the sequential test are named only where
    they are not the defaults (duty 1, ``calguard-cusum=false``), so that an adaptive or sequential
    row is never read as the plain attack, and the lines of tables without them stay as they were."""
    adaptive = table[(table["strategy"] == "calguard") & (table["tau"] != 1.0)]
    lines = []
    for ds, g in adaptive.dropna(subset=["d_sece"]).groupby("dataset", sort=False):
        worst = g.loc[g["d_sece"].abs().idxmax()]
        duty = worst.get("tsa_duty", 1.0)
        extra = "" if pd.isna(duty) or duty == 1.0 else f", duty {duty:g}"
        seq = worst.get("calguard_cusum", np.nan)
        extra += ", with the sequential test" if not pd.isna(seq) and bool(seq) else ""
        extra += ", on the clients' drift (no root set)" if worst.get("calguard_signal") == "clients" else ""
        lines.append(f"- {ds}: the largest |Δ sECE| any attack setting above reaches against CalGuard is "
                     f"{worst['d_sece']:+.2f} points (τ = {worst['tau']:g}, step share {worst['tsa_step_frac']:g}, "
                     f"blend {worst['tsa_blend']:g}{extra}, attackers {worst['attacker_ratio']:g}, "
                     f"α = {worst['dirichlet_alpha']:g}), with {100 * worst['detection']:.1f} % of its replies flagged")
    return lines


def audit_runs(rows: pd.DataFrame) -> dict[float, str]:
    """The run whose audit is drawn for each attackers' τ: CalGuard's run of the lowest seed in
    the first setting listed (one plot per τ, not per cell)."""
    guarded = rows[(rows["strategy"] == "calguard") & (rows["tau"] != 1.0)].sort_values("seed", kind="stable")
    return {float(tau): g["run_dir"].iloc[0] for tau, g in guarded.groupby("tau", sort=True)}
