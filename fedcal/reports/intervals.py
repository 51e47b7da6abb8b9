"""Per-run bootstrap intervals in the tables (flwr-free).

A run made with ``calibration-bootstrap`` = B > 0 holds ``calibration_intervals.csv``: each
calibration metric's final-round estimate with its 95 % percentile-bootstrap interval over the
test set (:func:`fedcal.calibration_metrics.bootstrap_intervals`). The τ tables show it beside the
estimate ("4.31 [3.90, 4.72]"), and "mean ± sd over seeds" beside the mean half-width of the
seeds' intervals ("4.31 ± 0.20 (CI ±0.41)"). A change against the benign run (Δ sECE) whose two
intervals overlap is marked *not resolved*: the test set's sampling noise alone could make it.
Disjoint 95 % intervals are a conservative test (they resolve a difference at well below 5 %);
overlapping ones do not prove the difference absent, only that this test set cannot tell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from fedcal.calibration_metrics import INTERVALS_FILE

#: the τ table's metrics that carry an interval (in percent, as their columns)
INTERVAL_METRICS = ("ece", "sece")
NOT_RESOLVED = "not resolved"
RESOLVED = "sece_resolved"


def read_intervals(run_dir: str | Path) -> pd.DataFrame | None:
    """A run's interval table indexed by metric (None when the run recorded none)."""
    path = Path(run_dir) / INTERVALS_FILE
    return pd.read_csv(path).set_index("metric") if path.exists() else None


def attach_intervals(table: pd.DataFrame, run_dirs: Sequence[str | Path], benign_key: Sequence[str]) -> pd.DataFrame:
    """``table`` (one row per run, ``run_id``) with ``<m>_lo_%`` / ``<m>_hi_%`` of ECE and sECE and
    ``sece_resolved`` (1: the run's sECE interval and its benign run's are disjoint, 0: they overlap;
    NaN without intervals or a benign run, and for the benign run itself). Unchanged when no run recorded intervals (committed tables keep
    their columns)."""
    found = {Path(d).name: iv for d in run_dirs if (iv := read_intervals(d)) is not None}
    if not found:
        return table
    table = table.copy()
    for m in INTERVAL_METRICS:
        for side in ("lo", "hi"):
            table[f"{m}_{side}_%"] = [100 * found[r].loc[m, side] if r in found and m in found[r].index else np.nan
                                      for r in table["run_id"]]
    benign = table[table["run"] == "benign"].set_index(list(benign_key))
    key = pd.MultiIndex.from_frame(table[list(benign_key)])
    b_lo = benign["sece_lo_%"].reindex(key).to_numpy()
    b_hi = benign["sece_hi_%"].reindex(key).to_numpy()
    lo, hi = table["sece_lo_%"].to_numpy(), table["sece_hi_%"].to_numpy()
    known = ~(np.isnan(lo) | np.isnan(b_lo)) & (table["run"] != "benign").to_numpy()
    table[RESOLVED] = np.where(known, ((lo > b_hi) | (hi < b_lo)).astype(float), np.nan)  # 1 / 0 / unknown
    return table


def with_interval(value: float, lo: float, hi: float, fmt: str = "{:.2f}") -> str:
    """"4.31 [3.90, 4.72]" (the value alone when the run has no interval)."""
    text = fmt.format(value)
    return text if pd.isna(lo) else f"{text} [{fmt.format(lo)}, {fmt.format(hi)}]"


def delta_text(text: str, resolved) -> str:
    """A Δ sECE cell marked when its intervals overlap."""
    return text if pd.isna(resolved) or resolved else f"{text} ({NOT_RESOLVED})"


def seed_intervals(table: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Per row of seeds: the mean half-width of the seeds' ECE and sECE intervals (``<m>_hw``), and
    how many of the seeds' Δ sECE are resolved (``sece_resolved``, of ``sece_compared``)."""
    g = table.assign(**{f"{m}_hw": (table[f"{m}_hi_%"] - table[f"{m}_lo_%"]) / 2 for m in INTERVAL_METRICS},
                     _r=table[RESOLVED]).groupby(list(by), sort=False)
    out = g[[f"{m}_hw" for m in INTERVAL_METRICS]].mean()
    out[RESOLVED] = g["_r"].sum().astype(int)
    out["sece_compared"] = g["_r"].count()
    return out


def seed_cell(cell: str, half_width: float) -> str:
    """"mean ± sd" followed by the seeds' mean interval half-width."""
    return cell if pd.isna(half_width) else f"{cell} (CI ±{half_width:.2f})"


def seed_delta(cell: str, resolved: int, compared: int) -> str:
    """A Δ sECE "mean ± sd" cell marked when not every seed's intervals resolve it."""
    if not compared or resolved == compared:
        return cell
    return f"{cell} ({NOT_RESOLVED}" + ("" if resolved == 0 else f" in {compared - resolved}/{compared} seeds") + ")"
