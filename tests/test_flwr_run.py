"""`flwr run .` — the project as a Flower App through a local SuperLink (slow: ~1 min each).

Run as the README writes it, on an offline-safe footing: with
``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1`` the local SuperLink that `flwr run` starts
uses the installed fedcal instead of `uv sync`-ing the app's dependencies (which needs the
internet; when it fails the simulation never runs and `flwr run` still exits 0). So each
test checks the run directory (DONE, every round's metrics), not only the exit status.
"""

import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from fedcal.results import load_metrics
from tests.deploy_harness import Deployment, Proc, free_port, tail

ROOT = Path(__file__).resolve().parents[1]
OFFLINE_ENV = {"FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}  # as in the README


def _local_superlink_pids(log_file: Path) -> list[int]:
    """Pids of the `flower-superlink` that `flwr run` started for this FLWR_HOME: the process
    whose argv holds ``--log-file <log_file>`` (an exact argument, not a pattern)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for i, arg in enumerate(argv[:-1]):
            if arg == b"--log-file" and argv[i + 1] == str(log_file).encode():
                pids.append(int(entry.name))
    return pids


def _stop_local_superlink(tmp_path: Path, log_file: Path) -> None:
    # `flwr run` leaves its managed SuperLink running (detached); stop exactly that one, by pid,
    # with whatever it spawned (SuperExec, flwr-simulation).
    dep = Deployment(tmp_path)
    dep.procs += [Proc(f"local-superlink-{pid}", _Adopted(pid), log_file)
                  for pid in _local_superlink_pids(log_file)]
    dep.stop()


class _Adopted:
    """The part of ``subprocess.Popen`` that ``Deployment.stop`` uses, for a pid we did not fork
    (the local SuperLink is started detached by `flwr run`)."""

    def __init__(self, pid: int):
        self.pid = pid

    def poll(self):
        return None if Path(f"/proc/{self.pid}").exists() else 0

    def send_signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None):
        deadline = time.monotonic() + (timeout or 0)
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.1)
        return 0


def _flwr_run(tmp_path: Path, run_config: str, supernodes: int, _capture: dict | None = None,
              **env_extra: str) -> Path:
    """`flwr run .` with its own FLWR_HOME and local SuperLink port (and ``env_extra`` in its
    environment); returns the run directory (and puts the streamed log in ``_capture["streamed"]``)."""
    flwr_home = tmp_path / "flwr-home"
    out = tmp_path / "runs"
    log_file = flwr_home / "local-superlink" / "superlink.log"
    env = dict(os.environ, FLWR_HOME=str(flwr_home), **OFFLINE_ENV,
               # A local SuperLink of our own (not one another process left on the default port).
               FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(free_port()),
               FLWR_LOCAL_CONTROL_API_PORT=str(free_port()), **env_extra)
    cmd = ["flwr", "run", ".", "--stream", "--run-config", f"{run_config} output-dir='{out}'",
           "--federation-config", f"num-supernodes={supernodes}"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    finally:
        _stop_local_superlink(tmp_path, log_file)
    context = f"rc={proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}\n{tail(log_file)}"
    assert proc.returncode == 0, context
    # Nobody tried to install the app's dependencies at run time. (Without the variable, offline,
    # the streamed log shows "uv sync failed", Flower exit code 608, no DONE, and rc 0.)
    streamed = proc.stdout + proc.stderr + tail(log_file, 1 << 22)
    if _capture is not None:
        _capture["streamed"] = streamed
    for sign in ("Installing application dependencies", "uv sync"):
        assert sign not in streamed, context
    runs = list(out.iterdir()) if out.exists() else []
    assert len(runs) == 1, f"expected one run directory in {out}, got {runs}\n{context}"
    assert (runs[0] / "DONE").exists(), f"no DONE in {runs[0]}\n{context}"
    return runs[0]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr") is None, reason="flwr CLI not on PATH")
def test_flwr_run_dot_runs_the_tsa_simulation(tmp_path):
    run_dir = _flwr_run(tmp_path, "dataset='digits' num-clients=6 clients-per-round=3 num-rounds=2 tau=5.0", 6)
    df = load_metrics(run_dir)
    assert sorted(df["round"].unique()) == [0, 1, 2]
    for rnd in (0, 1, 2):
        got = df[df["round"] == rnd].set_index("metric")["value"]
        for name in ("accuracy", "ece", "sece", "brier", "nll"):
            assert name in got.index and math.isfinite(float(got[name])), (rnd, name, got.to_dict())
    assert set(df["num-clients"]) == {6} and set(df["dataset"]) == {"digits"}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr") is None, reason="flwr CLI not on PATH")
def test_flwr_run_dot_runs_calguard_and_writes_its_audit(tmp_path):
    """strategy='calguard' through a local SuperLink and Ray: every round's replies are audited
    (signature, score, decision) in aggregation.csv, weights summing to 1 per round."""
    import pandas as pd

    run_dir = _flwr_run(tmp_path, "dataset='digits' num-clients=6 clients-per-round=3 num-rounds=2 tau=5.0 "
                                  "strategy='calguard' root-size=40", 6)
    audit = pd.read_csv(run_dir / "aggregation.csv")
    assert audit.groupby("round").size().to_dict() == {1: 3, 2: 3}
    assert audit.groupby("round")["weight"].sum().round(6).tolist() == [1.0, 1.0]
    assert {"scale_shift", "score", "decision"} <= set(audit.columns) and audit["scale_shift"].notna().all()
    assert set(audit["partition_id"]) <= set(range(6))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr") is None, reason="flwr CLI not on PATH")
def test_flwr_run_dot_runs_robust_federated_inference(tmp_path):
    """The same Flower App with task='inference': clients train, answer query messages, the
    server writes the accuracy table of every aggregator under every attack."""
    import pandas as pd

    run_dir = _flwr_run(tmp_path, "task='inference' dataset='digits' num-clients=5 inf-f=1 dirichlet-alpha=0.5 "
                        "lr=0.1 batch-size=32 inf-local-epochs=3 agg-epochs=30 agg-adv-epochs=1 agg-hidden=16 "
                        "inf-pgd-steps=3 inf-f-curve=false inf-amp-curve=''", 5)
    from fedcal.config import RunConfig
    from fedcal.inference.evaluate import AGGREGATOR_NAMES

    # every aggregator (inf-aggregators='' = all) except the logit-space purifiers, which are built
    # only when the clients answer with logits (inf-client-output='logits'), under every default attack
    cfg = RunConfig.from_flower({"task": "inference"})
    assert cfg.inf_client_output != "logits" and not cfg.inference_aggregators
    aggregators = [a for a in AGGREGATOR_NAMES if not a.endswith("_logit")]
    acc = pd.read_csv(run_dir / "accuracy.csv")
    assert sorted(set(acc["aggregator"])) == sorted(aggregators)
    assert sorted(set(acc["attack"])) == sorted(cfg.inference_attacks)
    assert len(acc) == len(aggregators) * len(cfg.inference_attacks) and acc["accuracy"].between(0, 1).all()
    assert (pd.read_csv(run_dir / "answers.csv")["clients"] == 5).all()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr") is None, reason="flwr CLI not on PATH")
def test_flwr_run_dot_runs_rfd_lora_with_heterogeneous_ranks_and_a_backdoor_client(tmp_path):
    """task='distill' through Flower's Simulation Engine: 3 SuperNodes with LoRA ranks 2, 4 and 8
    (one of them a backdoor client), a tiny backbone pretrained into the test's own cache; every
    round all three anchor-logit replies are accepted and weigh the same whatever the rank."""
    run_dir = _flwr_run(tmp_path, "task='distill' dst-corpus='synthetic' num-clients=3 dst-ranks='2,4,8' "
                        "dst-backdoor-ratio=0.3 dst-rounds=2 dst-groups=3 dst-bb-hidden=16 dst-bb-layers=1 "
                        "dst-bb-intermediate=32 dst-bb-vocab=120 dst-bb-steps=10 dst-max-length=16 batch-size=16 "
                        "dst-distill-steps=3 dst-student-rank=4 dst-backbone='' dst-lora-targets='query,value,word_embeddings'", 3, FEDCAL_CACHE_DIR=str(tmp_path / "cache"))
    df = load_metrics(run_dir)
    got = df.pivot_table(index="round", columns="metric", values="value")
    assert list(got.index) == [0, 1, 2]
    for name in ("ca", "ra", "asr"):
        assert got[name].between(0, 1).all(), (name, got[name].to_dict())
    assert (got.loc[[1, 2], "replies_accepted"] == 3).all() and (got.loc[[1, 2], "replies_rejected"] == 0).all()
    sizes = got.loc[[1, 2], ["upload_bytes_r2", "upload_bytes_r4", "upload_bytes_r8"]]
    assert (sizes.nunique(axis=1) == 1).all()  # the logits' size does not depend on the rank
    assert (tmp_path / "cache" / "backbones").is_dir()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr") is None, reason="flwr CLI not on PATH")
def test_flwr_run_dot_runs_the_language_model_case_study(tmp_path):
    """task='lm' through Flower's Simulation Engine: 3 SuperNodes (one TSA attacker at τ 2) fine-tune
    a test-sized GPT-2 pretrained into the test's own cache on the synthetic play; every reply is
    accepted, the token metrics and the sampled continuations are written."""
    run_dir = _flwr_run(tmp_path, "task='lm' lm-corpus='synthetic' num-clients=3 clients-per-round=3 num-rounds=2 "
                        "attacker-ratio=0.34 tau=2.0 lm-pretrain-steps=5 lm-vocab=200 lm-hidden=16 lm-heads=2 "
                        "lm-layers=1 lm-context=48 lm-gen-tokens=6 lm-samples=2 lm-prompt-count=2 "
                        "lm-prompt-words=4 batch-size=8 local-steps=2 optimizer='adamw' lr=0.002", 3,
                        FEDCAL_CACHE_DIR=str(tmp_path / "cache"))
    got = load_metrics(run_dir).pivot_table(index="round", columns="metric", values="value")
    assert list(got.index) == [0, 1, 2]
    assert got.loc[[0, 2], "perplexity"].gt(1).all() and got.loc[[0, 2], "nucleus"].ge(1).all()
    assert (got.loc[[1, 2], "replies_accepted"] == 3).all() and (got.loc[[1, 2], "replies_rejected"] == 0).all()
    assert len(pd.read_csv(run_dir / "generations.csv")) == 4


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr") is None, reason="flwr CLI not on PATH")
def test_a_relative_output_dir_lands_where_the_local_superlink_started_and_says_so(tmp_path):
    """`flwr run <app>` called from a directory D starts the local SuperLink there; a relative
    output-dir then resolves against D (not the app's folder), and the streamed log names the
    absolute run directory and the fix (docs/deployment.md §5)."""
    flwr_home = tmp_path / "flwr-home"
    log_file = flwr_home / "local-superlink" / "superlink.log"
    invoked = tmp_path / "invoked-here"
    invoked.mkdir()
    env = dict(os.environ, FLWR_HOME=str(flwr_home), **OFFLINE_ENV, OMP_NUM_THREADS="1",
               FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(free_port()), FLWR_LOCAL_CONTROL_API_PORT=str(free_port()))
    cmd = ["flwr", "run", str(ROOT), "--stream", "--run-config",
           "dataset='digits' num-clients=4 clients-per-round=2 num-rounds=1 output-dir='relative-runs'",
           "--federation-config", "num-supernodes=4"]
    try:
        proc = subprocess.run(cmd, cwd=invoked, env=env, capture_output=True, text=True, timeout=400)
    finally:
        _stop_local_superlink(tmp_path, log_file)
    context = f"rc={proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}\n{tail(log_file)}"
    runs = list((invoked / "relative-runs").glob("*/DONE"))
    assert len(runs) == 1, context
    assert not (ROOT / "relative-runs").exists()
    streamed = proc.stdout + proc.stderr
    assert f"run directory: {runs[0].parent}" in streamed and "output-dir='$PWD/runs'" in streamed, context


def _fresh_clone(dest: Path) -> Path:
    """The checkout's files as a fresh clone has them (tracked, and new files git does not
    ignore): no run folders, no ../shared/data beside it, no caches."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr") is None, reason="flwr CLI not on PATH")
def test_flwr_run_dot_with_no_override_finishes_on_a_fresh_offline_clone(tmp_path):
    """`flwr run .` exactly as typed after cloning (no --run-config, no --federation-config, a new
    FLWR_HOME: Flower's default local federation of 2 SuperNodes; no data folder): the Flower App's
    defaults agree with that federation and need no download, so the run finishes (DONE, rounds
    0-3 logged) and `fedcal runs --check` says so. Before, the defaults asked for 50 nodes on MNIST."""
    clone = _fresh_clone(tmp_path / "clone")
    flwr_home = tmp_path / "flwr-home"
    log_file = flwr_home / "local-superlink" / "superlink.log"
    env = dict(os.environ, FLWR_HOME=str(flwr_home), **OFFLINE_ENV, FEDCAL_DATA_DIR=str(tmp_path / "no-data"),
               FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(free_port()), FLWR_LOCAL_CONTROL_API_PORT=str(free_port()))
    try:
        proc = subprocess.run(["flwr", "run", ".", "--stream"], cwd=clone, env=env, capture_output=True, text=True,
                              timeout=400)
    finally:
        _stop_local_superlink(tmp_path, log_file)
    context = f"rc={proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}\n{tail(log_file)}"
    assert proc.returncode == 0, context
    runs = list((clone / "runs").glob("*/DONE"))
    assert len(runs) == 1, context
    df = load_metrics(runs[0].parent)
    assert sorted(df["round"].unique()) == [0, 1, 2, 3] and set(df["dataset"]) == {"digits"}, context
    assert set(df["num-clients"]) == {2}
    check = subprocess.run([sys.executable, "-m", "fedcal", "runs", "--check", str(clone / "runs")], env=env,
                           capture_output=True, text=True)
    assert check.returncode == 0 and ": finished" in check.stdout, check.stdout + check.stderr
