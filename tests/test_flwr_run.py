"""`flwr run .` — the project as a Flower App through a local SuperLink (slow: ~1 min)."""

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from fedcal.results import load_metrics

ROOT = Path(__file__).resolve().parents[1]


def _kill_local_superlink(flwr_home: Path) -> None:
    # `flwr run` leaves a managed SuperLink running; stop exactly the one using our FLWR_HOME.
    out = subprocess.run(["pgrep", "-f", str(flwr_home)], capture_output=True, text=True).stdout
    for pid in out.split():
        try:
            os.kill(int(pid), signal.SIGTERM)
        except ProcessLookupError:
            pass


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr") is None, reason="flwr CLI not on PATH")
def test_flwr_run_dot_runs_the_tsa_simulation(tmp_path):
    flwr_home = tmp_path / "flwr-home"
    out = tmp_path / "runs"
    env = dict(os.environ, FLWR_HOME=str(flwr_home))
    cmd = ["flwr", "run", ".", "--stream", "--run-config",
           f"dataset='digits' num-clients=6 clients-per-round=3 num-rounds=2 tau=5.0 output-dir='{out}'",
           "--federation-config", "num-supernodes=6"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    finally:
        _kill_local_superlink(flwr_home)
    (run_dir,) = list(out.iterdir())
    df = load_metrics(run_dir)
    assert sorted(df["round"].unique()) == [0, 1, 2]
    assert (run_dir / "DONE").exists()
