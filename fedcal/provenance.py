"""Which code made a run: recorded next to its config, checked when a finished run is reused.

A run's identity (:func:`fedcal.results.config_hash`) is what it computes, not which code
computed it, so a sweep re-run after a code change skips the runs it already finished. That
reuse is wanted (sweeps are resumable) but must never be silent: every run stores the
:func:`provenance` of the process that started it in its ``config.json``, every final table
carries a ``code`` column (:func:`fedcal.results.code_of`), and reusing a finished run made by
other code logs one line naming both (:func:`fedcal.results.reuse_note`); ``--force`` re-runs
it.

The code identity is the git commit of the checkout fedcal is imported from, plus, when that
checkout has uncommitted changes to ``fedcal/`` or ``pyproject.toml``, a hash of them (``<commit>+<diff hash>``): two runs made by
the same dirty tree share it, two made by different edits do not. A fedcal installed from a
wheel (no checkout) is identified by its version (``fedcal 0.1.0``).
"""

from __future__ import annotations

import functools
import hashlib
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

#: packages whose versions change what a run computes (those installed are recorded)
PACKAGES = ("torch", "torchvision", "numpy", "scikit-learn", "flwr", "ray", "transformers", "peft", "numba",
            "adversarial-robustness-toolbox")
_PACKAGE_DIR = Path(__file__).resolve().parent


def _git(root: Path, *args: str) -> bytes | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):  # no git, or it hung
        return None
    return done.stdout if done.returncode == 0 else None


def _checkout() -> Path | None:
    """The git work tree fedcal is imported from, or None (an installed wheel: its site-packages
    may sit inside some other repository, whose commit says nothing about fedcal)."""
    top = _git(_PACKAGE_DIR, "rev-parse", "--show-toplevel")
    if top is None:
        return None
    root = Path(top.decode().strip()).resolve()
    return root if (root / "fedcal" / "__init__.py").resolve() == _PACKAGE_DIR / "__init__.py" else None


def _code(root: Path | None) -> tuple[str, str | None, bool | None]:
    """(code identity, commit, dirty) of the checkout at ``root`` (see the module docstring)."""
    from fedcal import __version__

    if root is None:
        return f"fedcal {__version__}", None, None
    commit = (_git(root, "rev-parse", "HEAD") or b"").decode().strip() or None
    # what computes a run: the package and its declared dependencies (docs edits are not code)
    diff = _git(root, "diff", "HEAD", "--no-ext-diff", "--binary", "--", "fedcal", "pyproject.toml")
    # untracked source files of the package change the code as much as edited ones do
    untracked = _git(root, "ls-files", "--others", "--exclude-standard", "-z", "--", "fedcal")
    if commit is None or diff is None or untracked is None:
        return f"fedcal {__version__} (git unreadable)", commit, None
    h = hashlib.sha256(diff)
    for name in sorted(n for n in untracked.decode().split("\0") if n.endswith(".py")):
        h.update(name.encode())
        h.update((root / name).read_bytes())
    dirty = bool(diff) or any(n.endswith(".py") for n in untracked.decode().split("\0"))
    return (f"{commit[:12]}+{h.hexdigest()[:8]}" if dirty else commit[:12]), commit, dirty


@functools.lru_cache(maxsize=1)
def provenance() -> dict[str, Any]:
    """What made runs started by this process: ``code`` (the identity above), ``git_commit``,
    ``git_dirty`` (None outside a checkout), fedcal's, Python's and :data:`PACKAGES`' versions.
    Taken once per process — the code a process runs is the code it imported at its start."""
    from fedcal import __version__

    code, commit, dirty = _code(_checkout())
    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            pass
    return {"code": code, "git_commit": commit, "git_dirty": dirty, "fedcal": __version__,
            "python": platform.python_version(), "packages": packages, "machine": machine()}


def machine() -> dict[str, Any]:
    """The hardware a process ran on: CPU count, torch's thread count and the CUDA devices it can
    see (what ``device=auto`` trains on). Recorded, never compared by the reuse check: another
    machine computes the same run, but CUDA kernels and thread counts round differently, and over
    many rounds that moves a model about as far as a change of seed (docs/results.md shows one
    configuration made on 2 CPU cores and on an H100 side by side)."""
    import os

    import torch

    cuda = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    return {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "cuda": cuda}
