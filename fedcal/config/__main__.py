"""``python -m fedcal.config --write-pyproject | --check-pyproject | --write-stub | --check-stub [PATH]``:
the ``[tool.flwr.app.config]`` block of pyproject.toml (:mod:`fedcal.config.pyproject`) or the
``RunConfig`` stub fedcal/config/run_config.pyi (:mod:`fedcal.config.stub`) written from, or checked
against, the settings."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedcal.config.pyproject import stale_keys, with_block
from fedcal.config.stub import STUB_PATH, stale_stub, stub_text


def _stub(args: argparse.Namespace) -> int:
    path = args.path or STUB_PATH
    if args.check_stub:
        problem = stale_stub(path)
        if problem:
            print(problem, file=sys.stderr)
            return 1
        print(f"{path}: the RunConfig stub is current")
        return 0
    new = stub_text()
    old = path.read_text() if path.exists() else None
    if new != old:
        path.write_text(new)
    print(f"{path}: the RunConfig stub {'written' if new != old else 'already current'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedcal.config", description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write-pyproject", action="store_true", help="rewrite the block from the settings")
    action.add_argument("--check-pyproject", action="store_true", help="exit 1 if the block is not current")
    action.add_argument("--write-stub", action="store_true", help="write the RunConfig stub from the settings")
    action.add_argument("--check-stub", action="store_true", help="exit 1 if the stub is not current")
    parser.add_argument("path", nargs="?", type=Path,
                        help=f"default: ./pyproject.toml, or {STUB_PATH.relative_to(STUB_PATH.parents[2])} for the stub")
    args = parser.parse_args(argv)
    try:
        if args.write_stub or args.check_stub:
            return _stub(args)
        path = args.path or Path("pyproject.toml")
        text = path.read_text()
        if args.check_pyproject:
            problem = stale_keys(text, path)
            if problem:
                print(problem, file=sys.stderr)
                return 1
            print(f"{path}: [tool.flwr.app.config] is current")
            return 0
        new = with_block(text, path)
    except (OSError, ValueError, TypeError) as exc:
        print(f"python -m fedcal.config: {exc}", file=sys.stderr)
        return 2
    if new != text:
        path.write_text(new)
    print(f"{path}: [tool.flwr.app.config] {'rewritten' if new != text else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
