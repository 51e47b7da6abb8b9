"""What the study commands share: their run-config options, parsers of option lists, the
checks every grid makes before its first run, and the τ × seed case study of a task."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any, Sequence

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


def cluster_of(args: argparse.Namespace):
    """The ``--cluster`` options as a :class:`fedcal.app.cluster.ClusterSpec`, or None."""
    if not getattr(args, "cluster", ""):
        return None
    from fedcal.app.cluster import ClusterSpec

    try:
        return ClusterSpec(args.cluster, args.cell_cpus, args.cell_gpus, args.cell_retries)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def parse_taus(text: str) -> list[float]:
    try:
        return [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ConfigError(f"--taus must be comma-separated numbers, got {text!r}") from None


def check_run_dirs(configs: Sequence[RunConfig]) -> None:
    """Refuse, before anything runs, a run directory that holds a run of another config (a
    ``run-name`` reused): :class:`fedcal.results.RunNameConflict`, printed as one line."""
    from fedcal.results import check_run_dir, run_dir_for

    for cfg in configs:
        check_run_dir(run_dir_for(cfg), cfg)


def simulator(args: argparse.Namespace):
    from fedcal.app.engine import simulate

    from fedcal.tasks import get_task

    def run(cfg: RunConfig):  # simulate refuses a run-name reused for another config itself
        label = get_task(cfg.task).label(cfg)  # "": the bar shows the run directory's name
        return simulate(cfg, progress=not args.no_progress, verbose=args.verbose, force=args.force, desc=label,
                        restart=args.restart)

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


def parse_ints(text: str, what: str) -> list[int]:
    """``0,1,2`` or ``0-4``."""
    try:
        out: list[int] = []
        for part in (p.strip() for p in text.split(",") if p.strip()):
            lo, _, hi = part.partition("-")
            out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
        return out
    except ValueError:
        raise ConfigError(f"{what} must be integers such as 0,1,2 or 0-4, got {text!r}") from None


def parse_names(text: str) -> list[str]:
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
