"""fedcal's drop-in strategies against the newest Flower, in a venv of its own (not part of CI).

pyproject.toml pins ``flwr`` to a tested range. This script says whether its upper end still
holds: it makes a venv over this machine's packages (``--system-site-packages``, so torch is not
downloaded again), installs the newest Flower there — the nightly ``flwr-nightly`` by default,
whose ``flwr`` package shadows the installed one in that venv; ``--package flwr`` for the newest
release — and runs the drop-in tests (Flower's argument names, the same aggregate as Flower's
strategies, ``Strategy.start``'s arguments, the grids' ``pull_messages``) with this checkout's
fedcal, then the same tests with this interpreter's Flower, so a failure is told apart from one
the installed Flower has too. It ends with one line per Flower: what broke, or "all passed".

    python benchmarks/flwr_newest.py > docs/results/dependencies/flwr-newest.txt

Exit status 0 whatever the tests say (it reports; CI does not run it); 2 when the venv or the
install cannot be made (e.g. offline).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the drop-in tests: Flower's strategies' arguments and aggregates, start/should_stop, the grids
TESTS = ["tests/test_flower_dropin.py", "tests/test_strategies.py", "tests/test_inprocess.py"]


#: the distribution whose files a ``flwr`` package belongs to, and its version (``flwr.__version__``
#: reads the ``flwr`` distribution's metadata, which the venv sees from the machine's site-packages
#: even where ``flwr-nightly``'s package shadows it)
_WHICH = """
import importlib.metadata as m, pathlib, flwr
where = pathlib.Path(flwr.__file__).resolve().parent
for dist in ("flwr-nightly", "flwr"):
    try:
        init = pathlib.Path(m.distribution(dist).locate_file("flwr/__init__.py")).resolve()
    except m.PackageNotFoundError:
        continue
    if init.parent == where:
        print(dist, m.version(dist), where)
        break
else:
    print("flwr", flwr.__version__, where)
"""


def flwr_version(python: str) -> str:
    """``<distribution> <version> <folder>`` of the ``flwr`` package ``python`` imports."""
    out = subprocess.run([python, "-c", _WHICH], capture_output=True, text=True)
    return out.stdout.strip() or f"(flwr does not import: {out.stderr.strip().splitlines()[-1:]})"


def run_tests(python: str, label: str) -> tuple[str, list[str]]:
    """pytest of :data:`TESTS` under ``python`` with this checkout first on the path: (its result
    line, the failed or erroring test ids)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([python, "-m", "pytest", *TESTS, "-q", "-p", "no:cacheprovider", "-rfE"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    summary = lines[-1] if lines else proc.stderr.strip()[-500:]
    broke = [m.group(1) for m in re.finditer(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)]
    print(f"\n## {label}: {flwr_version(python)}")
    print("\n".join(line for line in lines if line.startswith(("FAILED", "ERROR"))) or "(no failure)")
    print(summary)
    return summary, broke


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", default="flwr-nightly",
                        help="what to pip install --upgrade into the venv (default: flwr-nightly; flwr: the newest release)")
    parser.add_argument("--venv", type=Path, default=None, help="where to make the venv (default: a temporary folder)")
    args = parser.parse_args(argv)
    where = args.venv or Path(tempfile.mkdtemp(prefix="fedcal-flwr-newest-"))
    venv.EnvBuilder(system_site_packages=True, with_pip=True, clear=True).create(where)
    python = str(where / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "install", "--quiet", "--upgrade", "--pre", args.package],
                             capture_output=True, text=True)
    if install.returncode != 0:
        print(f"could not install {args.package} into {where}: {install.stderr.strip()[-800:]}", file=sys.stderr)
        return 2
    print(f"# fedcal's drop-in tests ({' '.join(TESTS)}) with this checkout's fedcal, against the newest Flower")
    print(f"# ({args.package}, pip install --upgrade --pre, in a venv over this machine's packages) and against the")
    print("# installed Flower. Made by: python benchmarks/flwr_newest.py > docs/results/dependencies/flwr-newest.txt")
    for name in ("flwr", "flwr-nightly"):  # what the index serves, for the record
        index = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "--pre", name],
                               capture_output=True, text=True).stdout.strip().splitlines()
        print(f"# the index's newest {name}: {index[0] if index else '(index not reachable)'}")
    newest, newest_broke = run_tests(python, f"newest ({args.package})")
    installed, installed_broke = run_tests(sys.executable, "installed")
    print("\n## what broke")
    for label, broke in ((f"newest ({' '.join(flwr_version(python).split()[:2])})", newest_broke),
                         (f"installed ({' '.join(flwr_version(sys.executable).split()[:2])})", installed_broke)):
        only = [t for t in broke if label.startswith("installed") or t not in installed_broke]
        print(f"{label}: " + (("broke: " + ", ".join(only)) if only else "all passed"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
