"""Wall-clock seconds each run's rounds took, from the run store (``round_seconds`` in metrics.csv).

    python docs/tools/run_seconds.py runs/distill-minilm-first/* > docs/results/distill-minilm-first/seconds.md

One row per run directory: its name, the rounds recorded, the seconds of round 0 (set-up and the
first evaluation), of the training rounds, and their total — what a cell of that configuration
costs on the machine that ran it (a run's config.json records the machine).
"""

from __future__ import annotations

import sys

import pandas as pd


def main(argv: list[str]) -> int:
    from fedcal.reports.markdown import markdown_table
    from fedcal.results import load_metrics

    rows = []
    for d in argv:
        m = load_metrics(d)
        sec = m[m["metric"] == "round_seconds"].set_index("round")["value"]
        rows.append({"run": m["run_id"].iloc[0], "rounds": int(sec.index.max()),
                     "round 0 (s)": round(float(sec.get(0, 0.0))), "rounds 1+ (s)": round(float(sec.drop(0, errors="ignore").sum())),
                     "total (s)": round(float(sec.sum()))})
    if not rows:
        print("no run directories given", file=sys.stderr)
        return 1
    sys.stdout.write(markdown_table(pd.DataFrame(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
