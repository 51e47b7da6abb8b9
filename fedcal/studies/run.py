"""``fedcal run``: one Flower simulation of any task, from run-config overrides."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from fedcal.config import RunConfig, describe, groups
from fedcal.studies.common import add_run_options, config_overrides, refuse_unread_keys, simulator


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


def cmd_run(args: argparse.Namespace) -> int:
    from fedcal.tasks import get_task

    overrides = config_overrides(args)
    cfg = RunConfig.from_flower(overrides)
    refuse_unread_keys(overrides, [cfg])
    run_dir = simulator(args)(cfg)
    print(f"run dir: {run_dir}")
    print(get_task(cfg.task).summarise(run_dir))
    return 0


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("run", "run one Flower simulation", epilog=run_config_help())
    add_run_options(p)
    p.set_defaults(func=cmd_run)
