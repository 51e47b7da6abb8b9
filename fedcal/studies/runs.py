"""``fedcal runs``: what happened to each run (finished, damaged, unfinished, interrupted, failed, running)."""

from __future__ import annotations

import argparse
import sys
from typing import Any



def cmd_runs(args: argparse.Namespace) -> int:
    from fedcal.results import find_run_dirs, run_state

    states = [run_state(d) for d in find_run_dirs(args.dirs)]
    for state in states:
        print(state.line())
    counts = {s: sum(st.status == s for st in states)
              for s in ("finished", "damaged", "unfinished", "interrupted", "failed", "running")}
    print(", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" of {len(states)} run(s)", file=sys.stderr)
    return 1 if args.check and counts["finished"] < len(states) else 0


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("runs", "what happened to each run: finished, damaged, unfinished (how far), interrupted (resumable "
                    "from which round), failed (why), running",
            description="One line per run directory: finished; damaged (DONE, but a file the reports check "
                        "is not whole, e.g. a torn metrics.csv: no report reads it); unfinished (the last round "
                        "logged of the run's rounds, its last checkpoint: re-running the config resumes there); "
                        "interrupted (stopped by Ctrl-C, SIGINT or SIGTERM; resumable from its checkpoint's "
                        "round, when it has one); failed (the reason from its run.log); running (the pid writing "
                        "it); and whether its last attempt resumed. "
                        "flwr run exits 0 even when the run failed: `fedcal runs --check DIR` tells a script.")
    p.add_argument("dirs", nargs="+", help="run directories, or folders of run directories")
    p.add_argument("--check", action="store_true", help="exit 1 unless every run is finished (damaged runs are not)")
    p.set_defaults(func=cmd_runs)
