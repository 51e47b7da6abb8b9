"""``fedcal taus``: a benign run and the TSA at each τ (under one or several strategies); its grid
builder :func:`tau_configs` and the run that writes the τ table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from fedcal.config import ConfigError, RunConfig
from fedcal.studies.common import (KEYS_EPILOG, add_cluster_options, add_run_options, check_run_dirs, cluster_of,
                                   config_overrides, jobs_type, names_type, parse_ints, parse_taus,
                                   refuse_unread_keys, say_replaced, seeds_type, simulator, taus_type)

if TYPE_CHECKING:
    import pandas as pd

#: the tables a τ report (and a case study's) writes into its folder
REPORT_TABLES = ("table.csv", "table.md")


def tau_report(args: argparse.Namespace, base: RunConfig, taus: list[float], out: Path, title: str,
                strategies: list[str] | None = None) -> int:
    configs = tau_configs(base, taus, strategies)
    check_run_dirs(configs)  # every cell, before the first one runs
    run = simulator(args)
    if getattr(args, "jobs", 0) > 1 or cluster_of(args):  # the cells in parallel first; the report then skips them
        from fedcal.app.sweep import run_sweep

        run_sweep(configs, jobs=max(args.jobs, 1), progress=not args.no_progress, restart=args.restart,
                  cluster=cluster_of(args), force=args.force)
        run = simulator(args, force=False)  # --force re-ran them just now: not a second time
    say_replaced(out, REPORT_TABLES)
    table = run_tau_comparison(base, taus, out, run, title, strategies)
    print()
    print((out / "table.md").read_text())
    pngs = ["defenses.png"] if table["strategy"].nunique() > 1 else ["reliability.png", "trajectories.png"]
    print(f"table: {out / 'table.csv'}\n" + "\n".join(f"plot: {out / p}" for p in pngs))
    return 0


def cmd_taus(args: argparse.Namespace) -> int:
    overrides = config_overrides(args)
    out = Path(args.report)
    overrides.setdefault("output-dir", str(out / "runs"))
    base = RunConfig.from_flower(overrides)
    title = f"{base.dataset}–{base.model}, K={base.num_clients}, M={base.clients_per_round}, " \
            f"{base.replace(attack='tsa').num_attackers} attackers, " \
            f"{base.num_rounds} rounds, seed {base.seed}"
    strategies = list(args.strategies) or None
    for s in strategies or []:
        base.replace(strategy=s)  # validates each name (and its parameters) before anything runs
    refuse_unread_keys(overrides, tau_configs(base, parse_taus(args.taus), strategies))
    return tau_report(args, base, parse_taus(args.taus), out, title, strategies)


def tau_configs(base: RunConfig, taus: Sequence[float], strategies: Sequence[str] | None = None) -> list[RunConfig]:
    """One config per (strategy, τ). τ = 1 is the benign run (no attacker at all); every
    other τ is TSA at that τ. ``strategies`` defaults to the base config's."""
    out = []
    for strategy in strategies or [base.strategy]:
        for tau in taus:
            if tau <= 0:
                raise ValueError(f"tau must be > 0, got {tau}")
            if float(tau) == 1.0:
                out.append(base.replace(attack="none", tau=1.0, strategy=strategy))
            else:
                out.append(base.replace(attack="tsa", tau=float(tau), strategy=strategy))
    return out


def run_tau_comparison(base: RunConfig, taus: Sequence[float], out_dir: str | Path,
                       run_fn: Callable[[RunConfig], object], title: str = "",
                       strategies: Sequence[str] | None = None) -> pd.DataFrame:
    """Run (or skip, if finished) each (strategy, τ) with ``run_fn`` and write the report."""
    from fedcal.reports.taus import write_report
    from fedcal.results import run_dir_for

    configs = tau_configs(base, taus, strategies)
    for cfg in configs:
        run_fn(cfg)
    return write_report([run_dir_for(c) for c in configs], out_dir, title)


def case_study(args: argparse.Namespace, task: str, preset: dict[str, Any], describe: Any, report: Any,
                files: str) -> int:
    """A case study's τ × seed runs (τ = 1: the benign run) with ``preset`` under the command line's
    overrides, in-process and resumable, then its report. The task's preflight refuses what it
    cannot run before anything runs, ``describe(base)`` says what runs, ``files`` what was written."""
    from fedcal.app.sweep import run_sweep
    from fedcal.results import run_dir_for
    from fedcal.tasks import preflight

    out = Path(args.report)
    overrides = {**preset, "output-dir": str(out / "runs"), "engine": "inprocess", **config_overrides(args), "task": task}
    base = RunConfig.from_flower(overrides)
    configs = [c for seed in parse_ints(args.seeds, "--seeds")
               for c in tau_configs(base.replace(seed=seed), parse_taus(args.taus))]
    if base.run_name and len(configs) > 1:
        raise ConfigError(f"run-config key 'run-name' names one run; fedcal {task} makes several (leave it unset)")
    refuse_unread_keys(overrides, configs)
    for cfg in configs:
        preflight(cfg)
    check_run_dirs(configs)
    print(f"{task}: {len(configs)} runs ({describe(base)}, {base.num_clients} clients, "
          f"{base.replace(attack='tsa').num_attackers} attackers); "
          + ("all run again (--force)" if args.force else "finished runs are skipped"))
    failures = run_sweep(configs, jobs=max(args.jobs, 1), progress=not args.no_progress, restart=args.restart,
                         cluster=cluster_of(args), force=args.force)
    say_replaced(out, REPORT_TABLES)
    print(report([run_dir_for(c) for c in configs], out, args.title))
    print(files.format(out=out))
    return 1 if failures else 0


def add_case_study_options(p: argparse.ArgumentParser, taus: str, report: str) -> None:
    """The options of a case-study command (fedcal lm, fedcal detect)."""
    add_run_options(p)
    p.add_argument("--taus", default=taus, type=taus_type, help="attackers' τ (1 = the benign run)")
    p.add_argument("--seeds", default="0", type=seeds_type, help="seeds, e.g. 0-2")
    p.add_argument("--jobs", type=jobs_type, default=0, help="runs in parallel")
    p.add_argument("--title", default="", help="title of the table")
    p.add_argument("--report", default=report, help="folder for the runs, tables and plots")
    add_cluster_options(p)


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("taus", "benign run + TSA at each τ; table and plots", epilog=KEYS_EPILOG)
    add_run_options(p)
    p.add_argument("--taus", default="0.2,0.5,1,2,5", type=taus_type,
                   help="comma-separated τ values (1 = benign run)")
    p.add_argument("--report", default="fedcal-report", help="folder for table.csv/table.md/PNGs")
    p.add_argument("--strategies", default="", type=names_type("strategies", empty=True),
                   help="comma-separated strategies to compare (\"\" = the config's strategy)")
    p.add_argument("--jobs", type=jobs_type, default=0, help="runs in parallel (with engine=inprocess)")
    add_cluster_options(p)
    p.set_defaults(func=cmd_taus)
