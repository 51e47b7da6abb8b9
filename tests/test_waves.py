"""The GPU waves under benchmarks/waves/ run where a failure is costly (a lent device's few minutes,
or hours of CPU): each must be valid bash and name only run-config keys fedcal knows, so a renamed
or misspelt key fails here rather than on the device."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

WAVES = sorted((Path(__file__).resolve().parents[1] / "benchmarks" / "waves").glob("*.sh"))
# a run-config key on a command line: lower-case words joined by hyphens, then "=" (bash variables
# cannot hold a hyphen, so an assignment is never taken for a key)
KEY = re.compile(r"(?<![\w$/.-])([a-z][a-z0-9]*(?:-[a-z0-9]+)+)=")


def test_there_are_waves():
    assert {p.name for p in WAVES} >= {"distill_table1.sh", "distill_replays.sh"}


@pytest.mark.parametrize("wave", WAVES, ids=lambda p: p.name)
def test_a_wave_is_valid_bash(wave):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    done = subprocess.run([bash, "-n", str(wave)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("wave", WAVES, ids=lambda p: p.name)
def test_a_wave_names_only_known_run_config_keys(wave):
    from fedcal.config import RunConfig

    known = set(RunConfig().to_flower())
    code = "\n".join(line.split("#", 1)[0] for line in wave.read_text().splitlines())
    named = set(KEY.findall(code))
    assert named, f"{wave.name}: no run-config key found (the pattern no longer matches the script)"
    assert named <= known, f"{wave.name}: unknown run-config keys {sorted(named - known)}"


def test_the_key_pattern_catches_a_misspelt_key():
    line = 'C="data-dir=x num-clients=6 dst-lora-layer=2" RUNS=${RUNS:-runs/a-b} --out "$OUT/x-y"'
    assert set(KEY.findall(line)) == {"data-dir", "num-clients", "dst-lora-layer"}
