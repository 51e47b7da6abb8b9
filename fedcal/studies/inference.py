"""``fedcal inference`` (robust federated inference over (n, f) x seeds; its grid builder
:func:`inference_configs`), ``fedcal inference-collect`` (one setting's clients' probits stored) and
``fedcal inference-theorem`` (the averaging aggregators' error analysis)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from fedcal.config import ConfigError, RunConfig
from fedcal.studies.common import (KEYS_EPILOG, add_cluster_options, add_run_options, check_run_dirs, cluster_of,
                                   config_overrides, parse_ints, refuse_unread_keys, run_dirs_of, seeds_type)


def _parse_nf(items: list[str]) -> list[tuple[int, int]]:
    out = []
    for text in items:
        n, sep, f = text.partition(":")
        if not sep or not n.strip().isdigit() or not f.strip().isdigit():
            raise ConfigError(f"--nf takes n:f such as 17:4, got {text!r}")
        out.append((int(n), int(f)))
    return out


def cmd_inference(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from fedcal.reports import inference_report
    from fedcal.results import run_dir_for
    from fedcal.app.engine import simulate

    overrides = config_overrides(args)
    base = RunConfig.from_flower({"task": "inference", **overrides})
    configs = inference_configs(base, _parse_nf(args.nf or ["17:4"]), parse_ints(args.seeds, "--seeds"))
    refuse_unread_keys(overrides, configs)
    check_run_dirs(configs)
    if cluster_of(args):  # every cell on the cluster first; the loop below then skips the finished ones
        from fedcal.app.sweep import run_sweep

        run_sweep(configs, progress=not args.no_progress, restart=args.restart, cluster=cluster_of(args),
                  force=args.force)
        args.force = False  # forced once, on the cluster
    failed = []
    for cfg in tqdm(configs, desc="inference cells", unit="cell", disable=args.no_progress):
        try:
            simulate(cfg, progress=not args.no_progress, verbose=args.verbose,
                     force=args.force and not cluster_of(args), restart=args.restart)  # the cluster re-ran them
        except Exception as exc:  # noqa: BLE001 — one failed cell must not lose the others
            failed.append(cfg)
            print(f"fedcal: cell n={cfg.num_clients} f={cfg.inf_f} seed={cfg.seed} failed: {exc}", file=sys.stderr)
    done = [run_dir_for(c) for c in configs if c not in failed]
    if done:
        print(inference_report(done, args.report))
        print(f"report: {args.report}")
    return 1 if failed else 0


def cmd_inference_theorem(args: argparse.Namespace) -> int:
    from fedcal.reports.inference_theory import theorem_report

    if args.queries < 0:
        raise ConfigError(f"--queries must be >= 0, got {args.queries}")
    print(theorem_report(run_dirs_of(args.run_dirs), args.out, queries=args.queries))
    print(f"report: {args.out}")
    return 0


def cmd_inference_collect(args: argparse.Namespace) -> int:
    from fedcal.data import load_dataset
    from fedcal.inference.collect import collect_clients, default_collection_path, load_collection
    from fedcal.tasks.inference import collection_spec
    from fedcal.local_training import resolve_device
    from fedcal.models import build_model

    overrides = config_overrides(args)
    if "clients-per-round" not in overrides and "num-clients" in overrides:  # a round size no collection reads
        overrides["clients-per-round"] = min(RunConfig().clients_per_round, int(overrides["num-clients"]))
    if "inf-f" not in overrides and "num-clients" in overrides:  # nor an f
        overrides["inf-f"] = min(RunConfig().inf_f, (int(overrides["num-clients"]) - 1) // 2)
    cfg = RunConfig.from_flower({"task": "inference", **overrides})
    if cfg.inf_client_output != "probits":
        raise ConfigError("run-config key 'inf-client-output': a collection stores the clients' probits; "
                          f"got {cfg.inf_client_output!r}")
    spec = collection_spec(cfg)
    path = args.probits or default_collection_path(spec)
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    try:  # a model the data cannot feed fails here, in one line, before any client trains
        build_model(cfg.model, ds.input_shape, ds.num_classes)
    except ValueError as exc:
        raise ConfigError(f"run-config key 'model': {exc} (dataset {cfg.dataset})") from None

    def done(cid: int, seconds: float) -> None:
        print(f"client {cid + 1}/{cfg.num_clients}: {seconds:.0f} s", flush=True)

    print(f"probits: {collect_clients(spec, ds, path, device=resolve_device(cfg.device), on_client=done)}")
    data, _ = load_collection(path)
    own = (data.test_probits.argmax(-1) == data.test_labels[:, None]).float().mean(0) * 100
    mean = float((data.test_probits.mean(1).argmax(-1) == data.test_labels).float().mean()) * 100
    print(f"clean test accuracy on {len(data.test_labels)} queries: clients {own.mean():.2f} "
          f"[{own.min():.2f}, {own.max():.2f}], the plain mean of their probits {mean:.2f}")
    return 0


def inference_configs(base: RunConfig, nf: Sequence[tuple[int, int]], seeds: Sequence[int]) -> list[RunConfig]:
    """One robust-federated-inference config per (n, f) and seed."""
    return [base.replace(task="inference", num_clients=n, clients_per_round=min(base.clients_per_round, n),
                         inf_f=f, seed=s) for n, f in nf for s in seeds]


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("inference", "robust federated inference: aggregators × probit attacks over seeds",
            description="Every (n, f) and seed is one Flower run (task = inference): clients train their own "
                        "classifiers, the server trains its DeepSet on held-out probits and evaluates every "
                        "aggregator under every attack. Finished runs are skipped.", epilog=KEYS_EPILOG)
    add_run_options(p)
    p.add_argument("--nf", action="append", help="clients:adversaries, e.g. 17:4 (repeatable; default 17:4)")
    p.add_argument("--seeds", default="0", type=seeds_type, help="seeds, e.g. 0-4 or 0,2")
    p.add_argument("--report", default="fedcal-inference", help="folder for the tables and plots")
    add_cluster_options(p)
    p.set_defaults(func=cmd_inference)

    p = add("inference-collect", "train one setting's inference clients and store their probits (resumable)",
            description="Trains the num-clients clients of one inference config (seed, dirichlet-alpha, model, "
                        "training keys) exactly as an inference run trains them and stores each client's probits "
                        "on the server's split and on the test queries as float16 in one compressed .npz with a "
                        "manifest (config, collection hash, data hash); re-running resumes at the first client "
                        "not stored. fedcal.inference.collect.load_collection reads it (docs/inference.md).",
            epilog=KEYS_EPILOG)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="run-config overrides (task = inference)")
    p.add_argument("-c", "--run-config", action="append", metavar="FILE.toml|STRING",
                   help="overrides from a flat TOML file or one string; repeatable")
    p.add_argument("--probits", metavar="FILE.npz",
                   help="the .npz (default fedcal-probits/<dataset>-<model>-n<n>-a<alpha>-s<seed>-<hash>.npz)")
    p.set_defaults(func=cmd_inference_collect)

    p = add("inference-theorem", "the averaging aggregators' error vs honest dissimilarity and top-2 margin",
            description="From finished inference runs' saved probits: per test query the mean's, medians' and "
                        "trimmed mean's aggregation error, the honest answers' dissimilarity and the honest mean's "
                        "top-2 margin, with no attack and under SIA white-box (the robust-inference literature's "
                        "Theorem 1; docs/inference-results.md).")
    p.add_argument("run_dirs", nargs="+", help="finished inference runs")
    p.add_argument("--queries", type=int, default=0, help="the first k test queries (0 = all)")
    p.add_argument("--out", default="fedcal-report", help="folder for theorem_*.csv and theorem.png")
    p.set_defaults(func=cmd_inference_theorem)
