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


def _flwr_run(tmp_path: Path, run_config: str, supernodes: int) -> Path:
    """`flwr run .` with its own FLWR_HOME; returns the one run directory it wrote."""
    flwr_home = tmp_path / "flwr-home"
    out = tmp_path / "runs"
    env = dict(os.environ, FLWR_HOME=str(flwr_home))
    cmd = ["flwr", "run", ".", "--stream", "--run-config", f"{run_config} output-dir='{out}'",
           "--federation-config", f"num-supernodes={supernodes}"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    finally:
        _kill_local_superlink(flwr_home)
    (run_dir,) = list(out.iterdir())
    return run_dir


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr") is None, reason="flwr CLI not on PATH")
def test_flwr_run_dot_runs_the_tsa_simulation(tmp_path):
    run_dir = _flwr_run(tmp_path, "dataset='digits' num-clients=6 clients-per-round=3 num-rounds=2 tau=5.0", 6)
    df = load_metrics(run_dir)
    assert sorted(df["round"].unique()) == [0, 1, 2]
    assert (run_dir / "DONE").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr") is None, reason="flwr CLI not on PATH")
def test_flwr_run_dot_runs_robust_federated_inference(tmp_path):
    """The same Flower App with task='inference': clients train, answer query messages, the
    server writes the accuracy table of every aggregator under every attack."""
    import pandas as pd

    run_dir = _flwr_run(tmp_path, "task='inference' dataset='digits' num-clients=5 inf-f=1 dirichlet-alpha=0.5 "
                        "lr=0.1 batch-size=32 inf-local-epochs=3 agg-epochs=30 agg-adv-epochs=1 agg-hidden=16 "
                        "inf-pgd-steps=3 inf-f-curve=false inf-amp-curve=''", 5)
    assert (run_dir / "DONE").exists()
    acc = pd.read_csv(run_dir / "accuracy.csv")
    assert len(acc) == 6 * 8 and acc["accuracy"].between(0, 1).all()
    assert (pd.read_csv(run_dir / "answers.csv")["clients"] == 5).all()
