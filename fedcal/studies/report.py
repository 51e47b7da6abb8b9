"""``fedcal report``: tables and plots of finished run directories of one task (the task's report)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fedcal.config import ConfigError
from fedcal.studies.common import readable_tasks, run_dirs_of


def cmd_report(args: argparse.Namespace) -> int:
    from fedcal.reports.runs import finished_only
    from fedcal.results import UnfinishedRunError
    from fedcal.tasks import get_task

    dirs = run_dirs_of(args.run_dirs)
    out = Path(args.out)
    tasks = readable_tasks(dirs)
    if len(tasks) > 1:
        raise ConfigError(f"the runs belong to different tasks ({', '.join(tasks)}): report each task on its own")
    if not tasks:
        finished_only(dirs, "the report")  # names each directory and why
        raise ConfigError(f"no readable config.json among the {len(dirs)} run directories: nothing to report")
    task = get_task(tasks[0])
    report = task.load_report()
    if report is None:
        raise ConfigError(f"task {task.name!r} has no report")
    finished = finished_only(dirs, "the report")  # a warning line for each unfinished run left out
    if not finished:
        raise UnfinishedRunError(f"no finished run among the {len(dirs)} run directories: nothing to report")
    print(report(finished, out, args.title))
    left_out = len(dirs) - len(finished)
    print(f"report: {args.out}" + (f" ({len(finished)} finished runs; {left_out} unfinished left out)"
                                   if left_out else ""))
    return 0


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("report", "tables and plots from finished run directories of one task (the run store)")
    p.add_argument("run_dirs", nargs="+", help="run directories (each with its config.json), all of one task")
    p.add_argument("--out", default="fedcal-report", help="output folder")
    p.add_argument("--title", default="", help="table title")
    p.set_defaults(func=cmd_report)
