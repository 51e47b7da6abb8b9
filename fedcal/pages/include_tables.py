"""Refresh the generated tables pasted into a docs page.

    python -m fedcal.pages include_tables docs/defense.md

Every block between ``<!-- table: PATH -->`` and ``<!-- /table -->`` is replaced by the file at
PATH (relative to the repository root), so the numbers on the page are exactly those the command
shown above the block wrote; ``<!-- output: PATH -->`` … ``<!-- /output -->`` does the same for
a plain-text output (a benchmark's printout), inside a code fence so Markdown keeps its columns;
``<!-- example: PATH -->`` … ``<!-- /example -->`` pastes the region of a Python file between its
``# --- example: … ---`` and ``# --- end of example ---`` lines (a test's code shown as a worked
example, so the page shows code that runs). ``--check`` exits 1 instead of writing when a block
is stale.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from fedcal.pages import ROOT
BLOCK = re.compile(r"(<!-- (?P<kind>table|output|example): (?P<path>[^ ]+) -->\n)(?P<body>.*?)(<!-- /(?P=kind) -->)",
                   re.S)
EXAMPLE = re.compile(r"^# --- example: [^\n]* ---\n(?P<code>.*?)^# --- end of example ---$", re.S | re.M)


def example_of(path: Path) -> str:
    """The marked example region of the Python file at ``path``."""
    m = EXAMPLE.search(path.read_text())
    if m is None:
        raise SystemExit(f"{path}: no '# --- example: ... ---' ... '# --- end of example ---' region")
    return m.group("code")


def refreshed(text: str) -> str:
    """``text`` with every table block replaced by its file's current content."""
    def fill(m: re.Match) -> str:
        path = ROOT / m.group("path")
        body = example_of(path) if m.group("kind") == "example" else path.read_text()
        body += "" if body.endswith("\n") else "\n"
        if m.group("kind") == "output":
            body = "```\n" + body + "```\n"
        elif m.group("kind") == "example":
            body = "```python\n" + body + "```\n"
        return m.group(1) + body + m.group(5)

    return BLOCK.sub(fill, text)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m fedcal.pages include_tables", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pages", nargs="+")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    stale = []
    for page in map(Path, args.pages):
        text = page.read_text()
        new = refreshed(text)
        if new != text:
            if args.check:
                stale.append(str(page))
            else:
                page.write_text(new)
    for page in stale:
        print(f"stale tables in {page}: run python -m fedcal.pages include_tables {page}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
