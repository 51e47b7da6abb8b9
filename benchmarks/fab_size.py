"""Size of the Flower App Bundle (FAB) that `flwr build` / `flwr run .` make of this repository,
with pyproject.toml's ``fab-include`` and without it (the baseline: Flower's built-in patterns
alone, as before the key existed), both built in this run by Flower's own builder
(``flwr.cli.build.build_fab_from_files``) from the files on disk.

    python benchmarks/fab_size.py | tee docs/results/benchmarks/fab_size.txt

Prints bytes and files per top-level folder for each, and the ratio.
"""

from __future__ import annotations

import collections
import io
import sys
import zipfile
from pathlib import Path

import tomli
import tomli_w
from flwr.cli.build import build_fab_from_files
from flwr.cli.utils import collect_files

ROOT = Path(__file__).resolve().parents[1]


def fab(files: dict) -> tuple[int, collections.Counter, collections.Counter]:
    data, _ = build_fab_from_files(files)
    counts, sizes = collections.Counter(), collections.Counter()
    for info in zipfile.ZipFile(io.BytesIO(data)).infolist():
        top = info.filename.split("/")[0]
        counts[top] += 1
        sizes[top] += info.compress_size
    return len(data), counts, sizes


def main() -> None:
    files = collect_files(ROOT)
    config = tomli.loads((ROOT / "pyproject.toml").read_text())
    app = config["tool"]["flwr"]["app"]
    if "fab-include" not in app:
        sys.exit("pyproject.toml has no [tool.flwr.app] fab-include")
    baseline_config = tomli.loads((ROOT / "pyproject.toml").read_text())
    for key in ("fab-include", "fab-exclude"):
        baseline_config["tool"]["flwr"]["app"].pop(key, None)
    results = {
        "baseline (no fab-include)": fab({**files, "pyproject.toml": tomli_w.dumps(baseline_config).encode()}),
        f"fab-include = {app['fab-include']}": fab(files),
    }
    for label, (size, counts, sizes) in results.items():
        print(f"{label}: {size:,} bytes, {sum(counts.values())} files")
        for top in sorted(counts, key=lambda t: -sizes[t]):
            print(f"    {top:<16} {counts[top]:>4} files {sizes[top]:>10,} bytes")
    (base, *_), (new, *_) = results.values()
    print(f"ratio: {new / base:.3f} of the baseline")


if __name__ == "__main__":
    main()
