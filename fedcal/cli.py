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
  fedcal byzantine --ratios 0.1,0.25 --seeds 0-2   every strategy vs ALIE, IPM, Min-Max/Sum, Fang, backdoor
  fedcal data mnist cifar10 --out data     write the .npz files runs read with data-dir=data (torchvision download)

Overrides are Flower run-config keys with TOML values (tau=5 dataset="cifar10"; bare words
are strings), before or after the options; -c/--run-config "k=v k2=v2" is accepted too, like
flwr run. "fedcal run --help" lists every key with its default and range.
"""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
from typing import Any, Sequence

from fedcal import __version__
from fedcal.config import ConfigError
from fedcal.studies import (analyses, byzantine, data, defense, demo, detect, distill, inference, lm, report,
                            robustness, run, runs, sweep, taus)
from fedcal.studies.common import checked_folder, refuse_cell_options_without_cluster

EXIT_INTERRUPTED = 130  # the shell's code for a command ended by SIGINT (128 + 2)
#: the studies whose commands `fedcal` offers, in the order `fedcal --help` lists them
STUDIES = (run, taus, sweep, report, runs, analyses, inference, robustness, distill, lm, defense, detect, demo,
           byzantine, data)


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


class _OneLineErrors(argparse.ArgumentParser):
    """A parser whose errors (a bad option value, an unknown option, a missing argument) are one
    line on stderr, ``fedcal <command>: error: …``, and exit 2: the usage block argparse prints
    above them is what ``--help`` is for."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help)\n")


class _Parser(_OneLineErrors):
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


LOG_LEVELS = ("debug", "info", "warning", "error")


def _add_logging_options(p: argparse.ArgumentParser, *, sub: bool = False) -> None:
    """``--quiet`` / ``--log-level``, global options accepted before or after the command (a
    command's copy has no default, so it never overwrites the value given before the command)."""
    default = argparse.SUPPRESS if sub else None
    p.add_argument("--log-level", choices=LOG_LEVELS, default=default if sub else "warning", type=str.lower,
                   help="fedcal's messages on stderr from this level on; debug also shows Flower's and Ray's logs")
    p.add_argument("-q", "--quiet", action="store_true", default=default if sub else False,
                   help="errors only, no progress bars (tables and the paths written are still printed)")


def _apply_logging_options(args: argparse.Namespace, logger: logging.Logger, handler: logging.Handler) -> None:
    level = "error" if args.quiet else args.log_level
    logger.setLevel(level.upper())
    handler.setLevel(level.upper())
    if args.quiet and hasattr(args, "no_progress"):
        args.no_progress = True
    if level == "debug" and hasattr(args, "verbose"):
        args.verbose = True


def build_parser() -> argparse.ArgumentParser:
    """The `fedcal` parser: each study adds its sub-commands (arguments and the function that runs them)."""
    parser = _OneLineErrors(prog="fedcal", description=__doc__, formatter_class=_HelpFormatter)
    parser.add_argument("--version", action="version", version=f"fedcal {__version__}",
                        help="print fedcal's version and exit")
    _add_logging_options(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    def add(name: str, help: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs.setdefault("description", help[0].upper() + help[1:] + ".")
        p = sub.add_parser(name, help=help, formatter_class=_HelpFormatter, **kwargs)
        _add_logging_options(p, sub=True)
        return p

    for study in STUDIES:
        study.add_commands(add)
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The sub-command parsers of ``parser``, by command name."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


class _OneLine(logging.Handler):
    """fedcal's own warnings (e.g. an unfinished run left out of a table) as ``fedcal: warning: …``
    lines on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        from fedcal.progress import write_above_bars  # above a progress bar, never through it

        write_above_bars(f"fedcal: {record.levelname.lower()}: {record.getMessage()}")


def _ending(argv: Sequence[str] | None) -> None:
    """A stopped command's process is about to exit (``argv`` None: run as the ``fedcal`` command,
    not called from Python): freeze the heap, so the interpreter's last garbage collection does
    not walk every object torch, Ray and pandas made (5 of the 7 s a stopped Ray run took to exit
    on 2 busy cores)."""
    if argv is None:
        import gc

        gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``fedcal`` command; its exit code (1: a run failed, another process writes its run
    directory, or ``runs --check`` found an unfinished run; 2: bad config or input — including a
    reused run-name and a report with no finished run —; 130: interrupted; 143: terminated)."""
    from fedcal.extras import MissingExtraError
    from fedcal.results import RunFailed  # the run store (pandas) loads only with a command
    from fedcal.signals import EXIT_TERMINATED, Terminated, sigterm_raises

    logger = logging.getLogger("fedcal")
    handler = _OneLine(logging.WARNING)
    logger.addHandler(handler)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        _apply_logging_options(args, logger, handler)
        refuse_cell_options_without_cluster(args, _subparsers(parser)[args.command])
        for option in ("out", "report", "output"):  # every command's output folder, checked before it runs
            if isinstance(getattr(args, option, None), str):
                checked_folder(getattr(args, option), f"--{option}")
        with sigterm_raises():  # SIGTERM ends a run like Ctrl-C: logged in its run.log, workers stopped
            return args.func(args)
    except (ConfigError, FileNotFoundError, MissingExtraError) as exc:  # bad config, a run dir without its
        print(f"fedcal: error: {exc}", file=sys.stderr)  # (final) files, or a feature's extra not installed
        return 2
    except RunFailed as exc:  # the run ended without a result; what it logged stays in its run store
        print(f"fedcal: run failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback; finished rounds are in the run store
        print("fedcal: interrupted", file=sys.stderr)
        _ending(argv)
        return EXIT_INTERRUPTED
    except Terminated:  # SIGTERM: the same, with the shell's status for it
        print("fedcal: terminated", file=sys.stderr)
        _ending(argv)
        return EXIT_TERMINATED
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


if __name__ == "__main__":
    sys.exit(main())
