"""``fedcal defense``: defenses against the TSA over strategies x τ x seeds; its grid builder
:func:`defense_configs`."""

from __future__ import annotations

import argparse
from pathlib import Path
import itertools
from typing import Any, Sequence

from fedcal.config import RunConfig
from fedcal.studies.common import (KEYS_EPILOG, add_cluster_options, add_run_options, check_run_dirs, cluster_of,
                                   config_overrides, jobs_type, names_type, parse_ints, parse_names, parse_taus,
                                   refuse_unread_keys, say_replaced, seeds_type, taus_type)


def cmd_defense(args: argparse.Namespace) -> int:
    from fedcal.app.sweep import SweepGrid, run_sweep
    from fedcal.reports.defense import defense_report
    from fedcal.results import run_dir_for

    overrides = config_overrides(args)
    out = Path(args.report)
    overrides.setdefault("output-dir", str(out / "runs"))
    overrides.setdefault("engine", "inprocess")  # small models: Ray's start-up would dominate every cell
    base = RunConfig.from_flower(overrides)
    grid = SweepGrid()
    for axis in args.grid or []:
        grid.add_axis(axis)
    configs = defense_configs(base, parse_names(args.strategies), parse_taus(args.taus), parse_ints(args.seeds, "--seeds"),
                              grid.axes)
    refuse_unread_keys({**overrides, **grid.axes}, configs)
    check_run_dirs(configs)
    print(f"defense: {len(configs)} runs; "
          + ("all run again (--force)" if args.force else "finished runs are skipped"))
    failures = run_sweep(configs, jobs=max(args.jobs, 1), progress=not args.no_progress, restart=args.restart,
                         cluster=cluster_of(args), force=args.force)
    say_replaced(out, ["table.md", "table.csv", "runs.csv"])
    print(defense_report([run_dir_for(c) for c in configs], out, args.title, posthoc=not args.no_posthoc))
    audits = sorted(p.name for p in out.glob("audit-tau*.png"))
    print(f"tables: {out / 'table.md'}, {out / 'table.csv'}, {out / 'runs.csv'}\nplots: {out / 'defense.png'}"
          + "".join(f", {out / a}" for a in audits))
    return 1 if failures else 0


def defense_configs(base: RunConfig, strategies: Sequence[str], taus: Sequence[float], seeds: Sequence[int],
                    axes: dict[str, list[Any]] | None = None) -> list[RunConfig]:
    """Every cell of ``fedcal defense``: strategies × τ × seeds × the product of ``axes``
    (run-config key → values). τ = 1 is the benign run (``attack = none``; the attack-only keys at
    their defaults, so one benign run serves every attacker ratio and adaptive setting), and the
    benign FedAvg run of every setting is added as the reference of the Δ columns. Validated up
    front; duplicates dropped."""
    from fedcal.reports.defense import GUARD, REFERENCE
    from fedcal.results import config_hash

    axes = axes or {}
    out: dict[str, RunConfig] = {}
    defaults = RunConfig()
    for values in itertools.product(*axes.values()) if axes else [()]:
        cell = base.replace(**dict(zip(axes, values)))
        for seed in seeds:
            for strategy in [*strategies, REFERENCE]:
                # CalGuard's keys only matter to CalGuard: other strategies' cells keep the defaults, so a
                # κ grid does not re-run the same FedAvg cell once per κ
                own = cell if strategy == "calguard" else cell.replace(**{k: getattr(defaults, k) for k in GUARD})
                for tau in [*taus, 1.0] if strategy == REFERENCE else taus:
                    if tau == 1.0:
                        c = own.replace(strategy=strategy, seed=seed, attack="none", tau=1.0,
                                        attacker_ratio=defaults.attacker_ratio, tsa_step_frac=1.0, tsa_blend=1.0,
                                        tsa_duty=1.0)
                    else:
                        c = own.replace(strategy=strategy, seed=seed, attack="tsa", tau=tau)
                    out.setdefault(config_hash(c), c)
    return list(out.values())


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("defense", "defenses against TSA: accuracy, ECE, sECE, detection and false-positive rates over seeds",
            description="Every strategy × τ × seed (× each --grid axis) is one Flower run (task = train; τ = 1 is "
                        "the benign run, and the benign FedAvg run of every setting is always added as the "
                        "reference). The table adds FedAvg's final model temperature-scaled on the server's root "
                        "set and, with fed-eval-clients > 0, by the federated temperature of its clients' held-out "
                        "data. Finished runs are skipped.", epilog=KEYS_EPILOG)
    add_run_options(p)
    p.add_argument("--strategies", default="fedavg,fltrust,foolsgold,multikrum,calguard", type=names_type("strategies"),
                   help="strategies compared")
    p.add_argument("--taus", default="0.2,0.5,1,2,5", type=taus_type, help="attackers' τ (1 = the benign run)")
    p.add_argument("--seeds", default="0-2", type=seeds_type, help="seeds, e.g. 0-2")
    p.add_argument("--grid", action="append", help="another axis, key=v1,v2 (repeatable), e.g. attacker-ratio=0.1,0.4, "
                                                   "dirichlet-alpha=0.1, tsa-blend=0.25,0.5, tsa-step-frac=0.2,0.6")
    p.add_argument("--no-posthoc", action="store_true", help="leave out the post-hoc temperature-scaling rows")
    p.add_argument("--jobs", type=jobs_type, default=0, help="runs in parallel")
    p.add_argument("--title", default="", help="title of the table")
    p.add_argument("--report", default="fedcal-defense", help="folder for the runs, tables and plots")
    add_cluster_options(p)
    p.set_defaults(func=cmd_defense)
