"""The fedcal command.

  fedcal run  [key=value ...]              one Flower simulation (any run-config key)
  fedcal taus --taus 0.2,1,5 [key=value]   benign run + TSA per tau, table and plots
              [--strategies fedavg,fltrust,foolsgold,multikrum]   ... under each defense
  fedcal sweep grid.toml [--grid k=a,b]    a resumable, parallel grid of runs -> one tidy table
  fedcal report RUN_DIR ... --out DIR      table + plots from finished runs (the run store only)
  fedcal runs DIR ... [--check]            finished / unfinished / failed / running, one line per run
  fedcal posthoc|triage|similarity|stealth RUN_DIR ...   analyses of finished runs
  fedcal inference --nf 17:4 --seeds 0-4   robust federated inference: aggregators x attacks
  fedcal robustness --taus 0.5,1,10 --seeds 0-2   temperature training vs PGD, CW, corruptions
              [--runs RUN_DIR ...]         ... or the robustness of finished runs (e.g. TSA)
  fedcal distill --methods rfd,fedit --rhos 0,0.3 --seeds 0-2   RFD-LoRA vs the LoRA baselines
              [--ablation] [--aggregators mom,median,mean] [--groups 1,3,5,10]   ... and its ablations
  fedcal defense --strategies fedavg,calguard --taus 0.2,1,5 --seeds 0-2   defenses vs TSA, detection rates
              [--grid attacker-ratio=0.1,0.4] [--grid tsa-blend=0.25,0.5]   ... other settings, adaptive attackers
  fedcal demo                              the README's main job (digits, offline)

Overrides are Flower run-config keys with TOML values (tau=5 dataset="cifar10"; bare words
are strings), before or after the options; -c/--run-config "k=v k2=v2" is accepted too, like
flwr run. "fedcal run --help" lists every key with its default and range.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Any, Sequence

from fedcal import __version__
from fedcal.config import ConfigError, RunConfig, describe, groups, parse_override

EXIT_INTERRUPTED = 130  # the shell's code for a command ended by SIGINT (128 + 2)

DEMO_PRESET = {
    "dataset": "digits", "model": "mlp", "num-clients": 10, "clients-per-round": 5,
    "attacker-ratio": 0.3, "num-rounds": 40, "lr": 0.05, "batch-size": 32, "local-steps": 5,
    "dirichlet-alpha": 1.0, "seed": 0,
}


def _overrides(args: argparse.Namespace) -> dict:
    items = list(args.overrides or [])
    for text in args.run_config or []:
        items += shlex.split(text)
    return dict(parse_override(t) for t in items)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written; each argument's help ends with its default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help = action.help or ""
        default = action.default
        if "%(default)" in help or default in (None, argparse.SUPPRESS) or isinstance(default, bool) \
                or action.nargs == 0 or default == []:
            return help
        return help + " (default: %(default)r)" if isinstance(default, str) else help + " (default: %(default)s)"

    def _split_lines(self, text: str, width: int) -> list[str]:
        # never break inside a name such as fedcal-report or num-clients
        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width, break_on_hyphens=False)


class _Parser(argparse.ArgumentParser):
    """A sub-command parser whose positionals (``key=value`` overrides, run directories) may come
    before, between or after its options."""

    _intermixing = False

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None):  # type: ignore[override]
        if self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def run_config_help(width: int = 100) -> str:
    """Every run-config key with its default and range, by group (``fedcal run --help``)."""
    lines = ["run-config keys (key=value; defaults are pyproject.toml's [tool.flwr.app.config]):"]
    for group, what in groups().items():
        lines += ["", f"{group}: {what}"]
        for info in describe(group):
            default = '""' if info.default == "" else str(info.default).lower() if isinstance(info.default, bool) \
                else str(info.default)
            head = f"  {info.key} = {default}  [{info.type}" + (f"; {info.range}" if info.range else "") + "]"
            lines.append(head)
            lines += textwrap.wrap(info.help, width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


KEYS_EPILOG = "run-config keys, their defaults and ranges: fedcal run --help"


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="run-config overrides, TOML values (tau=5 coupled=false); before or after the options")
    p.add_argument("-c", "--run-config", action="append", help='overrides as one string, e.g. "tau=5 seed=1"')
    p.add_argument("--force", action="store_true", help="re-run even if an identical finished run exists")
    p.add_argument("--restart", action="store_true",
                   help="start unfinished runs over from round 0 instead of resuming them from their last checkpoint")
    p.add_argument("--verbose", action="store_true", help="show Flower's and Ray's logs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _parse_taus(text: str) -> list[float]:
    try:
        return [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ConfigError(f"--taus must be comma-separated numbers, got {text!r}") from None


def _check_run_dirs(configs: Sequence[RunConfig]) -> None:
    """Refuse, before anything runs, a run directory that holds a run of another config (a
    ``run-name`` reused): :class:`fedcal.results.RunNameConflict`, printed as one line."""
    from fedcal.results import check_run_dir, run_dir_for

    for cfg in configs:
        check_run_dir(run_dir_for(cfg), cfg)


def _simulate(args: argparse.Namespace):
    from fedcal.app.engine import simulate

    def run(cfg: RunConfig):  # simulate refuses a run-name reused for another config itself
        # the attack label names a training run; other tasks' bars show the run's directory name
        label = ("benign" if cfg.attack == "none" else f"{cfg.attack} τ={cfg.tau:g}") if cfg.task == "train" else ""
        return simulate(cfg, progress=not args.no_progress, verbose=args.verbose, force=args.force, desc=label,
                        restart=args.restart)

    return run


def cmd_run(args: argparse.Namespace) -> int:
    cfg = RunConfig.from_flower(_overrides(args))
    run_dir = _simulate(args)(cfg)
    print(f"run dir: {run_dir}")
    if cfg.task != "train":  # other tasks write their own tables there; `fedcal report` summarises them
        print("files: " + ", ".join(sorted(p.name for p in run_dir.iterdir())))
        return 0
    from fedcal.reports import final_metrics

    last = final_metrics(run_dir).iloc[0]
    print("final round {}: accuracy {:.2f}%  ECE {:.2f}%  sECE {:+.2f}%  Brier {:.4f}  NLL {:.4f}".format(
        int(last["round"]), 100 * last["accuracy"], 100 * last["ece"], 100 * last["sece"],
        last["brier"], last["nll"]))
    return 0


def _tau_report(args: argparse.Namespace, base: RunConfig, taus: list[float], out: Path, title: str,
                strategies: list[str] | None = None) -> int:
    from fedcal.reports import run_tau_comparison, tau_configs

    configs = tau_configs(base, taus, strategies)
    _check_run_dirs(configs)  # every cell, before the first one runs
    if getattr(args, "jobs", 0) > 1:  # run the cells in parallel first; the report then skips them
        from fedcal.app.sweep import run_sweep

        run_sweep(configs, jobs=args.jobs, progress=not args.no_progress, restart=args.restart)
    table = run_tau_comparison(base, taus, out, _simulate(args), title, strategies)
    print()
    print((out / "table.md").read_text())
    pngs = ["defenses.png"] if table["strategy"].nunique() > 1 else ["reliability.png", "trajectories.png"]
    print(f"table: {out / 'table.csv'}\n" + "\n".join(f"plot: {out / p}" for p in pngs))
    return 0


def cmd_taus(args: argparse.Namespace) -> int:
    overrides = _overrides(args)
    out = Path(args.report)
    overrides.setdefault("output-dir", str(out / "runs"))
    base = RunConfig.from_flower(overrides)
    title = f"{base.dataset}–{base.model}, K={base.num_clients}, M={base.clients_per_round}, " \
            f"{base.replace(attack='tsa').num_attackers} attackers, " \
            f"{base.num_rounds} rounds, seed {base.seed}"
    strategies = [s.strip() for s in args.strategies.split(",")] if args.strategies else None
    for s in strategies or []:
        base.replace(strategy=s)  # validates each name (and its parameters) before anything runs
    return _tau_report(args, base, _parse_taus(args.taus), out, title, strategies)


def cmd_demo(args: argparse.Namespace) -> int:
    out = Path(args.output)
    preset = dict(DEMO_PRESET, **{"output-dir": str(out / "runs")})
    if args.rounds:
        preset["num-rounds"] = args.rounds
    preset.update(_overrides(args))
    base = RunConfig.from_flower(preset)
    print(f"fedcal demo: scikit-learn digits, {base.num_clients} clients ({base.num_attackers} attackers), "
          f"{base.clients_per_round} per round, {base.num_rounds} rounds; a benign run and TSA at τ=0.2 and τ=5")
    title = "fedcal demo (digits–MLP): final global model per τ"
    return _tau_report(args, base, [0.2, 1.0, 5.0], out, title)


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
    configs = grid.configs(_overrides(args))
    jobs = args.jobs or 1
    print(f"sweep: {len(configs)} cells over {', '.join(grid.axes) or '(no axis)'}; {jobs} parallel")
    failures = run_sweep(configs, jobs=jobs, progress=not args.no_progress, restart=args.restart)
    cells = write_results(configs, args.report, list(grid.axes))
    shown = [c for c in [*grid.axes, "accuracy", "ece", "sece", "brier", "nll"] if c in cells.columns]
    print(cells[shown].to_string(index=False) if not cells.empty else "(no finished cell)")
    print(f"tables: {args.report}/cells.csv, {args.report}/rounds.csv")
    if args.plot_x and not cells.empty:
        from fedcal.reports import sweep_curves

        hue = args.plot_hue or None
        path = sweep_curves(cells, args.plot_x, Path(args.report) / f"sweep_{args.plot_x}.png", hue)
        print(f"plot: {path}")
    return 1 if failures else 0


def _folder(path: str | Path, option: str) -> Path:
    """``path`` as an output folder: refused in one line naming ``option`` when it, or a folder above
    it, is an existing file (``--out results.csv``), before anything runs or is written."""
    p = Path(path)
    for q in (p, *p.parents):
        if q.exists():
            if not q.is_dir():
                raise ConfigError(f"{option} {str(path)!r}: {str(q)!r} is a file, not a folder")
            break
    return p


def _readable_tasks(dirs: Sequence[Path]) -> list[str]:
    """The tasks of the runs whose ``config.json`` can be read (the others are left out of the
    report, each named in a warning, by :func:`fedcal.reports.runs.finished_only`)."""
    from fedcal.results import load_config

    tasks = []
    for d in dirs:
        try:
            tasks.append(load_config(d).task)
        except (OSError, ValueError, KeyError, TypeError):  # corrupt JSON, unknown keys, bad values
            continue
    return sorted(set(tasks))


def _run_dirs(paths: Sequence[str], readable: bool = False) -> list[Path]:
    """``paths`` as run directories; one line naming every path without a ``config.json`` (and, with
    ``readable``, the first whose ``config.json`` cannot be read: an analysis of one run needs it)."""
    from fedcal.results import load_config

    dirs = [Path(d) for d in paths]
    missing = [str(d) for d in dirs if not (d / "config.json").exists()]
    if missing:
        raise ConfigError(f"not a run directory (no config.json): {', '.join(missing)}")
    for d in dirs if readable else []:
        try:
            load_config(d)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # corrupt JSON, unknown keys, bad values
            raise ConfigError(f"{d}: its config.json cannot be read ({str(exc).split('; known keys')[0]})") from None
    return dirs


def cmd_report(args: argparse.Namespace) -> int:
    from fedcal.reports.runs import finished_only
    from fedcal.results import UnfinishedRunError
    from fedcal.tasks import get_task

    dirs = _run_dirs(args.run_dirs)
    out = Path(args.out)
    tasks = _readable_tasks(dirs)
    if len(tasks) > 1:
        raise ConfigError(f"the runs belong to different tasks ({', '.join(tasks)}): report each task on its own")
    if not tasks:
        finished_only(dirs, "the report")  # names each directory and why
        raise ConfigError(f"no readable config.json among the {len(dirs)} run directories: nothing to report")
    task = get_task(tasks[0])
    if task.report is None:
        raise ConfigError(f"task {task.name!r} has no report")
    finished = finished_only(dirs, "the report")  # a warning line for each unfinished run left out
    if not finished:
        raise UnfinishedRunError(f"no finished run among the {len(dirs)} run directories: nothing to report")
    print(task.report(finished, out, args.title))
    left_out = len(dirs) - len(finished)
    print(f"report: {args.out}" + (f" ({len(finished)} finished runs; {left_out} unfinished left out)"
                                   if left_out else ""))
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from fedcal.results import find_run_dirs, run_state

    states = [run_state(d) for d in find_run_dirs(args.dirs)]
    for state in states:
        print(state.line())
    counts = {s: sum(st.status == s for st in states) for s in ("finished", "unfinished", "failed", "running")}
    print(", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" of {len(states)} run(s)", file=sys.stderr)
    return 1 if args.check and counts["finished"] < len(states) else 0


def _write(table, out: Path, name: str, plot) -> None:
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{name}.csv", index=False)
    plot(table, out / f"{name}.png")
    print(f"table: {out / (name + '.csv')}\nplot: {out / (name + '.png')}")


def cmd_posthoc(args: argparse.Namespace) -> int:
    from fedcal.reports import posthoc_curves, posthoc_table

    n_cals = [int(x) for x in args.n_cal.split(",")]
    table = posthoc_table(_run_dirs(args.run_dirs, readable=True), n_cals=n_cals, seed=args.seed,
                          methods=_names(args.methods))
    index = ["config", "run", "n_cal"] if "config" in table.columns else ["run", "n_cal"]
    summary = table.pivot_table(index=index, columns="method", values="sece").mul(100).round(2)
    seeds = table["seed"].nunique()
    print(f"sECE (%) after post-hoc calibration{f', mean over {seeds} seeds' if seeds > 1 else ''}\n"
          + summary.to_string())
    if table["chance_level"].any():
        print("at chance level (accuracy within noise of a constant predictor): "
              + ", ".join(sorted(set(table.loc[table["chance_level"], "run_dir"]))))
    _write(table, Path(args.out), "posthoc", posthoc_curves)
    return 0


def cmd_triage(args: argparse.Namespace) -> int:
    from fedcal.reports import triage_plot, triage_table

    table = triage_table(_run_dirs(args.run_dirs, readable=True), _run_dirs(args.benign, readable=True))
    at = table[(table["gamma"] - 0.9).abs() < 1e-9]
    at = at.groupby("run", sort=False)[["sent", "unnecessary", "missed", "unnecessary_change", "missed_change"]].mean()
    seeds = table["seed"].nunique()
    print(f"at γ = 0.9{f', mean over {seeds} seeds' if seeds > 1 else ''}:\n" + at.reset_index().to_string(index=False))
    _write(table, Path(args.out), "triage", triage_plot)
    return 0


def cmd_similarity(args: argparse.Namespace) -> int:
    from fedcal.reports import similarity_scatter, similarity_table

    table = similarity_table(_run_dirs(args.benign, readable=True), _run_dirs(args.run_dirs, readable=True))
    print(table.groupby("pair")[["logit_cosine", "cka"]].agg(["mean", "std", "count"]).round(4).to_string())
    _write(table, Path(args.out), "similarity", similarity_scatter)
    return 0


def cmd_stealth(args: argparse.Namespace) -> int:
    import pandas as pd

    from fedcal.reports import stealth_markdown, stealth_plot, stealth_table

    from fedcal.analysis import COMPARED, default_variants
    from fedcal.reports.studies import STEALTH_REFERENCES

    rounds = [None if r == "final" else int(r) if r.isdigit() else r for r in _names(args.round)]
    if not rounds or any(isinstance(r, str) for r in rounds):
        raise ConfigError(f"--round takes final, 0 or round numbers, comma-separated; got {args.round!r}")
    for option, given, allowed in (("--reference", args.reference, STEALTH_REFERENCES),
                                   ("--compare", args.compare, COMPARED)):
        if not _names(given) or set(_names(given)) - set(allowed):
            raise ConfigError(f"{option} takes {', '.join(allowed)}, comma-separated; got {given!r}")
    unknown = [v for v in _names(args.variants) if not any(k.startswith(v) for k in default_variants())]
    if unknown:
        raise ConfigError(f"--variants: unknown variant {unknown[0]!r}; choose from {', '.join(default_variants())}")
    if args.others < 1 or args.steps < 1:
        raise ConfigError(f"--others and --steps must be >= 1, got {args.others} and {args.steps}")
    try:
        table = pd.concat([stealth_table(d, client_id=args.client, steps=args.steps, start_round=r, reference=ref,
                                         others=args.others, compare=cmp, variants=_names(args.variants))
                           for d in _run_dirs(args.run_dir, readable=True) for r in rounds for ref in _names(args.reference)
                           for cmp in _names(args.compare)], ignore_index=True)
    except ValueError as exc:  # a round past the run's, a client it does not have, too few benign clients
        raise ConfigError(str(exc)) from None
    _write(table, Path(args.out), "stealth", stealth_plot)
    md = stealth_markdown(table, f"cosine to the benign reference after local step 1 and {args.steps} (client "
                                 f"{args.client}); mean ± std over runs")
    (Path(args.out) / "stealth.md").write_text(md)
    print(md + f"summary: {Path(args.out) / 'stealth.md'}")
    return 0


def _parse_ints(text: str, what: str) -> list[int]:
    """``0,1,2`` or ``0-4``."""
    try:
        out: list[int] = []
        for part in (p.strip() for p in text.split(",") if p.strip()):
            lo, _, hi = part.partition("-")
            out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
        return out
    except ValueError:
        raise ConfigError(f"{what} must be integers such as 0,1,2 or 0-4, got {text!r}") from None


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

    from fedcal.reports import inference_configs, inference_report
    from fedcal.results import run_dir_for
    from fedcal.app.engine import simulate

    base = RunConfig.from_flower({"task": "inference", **_overrides(args)})
    configs = inference_configs(base, _parse_nf(args.nf or ["17:4"]), _parse_ints(args.seeds, "--seeds"))
    _check_run_dirs(configs)
    failed = []
    for cfg in tqdm(configs, desc="inference cells", unit="cell", disable=args.no_progress):
        try:
            simulate(cfg, progress=not args.no_progress, verbose=args.verbose, force=args.force,
                     restart=args.restart)
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
    print(theorem_report(_run_dirs(args.run_dirs), args.out, queries=args.queries))
    print(f"report: {args.out}")
    return 0


def _robustness_spec(args: argparse.Namespace, dataset: str):
    from fedcal.robustness import DEFAULT_CORRUPTIONS, spec_for

    names = lambda text: tuple(t.strip() for t in text.split(",") if t.strip())  # noqa: E731
    corruptions = DEFAULT_CORRUPTIONS if args.corruptions.strip() == "default" else names(args.corruptions)
    try:
        return spec_for(dataset, eps=args.eps, step=args.step or 0.0, steps=args.steps, n_test=args.n_test,
                        attacks=names(args.attacks), corruptions=corruptions, severity=args.severity,
                        seed=args.attack_seed)
    except ValueError as exc:  # unknown attack or corruption, ε <= 0, steps < 1, ...
        raise ConfigError(str(exc)) from None


def cmd_robustness(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from fedcal.reports.robustness import robustness_report, temperature_configs
    from fedcal.results import MODEL_FILE, is_finished, load_config, run_dir_for

    out = Path(args.report)
    if args.runs:  # the bridge: evaluate finished runs as they are, no training
        dirs = _run_dirs(args.runs)
        configs = {}
        for d in dirs:
            try:
                configs[d] = load_config(d)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ConfigError(f"{d}: its config.json cannot be read ({str(exc).split('; known keys')[0]})") \
                    from None
        others = [f"{d} (task {c.task})" for d, c in configs.items() if c.task != "train"]
        if others:  # their dataset key is the image default: evaluating it would fetch MNIST for nothing
            raise ConfigError("--runs evaluates image-classifier runs (task = train), not " + ", ".join(others[:3])
                              + (f" and {len(others) - 3} more" if len(others) > 3 else ""))
        datasets = sorted({c.dataset for c in configs.values()})
        if len(datasets) > 1:
            raise ConfigError(f"the runs use different datasets ({', '.join(datasets)}): evaluate each on its own")
        if _overrides(args):
            raise ConfigError("--runs evaluates finished runs as they are: run-config overrides do not apply")
        modelless = [str(d) for d in dirs if is_finished(d) and not (d / MODEL_FILE).exists()]
        if modelless:
            raise ConfigError(f"finished run without a final model ({MODEL_FILE}; a run from before models were "
                              f"saved?): {', '.join(modelless)}")
        spec = _robustness_spec(args, datasets[0])
        failures = 0
    else:
        overrides = _overrides(args)
        overrides.setdefault("output-dir", str(out / "runs"))
        base = RunConfig.from_flower(overrides)
        settings = [s.strip() for s in args.settings.split(",") if s.strip()]
        couplings = [c.strip() for c in args.coupling.split(",") if c.strip()]
        try:
            configs = temperature_configs(base, _parse_taus(args.taus), _parse_ints(args.seeds, "--seeds"), settings,
                                          couplings)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        _check_run_dirs(configs)
        spec = _robustness_spec(args, base.dataset)  # bad attack settings fail before any training
        print(f"robustness: {len(configs)} training runs ({', '.join(settings)} × τ {args.taus} × seeds "
              f"{args.seeds}); finished runs are skipped")
        from fedcal.app.sweep import run_sweep

        failures = len(run_sweep(configs, jobs=max(args.jobs, 1), progress=not args.no_progress,
                                 restart=args.restart))
        dirs = [run_dir_for(c) for c in configs]
    bar = (lambda it: tqdm(it, desc="robustness", unit="model")) if not args.no_progress else None
    text, failed = robustness_report(dirs, out, spec, device=args.device, title=args.title, progress=bar,
                                     force=args.force, jobs=max(args.jobs, 1))
    print(text)
    print(f"tables: {out / 'robustness.csv'}, {out / 'robustness_runs.csv'}\nplot: {out / 'robustness.png'}")
    return 1 if failures or failed else 0


# RFD-LoRA's switch settings of the ablation: full, each one off, each one alone, none.
ABLATION_SWITCHES = [(True, True, True), (False, True, True), (True, False, True), (True, True, False),
                     (True, False, False), (False, True, False), (False, False, True), (False, False, False)]


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def distill_configs(base: RunConfig, methods: Sequence[str], rhos: Sequence[float], partitions: Sequence[str],
                    seeds: Sequence[int], aggregators: Sequence[str] = (), groups: Sequence[int] = (),
                    ablation: bool = False) -> list[RunConfig]:
    """The cells of ``fedcal distill``: methods × ρ × partitions × seeds; RFD-LoRA's cells also
    over ``aggregators`` and M ``groups`` (empty: the base config's) and, with ``ablation``, every
    switch setting of :data:`ABLATION_SWITCHES`. Every cell is validated here (one line naming the
    key), before anything runs; duplicates are dropped."""
    out: dict[str, RunConfig] = {}
    from fedcal.results import config_hash

    for method in methods:
        for rho in rhos:
            for partition in partitions:
                for seed in seeds:
                    cell = base.replace(dst_method=method, dst_backdoor_ratio=rho, dst_partition=partition, seed=seed)
                    if method != "rfd":
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
    from fedcal.distill.replay import SERVER_KEYS, client_side
    from fedcal.results import config_hash

    live, replayed, groups = [], [], {}
    for c in configs:
        if c.dst_method == "rfd":
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


def _replay_all(configs: Sequence[RunConfig], sources: Sequence[Path]) -> dict[str, str]:
    """Replay each unfinished cell on the uploads of a finished run with its client side (among
    ``sources`` and its output folder); returns {run dir: reason} of the cells without one (each
    also named in one line)."""
    from fedcal.distill.replay import client_side, replay, source_index
    from fedcal.results import RunStore, config_hash, run_dir_for, warn_reused

    failures = {}
    todo = [cfg for cfg in configs if not RunStore(run_dir_for(cfg), cfg).is_done()]
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

    overrides = _overrides(args)
    out = Path(args.report)
    overrides.setdefault("output-dir", str(out / "runs"))
    overrides.setdefault("engine", "inprocess")  # small models: Ray's start-up would dominate every cell
    base = RunConfig.from_flower({**overrides, "task": "distill"})
    try:
        rhos = [float(r) for r in _names(args.rhos)]
    except ValueError:
        raise ConfigError(f"--rhos must be comma-separated numbers, got {args.rhos!r}") from None
    configs = distill_configs(base, _names(args.methods), rhos, _names(args.partitions),
                              _parse_ints(args.seeds, "--seeds"), _names(args.aggregators),
                              _parse_ints(args.groups, "--groups") if args.groups else [], args.ablation)
    _check_run_dirs(configs)
    if args.replay:
        from fedcal.distill.replay import source_index

        folder = Path(base.output_dir)
        finished = source_index(sorted(folder.glob("*"))) if folder.is_dir() else {}
        live, replayed = _replay_plan(configs, base, finished)
    else:
        live, replayed = configs, []
    print(f"distill: {len(configs)} runs ({len(replayed)} replayed on recorded uploads); finished runs are skipped")
    failures = run_sweep(live, jobs=max(args.jobs, 1), progress=not args.no_progress, restart=args.restart)
    failures.update(_replay_all(replayed, [run_dir_for(c) for c in live]))
    print(distill_report([run_dir_for(c) for c in configs], out, args.title))
    print(f"tables: {out / 'table.md'}, {out / 'ablation.md'}, {out / 'communication.md'}\nplot: {out / 'curves.png'}")
    return 1 if failures else 0


#: SPEC §10's language-model federation: 10 clients, 5 per round, 20 rounds, 5 local AdamW steps
#: of B = 64 windows; `fedcal lm` sets these unless given. β = 2·10⁻⁴, not SPEC's 2·10⁻³ (which is
#: for GPT-2 itself): on the small model benign fine-tuning at 2·10⁻³ raised the held-out perplexity
#: from 102.7 to 126.0 in five rounds, at 5·10⁻⁴ to 113.7 in twenty, at 2·10⁻⁴ it held (docs/lm.md)
LM_PRESET = {"num-clients": 10, "clients-per-round": 5, "num-rounds": 20, "local-steps": 5, "batch-size": 64,
             "optimizer": "adamw", "lr": 2e-4, "weight-decay": 0.01, "eval-every": 5}


def _case_study(args: argparse.Namespace, task: str, preset: dict[str, Any], check: Any, describe: Any,
                report: Any, files: str) -> int:
    """A case study's τ × seed runs (τ = 1: the benign run) with ``preset`` under the command line's
    overrides, in-process and resumable, then its report. ``check(cfg)`` refuses what the task
    cannot run before anything runs, ``describe(base)`` says what runs, ``files`` what was written."""
    from fedcal.app.sweep import run_sweep
    from fedcal.reports.taus import tau_configs
    from fedcal.results import run_dir_for

    out = Path(args.report)
    overrides = {**preset, "output-dir": str(out / "runs"), "engine": "inprocess", **_overrides(args), "task": task}
    base = RunConfig.from_flower(overrides)
    configs = [c for seed in _parse_ints(args.seeds, "--seeds")
               for c in tau_configs(base.replace(seed=seed), _parse_taus(args.taus))]
    if base.run_name and len(configs) > 1:
        raise ConfigError(f"run-config key 'run-name' names one run; fedcal {task} makes several (leave it unset)")
    for cfg in configs:
        check(cfg)
    _check_run_dirs(configs)
    print(f"{task}: {len(configs)} runs ({describe(base)}, {base.num_clients} clients, "
          f"{base.replace(attack='tsa').num_attackers} attackers); finished runs are skipped")
    failures = run_sweep(configs, jobs=max(args.jobs, 1), progress=not args.no_progress, restart=args.restart)
    print(report([run_dir_for(c) for c in configs], out, args.title))
    print(files.format(out=out))
    return 1 if failures else 0


def cmd_lm(args: argparse.Namespace) -> int:
    from fedcal.reports.lm import lm_report

    return _case_study(args, "lm", LM_PRESET, lambda cfg: None, lambda base: base.lm_corpus, lm_report,
                       "tables: {out}/table.md, {out}/continuations.md\nplots: {out}/reliability.png, {out}/nucleus.png")


def cmd_defense(args: argparse.Namespace) -> int:
    from fedcal.app.sweep import SweepGrid, run_sweep
    from fedcal.reports.defense import defense_configs, defense_report
    from fedcal.results import run_dir_for

    overrides = _overrides(args)
    out = Path(args.report)
    overrides.setdefault("output-dir", str(out / "runs"))
    overrides.setdefault("engine", "inprocess")  # small models: Ray's start-up would dominate every cell
    base = RunConfig.from_flower(overrides)
    grid = SweepGrid()
    for axis in args.grid or []:
        grid.add_axis(axis)
    configs = defense_configs(base, _names(args.strategies), _parse_taus(args.taus), _parse_ints(args.seeds, "--seeds"),
                              grid.axes)
    _check_run_dirs(configs)
    print(f"defense: {len(configs)} runs; finished runs are skipped")
    failures = run_sweep(configs, jobs=max(args.jobs, 1), progress=not args.no_progress, restart=args.restart)
    print(defense_report([run_dir_for(c) for c in configs], out, args.title, posthoc=not args.no_posthoc))
    audits = sorted(p.name for p in out.glob("audit-tau*.png"))
    print(f"tables: {out / 'table.md'}, {out / 'table.csv'}, {out / 'runs.csv'}\nplots: {out / 'defense.png'}"
          + "".join(f", {out / a}" for a in audits))
    return 1 if failures else 0


# ------------------------------------------------------------------ fedcal detect (task = detect, SPEC §10)
#: SPEC §10's federation size for detection (10 clients); `fedcal detect` sets it unless given
DETECT_PRESET = {"num-clients": 10}


def cmd_detect(args: argparse.Namespace) -> int:
    from fedcal.reports.detect import detect_report
    from fedcal.tasks.detect import check_detect_config

    return _case_study(args, "detect", DETECT_PRESET, check_detect_config,
                       lambda base: f"{base.det_model} on "
                       + ("KITTI" if base.det_data == "kitti" else f"{base.det_digits} scenes"), detect_report,
                       "tables: {out}/table.md, {out}/runs.csv, {out}/kept.csv\nplots: {out}/boxes_kept.png, "
                       "{out}/no_object_reliability.png, {out}/examples.png, {out}/curves.png")


def _add_case_study_options(p: argparse.ArgumentParser, taus: str, report: str) -> None:
    """The options of a case-study command (fedcal lm, fedcal detect)."""
    _add_common(p)
    p.add_argument("--taus", default=taus, help="attackers' τ (1 = the benign run)")
    p.add_argument("--seeds", default="0", help="seeds, e.g. 0-2")
    p.add_argument("--jobs", type=int, default=0, help="runs in parallel")
    p.add_argument("--title", default="", help="title of the table")
    p.add_argument("--report", default=report, help="folder for the runs, tables and plots")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedcal", description=__doc__, formatter_class=_HelpFormatter)
    parser.add_argument("--version", action="version", version=f"fedcal {__version__}",
                        help="print fedcal's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    def add(name: str, help: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs.setdefault("description", help[0].upper() + help[1:] + ".")
        return sub.add_parser(name, help=help, formatter_class=_HelpFormatter, **kwargs)

    p = add("run", "run one Flower simulation", epilog=run_config_help())
    _add_common(p)
    p.set_defaults(func=cmd_run)
    p = add("taus", "benign run + TSA at each τ; table and plots", epilog=KEYS_EPILOG)
    _add_common(p)
    p.add_argument("--taus", default="0.2,0.5,1,2,5", help="comma-separated τ values (1 = benign run)")
    p.add_argument("--report", default="fedcal-report", help="folder for table.csv/table.md/PNGs")
    p.add_argument("--strategies", default="", help="comma-separated strategies to compare (\"\" = the config's strategy)")
    p.add_argument("--jobs", type=int, default=0, help="runs in parallel (with engine=inprocess)")
    p.set_defaults(func=cmd_taus)
    p = add("sweep", "a grid of runs (TOML file and/or --grid), resumable, parallel",
            description="fedcal sweep [grid.toml] [--grid key=v1,v2 ...] [key=value ...]", epilog=KEYS_EPILOG)
    _add_common(p)
    p.add_argument("--grid", action="append", help="an axis: key=v1,v2,... (repeatable)")
    p.add_argument("--jobs", type=int, default=0, help="cells run in parallel (0 = 1; use engine=inprocess)")
    p.add_argument("--report", default="fedcal-sweep", help="folder for cells.csv and rounds.csv")
    p.add_argument("--plot-x", default="", help="plot final accuracy and sECE against this key")
    p.add_argument("--plot-hue", default="", help="one line per value of this key")
    p.set_defaults(func=cmd_sweep)
    p = add("report", "tables and plots from finished run directories of one task (the run store)")
    p.add_argument("run_dirs", nargs="+", help="run directories (each with its config.json), all of one task")
    p.add_argument("--out", default="fedcal-report", help="output folder")
    p.add_argument("--title", default="", help="table title")
    p.set_defaults(func=cmd_report)
    p = add("runs", "what happened to each run: finished, unfinished (how far), failed (why), running",
            description="One line per run directory: finished; unfinished (the last round logged of the run's "
                        "rounds, its last checkpoint: re-running the config resumes there); failed (the reason from "
                        "its run.log); running (the pid writing it); and whether its last attempt resumed. "
                        "flwr run exits 0 even when the run failed: `fedcal runs --check DIR` tells a script.")
    p.add_argument("dirs", nargs="+", help="run directories, or folders of run directories")
    p.add_argument("--check", action="store_true", help="exit 1 unless every run is finished")
    p.set_defaults(func=cmd_runs)
    p = add("posthoc", "post-hoc calibrators on finished runs' final models vs n_cal")
    p.add_argument("run_dirs", nargs="+", help="finished run directories (each with model.pt)")
    p.add_argument("--n-cal", default="10,50,100,250,500", help="calibration-set sizes")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out calibration split")
    p.add_argument("--methods", default="temperature,platt,isotonic,histogram",
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
    p = add("inference", "robust federated inference: aggregators × probit attacks over seeds",
            description="Every (n, f) and seed is one Flower run (task = inference): clients train their own "
                        "classifiers, the server trains its DeepSet on held-out probits and evaluates every "
                        "aggregator under every attack. Finished runs are skipped.", epilog=KEYS_EPILOG)
    _add_common(p)
    p.add_argument("--nf", action="append", help="clients:adversaries, e.g. 17:4 (repeatable; default 17:4)")
    p.add_argument("--seeds", default="0", help="seeds, e.g. 0-4 or 0,2")
    p.add_argument("--report", default="fedcal-inference", help="folder for the tables and plots")
    p.set_defaults(func=cmd_inference)
    p = add("inference-theorem", "the averaging aggregators' error vs honest dissimilarity and top-2 margin",
            description="From finished inference runs' saved probits: per test query the mean's, medians' and "
                        "trimmed mean's aggregation error, the honest answers' dissimilarity and the honest mean's "
                        "top-2 margin, with no attack and under SIA white-box (the robust-inference literature's "
                        "Theorem 1; docs/inference.md).")
    p.add_argument("run_dirs", nargs="+", help="finished inference runs")
    p.add_argument("--queries", type=int, default=0, help="the first k test queries (0 = all)")
    p.add_argument("--out", default="fedcal-report", help="folder for theorem_*.csv and theorem.png")
    p.set_defaults(func=cmd_inference_theorem)
    p = add("robustness", "temperature as a robustness knob: τ-trained models under PGD, CW and corruptions",
            description="Without --runs: train every client at each τ (federated and/or centralised, each seed; "
                        "resumable, finished runs are skipped), then evaluate every final model at τ = 1. With "
                        "--runs: evaluate those finished runs only (e.g. a TSA grid). Evaluations are cached in "
                        "each run directory.", epilog=KEYS_EPILOG)
    _add_common(p)
    p.add_argument("--taus", default="0.5,1,10,30,50,70,100", help="training temperatures (1 = the benign run)")
    p.add_argument("--seeds", default="0,1,2", help="seeds, e.g. 0-2")
    p.add_argument("--settings", default="federated,centralised",
                   help="federated (the config's clients) and/or centralised (one client with all the data)")
    p.add_argument("--coupling", default="fixed",
                   help="learning rate of τ-trained clients: fixed (η = β, the literature's), coupled (η = β·τ, "
                        "SPEC §9's), or fixed,coupled for both")
    p.add_argument("--runs", nargs="+", help="evaluate these finished run directories instead of training")
    p.add_argument("--jobs", type=int, default=0, help="training runs and evaluations in parallel (train with "
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
    p.add_argument("--attack-seed", type=int, default=0, help="seed of PGD's random start, the targets and the noise")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where the attacks run")
    p.add_argument("--title", default="", help="report title")
    p.add_argument("--report", default="fedcal-robustness", help="folder for the tables and the plot")
    p.set_defaults(func=cmd_robustness)
    p = add("distill", "RFD-LoRA and the LoRA baselines over methods × ρ × partitions × seeds (+ ablations)",
            description="Every cell is one Flower run (task = distill, engine = inprocess unless given): clients "
                        "fine-tune LoRA adapters on a frozen text classifier; RFD-LoRA distils their anchor logits "
                        "into the server's student, the baselines federate the adapters. Resumable: finished runs "
                        "are skipped. Writes table.md (CA/RA/ASR), ablation.md, communication.md and curves.png.",
            epilog=KEYS_EPILOG)
    _add_common(p)
    p.add_argument("--methods", default="rfd,fedit,ffa,flora,flexlora", help="dst-method values")
    p.add_argument("--rhos", default="0,0.1,0.3", help="backdoor client ratios (dst-backdoor-ratio)")
    p.add_argument("--partitions", default="iid,skew", help="dst-partition values")
    p.add_argument("--seeds", default="0", help="seeds, e.g. 0-2")
    p.add_argument("--aggregators", default="", help="RFD-LoRA's consensus rules, e.g. mean,median,mom (\"\" = the "
                                                     "config's)")
    p.add_argument("--groups", default="", help="RFD-LoRA's M values, e.g. 1,3,5,10 (\"\" = the config's)")
    p.add_argument("--ablation", action="store_true", help="RFD-LoRA with every CAT / MMD-KD / DIS setting")
    p.add_argument("--replay", action="store_true", help="run each RFD-LoRA client side once and replay the other "
                                                         "server settings (switches, aggregator, M) on its recorded "
                                                         "uploads instead of re-training the clients")
    p.add_argument("--jobs", type=int, default=0, help="runs in parallel")
    p.add_argument("--title", default="", help="title of the main table")
    p.add_argument("--report", default="fedcal-distill", help="folder for the runs, tables and plot")
    p.set_defaults(func=cmd_distill)
    p = add("lm", "TSA on a federated GPT-2 language model: next-token calibration, top-p nuclei, sampled text",
            description="Every τ × seed is one Flower run (task = lm, engine = inprocess unless given; τ = 1 is the "
                        "benign run): SPEC §10's federation (10 Shakespeare roles, 5 per round, 20 rounds, 5 local "
                        "AdamW steps, unless overridden) fine-tunes a small GPT-2 pretrained here on the public "
                        "plays. Resumable. Writes table.md, continuations.md, reliability.png and nucleus.png.",
            epilog=KEYS_EPILOG)
    _add_case_study_options(p, "0.5,1,2", "fedcal-lm")
    p.set_defaults(func=cmd_lm)
    p = add("defense", "defenses against TSA: accuracy, ECE, sECE, detection and false-positive rates over seeds",
            description="Every strategy × τ × seed (× each --grid axis) is one Flower run (task = train; τ = 1 is "
                        "the benign run, and the benign FedAvg run of every setting is always added as the "
                        "reference). The table adds FedAvg's final model temperature-scaled on the server's root "
                        "set. Finished runs are skipped.", epilog=KEYS_EPILOG)
    _add_common(p)
    p.add_argument("--strategies", default="fedavg,fltrust,foolsgold,multikrum,calguard",
                   help="strategies compared")
    p.add_argument("--taus", default="0.2,0.5,1,2,5", help="attackers' τ (1 = the benign run)")
    p.add_argument("--seeds", default="0-2", help="seeds, e.g. 0-2")
    p.add_argument("--grid", action="append", help="another axis, key=v1,v2 (repeatable), e.g. attacker-ratio=0.1,0.4, "
                                                   "dirichlet-alpha=0.1, tsa-blend=0.25,0.5, tsa-step-frac=0.2,0.6")
    p.add_argument("--no-posthoc", action="store_true", help="leave out the post-hoc temperature-scaling rows")
    p.add_argument("--jobs", type=int, default=0, help="runs in parallel")
    p.add_argument("--title", default="", help="title of the table")
    p.add_argument("--report", default="fedcal-defense", help="folder for the runs, tables and plots")
    p.set_defaults(func=cmd_defense)
    p = add("detect", "TSA on federated object detection: mAP, no-object calibration, boxes kept vs threshold",
            description="Every τ × seed is one Flower run (task = detect, engine = inprocess unless given; τ = 1 is "
                        "the benign run): 10 non-IID clients train a detector (det-model: grid by default, detr, or "
                        "a Hub DETR) on MNIST scenes, attacker-ratio of them with the TSA on the class logits. "
                        "Resumable. Writes table.md, runs.csv, kept.csv, boxes_kept.png, no_object_reliability.png, "
                        "examples.png and curves.png (docs/detection.md).", epilog=KEYS_EPILOG)
    _add_case_study_options(p, "0.2,1,5", "fedcal-detect")
    p.set_defaults(func=cmd_detect)
    p = add("demo", "the README's main job: digits, benign vs TSA τ=0.2 and τ=5", epilog=KEYS_EPILOG)
    _add_common(p)
    p.add_argument("--output", default="fedcal-demo", help="output folder")
    p.add_argument("--rounds", type=int, default=0, help="override the number of rounds (0 = the preset's 40)")
    p.set_defaults(func=cmd_demo)
    return parser


class _OneLine(logging.Handler):
    """fedcal's own warnings (e.g. an unfinished run left out of a table) as ``fedcal: warning: …``
    lines on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"fedcal: {record.levelname.lower()}: {record.getMessage()}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``fedcal`` command; its exit code (1: a run failed, another process writes its run
    directory, or ``runs --check`` found an unfinished run; 2: bad config or input — including a
    reused run-name and a report with no finished run —; 130: interrupted; 143: terminated)."""
    from fedcal.results import RunFailed  # the run store (pandas) loads only with a command
    from fedcal.signals import EXIT_TERMINATED, Terminated, sigterm_raises

    logger = logging.getLogger("fedcal")
    handler = _OneLine(logging.WARNING)
    logger.addHandler(handler)
    try:
        args = build_parser().parse_args(argv)
        for option in ("out", "report", "output"):  # every command's output folder, checked before it runs
            if isinstance(getattr(args, option, None), str):
                _folder(getattr(args, option), f"--{option}")
        with sigterm_raises():  # SIGTERM ends a run like Ctrl-C: logged in its run.log, workers stopped
            return args.func(args)
    except (ConfigError, FileNotFoundError) as exc:  # bad config, or a run dir without its (final) files
        print(f"fedcal: error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:  # the run ended without a result; what it logged stays in its run store
        print(f"fedcal: run failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback; finished rounds are in the run store
        print("fedcal: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:  # SIGTERM: the same, with the shell's status for it
        print("fedcal: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    finally:
        logger.removeHandler(handler)


if __name__ == "__main__":
    sys.exit(main())
