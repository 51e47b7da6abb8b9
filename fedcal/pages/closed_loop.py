"""The closed-loop tables of CalGuard's sequential test (docs/defense-results.md, "Under-confidence across
rounds", "The closed loop").

Input: a folder of finished ``task=train`` runs made by the ``fedcal defense`` commands shown in
docs/defense-results.md (CalGuard in ``filter`` mode with and without ``calguard-cusum``, the FedAvg
references). Unlike the offline replay (fedcal/pages/detector_replay.py), a dropped reply here
changed the later global models, so the damage columns are those of the runs that defended.

Writes into ``--out``:

* ``table.md`` / ``table.csv`` / ``runs.csv`` / ``defense.png``: :func:`fedcal.reports.defense.defense_report`
  on every finished run in the folder (fedcal's own defense table and its ``target`` column:
  |Δ sECE| ≤ 2 and |Δ acc| ≤ 1 under attack, both ≤ 1 without, benign replies flagged < 5 %);
* ``alarms.md``: per CalGuard row, what the sequential test did on its own (from each run's
  ``aggregation.csv``): attackers and benign clients alarmed by the last round, the median round
  of the attackers' alarms, replies the sequential test alone dropped, and rounds in which every
  reply was flagged (the global model is then kept);
* ``summary.md``: which rows of CalGuard with the sequential test meet the target, and the
  largest |Δ sECE| left against it at α = 1 by any attack setting and by the adaptive ones
  (``tsa-step-frac``, ``tsa-blend`` or ``tsa-duty`` below 1).

Usage (from the repository root)::

    python -m fedcal.pages closed_loop --runs runs/closed --out docs/results/closed-loop
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from fedcal.attacks import AttackSpec, attackers_of
from fedcal.reports.defense import SETTING, defense_report
from fedcal.reports.markdown import markdown_table
from fedcal.reports.runs import finished_only
from fedcal.results import AUDIT_FILE, load_config

ROW = ["calguard_cusum", *SETTING]


def _setting(cfg) -> dict:
    benign = cfg.attack == "none"
    return {"calguard_cusum": cfg.calguard_cusum, "tau": 1.0 if benign else cfg.tau,
            "attacker_ratio": np.nan if benign else cfg.attacker_ratio, "dirichlet_alpha": cfg.dirichlet_alpha,
            "tsa_step_frac": cfg.tsa_step_frac, "tsa_blend": cfg.tsa_blend, "tsa_duty": cfg.tsa_duty}


def alarm_rows(run_dirs) -> pd.DataFrame:
    """One row per CalGuard run: the sequential test's alarms and drops, from ``aggregation.csv``."""
    rows = []
    for d in run_dirs:
        cfg = load_config(d)
        if cfg.strategy != "calguard":
            continue
        a = pd.read_csv(Path(d) / AUDIT_FILE)
        seq = a["sequential"].astype(bool) if "sequential" in a.columns else pd.Series(False, index=a.index)
        flagged = a["flagged"].astype(bool)
        attacker = a["partition_id"].isin(attackers_of(AttackSpec.from_config(cfg)))
        alarmed = set(a.loc[seq, "partition_id"])
        first = a[seq].groupby("partition_id")["round"].min()
        att_ids, ben_ids = set(a.loc[attacker, "partition_id"]), set(a.loc[~attacker, "partition_id"])
        only_seq = seq & ~(a["outlier"].astype(bool) | a["struck_out"].astype(bool))
        rows.append({**_setting(cfg), "seed": cfg.seed,
                     "attackers_alarmed": len(alarmed & att_ids) / len(att_ids) if att_ids else np.nan,
                     "benign_alarmed": len(alarmed & ben_ids) / len(ben_ids) if ben_ids else np.nan,
                     "alarm_round": float(first[first.index.isin(att_ids)].median()) if len(alarmed & att_ids)
                     else np.nan,
                     "att_dropped_by_seq": float(only_seq[attacker].mean()) if attacker.any() else np.nan,
                     "benign_dropped_by_seq": float(only_seq[~attacker].mean()),
                     "all_flagged_rounds": int(a.groupby("round")["flagged"].all().sum())})
    return pd.DataFrame(rows)


def _pct(v) -> str:
    return "" if pd.isna(v) else f"{100 * v:.1f}"


def alarm_table(rows: pd.DataFrame) -> str:
    g = rows.groupby(ROW, dropna=False, sort=True)
    t = g.agg(seeds=("seed", "nunique"), attackers_alarmed=("attackers_alarmed", "mean"),
              benign_alarmed=("benign_alarmed", "mean"), alarm_round=("alarm_round", "median"),
              att_dropped_by_seq=("att_dropped_by_seq", "mean"), benign_dropped_by_seq=("benign_dropped_by_seq", "mean"),
              all_flagged_rounds=("all_flagged_rounds", "sum")).reset_index()
    t = t.sort_values(["calguard_cusum", "dirichlet_alpha", "tau", "tsa_step_frac", "tsa_blend", "tsa_duty"],
                      ascending=[False, False, True, False, False, False])
    out = pd.DataFrame({
        "cusum": t["calguard_cusum"].map(lambda v: "on" if v else "off"),
        "tau": t["tau"].map(lambda v: "benign" if v == 1.0 else f"{v:g}"),
        "alpha": t["dirichlet_alpha"].map("{:g}".format),
        "adaptive": [", ".join(f"{n} {v:g}" for n, v in (("step-frac", f), ("blend", b), ("duty", u)) if v != 1.0)
                     for f, b, u in zip(t["tsa_step_frac"], t["tsa_blend"], t["tsa_duty"])],
        "seeds": t["seeds"],
        "attackers_alarmed_%": t["attackers_alarmed"].map(_pct),
        "median_alarm_round": t["alarm_round"].map(lambda v: "" if pd.isna(v) else f"{v:g}"),
        "benign_clients_alarmed_%": t["benign_alarmed"].map(_pct),
        "att_replies_dropped_by_cusum_only_%": t["att_dropped_by_seq"].map(_pct),
        "benign_replies_dropped_by_cusum_only_%": t["benign_dropped_by_seq"].map(_pct),
        "rounds_all_flagged": t["all_flagged_rounds"]})
    return markdown_table(out, "CalGuard (filter, κ = 5, 3 strikes) per row, from each run's aggregation.csv; "
                               "rounds_all_flagged summed over seeds")


def summary(table: pd.DataFrame) -> str:
    g = table[(table["strategy"] == "calguard") & (table["calguard_cusum"] == True)]  # noqa: E712
    lines = []
    for _, r in g.iterrows():
        what = "benign" if r["tau"] == 1.0 else f"τ = {r['tau']:g}"
        knobs = ", ".join(f"{n} {r[c]:g}" for n, c in (("step-frac", "tsa_step_frac"), ("blend", "tsa_blend"),
                                                       ("duty", "tsa_duty")) if r[c] != 1.0)
        lines.append(f"- {what}{', ' + knobs if knobs else ''}, α = {r['dirichlet_alpha']:g}: target "
                     f"{'met' if r['target'] == 'yes' else 'not met'} (Δ sECE {r['d_sece']:+.2f}, Δ acc "
                     f"{r['d_accuracy']:+.2f}, benign replies flagged {100 * r['false_positive']:.1f} %)")
    att = g[(g["tau"] != 1.0) & (g["dirichlet_alpha"] == 1.0)].dropna(subset=["d_sece"])
    adaptive = (att["tsa_step_frac"] != 1.0) | (att["tsa_blend"] != 1.0) | (att["tsa_duty"] != 1.0)
    for name, rows in (("every attack setting", att), ("the adaptive attacker (its settings above)", att[adaptive])):
        if not len(rows):
            continue
        w = rows.loc[rows["d_sece"].abs().idxmax()]
        knobs = ", ".join(f"{n} {w[c]:g}" for n, c in (("step-frac", "tsa_step_frac"), ("blend", "tsa_blend"),
                                                       ("duty", "tsa_duty")) if w[c] != 1.0) or "not adaptive"
        lines.append(f"- α = 1, {name}: the largest |Δ sECE| left against CalGuard with the sequential "
                     f"test is {w['d_sece']:+.2f} points (τ = {w['tau']:g}, {knobs}; Δ acc {w['d_accuracy']:+.2f}, "
                     f"{100 * w['detection']:.1f} % of its replies flagged)")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m fedcal.pages closed_loop", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", required=True, help="folder of run directories")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="MNIST–MLP at paper scale, 25 % attackers, seeds 3-5; CalGuard filter, "
                                        "κ = 5, 3 strikes; cusum = the sequential test (defaults)")
    args = ap.parse_args()
    dirs = finished_only(sorted(p.parent for p in Path(args.runs).glob("*/config.json")), "the closed-loop table")
    out = Path(args.out)
    defense_report(dirs, out, args.title, posthoc=False)
    (out / "alarms.md").write_text(alarm_table(alarm_rows(dirs)))
    (out / "summary.md").write_text(summary(pd.read_csv(out / "table.csv")))
    print((out / "table.md").read_text(), (out / "alarms.md").read_text(), (out / "summary.md").read_text(), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
