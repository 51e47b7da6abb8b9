"""Checks over every committed result table (docs/results/**): one run id, one number.

    python -m fedcal.pages table_integrity           # list the run ids with two values (exit 1 if any)
    python -m fedcal.pages table_integrity --tag     # give the re-made copies named in REMADE their own ids
    python -m fedcal.pages table_integrity --summaries   # rebuild every summary over seeds from its runs' table

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

import argparse
import csv
import re
import sys
from pathlib import Path

import pandas as pd

from fedcal.pages import RESULTS

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


#: the test sets' labels (../shared/data beside the checkout): the chance level of a committed table's runs
DATA = RESULTS.parents[2] / "shared" / "data"


def _chance_flags(datasets: pd.Series, accuracy: pd.Series) -> list[bool]:
    """The chance rule (fedcal.reports.chance) on committed accuracies (fractions) of whole-test-set evaluations."""
    from fedcal.reports.chance import image_chance

    levels = {d: image_chance(d, str(DATA), None if (DATA / f"{d}_test.npz").exists() else 10_000)
              for d in datasets.unique()}
    return [bool(levels[d] is not None and levels[d].flags(float(a))) for d, a in zip(datasets, accuracy)]


def _with_chance(t: pd.DataFrame, datasets: pd.Series, accuracy: pd.Series, before: str | None) -> pd.DataFrame:
    """``t`` with a ``chance_level`` column (computed where the table was written before it existed)."""
    if "chance_level" in t.columns:
        return t
    at = list(t.columns).index(before) if before in t.columns else len(t.columns)
    t = t.copy()
    t.insert(at, "chance_level", _chance_flags(datasets, accuracy))
    return t


def _swap_tables(md: str, new_md: str) -> str:
    """``md`` with each of its Markdown tables replaced, in order, by those of ``new_md`` (the prose kept)."""
    def blocks(text):
        out, cur = [], []
        for line in text.split("\n"):
            if line.startswith("|"):
                cur.append(line)
            elif cur:
                out.append(cur)
                cur = []
        return out + ([cur] if cur else [])
    old, new = blocks(md), blocks(new_md)
    if len(old) != len(new):
        raise ValueError(f"{len(old)} tables in the page, {len(new)} built")
    for o, n in zip(old, new):
        md = md.replace("\n".join(o), "\n".join(n), 1)
    return md


def _footnote_once(md: str, flagged: bool, datasets) -> str:
    from fedcal.reports.chance import MARK, footnote, image_chance

    if not flagged or f"\n{MARK} " in md:
        return md
    note = footnote(image_chance(d, str(DATA)) for d in set(datasets))
    head, sep, units = md.rpartition("\naccuracy, ECE and sECE in percent")
    return (head + "\n\n" + note + sep + units) if sep else md.rstrip("\n") + "\n\n" + note


def refresh_summaries(root: Path = RESULTS) -> list[Path]:
    """Rebuild every committed summary over seeds from the per-run table beside it, by the builders' rule
    (the τ tables' ``table_seeds.csv``, the robustness reports' ``robustness.csv``, the sweeps' ``seeds.csv``)
    and the tables of its Markdown page; the files changed."""
    from fedcal.reports.robustness import robustness_markdown, summarise_robustness
    from fedcal.reports.sweeps import REJECTED, seed_markdown, seed_summary
    from fedcal.reports.taus import seed_summary as tau_summary
    from fedcal.reports.taus import seeds_markdown

    changed = []

    def write(path: Path, text: str):
        if path.read_text() != text:
            path.write_text(text)
            changed.append(path)

    for summary in sorted(root.rglob("table_seeds.csv")):
        folder = summary.parent
        t = pd.read_csv(folder / "table.csv")
        datasets = t["run_id"].str.split("-").str[0]
        t = _with_chance(t, datasets, t["accuracy_%"] / 100, "d_accuracy")
        write(folder / "table.csv", t.to_csv(index=False))
        agg = tau_summary(t)
        write(summary, agg.to_csv(index=False))
        md = (folder / "table.md").read_text()
        write(folder / "table.md", _footnote_once(_swap_tables(md, seeds_markdown(agg)), t["chance_level"].any(),
                                                  datasets))
    for summary in sorted(root.rglob("robustness.csv")):
        folder = summary.parent
        t = pd.read_csv(folder / "robustness_runs.csv")
        t = _with_chance(t, t["dataset"], t["accuracy"], None)
        write(folder / "robustness_runs.csv", t.to_csv(index=False))
        agg = summarise_robustness(t)
        write(summary, agg.to_csv(index=False))
        md = (folder / "robustness.md").read_text()
        head = md[:md.index("### ")]
        spec = next(line for line in md.splitlines() if line.startswith("Evaluated at"))
        text = head + robustness_markdown(agg) + "\n" + spec + "\n"
        write(folder / "robustness.md", _footnote_once(text, t["chance_level"].any(), t["dataset"]))
    for summary in sorted(root.rglob("seeds.csv")):
        folder = summary.parent
        cells, old = pd.read_csv(folder / "cells.csv"), pd.read_csv(summary)
        axes = [c for c in old.columns if not c.endswith(("_mean", "_std")) and c in cells.columns
                and c not in ("seeds", "seeds_in_means", "chance_level", "stalled", REJECTED, "left_out")]
        agg = seed_summary(cells, pd.DataFrame(), [*axes, "seed"])
        agg[REJECTED] = agg[axes].merge(old[[*axes, REJECTED]], on=axes, how="left")[REJECTED].to_numpy()
        write(summary, agg.to_csv(index=False))
        md = (folder / "seeds.md").read_text()
        write(folder / "seeds.md", _swap_tables(md, seed_markdown(agg)))
    return changed


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m fedcal.pages table_integrity", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tag", action="store_true", help="give the re-made copies named in REMADE their own ids")
    ap.add_argument("--summaries", action="store_true", help="rebuild every summary over seeds from its runs' table")
    args = ap.parse_args(argv)
    if args.tag:
        for p in tag():
            print(f"tagged {p.relative_to(RESULTS)}")
    if args.summaries:
        for p in refresh_summaries():
            print(f"rebuilt {p.relative_to(RESULTS)}")
    bad = two_valued(readings())
    for _, b in bad.iterrows():
        print(f"{b['run_id']} {b['metric']} [{b['measurement']}]: {b['values']}")
    return 1 if len(bad) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
