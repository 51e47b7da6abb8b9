"""Every calibration metric of several runs with its bootstrap interval, one column per run.

    python -m fedcal.pages interval_table RUN_DIR... > intervals.md

Reads each run's ``calibration_intervals.csv`` (run-config key ``calibration-bootstrap``) and writes
a Markdown table: one row per metric (accuracy, ECE, sECE and the estimators the runs recorded, in
percent; Brier and NLL as they are), each cell "estimate [lo, hi]".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

PLAIN = ("brier", "nll")  # not percentages


def main(argv: list[str]) -> int:
    from fedcal.calibration_metrics import INTERVALS_FILE
    from fedcal.reports.markdown import markdown_table
    from fedcal.reports.taus import run_label
    from fedcal.results import load_config

    ap = argparse.ArgumentParser(prog="python -m fedcal.pages interval_table", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories with calibration intervals")
    columns = {}
    for d in ap.parse_args(argv).runs:
        iv = pd.read_csv(d / INTERVALS_FILE).set_index("metric")
        label = run_label(load_config(d))
        columns[label] = {m: (f"{r.estimate:.4f} [{r.lo:.4f}, {r.hi:.4f}]" if m in PLAIN else
                              f"{100 * r.estimate:.2f} [{100 * r.lo:.2f}, {100 * r.hi:.2f}]")
                          for m, r in iv.iterrows()}
        level, resamples = iv["level"].iloc[0], int(iv["resamples"].iloc[0])
    table = pd.DataFrame(columns).rename_axis("metric").reset_index()
    sys.stdout.write(markdown_table(table, f"final-round metrics with {100 * level:g} % percentile-bootstrap "
                                           f"intervals ({resamples} resamples of the test set)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
