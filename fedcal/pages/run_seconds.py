"""Wall-clock seconds each run's rounds took, from the run store (``round_seconds`` in timings.csv).

    python -m fedcal.pages run_seconds runs/distill-minilm-first/* > docs/results/distill-minilm-first/seconds.md
    python -m fedcal.pages run_seconds --by dst-method runs/distill-minilm-sentiment/* > seconds-by-method.md
    python -m fedcal.pages run_seconds --by machine,dst-method runs/distill-minilm-genre/* > seconds.md
    python -m fedcal.pages run_seconds --project 100 runs/cifar-timing/* > docs/results/closed-loop/cifar-seconds.md

One row per run directory: its name, the rounds recorded, the seconds of round 0 (set-up and the
first evaluation), of the training rounds, and their total — what a cell of that configuration
costs on the machine that ran it (a run's config.json records the machine). With ``--by KEYS``
(run-config keys, comma-separated; ``machine`` is the machine recorded in the run's provenance: its
GPU, else its CPU count and torch threads), one row per combination of their values instead: the
runs, and the median, mean, least and most of their totals, and a row over all runs (left out when
grouping by machine: seconds on two machines do not add up to one figure). With ``--project N``, a last column projects each run to N rounds (round 0
plus the mean of its training rounds × N: what a short timing run says about a full one).
Directories without metrics (a run not started) are skipped; a replayed run
has no training rounds of its own and is skipped too.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd


def machine_of(run_dir: str) -> str:
    """The machine a run's provenance records: its GPU(s), else its CPUs and torch threads."""
    from fedcal.results import load_run_config

    m = load_run_config(run_dir).get("provenance", {}).get("machine", {})
    if m.get("cuda"):
        return "GPU: " + ", ".join(m["cuda"])
    return f"CPU: {m.get('cpus', '?')} cores, {m.get('torch_threads', '?')} torch thread(s)" if m else "not recorded"


def main(argv: list[str]) -> int:
    from fedcal.reports.markdown import markdown_table
    from fedcal.results import load_metrics, load_timings

    ap = argparse.ArgumentParser(prog="python -m fedcal.pages run_seconds", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--by", type=lambda s: s.split(","), help="group by these run-config keys (comma-separated; machine too)")
    ap.add_argument("--project", type=int, metavar="N", help="also project each run's seconds to N rounds")
    ap.add_argument("runs", nargs="*", metavar="RUN_DIR")
    args = ap.parse_args(argv)
    by, project = args.by, args.project
    rows = []
    for d in args.runs:
        m = load_metrics(d)
        t = load_timings(d)  # round_seconds left metrics.csv for timings.csv; older runs' come from metrics.csv
        sec = t[t["metric"] == "round_seconds"].set_index("round")["value"] if not t.empty else pd.Series(dtype=float)
        if sec.empty:
            continue
        keys = {k: machine_of(d) if k == "machine" else m[k].iloc[0] for k in by or ()}
        rows.append({"run": m["run_id"].iloc[0], **keys, "rounds": int(sec.index.max()),
                     "round 0 (s)": round(float(sec.get(0, 0.0))), "rounds 1+ (s)": round(float(sec.drop(0, errors="ignore").sum())),
                     "total (s)": round(float(sec.sum()))})
        if project:  # a short timing run's cost at full length: round 0 plus the mean training round × N
            train = sec.drop(0, errors="ignore")
            rows[-1][f"projected {project} rounds (s)"] = round(float(sec.get(0, 0.0)) + float(train.mean()) * project)
    if not rows:
        print("no run directories given", file=sys.stderr)
        return 1
    table = pd.DataFrame(rows)
    if by:
        g = table.groupby(by)["total (s)"]
        table = pd.DataFrame({"runs": g.size(), "median (s)": g.median().round(), "mean (s)": g.mean().round(),
                              "least (s)": g.min(), "most (s)": g.max()}).reset_index()
        if "machine" not in by:  # a total over two machines' seconds would mean nothing
            every = pd.DataFrame(rows)["total (s)"]
            total = pd.DataFrame([{**{k: "all" for k in by}, "runs": len(rows), "median (s)": round(every.median()),
                                   "mean (s)": round(every.mean()), "least (s)": every.min(), "most (s)": every.max()}])
            table = pd.concat([table, total], ignore_index=True)
    sys.stdout.write(markdown_table(table, formats={c: "{:.0f}" for c in table.columns if c.endswith("(s)")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
