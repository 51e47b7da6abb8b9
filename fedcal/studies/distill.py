"""``fedcal distill``: RFD-LoRA and the LoRA baselines over methods x ρ x partitions x seeds
(+ ablations); its grid builder :func:`distill_configs` and the replay plan."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from fedcal.config import RunConfig
from fedcal.studies.common import (KEYS_EPILOG, add_cluster_options, add_run_options, check_run_dirs, cluster_of,
                                   config_overrides, groups_type, jobs_type, names_type, parse_ints, parse_names,
                                   ratios_type, refuse_unread_keys, seeds_type)


# RFD-LoRA's switch settings of the ablation: full, each one off, each one alone, none.
ABLATION_SWITCHES = [(True, True, True), (False, True, True), (True, False, True), (True, True, False),
                     (True, False, False), (False, True, False), (False, False, True), (False, False, False)]


#: the keys of the grid's server axes: ``aggregators``, ``groups`` and :data:`ABLATION_SWITCHES`
SERVER_AXES = ("dst_aggregator", "dst_groups", "dst_cat", "dst_mmd", "dst_dis")


def distill_configs(base: RunConfig, methods: Sequence[str], rhos: Sequence[float], partitions: Sequence[str],
                    seeds: Sequence[int], aggregators: Sequence[str] = (), groups: Sequence[int] = (),
                    ablation: bool = False) -> list[RunConfig]:
    """The cells of ``fedcal distill``: methods × ρ × partitions × seeds; RFD-LoRA's cells also
    over ``aggregators`` and M ``groups`` (empty: the base config's) and, with ``ablation``, every
    switch setting of :data:`ABLATION_SWITCHES`. Every cell is validated here (one line naming the
    key), before anything runs; duplicates are dropped."""
    out: dict[str, RunConfig] = {}
    from fedcal import catalogue
    from fedcal.results import config_hash

    known = catalogue.components("lora-method")
    for method in methods:
        # the server axes (aggregator, M, the ablation switches) are a method's own keys (RFD-LoRA's); an
        # unknown method is refused by its cell's validation, naming dst-method
        server_axes = method in known and set(SERVER_AXES) <= set(known[method].keys)
        for rho in rhos:
            for partition in partitions:
                for seed in seeds:
                    cell = base.replace(dst_method=method, dst_backdoor_ratio=rho, dst_partition=partition, seed=seed)
                    if not server_axes:
                        out.setdefault(config_hash(cell), cell)
                        continue
                    for agg in aggregators or [base.dst_aggregator]:
                        for m in groups or [base.dst_groups]:
                            for cat, mmd, dis in ABLATION_SWITCHES if ablation else [(base.dst_cat, base.dst_mmd,
                                                                                       base.dst_dis)]:
                                c = cell.replace(dst_aggregator=agg, dst_groups=m, dst_cat=cat, dst_mmd=mmd, dst_dis=dis)
                                out.setdefault(config_hash(c), c)
    return list(out.values())


def _replay_plan(configs: Sequence[RunConfig], base: RunConfig,
                 sources: Sequence[str] = ()) -> tuple[list[RunConfig], list[RunConfig]]:
    """(cells to run, RFD-LoRA cells to replay): per client side (:func:`fedcal.distill.replay.client_side`)
    one RFD-LoRA cell runs — the one with the base config's server setting if present — and the
    others replay its uploads; a client side of which ``sources`` (client-side hashes of finished
    runs with recorded uploads) already has a run is replayed whole: no client trains again."""
    from fedcal.distill.methods import lora_method
    from fedcal.distill.replay import SERVER_KEYS, client_side
    from fedcal.results import config_hash

    live, replayed, groups = [], [], {}
    for c in configs:
        if lora_method(c.dst_method).uploads_logits:  # its recorded uploads are what a replay's server reads
            groups.setdefault(config_hash(client_side(c)), []).append(c)
        else:
            live.append(c)
    for key, cells in groups.items():
        if key in sources:
            replayed += cells
            continue
        first = next((c for c in cells if all(getattr(c, k) == getattr(base, k) for k in SERVER_KEYS)), cells[0])
        live.append(first)
        replayed += [c for c in cells if c is not first]
    return live, replayed


def _replay_all(configs: Sequence[RunConfig], sources: Sequence[Path], force: bool = False) -> dict[str, str]:
    """Replay each unfinished cell (each cell, with ``force``) on the uploads of a finished run
    with its client side (among ``sources`` and its output folder); returns {run dir: reason} of
    the cells without one (each also named in one line)."""
    from fedcal.distill.replay import client_side, replay, source_index
    from fedcal.results import RunStore, config_hash, run_dir_for, warn_reused

    failures = {}
    todo = list(configs) if force else [cfg for cfg in configs if not RunStore(run_dir_for(cfg), cfg).is_done()]
    warn_reused([run_dir_for(cfg) for cfg in configs if cfg not in todo])
    folders = sorted({Path(cfg.output_dir) for cfg in todo})
    pool = [*map(Path, sources), *(p for folder in folders for p in sorted(folder.glob("*")))]
    index = source_index(dict.fromkeys(pool))  # each directory read once, in this order
    for cfg in todo:
        target = run_dir_for(cfg)
        source = index.get(config_hash(client_side(cfg)))
        if source is None:
            reason = "no finished RFD-LoRA run with recorded uploads and the same client side to replay"
            print(f"fedcal: error: {target.name}: {reason}", file=sys.stderr)
            failures[str(target)] = reason
            continue
        replay(source, cfg)
    return failures


def cmd_distill(args: argparse.Namespace) -> int:
    from fedcal.app.sweep import run_sweep
    from fedcal.reports.distill import distill_report
    from fedcal.results import run_dir_for

    overrides = config_overrides(args)
    out = Path(args.report)
    overrides.setdefault("output-dir", str(out / "runs"))
    overrides.setdefault("engine", "inprocess")  # small models: Ray's start-up would dominate every cell
    base = RunConfig.from_flower({**overrides, "task": "distill"})
    configs = distill_configs(base, parse_names(args.methods), list(args.rhos), parse_names(args.partitions),
                              parse_ints(args.seeds, "--seeds"), parse_names(args.aggregators),
                              list(args.groups), args.ablation)
    refuse_unread_keys(overrides, configs)
    check_run_dirs(configs)
    if args.replay:
        from fedcal.distill.replay import source_index

        folder = Path(base.output_dir)
        finished = source_index(sorted(folder.glob("*"))) if folder.is_dir() else {}
        live, replayed = _replay_plan(configs, base, finished)
    else:
        live, replayed = configs, []
    print(f"distill: {len(configs)} runs ({len(replayed)} replayed on recorded uploads); "
          + ("all run again (--force)" if args.force else "finished runs are skipped"))
    failures = run_sweep(live, jobs=max(args.jobs, 1), progress=not args.no_progress, restart=args.restart,
                         cluster=cluster_of(args), force=args.force)
    failures.update(_replay_all(replayed, [run_dir_for(c) for c in live], force=args.force))
    print(distill_report([run_dir_for(c) for c in configs], out, args.title))
    print(f"tables: {out / 'table.md'}, {out / 'ablation.md'}, {out / 'communication.md'}\nplot: {out / 'curves.png'}")
    return 1 if failures else 0


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("distill", "RFD-LoRA and the LoRA baselines over methods × ρ × partitions × seeds (+ ablations)",
            description="Every cell is one Flower run (task = distill, engine = inprocess unless given): clients "
                        "fine-tune LoRA adapters on a frozen text classifier; RFD-LoRA distils their anchor logits "
                        "into the server's student, the baselines federate the adapters. Resumable: finished runs "
                        "are skipped. Writes table.md (CA/RA/ASR), ablation.md, communication.md and curves.png.",
            epilog=KEYS_EPILOG)
    add_run_options(p)
    p.add_argument("--methods", default="rfd,fedit,ffa,flora,flexlora", type=names_type("methods"),
                   help="dst-method values")
    p.add_argument("--rhos", default="0,0.1,0.3", type=ratios_type, help="backdoor client ratios (dst-backdoor-ratio)")
    p.add_argument("--partitions", default="iid,skew", type=names_type("partitions"), help="dst-partition values")
    p.add_argument("--seeds", default="0", type=seeds_type, help="seeds, e.g. 0-2")
    p.add_argument("--aggregators", default="", type=names_type("aggregators", empty=True),
                   help="RFD-LoRA's consensus rules, e.g. mean,median,mom (\"\" = the "
                                                     "config's)")
    p.add_argument("--groups", default="", type=groups_type,
                   help="RFD-LoRA's M values, e.g. 1,3,5,10 (\"\" = the config's)")
    p.add_argument("--ablation", action="store_true", help="RFD-LoRA with every CAT / MMD-KD / DIS setting")
    p.add_argument("--replay", action="store_true", help="run each RFD-LoRA client side once and replay the other "
                                                         "server settings (switches, aggregator, M) on its recorded "
                                                         "uploads instead of re-training the clients")
    p.add_argument("--jobs", type=jobs_type, default=0, help="runs in parallel")
    p.add_argument("--title", default="", help="title of the main table")
    p.add_argument("--report", default="fedcal-distill", help="folder for the runs, tables and plot")
    add_cluster_options(p)
    p.set_defaults(func=cmd_distill)
