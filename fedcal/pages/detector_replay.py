"""Offline evaluation of CalGuard's per-client sequential test (docs/defense-results.md, "Under-confidence
across rounds") on recorded signatures.

Input: finished ``task=train`` runs made with ``strategy=calguard calguard-mode=audit`` (CalGuard
records every reply's calibration signature in ``aggregation.csv`` while aggregating like
FedAvg). For every run the script replays CalGuard's rule (:func:`fedcal.aggregate.calguard.replay`: the
per-round test at κ = 5 with three strikes, as in ``filter`` mode) with and without the
sequential test (:class:`fedcal.sequential.ClientCusum`) on the recorded signal:

* ``scale``: the reply's logit-scale shift s (CalGuard's own signature);
* ``ratio``: s per unit of update norm, s / ‖Δ‖ (a client that trains more steps moves further,
  whatever its behaviour; the ratio takes the step's size out).

Thresholds are calibrated on the benign runs only (``attack=none``, every α in the input): the
CUSUM's running maximum over every benign reply is the null (:func:`fedcal.sequential.calibrate_threshold`),
each side gets half of ``--fp-target``. Leave-one-seed-out: the thresholds applied to seed s come
from the benign runs of the other seeds, so every number in ``runs.csv`` is out of sample for
its seed. ``thresholds.csv`` also gives the thresholds from every seed (what a closed-loop run
would use).

This is a *what-if*: the replies were made by global models that aggregated every reply (FedAvg);
a rule that had excluded attackers would have changed the later rounds' models, and so the later
signatures. The damage columns (``d_sece``, ``d_acc``) are those of the recorded runs — what the
attack does when nothing is excluded — against the benign run of the same seed and α.

Usage (from the repository root)::

    python -m fedcal.pages detector_replay --runs runs/detector --out docs/results/detector
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from fedcal.aggregate import calguard as cg
from fedcal import sequential as sq
from fedcal.attacks import AttackSpec, attackers_of
from fedcal.reports.markdown import markdown_table
from fedcal.reports.runs import final_metrics
from fedcal.results import AUDIT_FILE, load_config, load_run_config

SIGNALS = ("scale", "ratio")
#: rounds at which the share of attackers alarmed is reported
BY_ROUNDS = (25, 50, 75, 100)


def load_runs(roots: list[Path]) -> list[dict]:
    """Every finished CalGuard audit run under ``roots``: its config, attackers, audit table and
    final metrics."""
    dirs = sorted({d for root in roots for d in root.iterdir() if (d / "DONE").exists() and (d / AUDIT_FILE).exists()})
    out = []
    for d in dirs:
        cfg = load_config(d)
        if cfg.strategy != "calguard" or cfg.calguard_mode != "audit":
            continue
        audit = pd.read_csv(d / AUDIT_FILE)
        if "update_norm" not in audit.columns:
            print(f"warning: {d.name} has no update_norm column (made before it was recorded): left out", file=sys.stderr)
            continue
        # one run at a time: final_metrics over runs made before and after a run-config key was
        # added (tsa-duty) drops the older ones (their missing key is a NaN in pivot_table's index)
        last = final_metrics([d], "the detector replay").iloc[0]
        machine = load_run_config(d).get("provenance", {}).get("machine", {})
        out.append({"dir": d, "cfg": cfg, "attackers": attackers_of(AttackSpec.from_config(cfg)) if cfg.attack != "none" else frozenset(),
                    "audit": audit, "accuracy": float(last["accuracy"]), "sece": float(last["sece"]),
                    "seconds": _run_seconds(d), "cpus": machine.get("cpus"), "threads": machine.get("torch_threads")})
    return out


def _run_seconds(run_dir: Path) -> float:
    """Wall-clock of a run: the sum of its rounds' ``round_seconds`` (train, aggregate, evaluate)."""
    m = pd.read_csv(run_dir / "metrics.csv")
    return float(m.loc[m["metric"] == "round_seconds", "value"].sum())


def cost_table(runs: list[dict]) -> pd.DataFrame:
    """Seconds per run (sum of round_seconds) per setting: mean, min, max over the runs, and the
    machine the runs recorded."""
    rows = []
    for r in runs:
        s = setting_of(r["cfg"])
        rows.append({"setting": label_of(s), "alpha": s["alpha"], "seconds": r["seconds"],
                     "machine": f"{r['cpus']} CPUs, {r['threads']} torch thread(s)"})
    t = pd.DataFrame(rows)
    out = t.groupby(["setting", "alpha", "machine"], sort=False)["seconds"].agg(["count", "mean", "min", "max"])
    out = out.reset_index().rename(columns={"count": "runs", "mean": "mean_s", "min": "min_s", "max": "max_s"})
    for c in ("mean_s", "min_s", "max_s"):
        out[c] = out[c].round(0).astype(int)
    out["alpha"] = out["alpha"].map("{:g}".format)
    return out


def setting_of(cfg) -> dict:
    """The attack setting of a run: τ (1 = benign), α, the adaptive knobs."""
    if cfg.attack == "none":
        return {"tau": 1.0, "alpha": cfg.dirichlet_alpha, "step_frac": 1.0, "blend": 1.0, "duty": 1.0}
    return {"tau": cfg.tau, "alpha": cfg.dirichlet_alpha, "step_frac": cfg.tsa_step_frac, "blend": cfg.tsa_blend,
            "duty": cfg.tsa_duty}


def label_of(s: dict) -> str:
    if s["tau"] == 1.0:
        return "benign"
    knobs = [f"τ = {s['tau']:g}"] + [f"{k.replace('_', '-')} {s[k]:g}" for k in ("step_frac", "blend", "duty")
                                      if s[k] != 1.0]
    return ", ".join(knobs)


def rounds_of(audit: pd.DataFrame, name: str):
    """The replay's rounds: CalGuard's per-round test always on the logit-scale shift; the
    sequential test fed its z (``scale``) or the robust score of the shift per unit of update
    norm (``ratio``), as :class:`fedcal.strategies.CalGuard` does with ``sequential_signal``."""
    if name not in SIGNALS:
        raise ValueError(f"unknown signal {name!r}")
    for r, g in audit.groupby("round", sort=True):
        clients, shifts = [int(c) for c in g["partition_id"]], g["scale_shift"].to_numpy(dtype=np.float64)
        if name == "ratio":
            yield int(r), clients, shifts, shifts / g["update_norm"].to_numpy(dtype=np.float64)
        else:
            yield int(r), clients, shifts


def replay_run(run: dict, name: str, k: float, clip: float, h_low: float, h_high: float) -> pd.DataFrame:
    """The replay of one run with the sequential test (thresholds ``h_low``, ``h_high``), with the
    per-reply columns of :func:`fedcal.aggregate.calguard.replay` plus ``attacker``, ``calguard_only`` (what
    CalGuard alone flags) and ``alarm_round`` of the reply's client."""
    det = sq.ClientCusum(k=k, h_low=h_low, h_high=h_high, clip=clip)
    rows = pd.DataFrame(cg.replay(rounds_of(run["audit"], name), sequential=det))
    alone = pd.DataFrame(cg.replay(rounds_of(run["audit"], name)))
    rows["calguard_only"] = alone["flagged"].to_numpy()
    rows["attacker"] = rows["client"].isin(run["attackers"])
    rows["alarm_round"] = [det.statistic(c).alarm_round if det.alarmed(c) else 0 for c in rows["client"]]
    return rows


def null_maxima(runs: list[dict], name: str, k: float, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """Running maxima of the low and high CUSUM over every benign reply of the benign ``runs`` (no
    alarm: thresholds at infinity)."""
    lows, highs = [], []
    for run in runs:
        rows = pd.DataFrame(cg.replay(rounds_of(run["audit"], name),
                                      sequential=sq.ClientCusum(k=k, h_low=math.inf, h_high=math.inf, clip=clip)))
        for _, g in rows.groupby("client", sort=False):
            lows.append(sq.running_max(g["low"].to_numpy()))
            highs.append(sq.running_max(g["high"].to_numpy()))
    return np.concatenate(lows), np.concatenate(highs)


#: the miss rate β of the Wald reference threshold in thresholds.csv
WALD_BETA = 0.1


def thresholds(benign: list[dict], name: str, k: float, clip: float, target: float) -> dict:
    """The calibrated thresholds on the benign ``runs``' null, and Wald's: the SPRT boundary for
    α = target / 2 per side, β = :data:`WALD_BETA` and a shift δ = 2k
    (:func:`fedcal.sequential.cusum_threshold`) with the share of benign replies it would flag —
    what the normal, independent model behind it promises against what the benign clients do."""
    low, high = null_maxima(benign, name, k, clip)
    wald = sq.cusum_threshold(target / 2, WALD_BETA, 2 * k) if k > 0 else math.nan
    return {"h_low": sq.calibrate_threshold(low, target / 2), "h_high": sq.calibrate_threshold(high, target / 2),
            "wald_h": wald, "benign_over_wald_low": float(np.mean(low > wald)),
            "benign_over_wald_high": float(np.mean(high > wald)), "benign_replies": len(low)}


def summarise_run(run: dict, rows: pd.DataFrame, benign_ref: dict | None) -> dict:
    att, ben = rows[rows["attacker"]], rows[~rows["attacker"]]
    att_clients = sorted(set(att["client"]))
    alarms = {c: int(g["alarm_round"].iloc[-1]) for c, g in rows.groupby("client")}
    out = {
        "attacker_replies": len(att),
        "attackers_sampled": len(att_clients),
        "attacker_flagged_calguard": float(att["calguard_only"].mean()) if len(att) else np.nan,
        "attacker_flagged": float(att["flagged"].mean()) if len(att) else np.nan,
        "benign_flagged_calguard": float(ben["calguard_only"].mean()),
        "benign_flagged": float(ben["flagged"].mean()),
        "benign_flagged_sequential": float(ben["sequential"].mean()),
        "benign_clients_alarmed": float(np.mean([alarms[c] > 0 for c in set(ben["client"])])),
        "accuracy": run["accuracy"], "sece": run["sece"],
    }
    # sparse participation: how many of its own replies an alarmed attacker had sent when the alarm came
    to_alarm = [int(((g["round"] <= alarms[c])).sum()) for c, g in att.groupby("client") if alarms[c] > 0]
    out["attacker_replies_to_alarm"] = float(np.median(to_alarm)) if to_alarm else np.nan
    out["attacker_replies_per_attacker"] = len(att) / len(run["attackers"]) if run["attackers"] else np.nan
    for r in BY_ROUNDS:  # share of the run's attackers (all of them, sampled or not) alarmed by round r
        out[f"attackers_alarmed_r{r}"] = (float(np.mean([0 < alarms.get(c, 0) <= r for c in run["attackers"]]))
                                          if run["attackers"] else np.nan)
    if benign_ref is not None:
        out["d_sece"] = 100 * (run["sece"] - benign_ref["sece"])
        out["d_acc"] = 100 * (run["accuracy"] - benign_ref["accuracy"])
    return out


def evaluate(runs: list[dict], name: str, k: float, clip: float, target: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Leave-one-seed-out: per run, thresholds from the benign runs of the other seeds."""
    seeds = sorted({r["cfg"].seed for r in runs})
    benign = [r for r in runs if r["cfg"].attack == "none"]
    refs = {(r["cfg"].seed, r["cfg"].dirichlet_alpha): r for r in benign}
    rows, ths = [], []
    for seed in [*seeds, None]:  # None: every seed (the closed loop's thresholds)
        pool = [r for r in benign if seed is None or r["cfg"].seed != seed]
        if not pool:
            continue
        th = thresholds(pool, name, k, clip, target)
        h_low, h_high = th["h_low"], th["h_high"]
        ths.append({"signal": name, "k": k, "clip": clip, "fp_target": target,
                    "calibrated_on": "all seeds" if seed is None else f"seeds other than {seed}",
                    "benign_runs": len(pool), **th})
        if seed is None:
            continue
        for run in (r for r in runs if r["cfg"].seed == seed):
            replayed = replay_run(run, name, k, clip, h_low, h_high)
            s = setting_of(run["cfg"])
            rows.append({"setting": label_of(s), **s, "seed": seed, "signal": name, "k": k, "clip": clip,
                         "h_low": h_low, "h_high": h_high, "run": run["dir"].name,
                         **summarise_run(run, replayed, refs.get((seed, run["cfg"].dirichlet_alpha)))})
    return pd.DataFrame(rows), pd.DataFrame(ths)


def pct(x: pd.Series) -> str:
    return f"{100 * x.mean():.1f}"


def table(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per setting (percent)."""
    out = []
    for (label, alpha), g in runs.groupby(["setting", "alpha"], sort=False):
        row = {"setting": label, "alpha": f"{alpha:g}", "seeds": g["seed"].nunique()}
        if label != "benign":
            row.update({"d_sece": f"{g['d_sece'].mean():+.2f}", "d_acc": f"{g['d_acc'].mean():+.2f}"})
            for r in BY_ROUNDS:
                row[f"alarmed_r{r}_%"] = pct(g[f"attackers_alarmed_r{r}"])
            row["replies_to_alarm"] = f"{g['attacker_replies_to_alarm'].mean():.1f}"
            row["replies_per_attacker"] = f"{g['attacker_replies_per_attacker'].mean():.1f}"
            row["att_flagged_calguard_%"] = pct(g["attacker_flagged_calguard"])
            row["att_flagged_%"] = pct(g["attacker_flagged"])
        row["benign_flagged_calguard_%"] = pct(g["benign_flagged_calguard"])
        row["benign_flagged_%"] = pct(g["benign_flagged"])
        row["benign_clients_alarmed_%"] = pct(g["benign_clients_alarmed"])
        out.append(row)
    return pd.DataFrame(out).fillna("")


def undetected_lines(runs: pd.DataFrame) -> str:
    """Per α: the attack settings whose attackers are alarmed by round 100 no more often than the
    benign runs' clients are (they stay under the detector), and the largest calibration damage
    among them — measured with nothing excluded, so what such an attacker keeps."""
    lines = []
    for alpha, g in runs.groupby("alpha", sort=False):
        benign = g[g["tau"] == 1.0]
        if benign.empty:
            continue
        base = benign["benign_clients_alarmed"].mean()
        per = g[g["tau"] != 1.0].groupby("setting", sort=False).agg(
            alarmed=("attackers_alarmed_r100", "mean"), d_sece=("d_sece", "mean"), flagged=("attacker_flagged", "mean"))
        under = per[per["alarmed"] <= base]
        head = (f"- α = {alpha:g}: benign clients alarmed by round 100 in the benign runs: {100 * base:.1f} %; ")
        if under.empty:
            least = per.loc[per["alarmed"].idxmin()] if len(per) else None
            lines.append(head + "no attack setting stays at or under that" + (
                f" (the least detected: {per['alarmed'].idxmin()}, {100 * least['alarmed']:.1f} % of its attackers "
                f"alarmed, Δ sECE {least['d_sece']:+.2f} points with nothing excluded)" if least is not None else ""))
        else:
            worst = under.loc[under["d_sece"].abs().idxmax()]
            lines.append(head + f"settings at or under it: {', '.join(under.index)}; the largest damage among them is "
                         f"{under['d_sece'].abs().idxmax()} with Δ sECE {worst['d_sece']:+.2f} points "
                         f"({100 * worst['alarmed']:.1f} % of its attackers alarmed, {100 * worst['flagged']:.1f} % of "
                         "its replies flagged)")
    return "\n".join(lines) + "\n"


def order(runs: pd.DataFrame) -> pd.DataFrame:
    key = runs.assign(_benign=runs["tau"] != 1.0, _low=runs["tau"] > 1.0)
    return key.sort_values(["_benign", "alpha", "_low", "tau", "step_frac", "blend", "duty", "seed"],
                           ascending=[True, False, True, True, False, False, False, True]).drop(columns=["_benign", "_low"])


def plot_paths(runs: list[dict], name: str, k: float, clip: float, h_low: float, h_high: float, out: Path) -> None:
    """Every client's high CUSUM (up) and low CUSUM (drawn down) over rounds, seed 0 of the
    benign, τ = 0.2 and τ = 5 runs (columns) for each α (rows); attackers in red, the
    thresholds dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def plain(r):
        s = setting_of(r["cfg"])
        return r["cfg"].seed == 0 and s["step_frac"] == s["blend"] == s["duty"] == 1.0

    alphas = sorted({r["cfg"].dirichlet_alpha for r in runs if plain(r)}, reverse=True)
    taus = [1.0, 0.2, 5.0]
    if not alphas:
        return
    fig, axes = plt.subplots(len(alphas), len(taus), figsize=(3.8 * len(taus), 3.0 * len(alphas)), sharey=True,
                             squeeze=False)
    for i, alpha in enumerate(alphas):
        for j, tau in enumerate(taus):
            ax = axes[i][j]
            pick = [r for r in runs if plain(r) and r["cfg"].dirichlet_alpha == alpha and setting_of(r["cfg"])["tau"] == tau]
            if not pick:
                ax.set_visible(False)
                continue
            run = pick[0]
            rows = replay_run(run, name, k, clip, h_low, h_high)
            for c, g in rows.groupby("client"):
                att = c in run["attackers"]
                style = dict(color="tab:red" if att else "0.6", lw=1.2 if att else 0.7, zorder=3 if att else 2)
                ax.plot(g["round"], g["high"], **style)
                ax.plot(g["round"], -g["low"], **style)
            ax.axhline(h_high, ls="--", color="k", lw=0.8)
            ax.axhline(-h_low, ls="--", color="k", lw=0.8)
            ax.set_title(f"{label_of(setting_of(run['cfg']))}, α = {alpha:g}, seed 0", fontsize=9)
            if i == len(alphas) - 1:
                ax.set_xlabel("round")
        axes[i][0].set_ylabel("high CUSUM ↑ / low CUSUM ↓")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fedcal.pages detector_replay", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", nargs="+", required=True, help="folders holding the audit runs")
    p.add_argument("--out", required=True, help="folder for runs.csv, table.md, signals.md, thresholds.csv, cusum.png")
    p.add_argument("--ks", default="0.25,0.5,1", help="CUSUM reference values k compared (robust units)")
    p.add_argument("--clip", type=float, default=3.0, help="scores are clipped to [-clip, clip]")
    p.add_argument("--fp-target", type=float, default=0.02,
                   help="share of benign replies the sequential test may flag (half per side)")
    p.add_argument("--signal", default="scale", choices=SIGNALS, help="the signal of the main table")
    p.add_argument("--k", type=float, default=0.5, help="the k of the main table")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = load_runs([Path(r) for r in args.runs])
    if not any(r["cfg"].attack == "none" for r in runs):
        raise SystemExit("no benign audit run (attack=none) to calibrate the thresholds on")
    every, ths = [], []
    for name in SIGNALS:
        for k in (float(v) for v in args.ks.split(",")):
            rows, th = evaluate(runs, name, k, args.clip, args.fp_target)
            every.append(rows)
            ths.append(th)
    allruns = order(pd.concat(every, ignore_index=True))
    allruns.to_csv(out / "runs.csv", index=False)
    pd.concat(ths, ignore_index=True).to_csv(out / "thresholds.csv", index=False)

    main_rows = allruns[(allruns["signal"] == args.signal) & (allruns["k"] == args.k)]
    header = (f"signal {args.signal}, k = {args.k:g}, clip {args.clip:g}, benign-reply budget {100 * args.fp_target:g} % "
              "(half per side), thresholds leave-one-seed-out; CalGuard κ = 5, 3 strikes\n\n")
    (out / "table.md").write_text(header + markdown_table(table(main_rows)) + "\n" + undetected_lines(main_rows))

    # the signals and k compared on the settings without adaptive knobs
    plain = allruns[(allruns["step_frac"] == 1.0) & (allruns["blend"] == 1.0) & (allruns["duty"] == 1.0)]
    cmp_rows = []
    for (name, k, label, alpha), g in plain.groupby(["signal", "k", "setting", "alpha"], sort=False):
        cmp_rows.append({"signal": name, "k": f"{k:g}", "setting": label, "alpha": f"{alpha:g}",
                         "alarmed_r100_%": "" if label == "benign" else pct(g["attackers_alarmed_r100"]),
                         "att_flagged_%": "" if label == "benign" else pct(g["attacker_flagged"]),
                         "benign_flagged_%": pct(g["benign_flagged"]),
                         "benign_clients_alarmed_%": pct(g["benign_clients_alarmed"])})
    (out / "signals.md").write_text(f"clip {args.clip:g}, benign-reply budget {100 * args.fp_target:g} % (half per side), "
                                    "thresholds leave-one-seed-out; mean over seeds\n\n" + markdown_table(pd.DataFrame(cmp_rows)))
    (out / "cost.md").write_text("wall-clock per run (sum of its rounds' round_seconds), shared machine\n\n"
                                 + markdown_table(cost_table(runs)))
    th_table = pd.concat(ths, ignore_index=True)
    th_md = th_table[(th_table["signal"] == args.signal) & (th_table["k"] == args.k)].copy()
    for c in ("h_low", "h_high", "wald_h"):
        th_md[c] = th_md[c].map("{:.2f}".format)
    for c in ("benign_over_wald_low", "benign_over_wald_high"):
        th_md[c] = th_md[c].map(lambda v: f"{100 * v:.1f} %")
    (out / "thresholds.md").write_text(markdown_table(th_md[["calibrated_on", "benign_runs", "benign_replies", "h_low",
                                                              "h_high", "wald_h", "benign_over_wald_low",
                                                              "benign_over_wald_high"]]))
    th_all = pd.concat(ths).query("calibrated_on == 'all seeds' and signal == @args.signal and k == @args.k").iloc[0]
    plot_paths(runs, args.signal, args.k, args.clip, th_all["h_low"], th_all["h_high"], out / "cusum.png")
    print(f"{len(runs)} runs; tables: {out / 'table.md'}, {out / 'signals.md'}, {out / 'runs.csv'}, {out / 'thresholds.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
