"""What the study commands share: their run-config options, parsers of option lists, the
checks every grid makes before its first run, and the τ × seed case study of a task."""

from __future__ import annotations

import argparse
import math
import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

from fedcal.config import ConfigError, RunConfig, parse_override


def config_overrides(args: argparse.Namespace) -> dict:
    """The run-config overrides of a command: ``-c`` TOML files first, then the ``key=value``
    arguments and ``-c "k=v ..."`` strings, later ones winning."""
    items, files = list(args.overrides or []), {}
    for text in args.run_config or []:
        if text.strip().endswith(".toml"):  # a file, as `flwr run --run-config f.toml` takes it
            files.update(read_overrides_file(text.strip()))
        else:
            items += shlex.split(text)
    return {**files, **dict(parse_override(t) for t in items)}


def read_overrides_file(path: str | Path) -> dict[str, Any]:
    """Run-config overrides from a flat TOML file (``tau = 5`` per line, kebab-case keys): the
    file ``flwr run --run-config f.toml`` accepts. A nested table would become a dotted key in
    Flower (no fedcal key has a dot), so it is refused here with one line naming it; unknown keys
    are refused later, with the closest valid ones, by :meth:`RunConfig.from_flower`."""
    import tomllib

    p = Path(path).expanduser()
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"-c {str(path)!r}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"-c {str(path)!r}: a directory, not a TOML file") from None
    except OSError as exc:  # unreadable: permissions, a FIFO gone, ...
        raise ConfigError(f"-c {str(path)!r}: cannot be read ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"-c {str(path)!r}: not a TOML file ({exc})") from None
    for key, value in data.items():
        if isinstance(value, (dict, list)):
            raise ConfigError(f"-c {str(path)!r}: key {key!r} is a table or list; an overrides file is flat "
                              "`key = value` lines (a sweep's axes go in its grid file: fedcal sweep grid.toml)")
    return data


KEYS_EPILOG = "run-config keys, their defaults and ranges: fedcal run --help"


def add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="run-config overrides, TOML values (tau=5 coupled=false); before or after the options")
    p.add_argument("-c", "--run-config", action="append", metavar="FILE.toml|STRING",
                   help='overrides from a flat TOML file (as flwr run --run-config takes it; key=value arguments '
                        'win over it) or as one string, e.g. "tau=5 seed=1"; repeatable')
    p.add_argument("--force", action="store_true", help="re-run even if an identical finished run exists")
    p.add_argument("--restart", action="store_true",
                   help="start unfinished runs over from round 0 instead of resuming them from their last checkpoint")
    p.add_argument("--verbose", action="store_true", help="show Flower's and Ray's logs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_cluster_options(p: argparse.ArgumentParser) -> None:
    """A grid command's cells as Ray tasks on a cluster (docs/cluster.md)."""
    p.add_argument("--cluster", default="", metavar="ADDRESS",
                   help="run every cell as a Ray task on this Ray cluster (host:port, or auto = the running one)")
    p.add_argument("--cell-cpus", type=float, default=1.0, help="with --cluster: Ray CPUs per cell")
    p.add_argument("--cell-gpus", type=float, default=0.0, help="with --cluster: GPUs per cell (0.25: four share one)")
    p.add_argument("--cell-retries", type=int, default=3, help="with --cluster: re-runs of a cell whose node died")


def refuse_cell_options_without_cluster(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``--cell-cpus`` / ``--cell-gpus`` / ``--cell-retries`` given without ``--cluster``: one line
    saying so (they size Ray tasks, and without a cluster the cells run here), not ignored."""
    if not hasattr(args, "cluster") or args.cluster:
        return
    for action in parser._actions:
        if action.dest in ("cell_cpus", "cell_gpus", "cell_retries"):
            value = getattr(args, action.dest)
            if value != action.default or value != value:  # nan != nan: given, whatever it is
                raise ConfigError(f"{action.option_strings[0]} {value} applies with --cluster only (it sizes each "
                                  "cell's Ray task); without --cluster the cells run on this machine")


def cluster_of(args: argparse.Namespace):
    """The ``--cluster`` options as a :class:`fedcal.app.cluster.ClusterSpec`, or None."""
    if not getattr(args, "cluster", ""):
        return None
    from fedcal.app.cluster import ClusterSpec

    try:
        return ClusterSpec(args.cluster, args.cell_cpus, args.cell_gpus, args.cell_retries)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _items(text: str) -> list[str]:
    """The comma-separated items of an option's value; an empty item (``10,,50``, a trailing comma)
    is refused: it is a typo, never "no value"."""
    items = [t.strip() for t in str(text).split(",")]
    if any(not t for t in items):
        raise argparse.ArgumentTypeError(f"empty item in {text!r}")
    return items


#: the most values one ``a-b`` range of a list option may stand for (``0-99999999`` is a typo, not a study)
MAX_RANGE = 10_000


def number_list(kind: type = float, *, low: float | None = None, low_open: bool = False,
                high: float | None = None, ranges: bool = False, empty: bool = False,
                what: str = "numbers", example: str = "") -> Any:
    """An argparse ``type`` for a comma-separated list of numbers (the study commands' ``--taus``,
    ``--seeds``, ``--ratios``, ``--n-cal`` …): each item a finite ``kind`` within
    [``low``, ``high``] (``low_open``: > ``low``); with ``ranges``, ``a-b`` (a ≤ b) stands for every
    integer from a to b. A bad value fails while the command line is parsed, in one line naming the
    option and the value (:class:`fedcal.cli._OneLineErrors`); ``empty`` lets "" mean "none"."""
    bound = " and ".join([*([f"{'>' if low_open else '>='} {low:g}"] if low is not None else []),
                          *([f"<= {high:g}"] if high is not None else [])])
    example = example or ("0,1,2 or 0-4" if ranges else "0.2,1,5" if kind is float else "10,50")

    def one(item: str, text: str) -> list:
        where = f" in {text!r}" if item != text.strip() else ""
        lo, dash, hi = item.partition("-") if ranges else (item, "", "")
        if dash and lo.strip():  # a-b (a leading "-" is a negative number, refused by the bound)
            if not hi.strip():
                raise argparse.ArgumentTypeError(f"range {item!r}{where} has no upper end (e.g. {example})")
            a, b = one(lo.strip(), text), one(hi.strip(), text)
            if len(a) + len(b) != 2:  # 1-2-3
                raise argparse.ArgumentTypeError(f"{item!r}{where} is not a range a-b (e.g. {example})")
            if b[0] < a[0]:
                raise argparse.ArgumentTypeError(f"range {item!r}{where} is empty ({b[0]} < {a[0]})")
            if b[0] - a[0] >= MAX_RANGE:
                raise argparse.ArgumentTypeError(f"range {item!r}{where} holds more than {MAX_RANGE} {what}")
            return list(range(a[0], b[0] + 1))
        try:
            value = kind(item)
        except ValueError:
            value = None
        if value is None or (kind is float and not math.isfinite(value)):
            noun = "an integer" if kind is int else "a finite number"
            raise argparse.ArgumentTypeError(f"{item!r}{where} is not {noun} (comma-separated {what}, e.g. {example})")
        if (low is not None and (value <= low if low_open else value < low)) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{what} must be {bound}, got {item!r}{where}")
        return [value]

    def parse(text: str) -> list:
        if not str(text).strip():
            if empty:
                return []
            raise argparse.ArgumentTypeError(f"no {what} given (e.g. {example})")
        return [v for item in _items(text) for v in one(item, text)]

    parse.__name__ = what  # argparse names the type in its own messages
    return parse


#: ``--taus``: TSA temperatures, finite and > 0 (τ = 1 is the benign run)
taus_type = number_list(float, low=0, low_open=True, what="temperatures")
#: ``--seeds``: non-negative integers or ranges (``0-2``), as the ``seed`` key takes them
seeds_type = number_list(int, low=0, ranges=True, what="seeds")
#: ``--ratios`` / ``--rhos``: shares of the clients, in [0, 1]
ratios_type = number_list(float, low=0, high=1, what="ratios", example="0.1,0.25")
#: ``--groups``: RFD-LoRA's numbers of groups M, >= 1 ("" = the config's)
groups_type = number_list(int, low=1, empty=True, what="group counts", example="1,3,5")
#: ``--n-cal``: calibration-set sizes, >= 2 (a calibrator needs two samples)
n_cals_type = number_list(int, low=2, what="calibration-set sizes")


def names_type(what: str, empty: bool = False) -> Any:
    """An argparse ``type`` for a comma-separated list of names (``--strategies``, ``--methods``):
    no empty item, and no empty list unless ``empty`` ("" = the config's): a grid over no
    strategy or method has no cell."""

    def parse(text: str) -> list[str]:
        if not str(text).strip():
            if empty:
                return []
            raise argparse.ArgumentTypeError(f"no {what} given")
        return _items(text)

    parse.__name__ = what
    return parse


def count_type(low: int, what: str) -> Any:
    """An argparse ``type`` for one integer >= ``low`` (``--jobs``: 0 = one at a time)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{what} must be an integer >= {low}, got {text!r}")
        return value

    parse.__name__ = what
    return parse


#: ``--jobs``: cells run in parallel, 0 (the default) or 1 = one at a time
jobs_type = count_type(0, "jobs")


def parse_taus(text: str | Sequence[float]) -> list[float]:
    """``--taus`` as a list (already parsed by :data:`taus_type` when it came from the command line)."""
    if not isinstance(text, str):
        return list(text)
    try:
        return taus_type(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"--taus: {exc}") from None


def refuse_unread_keys(given: Mapping[str, Any], configs: Sequence[RunConfig]) -> None:
    """Refuse, in one line naming it, a run-config key the command line (or a grid file) sets that
    no run of the command reads: a key declared ``only_with`` another key's values
    (:meth:`fedcal.config.Setting.read_by`; ``calguard-cusum`` with ``strategy = fedavg``) would be
    ignored otherwise, the run computed without it. ``given`` maps keys to their value, or to the
    list of an axis's values; a key set to its default changes nothing and passes."""
    from fedcal.config import key_of, setting_of

    for key, value in given.items():
        try:
            s = setting_of(str(key))
        except KeyError:  # not a key: RunConfig.from_flower names it
            continue
        values = value if isinstance(value, list) else [value]
        if s.only_with is None or all(v == s.default for v in values) or any(s.read_by(c) for c in configs):
            continue
        field = s.only_with[0]
        seen = sorted({str(getattr(c, field)) or '""' for c in configs})
        raise ConfigError(f"run-config key {key_of(s.name)!r} is read only when {s.only_with_text()}; no run here has "
                          f"that ({key_of(field)} = {', '.join(seen)}), so it would be ignored")


def check_run_dirs(configs: Sequence[RunConfig]) -> None:
    """Refuse, before anything runs, a run directory that holds a run of another config (a
    ``run-name`` reused): :class:`fedcal.results.RunNameConflict`, printed as one line."""
    from fedcal.results import check_run_dir, run_dir_for

    for cfg in configs:
        check_run_dir(run_dir_for(cfg), cfg)


def simulator(args: argparse.Namespace, force: bool | None = None):
    """One run of a command's config: resumed, skipped if finished (unless ``force``, by default
    the command's ``--force``), with its progress bar."""
    from fedcal.app.engine import simulate

    from fedcal.tasks import get_task

    def run(cfg: RunConfig):  # simulate refuses a run-name reused for another config itself
        label = get_task(cfg.task).progress_label(cfg)  # "": the bar shows the run directory's name
        return simulate(cfg, progress=not args.no_progress, verbose=args.verbose,
                        force=args.force if force is None else force, desc=label, restart=args.restart)

    return run


def checked_folder(path: str | Path, option: str) -> Path:
    """``path`` as an output folder: refused in one line naming ``option`` when it, or a folder above
    it, is an existing file (``--out results.csv``), before anything runs or is written."""
    p = Path(path)
    for q in (p, *p.parents):
        if q.exists():
            if not q.is_dir():
                raise ConfigError(f"{option} {str(path)!r}: {str(q)!r} is a file, not a folder")
            break
    return p


def readable_tasks(dirs: Sequence[Path]) -> list[str]:
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


def run_dirs_of(paths: Sequence[str], readable: bool = False) -> list[Path]:
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


def image_classifier_runs(dirs: Sequence[Path], what: str) -> dict[Path, RunConfig]:
    """The configs of ``dirs``, refused in one line unless every run is of a task whose final
    model is an image classifier of its ``model`` key on its ``dataset`` key (the train task: a run
    of another task leaves its dataset key at the image default, and reading it would fetch MNIST
    for nothing). ``what`` starts the line: "--runs evaluates", "fedcal posthoc calibrates"."""
    from fedcal.config import get_task, task_names
    from fedcal.results import load_config

    configs = {}
    for d in dirs:
        try:
            configs[d] = load_config(d)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # corrupt JSON, unknown keys, bad values
            raise ConfigError(f"{d}: its config.json cannot be read ({str(exc).split('; known keys')[0]})") from None
    others = [f"{d} (task {c.task})" for d, c in configs.items() if not get_task(c.task).image_classifier]
    if others:
        tasks = ", ".join(t for t in task_names() if get_task(t).image_classifier)
        raise ConfigError(f"{what} image-classifier runs (task = {tasks}), not " + ", ".join(others[:3])
                          + (f" and {len(others) - 3} more" if len(others) > 3 else ""))
    return configs


def parse_ints(text: str | Sequence[int], what: str) -> list[int]:
    """``0,1,2`` or ``0-4`` (non-negative; already parsed by :data:`seeds_type` when it came from
    the command line)."""
    if not isinstance(text, str):
        return list(text)
    try:
        return seeds_type(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def parse_names(text: str | Sequence[str]) -> list[str]:
    """``a, b,c`` as ``["a", "b", "c"]`` (already a list when :func:`names_type` parsed it)."""
    if not isinstance(text, str):
        return list(text)
    return [t.strip() for t in text.split(",") if t.strip()]


def say_replaced(folder: str | Path, names: Sequence[str]) -> None:
    """One line naming the tables in ``folder`` an earlier invocation wrote that this one is about to
    overwrite (nothing when there are none): a report folder never changes silently."""
    old = [str(Path(folder) / n) for n in names if (Path(folder) / n).exists()]
    if old:
        print(f"overwriting the tables an earlier invocation wrote: {', '.join(old)}")


def write_table_and_plot(table, out: Path, name: str, plot) -> None:
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{name}.csv", index=False)
    plot(table, out / f"{name}.png")
    print(f"table: {out / (name + '.csv')}\nplot: {out / (name + '.png')}")
