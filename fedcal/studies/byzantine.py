"""``fedcal byzantine``: every strategy against every attack of Byzantine-robust FL (accuracy, sECE,
ASR, worst case) over attacker ratios and seeds."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fedcal.config import RunConfig
from fedcal.studies.common import (KEYS_EPILOG, add_cluster_options, add_run_options, check_run_dirs, cluster_of,
                                   config_overrides, parse_ints, parse_names)


def cmd_byzantine(args: argparse.Namespace) -> int:
    from fedcal.app.sweep import run_sweep
    from fedcal.reports.byzantine import byzantine_cells, byzantine_configs, byzantine_report

    overrides = config_overrides(args)
    out = Path(args.report)
    overrides.setdefault("output-dir", str(out / "runs"))
    overrides.setdefault("engine", "inprocess")
    base = RunConfig.from_flower(overrides)
    cells = byzantine_cells(base, parse_names(args.strategies), parse_names(args.attacks),
                            [float(r) for r in parse_names(args.ratios)], parse_ints(args.seeds, "--seeds"))
    configs = byzantine_configs(cells)
    check_run_dirs(configs)
    print(f"byzantine: {len(configs)} runs; finished runs are skipped")
    failures = run_sweep(configs, jobs=max(args.jobs, 1), progress=not args.no_progress, restart=args.restart,
                         cluster=cluster_of(args))
    print(byzantine_report(cells, out, args.title))
    print(f"tables: {out / 'table.md'}, {out / 'table.csv'}, {out / 'runs.csv'}")
    return 1 if failures else 0


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    from fedcal.reports.byzantine import DEFAULT_ATTACKS, DEFAULT_STRATEGIES

    p = add("byzantine", "every strategy against every attack of Byzantine-robust FL: accuracy, sECE, ASR, worst case",
            description="Every strategy spec × (benign + each attack) × attacker ratio × seed is one Flower run "
                        "(task = train, engine = inprocess unless given). A spec nnm+trimmed_mean is trimmed_mean "
                        "with pre-aggregation = nnm; krum-f, trim-f and pre-f are set to ceil(ratio * "
                        "clients-per-round). Finished runs are skipped (docs/defense.md).", epilog=KEYS_EPILOG)
    add_run_options(p)
    p.add_argument("--strategies", default=", ".join(DEFAULT_STRATEGIES), help="strategy specs compared")
    p.add_argument("--attacks", default=", ".join(DEFAULT_ATTACKS), help="attacks (the benign run is always added)")
    p.add_argument("--ratios", default="0.1,0.25", help="attacker ratios")
    p.add_argument("--seeds", default="0-2", help="seeds, e.g. 0-2")
    p.add_argument("--jobs", type=int, default=0, help="runs in parallel")
    p.add_argument("--title", default="", help="title of the table")
    p.add_argument("--report", default="fedcal-byzantine", help="folder for the runs and tables")
    add_cluster_options(p)
    p.set_defaults(func=cmd_byzantine)
