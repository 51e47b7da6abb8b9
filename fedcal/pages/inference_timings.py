"""Wall times of finished inference runs, read from their run directories.

    python -m fedcal.pages inference_timings RUN_DIR... --out docs/results/inference-i35-timings.csv

Per run: when it started (``config.json``), when its probits were on disk (``probits.pt``: collected by
this run, or copied from an earlier one), when its aggregators were (``aggregators.pt``: trained or
loaded), and when it finished (``DONE``); the three phases' seconds follow. File times are the
filesystem's, so a run resumed later shows the gap.
"""
from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

import pandas as pd


def run_timings(run_dir: Path) -> dict:
    meta = json.loads((run_dir / "config.json").read_text())
    started = datetime.fromisoformat(meta["started"]).timestamp()
    cfg = meta["config"]

    def at(name: str) -> float | None:
        path = run_dir / name
        return path.stat().st_mtime if path.exists() else None

    probits, aggregators, done = at("probits.pt"), at("aggregators.pt"), at("DONE")
    return {"run": run_dir.name, "seed": cfg.get("seed"), "dirichlet-alpha": cfg.get("dirichlet-alpha"),
            "started": meta["started"], "machine_cpus": meta.get("provenance", {}).get("machine", {}).get("cpus"),
            "collect_s": None if probits is None else round(probits - started),
            "aggregators_s": None if aggregators is None or probits is None else round(aggregators - probits),
            "attacks_s": None if done is None or aggregators is None else round(done - aggregators),
            "total_s": None if done is None else round(done - started)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m fedcal.pages inference_timings", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    table = pd.DataFrame([run_timings(Path(d)) for d in args.run_dirs if (Path(d) / "config.json").exists()])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
