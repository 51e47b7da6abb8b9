"""The page builders are modules of the package (fedcal.pages) run as ``python -m fedcal.pages <builder>``:
docs/ holds no builder code, every module that writes something when run is a listed builder, and a
wrong builder name fails in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "fedcal" / "pages"


def test_every_runnable_module_is_a_listed_builder():
    from fedcal.pages.__main__ import BUILDERS

    runnable = sorted(p.stem for p in PAGES.glob("*.py")
                      if p.stem != "__main__" and 'if __name__ == "__main__":' in p.read_text())
    assert list(BUILDERS) == runnable


def test_docs_hold_no_builder_code():
    """What builds docs/ lives in the package, under its house rules (size limits, layers); docs/tools
    keeps only shell scripts of commands and a page's source text."""
    assert sorted(p.name for p in (ROOT / "docs").rglob("*.py")) == []


def test_an_unknown_builder_fails_in_one_line():
    done = subprocess.run([sys.executable, "-m", "fedcal.pages", "build_result"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "unknown builder 'build_result'; choose from" in done.stderr and "build_results" in done.stderr


def test_a_builder_run_by_name_gets_its_arguments_and_its_exit_code():
    """``python -m fedcal.pages inference_alpha ...`` is the module run as a script: its arguments after the
    name, its output the committed table it made (byte for byte), its refusal its own exit code."""
    folders = [f"{a}=docs/results/inference-cifar10-resnet8{s}" for a, s in
               (("0.3", "-alpha0.3"), ("0.5", ""), ("0.8", "-alpha0.8"))]
    done = subprocess.run([sys.executable, "-m", "fedcal.pages", "inference_alpha", *folders], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (ROOT / "docs" / "results" / "inference-cifar10-resnet8-alpha" / "table.md").read_text()
    done = subprocess.run([sys.executable, "-m", "fedcal.pages", "inference_alpha", "nonsense"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "each folder is given as ALPHA=FOLDER" in done.stderr


def test_every_builder_answers_help_with_its_usage_and_runs_nothing(tmp_path, monkeypatch, capsys):
    """``python -m fedcal.pages BUILDER --help`` prints the builder's usage and exits 0 without running it:
    nothing is written where it is asked (a builder that read its arguments by hand used to take
    ``--help`` for its output folder and start its simulations there)."""
    from fedcal.pages.__main__ import BUILDERS, main

    monkeypatch.chdir(tmp_path)
    for name in BUILDERS:
        assert main([name, "--help"]) == 0, name
        out = capsys.readouterr().out
        assert out.startswith(f"usage: python -m fedcal.pages {name}"), (name, out[:200])
        assert list(tmp_path.iterdir()) == [], (name, list(tmp_path.iterdir()))
