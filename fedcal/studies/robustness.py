"""``fedcal robustness``: temperature-trained models under PGD, CW and corruptions; its grid
builder :func:`temperature_configs`. It evaluates image classifiers: runs of the train task."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

from fedcal.config import ConfigError, RunConfig
from fedcal.studies.common import (KEYS_EPILOG, add_cluster_options, add_run_options, check_run_dirs, cluster_of,
                                   config_overrides, count_type, image_classifier_runs, jobs_type, names_type,
                                   parse_ints, parse_taus, refuse_unread_keys, run_dirs_of, seeds_type, taus_type)


#: the option of each of fedcal.robustness.spec_for's refusals, by the start of its message
_OPTION_OF = (("attack epsilon", "--eps"), ("no default epsilon", "--eps"), ("attack step size", "--step"),
              ("attack steps", "--steps"), ("unknown attack", "--attacks"), ("attack 'pgd_targeted'", "--attacks"),
              ("unknown corruption", "--corruptions"), ("corruption severity", "--severity"), ("n_test", "--n-test"))


def _robustness_spec(args: argparse.Namespace, dataset: str):
    from fedcal.robustness import DEFAULT_CORRUPTIONS, spec_for

    names = lambda text: tuple(t.strip() for t in text.split(",") if t.strip())  # noqa: E731
    corruptions = DEFAULT_CORRUPTIONS if args.corruptions.strip() == "default" else names(args.corruptions)
    try:
        return spec_for(dataset, eps=args.eps, step=args.step or 0.0, steps=args.steps, n_test=args.n_test,
                        attacks=names(args.attacks), corruptions=corruptions, severity=args.severity,
                        seed=args.attack_seed)
    except ValueError as exc:  # unknown attack or corruption, ε <= 0, steps < 1, ...: named by its option
        option = next((o for start, o in _OPTION_OF if str(exc).startswith(start)), "")
        raise ConfigError(f"{option}: {exc}" if option else str(exc)) from None


def cmd_robustness(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from fedcal.reports.robustness import robustness_report
    from fedcal.results import MODEL_FILE, is_finished, run_dir_for

    out = Path(args.report)
    if args.runs:  # the bridge: evaluate finished runs as they are, no training
        dirs = run_dirs_of(args.runs)
        configs = image_classifier_runs(dirs, "--runs evaluates")
        datasets = sorted({c.dataset for c in configs.values()})
        if len(datasets) > 1:
            raise ConfigError(f"the runs use different datasets ({', '.join(datasets)}): evaluate each on its own")
        if config_overrides(args):
            raise ConfigError("--runs evaluates finished runs as they are: run-config overrides do not apply")
        modelless = [str(d) for d in dirs if is_finished(d) and not (d / MODEL_FILE).exists()]
        if modelless:
            raise ConfigError(f"finished run without a final model ({MODEL_FILE}; a run from before models were "
                              f"saved?): {', '.join(modelless)}")
        spec = _robustness_spec(args, datasets[0])
        failures = 0
    else:
        overrides = config_overrides(args)
        overrides.setdefault("output-dir", str(out / "runs"))
        base = RunConfig.from_flower(overrides)
        settings, couplings = list(args.settings), list(args.coupling)
        try:
            configs = temperature_configs(base, parse_taus(args.taus), parse_ints(args.seeds, "--seeds"), settings,
                                          couplings)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        refuse_unread_keys(overrides, configs)
        check_run_dirs(configs)
        spec = _robustness_spec(args, base.dataset)  # bad attack settings fail before any training
        taus = ",".join(f"{t:g}" for t in args.taus)
        print(f"robustness: {len(configs)} training runs ({', '.join(settings)} × τ {taus} × seeds "
              f"{','.join(map(str, args.seeds))}); finished runs are skipped")
        from fedcal.app.sweep import run_sweep

        failures = len(run_sweep(configs, jobs=max(args.jobs, 1), progress=not args.no_progress,
                                 restart=args.restart, cluster=cluster_of(args), force=args.force))
        dirs = [run_dir_for(c) for c in configs]
    bar = (lambda it: tqdm(it, desc="robustness", unit="model")) if not args.no_progress else None
    text, failed = robustness_report(dirs, out, spec, device=args.device, title=args.title, progress=bar,
                                     force=args.force, jobs=max(args.jobs, 1))
    print(text)
    print(f"tables: {out / 'robustness.csv'}, {out / 'robustness_runs.csv'}\nplot: {out / 'robustness.png'}")
    return 1 if failures or failed else 0


def temperature_configs(base: RunConfig, taus: Sequence[float], seeds: Sequence[int],
                        settings: Sequence[str] | None = None, couplings: Sequence[str] = ("fixed",)) -> list[RunConfig]:
    """The runs of the τ study: per setting, learning-rate coupling, τ and seed, every client
    trains at τ (``settings``: all of :data:`fedcal.reports.robustness.SETTINGS` by default).

    τ = 1 is the plain benign run (``attack = none``: the same training, and the same run as
    any other study's benign run, shared by both couplings). Otherwise ``attack = tsa,
    attacker-ratio = 1``: the TSA client at every client, with η = β (``fixed``, the
    literature's fixed learning rate) or η = β·τ (``coupled``, SPEC §9's form). ``centralised``
    is one client holding the whole training set (IID), taking ``clients-per-round ×
    local-steps`` steps per round, i.e. the federation's total client steps per round.
    """
    from fedcal.reports.robustness import COUPLINGS, SETTINGS
    from fedcal.results import config_hash

    settings = SETTINGS if settings is None else settings
    for name, given, known in (("setting", settings, SETTINGS), ("coupling", couplings, COUPLINGS)):
        unknown = [s for s in given if s not in known]
        if unknown:
            raise ValueError(f"unknown {name} {unknown[0]!r}; choose from {', '.join(known)}")
    if "centralised" in settings and base.local_epochs:
        raise ValueError("the centralised setting takes the federation's client steps per round "
                         "(clients-per-round × local-steps); with local-epochs set there is no such count — "
                         "use local-steps, or settings=federated only")
    out: dict[str, RunConfig] = {}
    for setting in settings:
        for coupling in couplings:
            for tau in taus:
                for seed in seeds:
                    changes: dict = {"seed": seed}
                    if float(tau) == 1.0:
                        changes.update(attack="none", tau=1.0)
                    else:
                        changes.update(attack="tsa", attacker_ratio=1.0, tau=float(tau),
                                       coupled=coupling == "coupled")
                    if setting == "centralised":
                        changes.update(num_clients=1, clients_per_round=1, partition="iid",
                                       local_steps=base.clients_per_round * base.local_steps)
                    cfg = base.replace(**changes)
                    out.setdefault(config_hash(cfg) + setting, cfg)  # the benign runs once, not per coupling
    return list(out.values())


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("robustness", "temperature as a robustness knob: τ-trained models under PGD, CW and corruptions",
            description="Without --runs: train every client at each τ (federated and/or centralised, each seed; "
                        "resumable, finished runs are skipped), then evaluate every final model at τ = 1. With "
                        "--runs: evaluate those finished runs only (e.g. a TSA grid). Evaluations are cached in "
                        "each run directory.", epilog=KEYS_EPILOG)
    add_run_options(p)
    p.add_argument("--taus", default="0.5,1,10,30,50,70,100", type=taus_type,
                   help="training temperatures (1 = the benign run)")
    p.add_argument("--seeds", default="0,1,2", type=seeds_type, help="seeds, e.g. 0-2")
    p.add_argument("--settings", default="federated,centralised", type=names_type("settings"),
                   help="federated (the config's clients) and/or centralised (one client with all the data)")
    p.add_argument("--coupling", default="fixed", type=names_type("couplings"),
                   help="learning rate of τ-trained clients: fixed (η = β, the literature's), coupled (η = β·τ, "
                        "SPEC §9's), or fixed,coupled for both")
    p.add_argument("--runs", nargs="+", help="evaluate these finished run directories instead of training")
    p.add_argument("--jobs", type=jobs_type, default=0, help="training runs and evaluations in parallel (train with "
                                                       "engine=inprocess)")
    p.add_argument("--eps", type=float, default=None, help="L∞ budget in pixel units (default: 8/255 for CIFAR, "
                                                           "0.1 for MNIST and digits)")
    p.add_argument("--step", type=float, default=0.0, help="PGD step size (0 = ε/4)")
    p.add_argument("--steps", type=int, default=20, help="PGD steps")
    p.add_argument("--n-test", type=int, default=1000, help="test images attacked and corrupted (the first n)")
    p.add_argument("--attacks", default="fgsm,pgd,pgd_targeted,cw", help="attacks: fgsm, pgd, pgd_targeted, cw")
    p.add_argument("--corruptions", default="default",
                   help="comma-separated corruptions; default = gaussian_noise, shot_noise, impulse_noise, "
                        "defocus_blur, contrast, brightness, jpeg_compression, pixelate; also speckle_noise, "
                        "gaussian_blur, saturate; \"\" = none")
    p.add_argument("--severity", type=int, default=3, help="corruption severity, 1..5")
    p.add_argument("--attack-seed", type=count_type(0, "attack seed"), default=0,
                   help="seed of PGD's random start, the targets and the noise")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where the attacks run")
    p.add_argument("--title", default="", help="report title")
    p.add_argument("--report", default="fedcal-robustness", help="folder for the tables and the plot")
    add_cluster_options(p)
    p.set_defaults(func=cmd_robustness)
