"""Checks over every committed result table (docs/results/**): one run id, one number.

    python docs/tools/table_integrity.py           # list the run ids with two values (exit 1 if any)
    python docs/tools/table_integrity.py --tag     # give the re-made copies named in REMADE their own ids

**One run id, one result.** A run id (``<dataset>-<model>-<strategy>-<attack>-s<seed>-<config hash>``)
names a run's configuration, not a run: the same configuration made again — by other code, on
another machine, under another thread count — ends at another model after 100 rounds of non-IID
sampling. Where two tables report two makes of one configuration, each make carries its own id:
the copies in the tables of :data:`REMADE` get ``@<make>`` appended (the code version or run store
that made them), so no id stands for two numbers.

:func:`readings` reads every run's metrics from every committed CSV (the ids in ``run_id``,
``run`` or the last part of ``run_dir``; accuracy, ECE and sECE as fractions whichever unit the
table prints). Rows that measure something else than the run's own final metrics on the whole test
set are told apart by :data:`MEASUREMENT` (a post-hoc calibrator fitted on part of the test set, a
round other than the last, a defense applied after training: ``fedavg + TS(root)``).
:func:`two_valued` lists every (id, metric, measurement) with values further apart than the
tables' printed precision (:data:`TOLERANCE`).
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import pandas as pd

RESULTS = Path(__file__).resolve().parents[1] / "results"

#: a run directory's name, optionally with the make tag this module appends
RUN_ID = re.compile(r"^(?P<name>[a-z0-9][\w.\-]*-s\d+-[0-9a-f]{8})(?P<make>@[\w.+\-]+)?$")
ID_COLUMNS = ("run_id", "run", "run_dir")
#: metric column -> (metric, divisor to a fraction)
METRICS = {"accuracy": ("accuracy", 1), "accuracy_%": ("accuracy", 100), "ece": ("ece", 1),
           "ece_%": ("ece", 100), "sece": ("sece", 1), "sece_%": ("sece", 100)}
#: columns that make a row another measurement of its run than the run's final metrics
MEASUREMENT = ("method", "n_cal", "round")
#: two fractions further apart than this print differently at the tables' two decimals of a percent
TOLERANCE = 5e-5

#: tables whose runs re-make (same configuration, same run name) runs another table reports from
#: another make: table folder -> (make tag, why the two makes differ)
REMADE = {
    "defense-cifar10": ("defense-cifar10", "the defense sweep's own run store (runs/defense-cifar10), made apart "
                        "from the τ table's runs/cifar-tau-seeds"),
    "defense-cifar10-others": ("defense-cifar10", "the defense sweep's own run store (runs/defense-cifar10)"),
    "defenses-cifar10": ("defenses-cifar10", "the robust-aggregation comparison's own runs (fixed client order)"),
    "robustness-tsa-cifar10": ("robustness-eval", "the robustness report evaluates each stored model again "
                               "(another batch order and thread count than the run's own final evaluation)"),
    "defense-mnist": ("defense-mnist", "the defense sweep's own run store (runs/defense-mnist)"),
    "defense-mnist-alpha": ("defense-mnist", "the defense sweep's own run store (runs/defense-mnist)"),
    "defense-mnist-ratio": ("defense-mnist", "the defense sweep's own run store (runs/defense-mnist)"),
    "defense-mnist-blend": ("defense-mnist", "the defense sweep's own run store (runs/defense-mnist)"),
    "defense-mnist-mildtau": ("defense-mnist", "the defense sweep's own run store (runs/defense-mnist)"),
    "defense-mnist-sensitivity": ("defense-mnist", "the defense sweep's own run store (runs/defense-mnist)"),
    "defense-mnist-stepfrac": ("defense-mnist", "the defense sweep's own run store (runs/defense-mnist)"),
    "robustness-tsa-mnist": ("robustness-eval", "the robustness report evaluates each stored model again"),
    "cifar10-paper-probe": ("824958e3fdca", "the probe's make (code 824958e3fdca), before the paper-scale τ "
                            "table's"),
    "paper-cifar10-cnn-tau-3seeds": ("ea1c5d0d7339", "made by code ea1c5d0d7339 on 2 CPU cores; the defense, "
                                     "extreme-τ and sensitivity tables read the later make (a49eab128d5c)"),
    "paper-cifar10-posthoc-ovr": ("ea1c5d0d7339", "the post-hoc study of the τ table's make (code ea1c5d0d7339)"),
    "paper-cifar10-cnn-tau-grid": ("ccaa90602cd4", "made by code ccaa90602cd4 on one H100"),
}


def table_files(root: Path = RESULTS) -> list[Path]:
    return sorted(root.rglob("*.csv"))


def run_name(value) -> tuple[str, str] | None:
    """(run id as the table shows it, the run directory's name) of an id cell, or None for another value."""
    if not isinstance(value, str):
        return None
    m = RUN_ID.match(value.rstrip("/").rsplit("/", 1)[-1])
    return (m.group(0), m.group("name")) if m else None


def readings(files: list[Path] | None = None, root: Path = RESULTS) -> pd.DataFrame:
    """One row per (table, run, metric): ``table``, ``run_id`` (as shown), ``metric``, ``measurement``,
    ``value`` (a fraction)."""
    out = []
    for path in files if files is not None else table_files(root):
        try:
            t = pd.read_csv(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
            continue
        ids = [c for c in ID_COLUMNS if c in t.columns]
        metrics = [c for c in METRICS if c in t.columns]
        if not ids or not metrics:
            continue
        for _, row in t.iterrows():
            found = next((n for n in (run_name(row[c]) for c in ids) if n), None)
            if found is None:
                continue
            measurement = ";".join(f"{c}={row[c]}" for c in MEASUREMENT if c in t.columns)
            if "strategy" in t.columns and "+" in str(row["strategy"]):
                measurement += f";strategy={row['strategy']}"
            for c in metrics:
                metric, div = METRICS[c]
                if pd.notna(row[c]):
                    out.append({"table": str(path.relative_to(root)), "run_id": found[0], "metric": metric,
                                "measurement": measurement, "value": float(row[c]) / div})
    return pd.DataFrame(out, columns=["table", "run_id", "metric", "measurement", "value"])


def two_valued(r: pd.DataFrame) -> pd.DataFrame:
    """Every (run id, metric, measurement) whose values across the tables differ by more than
    :data:`TOLERANCE`: the run id, the metric and each value with the tables that show it."""
    rows = []
    for (rid, metric, meas), g in r.groupby(["run_id", "metric", "measurement"], sort=True):
        if g["value"].max() - g["value"].min() > TOLERANCE:
            by_value = g.groupby(g["value"].round(5))["table"].agg(lambda s: ", ".join(sorted(set(s))))
            rows.append({"run_id": rid, "metric": metric, "measurement": meas,
                         "values": "; ".join(f"{v:.4f} ({t})" for v, t in by_value.items())})
    return pd.DataFrame(rows, columns=["run_id", "metric", "measurement", "values"])


def tag(root: Path = RESULTS) -> list[Path]:
    """Append each :data:`REMADE` table's make tag to the run ids of its CSVs (once), cell by cell (every
    other cell's text kept as it is); the files changed."""
    changed = []
    for folder, (make, _) in REMADE.items():
        for path in sorted((root / folder).glob("*.csv")):
            with path.open(newline="") as f:
                rows = list(csv.reader(f))
            if not rows:
                continue
            cols = [i for i, c in enumerate(rows[0]) if c in ID_COLUMNS]
            new = [rows[0]] + [[_tagged(v, make) if i in cols else v for i, v in enumerate(r)] for r in rows[1:]]
            if new != rows:
                with path.open("w", newline="") as f:
                    csv.writer(f, lineterminator="\n").writerows(new)
                changed.append(path)
    return changed


def _tagged(value, make: str):
    found = run_name(value)
    if found is None or "@" in found[0]:
        return value
    return f"{value.rstrip('/')}@{make}"


def main(argv: list[str]) -> int:
    if "--tag" in argv:
        for p in tag():
            print(f"tagged {p.relative_to(RESULTS)}")
    bad = two_valued(readings())
    for _, b in bad.iterrows():
        print(f"{b['run_id']} {b['metric']} [{b['measurement']}]: {b['values']}")
    return 1 if len(bad) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
