"""``fedcal byzantine``: every strategy against every attack of Byzantine-robust FL (accuracy, sECE,
ASR, worst case) over attacker ratios and seeds.

A *strategy spec* is a strategy name, optionally preceded by pre-aggregation steps joined with
``+`` and followed by ``:switch`` options: ``nnm+trimmed_mean`` is ``strategy = trimmed_mean`` with
``pre-aggregation = nnm``; ``calguard:cusum`` is ``strategy = calguard`` with ``calguard-cusum = true``. The
robust rules' assumed number of Byzantine replies per round (``krum-f``, ``trim-f``, ``pre-f``) is
set per attacker ratio to f = ⌈ratio · M⌉ (M = ``clients-per-round``,
:func:`fedcal.reports.byzantine.assumed_f`), the expected attackers in a round rounded up, so that
each rule is given the f its guarantee needs; the benign runs (attack = none) of a ratio use the
same f, so a column's drop from ``benign`` is the attack's alone. The table is
:func:`fedcal.reports.byzantine.byzantine_report`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedcal.config import ConfigError, RunConfig
from fedcal.studies.common import (KEYS_EPILOG, add_cluster_options, add_run_options, check_run_dirs, cluster_of,
                                   config_overrides, jobs_type, names_type, parse_ints, parse_names, ratios_type,
                                   refuse_unread_keys, say_replaced, seeds_type)


#: the strategies of the strategy × attack table (docs/defense.md), in its order
DEFAULT_STRATEGIES = ("fedavg", "fltrust", "foolsgold", "multikrum", "median", "trimmed_mean", "geometric_median",
                      "median_of_means", "calguard", "calguard:cusum", "nnm+trimmed_mean")
#: the model-poisoning attacks of Byzantine-robust FL and the image backdoor (docs/attacks.md)
DEFAULT_ATTACKS = ("alie", "ipm", "minmax", "minsum", "fang-trmean", "fang-krum", "backdoor")


def parse_spec(spec: str) -> tuple[str, str, dict[str, bool]]:
    """``"nnm+trimmed_mean"`` → (strategy ``trimmed_mean``, pre-aggregation ``nnm``, no switches);
    ``"calguard:cusum"`` → (``calguard``, no pre-aggregation, ``{"calguard_cusum": True}``): a
    ``:name`` after the strategy turns on its boolean key ``<strategy>-<name>``, so a rule's variant
    (CalGuard with its sequential test) is a row of its own."""
    from fedcal.config import field_names, setting_of

    parts = [p.strip() for p in spec.split("+") if p.strip()]
    if not parts:
        raise ConfigError(f"--strategies: empty strategy spec {spec!r}")
    strategy, *flags = [t.strip() for t in parts[-1].split(":")]
    switches = {}
    for flag in flags:
        name = f"{strategy}_{flag.replace('-', '_')}"
        if not flag or name not in field_names() or not isinstance(setting_of(name).default, bool):
            raise ConfigError(f"--strategies: {spec!r}: {flag!r} names no boolean key "
                              f"'{strategy}-{flag}' of the strategy")
        switches[name] = True
    return strategy, ",".join(parts[:-1]), switches


def byzantine_cells(base: RunConfig, strategies: Sequence[str], attacks: Sequence[str], ratios: Sequence[float],
                    seeds: Sequence[int]) -> list[tuple[float, RunConfig]]:
    """Every cell as (attacker ratio, config): strategy spec × (benign + each attack) × ratio ×
    seed, validated up front (a bad spec or a rule whose f does not fit M fails here, naming the
    key). Only the keys a cell's computation reads are set: the f of the rule that takes one
    (``krum-f``, ``trim-f``, ``pre-f`` for nnm / arc), and the attacker ratio of attacked cells, so
    the benign run of a strategy without an f serves both ratios (one config, two cells)."""
    from fedcal.reports.byzantine import assumed_f  # the f the table shows for a ratio

    defaults = RunConfig()
    cells = []
    for ratio in ratios:
        f = assumed_f(ratio, base.clients_per_round)
        for spec in strategies:
            strategy, pre, switches = parse_spec(spec)
            own = {"pre_aggregation": pre, **switches}
            if strategy == "multikrum":
                own["krum_f"] = f
            if strategy == "trimmed_mean":
                own["trim_f"] = f
            if {"nnm", "arc"} & set(pre.split(",")):
                own["pre_f"] = f
            for seed in seeds:
                for attack in ["none", *attacks]:
                    c = base.replace(strategy=strategy, seed=seed, attack=attack, **own,
                                     attacker_ratio=ratio if attack != "none" else defaults.attacker_ratio)
                    cells.append((ratio, c))
    return cells


def byzantine_configs(cells: Sequence[tuple[float, RunConfig]]) -> list[RunConfig]:
    """The distinct configs of ``cells`` (:func:`byzantine_cells`), in order."""
    from fedcal.results import config_hash

    out: dict[str, RunConfig] = {}
    for _, c in cells:
        out.setdefault(config_hash(c), c)
    return list(out.values())


def cmd_byzantine(args: argparse.Namespace) -> int:
    from fedcal.app.sweep import run_sweep
    from fedcal.reports.byzantine import byzantine_report

    overrides = config_overrides(args)
    out = Path(args.report)
    overrides.setdefault("output-dir", str(out / "runs"))
    overrides.setdefault("engine", "inprocess")
    base = RunConfig.from_flower(overrides)
    cells = byzantine_cells(base, parse_names(args.strategies), parse_names(args.attacks),
                            list(args.ratios), parse_ints(args.seeds, "--seeds"))
    configs = byzantine_configs(cells)
    refuse_unread_keys(overrides, configs)
    check_run_dirs(configs)
    if args.table_only:  # the table of what has finished, e.g. while another process runs the rest
        failures = []
        print(f"byzantine: {len(configs)} runs; none started (--table-only)")
    else:
        print(f"byzantine: {len(configs)} runs; "
              + ("all run again (--force)" if args.force else "finished runs are skipped"))
        failures = run_sweep(configs, jobs=max(args.jobs, 1), progress=not args.no_progress, restart=args.restart,
                             cluster=cluster_of(args), force=args.force)
    say_replaced(out, ["table.md", "table.csv", "runs.csv"])
    print(byzantine_report(cells, out, args.title))
    print(f"tables: {out / 'table.md'}, {out / 'table.csv'}, {out / 'runs.csv'}")
    return 1 if failures else 0


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("byzantine", "every strategy against every attack of Byzantine-robust FL: accuracy, sECE, ASR, worst case",
            description="Every strategy spec × (benign + each attack) × attacker ratio × seed is one Flower run "
                        "(task = train, engine = inprocess unless given). A spec nnm+trimmed_mean is trimmed_mean "
                        "with pre-aggregation = nnm; krum-f, trim-f and pre-f are set to ceil(ratio * "
                        "clients-per-round). Finished runs are skipped (docs/defense.md).", epilog=KEYS_EPILOG)
    add_run_options(p)
    p.add_argument("--strategies", default=", ".join(DEFAULT_STRATEGIES), type=names_type("strategy specs"),
                   help="strategy specs compared")
    p.add_argument("--attacks", default=", ".join(DEFAULT_ATTACKS), type=names_type("attacks", empty=True),
                   help="attacks (the benign run is always added)")
    p.add_argument("--ratios", default="0.1,0.25", type=ratios_type, help="attacker ratios")
    p.add_argument("--seeds", default="0-2", type=seeds_type, help="seeds, e.g. 0-2")
    p.add_argument("--jobs", type=jobs_type, default=0, help="runs in parallel")
    p.add_argument("--title", default="", help="title of the table")
    p.add_argument("--report", default="fedcal-byzantine", help="folder for the runs and tables")
    p.add_argument("--table-only", action="store_true",
                   help="start no run: the table of the runs that have finished (the others are left blank)")
    add_cluster_options(p)
    p.set_defaults(func=cmd_byzantine)
