"""``python -m fedcal.config --write-pyproject | --check-pyproject [PATH]``: the
``[tool.flwr.app.config]`` block of pyproject.toml written from, or checked against, the settings
(:mod:`fedcal.config.pyproject`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedcal.config.pyproject import stale_keys, with_block


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedcal.config", description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write-pyproject", action="store_true", help="rewrite the block from the settings")
    action.add_argument("--check-pyproject", action="store_true", help="exit 1 if the block is not current")
    parser.add_argument("path", nargs="?", default="pyproject.toml", type=Path, help="default: ./pyproject.toml")
    args = parser.parse_args(argv)
    try:
        text = args.path.read_text()
        if args.check_pyproject:
            problem = stale_keys(text, args.path)
            if problem:
                print(problem, file=sys.stderr)
                return 1
            print(f"{args.path}: [tool.flwr.app.config] is current")
            return 0
        new = with_block(text, args.path)
    except (OSError, ValueError) as exc:
        print(f"python -m fedcal.config: {exc}", file=sys.stderr)
        return 2
    if new != text:
        args.path.write_text(new)
    print(f"{args.path}: [tool.flwr.app.config] {'rewritten' if new != text else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
