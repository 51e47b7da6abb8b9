"""``fedcal sweep``: a resumable, parallel grid of runs (a TOML file and/or ``--grid`` axes) -> one tidy table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fedcal.config import ConfigError
from fedcal.studies.common import (KEYS_EPILOG, add_cluster_options, add_run_options, cluster_of, config_overrides,
                                   jobs_type, refuse_unread_keys, say_replaced)


def cmd_sweep(args: argparse.Namespace) -> int:
    from fedcal.app.sweep import SweepGrid, run_sweep
    from fedcal.reports import write_results

    files = [o for o in args.overrides or [] if "=" not in o]  # `fedcal sweep grid.toml k=v ...`
    args.overrides = [o for o in args.overrides or [] if "=" in o]
    if len(files) > 1:
        raise ConfigError(f"one grid file at most, got {files}")
    grid = SweepGrid.from_toml(files[0]) if files else SweepGrid()
    for axis in args.grid or []:
        grid.add_axis(axis)
    overrides = config_overrides(args)
    configs = grid.configs(overrides)
    refuse_unread_keys({**grid.base, **overrides, **grid.axes}, configs)
    jobs = args.jobs or 1
    where = f"Ray tasks on {args.cluster}" if cluster_of(args) else f"{jobs} parallel"
    print(f"sweep: {len(configs)} cells over {', '.join(grid.axes) or '(no axis)'}; {where}")
    failures = run_sweep(configs, jobs=jobs, progress=not args.no_progress, restart=args.restart,
                         cluster=cluster_of(args), force=args.force)
    say_replaced(args.report, ["cells.csv", "rounds.csv", "seeds.csv", "seeds.md"])
    cells = write_results(configs, args.report, list(grid.axes))
    from fedcal.reports.sweeps import printed_cells

    print(printed_cells(cells, list(grid.axes)))
    if (seeds := Path(args.report) / "seeds.md").exists():
        print(seeds.read_text())
    print(f"tables: {args.report}/cells.csv, {args.report}/rounds.csv" + (f", {seeds}" if seeds.exists() else ""))
    if args.plot_x and not cells.empty:
        from fedcal.reports import sweep_curves

        hue = args.plot_hue or None
        path = sweep_curves(cells, args.plot_x, Path(args.report) / f"sweep_{args.plot_x}.png", hue)
        print(f"plot: {path}")
    return 1 if failures else 0


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("sweep", "a grid of runs (TOML file and/or --grid), resumable, parallel",
            description="fedcal sweep [grid.toml] [--grid key=v1,v2 ...] [key=value ...]", epilog=KEYS_EPILOG)
    add_run_options(p)
    p.add_argument("--grid", action="append", help="an axis: key=v1,v2,... (repeatable)")
    p.add_argument("--jobs", type=jobs_type, default=0, help="cells run in parallel (0 = 1; use engine=inprocess)")
    p.add_argument("--report", default="fedcal-sweep", help="folder for cells.csv and rounds.csv")
    p.add_argument("--plot-x", default="", help="plot final accuracy and sECE against this key")
    p.add_argument("--plot-hue", default="", help="one line per value of this key")
    add_cluster_options(p)
    p.set_defaults(func=cmd_sweep)
