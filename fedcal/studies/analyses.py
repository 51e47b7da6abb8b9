"""The analyses of finished runs: ``fedcal posthoc``, ``triage``, ``similarity`` and ``stealth``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fedcal.config import ConfigError
from fedcal.studies.common import (count_type, image_classifier_runs, n_cals_type, names_type, parse_names, run_dirs_of,
                                   write_table_and_plot)


def _number(value: Any) -> str:
    """A printed table's cell: a float with at most 4 decimals (449.5, 0.8651, 450), else as it is."""
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".") if value == value else "nan"
    return str(value)


def cmd_posthoc(args: argparse.Namespace) -> int:
    from fedcal.calibrate import CALIBRATORS
    from fedcal.data import load_dataset
    from fedcal.reports import posthoc_curves, posthoc_table
    from fedcal.reports.markdown import SECE_SIGN, markdown_table

    methods = parse_names(args.methods)
    unknown = [m for m in methods if m not in CALIBRATORS]
    if not methods or unknown:
        raise ConfigError(f"--methods: unknown calibrator {(unknown or [''])[0]!r} in {','.join(methods)!r}; "
                          f"choose from {', '.join(CALIBRATORS)}")
    dirs = run_dirs_of(args.run_dirs, readable=True)
    configs = image_classifier_runs(dirs, "fedcal posthoc calibrates")
    for d, cfg in configs.items() if args.n_cal is not None else ():
        n = len(load_dataset(cfg.dataset, cfg.data_dir).y_test)  # cached: the table reads it again
        if max(args.n_cal) >= n:
            raise ConfigError(f"--n-cal {max(args.n_cal)}: {d} has {n} test samples; each calibration-set size "
                              f"must be below that (the calibrators are scored on the rest)")
    table = posthoc_table(dirs, n_cals=args.n_cal, seed=args.seed, methods=methods)
    index = ["config", "run", "n_cal"] if "config" in table.columns else ["run", "n_cal"]
    summary = table.pivot_table(index=index, columns="method", values="sece").mul(100)
    summary.columns.name = None
    seeds = table["seed"].nunique()
    print(markdown_table(summary.reset_index(), "sECE (%) after post-hoc calibration"
                                                f"{f', mean over {seeds} seeds' if seeds > 1 else ''}",
                         {m: "{:+.2f}" for m in summary.columns}, default=_number) + SECE_SIGN)
    if table["chance_level"].any():
        print("at chance level (accuracy within noise of a constant predictor): "
              + ", ".join(sorted(set(table.loc[table["chance_level"], "run_dir"]))))
    write_table_and_plot(table, Path(args.out), "posthoc", posthoc_curves)
    return 0


def cmd_triage(args: argparse.Namespace) -> int:
    from fedcal.reports import triage_plot, triage_table
    from fedcal.reports.markdown import markdown_table

    attacked, benign = run_dirs_of(args.run_dirs, readable=True), run_dirs_of(args.benign, readable=True)
    image_classifier_runs([*attacked, *benign], "fedcal triage reads")
    table = triage_table(attacked, benign)
    at = table[(table["gamma"] - 0.9).abs() < 1e-9]
    at = at.groupby("run", sort=False)[["sent", "unnecessary", "missed", "unnecessary_change", "missed_change"]].mean()
    seeds = table["seed"].nunique()
    print(markdown_table(at.reset_index(), f"at γ = 0.9{f', mean over {seeds} seeds' if seeds > 1 else ''}",
                         default=_number))
    write_table_and_plot(table, Path(args.out), "triage", triage_plot)
    return 0


def cmd_similarity(args: argparse.Namespace) -> int:
    from fedcal.reports import similarity_scatter, similarity_table
    from fedcal.reports.markdown import markdown_table

    benign, attacked = run_dirs_of(args.benign, readable=True), run_dirs_of(args.run_dirs, readable=True)
    image_classifier_runs([*benign, *attacked], "fedcal similarity compares")
    table = similarity_table(benign, attacked)
    stats = table.groupby("pair")[["logit_cosine", "cka"]].agg(["mean", "std", "count"])
    stats.columns = [f"{metric} {stat}" for metric, stat in stats.columns]
    print(markdown_table(stats.reset_index(), default=_number))
    write_table_and_plot(table, Path(args.out), "similarity", similarity_scatter)
    return 0


def cmd_stealth(args: argparse.Namespace) -> int:
    import pandas as pd

    from fedcal.reports import stealth_markdown, stealth_plot, stealth_table

    from fedcal.analysis import COMPARED, default_variants
    from fedcal.reports.studies import STEALTH_REFERENCES

    rounds = [None if r == "final" else int(r) if r.isdigit() else r for r in parse_names(args.round)]
    if not rounds or any(isinstance(r, str) for r in rounds):
        raise ConfigError(f"--round takes final, 0 or round numbers, comma-separated; got {args.round!r}")
    for option, given, allowed in (("--reference", args.reference, STEALTH_REFERENCES),
                                   ("--compare", args.compare, COMPARED)):
        if not parse_names(given) or set(parse_names(given)) - set(allowed):
            raise ConfigError(f"{option} takes {', '.join(allowed)}, comma-separated; got {given!r}")
    unknown = [v for v in parse_names(args.variants) if not any(k.startswith(v) for k in default_variants())]
    if unknown:
        raise ConfigError(f"--variants: unknown variant {unknown[0]!r}; choose from {', '.join(default_variants())}")
    if args.others < 1 or args.steps < 1:
        raise ConfigError(f"--others and --steps must be >= 1, got {args.others} and {args.steps}")
    dirs = run_dirs_of(args.run_dir, readable=True)
    image_classifier_runs(dirs, "fedcal stealth trains from")
    try:
        table = pd.concat([stealth_table(d, client_id=args.client, steps=args.steps, start_round=r, reference=ref,
                                         others=args.others, compare=cmp, variants=parse_names(args.variants))
                           for d in dirs for r in rounds for ref in parse_names(args.reference)
                           for cmp in parse_names(args.compare)], ignore_index=True)
    except ValueError as exc:  # a round past the run's, a client it does not have, too few benign clients
        raise ConfigError(str(exc)) from None
    write_table_and_plot(table, Path(args.out), "stealth", stealth_plot)
    md = stealth_markdown(table, f"cosine to the benign reference after local step 1 and {args.steps} (client "
                                 f"{args.client}); mean ± std over runs")
    (Path(args.out) / "stealth.md").write_text(md)
    print(md + f"summary: {Path(args.out) / 'stealth.md'}")
    return 0


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("posthoc", "post-hoc calibrators on finished runs' final models vs n_cal")
    p.add_argument("run_dirs", nargs="+", help="finished run directories (each with model.pt)")
    p.add_argument("--n-cal", type=n_cals_type, default=None,
                   help="calibration-set sizes, each below a run's test-set size (default: those of "
                        "10,50,100,250,500 below it)")
    p.add_argument("--seed", type=count_type(0, "seed"), default=0, help="seed of the held-out calibration split")
    p.add_argument("--methods", default="temperature,platt,isotonic,histogram", type=names_type("calibrators"),
                   help="calibrators (also platt-ovr, isotonic-ovr: one-vs-rest, as scikit-learn's)")
    p.add_argument("--out", default="fedcal-report", help="folder for posthoc.csv and posthoc.png")
    p.set_defaults(func=cmd_posthoc)

    p = add("triage", "unnecessary/missed verifications vs threshold, against the benign run of each seed")
    p.add_argument("run_dirs", nargs="+", help="attacked runs")
    p.add_argument("--benign", required=True, nargs="+", help="the benign run directory, one per seed")
    p.add_argument("--out", default="fedcal-report", help="folder for triage.csv and triage.png")
    p.set_defaults(func=cmd_triage)

    p = add("similarity", "logit cosine and linear CKA against benign models")
    p.add_argument("run_dirs", nargs="+", help="attacked runs")
    p.add_argument("--benign", nargs="+", required=True, help="benign runs (several seeds give the reference)")
    p.add_argument("--out", default="fedcal-report", help="folder for similarity.csv and similarity.png")
    p.set_defaults(func=cmd_similarity)

    p = add("stealth", "update cosine to the benign update after each local step")
    p.add_argument("run_dir", nargs="+", help="runs whose global model is the starting point (one per seed)")
    p.add_argument("--client", type=int, default=0, help="the client whose data the local steps use")
    p.add_argument("--steps", type=int, default=10, help="local SGD steps (a cosine after each)")
    p.add_argument("--round", default="final", help="start from the global model after these rounds: final, 0 (the "
                                                    "initial model) or a round (recomputed), comma-separated")
    p.add_argument("--reference", default="same", help="benign reference, comma-separated: same (the client's own "
                                                      "benign update, same batches) or others (the mean benign "
                                                      "update of --others other clients)")
    p.add_argument("--others", type=int, default=4, help="clients averaged by --reference others")
    p.add_argument("--compare", default="update", help="update (the updates) or weights (the local models' weights), "
                                                      "comma-separated")
    p.add_argument("--variants", default="", help="variants to measure besides benign, names or prefixes (\"\" = all)")
    p.add_argument("--out", default="fedcal-report", help="folder for stealth.csv, stealth.md and stealth.png")
    p.set_defaults(func=cmd_stealth)
