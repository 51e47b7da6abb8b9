"""Runs that resume and stop (issue 30): checkpoints and bit-for-bit resumes, run.log, the lock,
``--restart``, ``fedcal runs --check``, timings out of metrics.csv, and sweeps that stop.

The interrupt-and-resume tests kill a ``python -m fedcal run`` process with SIGKILL once it has
logged a round after a checkpoint (so the resume has rows to cut back), re-run the same command
(a fresh process: nothing survives but the run directory) and compare the result byte for byte
with an uninterrupted run of the same config made in this process. All on the in-process engine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedcal.app.engine import simulate
from fedcal.cli import main as cli_main
from fedcal.config import RunConfig
from fedcal.signals import Terminated
from fedcal.results import (CHECKPOINT_FILE, METRICS_FILE, RUN_LOG, RunLocked, RunStore, find_run_dirs, run_events,
                            run_state, run_dir_for)

ROOT = Path(__file__).resolve().parents[1]
# a train run of a few seconds: 4 clients, 3 a round, one TSA attacker, 8 rounds, a checkpoint every 2
TRAIN = dict(dataset="synthetic", model="mlp", num_clients=4, clients_per_round=3, num_rounds=8, attacker_ratio=0.25,
             attack="tsa", tau=5.0, lr=0.05, batch_size=16, local_steps=2, engine="inprocess", checkpoint_every=2)
# the runs made in this process use one torch thread, as the `fedcal` subprocesses do (OMP_NUM_THREADS=1):
# sums over another thread count round in another order, and the comparisons are byte for byte
pytestmark = pytest.mark.usefixtures("one_thread_and_tmp_cache")
RESUMED = re.compile(r"resumed from round (\d+) \(--restart starts over\)")


def crash_in_round(cfg, crash_round: int) -> None:
    """Run ``cfg`` until its ServerApp's progress callback raises in round ``crash_round`` (a crash
    after that round's metrics are logged, before the next checkpoint), as a real crash would end it."""
    import fedcal.app.server as server

    real = server.server_app_for

    def crashing(cfg_, progress=None, sink=None):
        def boom(server_round, metrics):
            if server_round == crash_round:
                raise RuntimeError("simulated crash")
        return real(cfg_, boom)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(server, "server_app_for", crashing)
        with pytest.raises(RuntimeError, match="simulated crash"):
            simulate(cfg, progress=False)


def _cfg(out: Path, **overrides) -> RunConfig:
    return RunConfig(**{**TRAIN, "output_dir": str(out), **overrides})


def _args(cfg: RunConfig) -> list[str]:
    """``cfg`` as ``fedcal run`` overrides (TOML values)."""
    return [f"{k}={json.dumps(v) if isinstance(v, (str, bool)) else v}" for k, v in cfg.to_flower().items()]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")


def _fedcal(*args: str) -> list[str]:
    return [sys.executable, "-m", "fedcal", *args]


def _last_round(run_dir: Path) -> int:
    """The last round of metrics.csv whose line is complete (-1: none)."""
    try:
        text = (run_dir / METRICS_FILE).read_text()
    except OSError:
        return -1
    lines = [ln for ln in text[: text.rfind("\n") + 1].splitlines()[1:] if ln]
    return int(lines[-1].split(",")[1]) if lines else -1


def _checkpoints(run_dir: Path) -> list[int]:
    return [int(m.group(1)) for _, e in run_events(run_dir) if (m := re.match(r"checkpoint: round (\d+)", e))]


def kill_after_a_checkpoint(cfg: RunConfig, timeout: float = 600) -> tuple[int, bytes]:
    """Run ``python -m fedcal run`` of ``cfg`` and SIGKILL it once it has logged a round after its
    latest checkpoint; returns (that checkpoint's round, metrics.csv as the killed run left it)."""
    run_dir = run_dir_for(cfg)
    proc = subprocess.Popen(_fedcal("run", "--no-progress", *_args(cfg)), cwd=ROOT, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not ((ck := _checkpoints(run_dir)) and _last_round(run_dir) > ck[-1]):
        if proc.poll() is not None:
            pytest.fail(f"the run ended (exit {proc.returncode}) before it could be killed: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no checkpoint within the timeout")
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert not (run_dir / "DONE").exists()
    return _checkpoints(run_dir)[-1], (run_dir / METRICS_FILE).read_bytes()


def resume(cfg: RunConfig, *extra: str) -> subprocess.CompletedProcess:
    """Re-run ``fedcal run`` of ``cfg`` in a fresh process (it must succeed)."""
    done = subprocess.run(_fedcal("run", "--no-progress", *extra, *_args(cfg)), cwd=ROOT, env=_env(),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done


def assert_resumed_equal(ref: Path, run_dir: Path, killed_at: int, killed_metrics: bytes, stderr: str,
                         files: list[str]) -> int:
    """The resumed run said so, resumed from the killed run's last checkpoint (or a later one it
    wrote before dying), kept the rounds up to it as they were, cut the rounds after it, and ended
    byte-identical to the uninterrupted run in every one of ``files``. Returns the resumed round."""
    said = RESUMED.search(stderr)
    assert said, f"no 'resumed' line on the console: {stderr}"
    round_ = int(said.group(1))
    assert round_ >= killed_at
    events = [e for _, e in run_events(run_dir)]
    assert events[0].startswith("started") and events[-1] == "finished"
    assert sum(e.startswith(f"resumed from round {round_}") for e in events) == 1
    kept = pd.read_csv(run_dir / METRICS_FILE)
    cut = pd.read_csv(pd.io.common.StringIO(killed_metrics.decode()))
    assert cut["round"].max() > round_  # the killed run had logged rounds past the checkpoint ...
    pd.testing.assert_frame_equal(kept[kept["round"] <= round_], cut[cut["round"] <= round_])  # ... cut back
    for name in files:
        assert (run_dir / name).read_bytes() == (ref / name).read_bytes(), name
    assert not (run_dir / CHECKPOINT_FILE).exists()  # a finished run keeps no checkpoint
    return round_


# ---------------------------------------------------------------------------------- train: kill and resume
@pytest.mark.parametrize("strategy", ["fedavg", "foolsgold", "calguard"])
def test_a_killed_train_run_resumes_bit_for_bit(tmp_path, strategy):
    """FedAvg (no rule state), FoolsGold (per-client histories, keyed by partition: node ids are
    new in the resumed process) and CalGuard (deviation pool and strikes)."""
    extra = {"root_size": 50} if strategy == "calguard" else {}
    ref = simulate(_cfg(tmp_path / "ref", strategy=strategy, **extra), progress=False)
    cfg = _cfg(tmp_path / "killed", strategy=strategy, **extra)
    at, metrics = kill_after_a_checkpoint(cfg)
    done = resume(cfg)
    assert_resumed_equal(ref, run_dir_for(cfg), at, metrics, done.stderr,
                         files=["metrics.csv", "model.pt", "reliability.csv", "rejections.csv", "aggregation.csv"])
    # the timings of every round are there, in their own file
    timings = pd.read_csv(run_dir_for(cfg) / "timings.csv")
    assert sorted(timings["round"]) == list(range(cfg.num_rounds + 1))


# ---------------------------------------------------------------------------------- distill and inference
# RFD-LoRA on the synthetic corpus with a test-sized backbone (tests/test_distill_task.py's), 6 rounds
DISTILL = {"task": "distill", "engine": "inprocess", "device": "cpu", "num-clients": 3, "dst-corpus": "synthetic",
           "dst-rounds": 6, "dst-ranks": "2,4,8", "dst-groups": 3, "dst-backdoor-ratio": 0.3, "dst-bb-hidden": 16,
           "dst-bb-layers": 1, "dst-bb-heads": 2, "dst-bb-intermediate": 32, "dst-bb-vocab": 120, "dst-bb-steps": 10,
           "dst-max-length": 16, "batch-size": 16, "dst-distill-steps": 3, "dst-student-rank": 4,
           "dst-client-lr": 5e-3, "checkpoint-every": 2}


@pytest.mark.parametrize("method", ["rfd", pytest.param("flora", marks=pytest.mark.slow),
                                    pytest.param("flexlora", marks=pytest.mark.slow)])
def test_a_killed_distill_run_resumes_bit_for_bit(tmp_path, method):
    """RFD-LoRA: the student and its AdamW state on the server, every client's adapter in its
    Context.state (sent back to the new nodes on resume), the recorded uploads. FLoRA (the
    global updates merged into base weights, server and clients) and FlexLoRA (the global model
    rebuilt at full rank, per-rank states) run with -m slow."""
    pytest.importorskip("peft")
    ref = simulate(RunConfig.from_flower({**DISTILL, "dst-method": method, "output-dir": str(tmp_path / "ref")}),
                   progress=False)
    cfg = RunConfig.from_flower({**DISTILL, "dst-method": method, "output-dir": str(tmp_path / "killed")})
    at, metrics = kill_after_a_checkpoint(cfg)
    done = resume(cfg)
    files = ["metrics.csv", "model.pt", "rejections.csv"] + (["uploads.npz"] if method == "rfd" else [])
    assert_resumed_equal(ref, run_dir_for(cfg), at, metrics, done.stderr, files)


INFERENCE = dict(task="inference", dataset="digits", num_clients=5, clients_per_round=5, dirichlet_alpha=0.5, lr=0.1,
                 batch_size=32, seed=0, inf_f=1, inf_local_epochs=1, agg_epochs=30, agg_adv_epochs=1, agg_lr=3e-3,
                 agg_hidden=32, agg_attack_steps=2, copur_steps=5, inf_query_batch=150, inf_pgd_steps=2,
                 inf_test_queries=150, inf_f_curve=False, inf_amp_curve="1,4", engine="inprocess")


def test_a_killed_inference_run_resumes_from_its_collection(tmp_path):
    """The inference task's checkpoint is its clients' probits: killed while it evaluates the
    aggregators, the re-run says it resumed after the collection, asks no client anything (no
    node trains: run.log has no second collection) and writes the uninterrupted run's tables."""
    ref = simulate(RunConfig(**{**INFERENCE, "output_dir": str(tmp_path / "ref")}), progress=False)
    cfg = RunConfig(**{**INFERENCE, "output_dir": str(tmp_path / "killed")})
    run_dir = run_dir_for(cfg)
    proc = subprocess.Popen(_fedcal("run", "--no-progress", *_args(cfg)), cwd=ROOT, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not any(e.startswith("checkpoint: the clients' probits") for _, e in run_events(run_dir)):
        assert proc.poll() is None and time.monotonic() < deadline, "no collection checkpoint"
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "DONE").exists() and not (run_dir / "accuracy.csv").exists()
    done = resume(cfg)
    events = [e for _, e in run_events(run_dir)]
    assert [e.split(",")[0] for e in events if e.startswith("resumed")] == [
        "resumed after the clients' collection (probits.pt of an earlier attempt)"]
    assert sum(e.startswith("checkpoint: the clients' probits") for e in events) == 1  # collected once
    assert events[-1] == "finished"
    assert "resumed after the clients' collection" in done.stderr
    for name in ("probits.pt", "answers.csv", "accuracy.csv", "curve_amp.csv", "deepset.pt"):
        assert (run_dir / name).read_bytes() == (ref / name).read_bytes(), name


# ---------------------------------------------------------------------------------- every strategy, in process
# FedAvg, FoolsGold and CalGuard are killed and resumed above; the rules that keep no state between
# rounds but the seeded draws of their round run by default, the others with -m slow
@pytest.mark.parametrize("strategy", ["fltrust", "multikrum", "median_of_means",
                                      *(pytest.param(s, marks=pytest.mark.slow) for s in
                                        ("fedavg", "foolsgold", "calguard", "trimmed_mean", "median",
                                         "geometric_median"))])
def test_every_strategy_resumes_after_a_crash_bit_for_bit(tmp_path, strategy):
    """A run that crashed in round 5 (an exception, in this process) resumes from its round-4
    checkpoint and ends byte-identical to the uninterrupted run, for every strategy."""
    extra = {"root_size": 50} if strategy in ("calguard", "fltrust") else {}
    extra.update(num_clients=5, clients_per_round=4)  # MultiKrum's f = 1 needs 4 replies a round
    ref = simulate(_cfg(tmp_path / "ref", strategy=strategy, **extra), progress=False)
    cfg = _cfg(tmp_path / "crashed", strategy=strategy, **extra)
    crash_in_round(cfg, 5)
    run_dir = run_dir_for(cfg)
    assert _last_round(run_dir) == 5 and _checkpoints(run_dir) == [2, 4]
    assert run_events(run_dir)[-1][1] == "failed: RuntimeError: simulated crash"
    simulate(cfg, progress=False)
    events = [e for _, e in run_events(run_dir)]
    assert [e.split(",")[0] for e in events if e.startswith("resumed")] == ["resumed from round 4"]
    for name in ("metrics.csv", "model.pt", "reliability.csv", "rejections.csv", "aggregation.csv"):
        assert (run_dir / name).read_bytes() == (ref / name).read_bytes(), name


def test_a_crashed_run_with_client_momentum_resumes_the_clients_buffers_bit_for_bit(tmp_path):
    """With client-momentum each benign client keeps its buffer in its node's Context.state; a run
    that crashed in round 5 resumes from its round-4 checkpoint in new node contexts, the buffers
    taken from the checkpoint (a buffer restarted from zero would change every later round)."""
    extra = dict(client_momentum=0.9, local_steps=1)
    ref = simulate(_cfg(tmp_path / "ref", **extra), progress=False)
    cfg = _cfg(tmp_path / "crashed", **extra)
    crash_in_round(cfg, 5)
    run_dir = run_dir_for(cfg)
    assert _checkpoints(run_dir) == [2, 4]
    simulate(cfg, progress=False)
    assert [e for _, e in run_events(run_dir) if e.startswith("resumed")][0].startswith("resumed from round 4")
    for name in ("metrics.csv", "model.pt"):
        assert (run_dir / name).read_bytes() == (ref / name).read_bytes(), name


@pytest.mark.slow
def test_a_crashed_ray_run_resumes(tmp_path, monkeypatch):
    """On Ray's Simulation Engine (the default engine; every client actor of the resumed run is a
    new process) a run that crashed in round 5 resumes from its round-4 checkpoint. Compared with
    the uninterrupted Ray run to float tolerance (what docs/design.md promises for Ray); the test
    prints whether the files are also byte-identical."""
    import fedcal.app.server as server

    kw = dict(engine="ray", strategy="foolsgold")
    ref = simulate(_cfg(tmp_path / "ref", **kw), progress=False)
    cfg = _cfg(tmp_path / "crashed", **kw)
    real = server.server_app_for
    with monkeypatch.context() as m:
        m.setattr(server, "server_app_for", lambda c, progress=None, sink=None: real(
            c, lambda r, _: (_ for _ in ()).throw(RuntimeError("simulated crash")) if r == 5 else None))
        with pytest.raises(Exception):
            simulate(cfg, progress=False)
    simulate(cfg, progress=False)
    run_dir = run_dir_for(cfg)
    assert [e.split(",")[0] for _, e in run_events(run_dir) if e.startswith("resumed")] == ["resumed from round 4"]
    a, b = pd.read_csv(ref / "metrics.csv"), pd.read_csv(run_dir / "metrics.csv")
    assert a[["round", "metric"]].equals(b[["round", "metric"]])
    diff = (a["value"] - b["value"]).abs().max()
    identical = {n: (ref / n).read_bytes() == (run_dir / n).read_bytes() for n in ("metrics.csv", "model.pt")}
    print(f"ray resume: max |metric difference| {diff:.3g}; byte-identical: {identical}")
    pd.testing.assert_series_equal(a["value"], b["value"], rtol=1e-5, atol=1e-7)


DETECT = dict(task="detect", num_clients=3, clients_per_round=3, attack="tsa", tau=5.0, attacker_ratio=0.34,
              det_digits="digits", det_size=32, det_min_scale=8, det_max_scale=16, det_max_digits=2,
              det_train_scenes=6, det_test_scenes=4, det_rounds=6, det_local_steps=2, det_batch_size=3,
              det_backbone_width=4, engine="inprocess", device="cpu", checkpoint_every=2)


@pytest.mark.slow
def test_a_crashed_detect_run_resumes_bit_for_bit(tmp_path, monkeypatch):
    """The detect task's rounds are the train task's (federate) with its own evaluation and its
    appended kept.csv: crashed in round 5, resumed from round 4, byte-identical."""
    import fedcal.app.server as server

    ref = simulate(RunConfig.from_flower({**DETECT, "output_dir": str(tmp_path / "ref")}), progress=False)
    cfg = RunConfig.from_flower({**DETECT, "output_dir": str(tmp_path / "crashed")})
    real = server.server_app_for
    with monkeypatch.context() as m:
        m.setattr(server, "server_app_for", lambda c, progress=None, sink=None: real(
            c, lambda r, _: (_ for _ in ()).throw(RuntimeError("simulated crash")) if r == 5 else None))
        with pytest.raises(RuntimeError):
            simulate(cfg, progress=False)
    run_dir = run_dir_for(cfg)
    assert set(pd.read_csv(run_dir / "kept.csv")["round"]) == set(range(6))  # round 5 was logged before the crash
    simulate(cfg, progress=False)
    assert [e.split(",")[0] for _, e in run_events(run_dir) if e.startswith("resumed")] == ["resumed from round 4"]
    for name in ("metrics.csv", "model.pt", "kept.csv", "reliability.csv", "example.csv", "rejections.csv"):
        assert (run_dir / name).read_bytes() == (ref / name).read_bytes(), name


def test_restart_starts_over(tmp_path, monkeypatch, capsys):
    """`fedcal run --restart` discards the checkpoint: the run starts from round 0 (run.log says
    so, no 'resumed') and still ends equal to the uninterrupted run."""
    import fedcal.app.server as server

    ref = simulate(_cfg(tmp_path / "ref"), progress=False)
    cfg = _cfg(tmp_path / "again")
    real = server.server_app_for
    with monkeypatch.context() as m:
        m.setattr(server, "server_app_for", lambda c, progress=None, sink=None: real(
            c, lambda r, _: (_ for _ in ()).throw(RuntimeError("stop")) if r == 3 else None))
        with pytest.raises(RuntimeError):
            simulate(cfg, progress=False)
    assert (run_dir_for(cfg) / CHECKPOINT_FILE).exists()
    assert cli_main(["run", "--restart", "--no-progress", *_args(cfg)]) == 0
    events = [e for _, e in run_events(run_dir_for(cfg))]
    after = events[events.index("restart requested: earlier results and checkpoint discarded"):]
    assert after[1].startswith("started") and not any(e.startswith("resumed") for e in after)
    assert "resumed" not in capsys.readouterr().err
    for name in ("metrics.csv", "model.pt"):
        assert (run_dir_for(cfg) / name).read_bytes() == (ref / name).read_bytes()


def test_same_seed_runs_write_identical_metrics_and_time_every_round(tmp_path):
    """Wall-clock timings are in timings.csv, so two runs of one config give byte-identical
    metrics.csv (before, their round_seconds rows differed)."""
    a = simulate(_cfg(tmp_path / "a", checkpoint_every=0), progress=False)
    b = simulate(_cfg(tmp_path / "b", checkpoint_every=0), progress=False)
    assert (a / "metrics.csv").read_bytes() == (b / "metrics.csv").read_bytes()
    assert "round_seconds" not in set(pd.read_csv(a / "metrics.csv")["metric"])
    timings = pd.read_csv(a / "timings.csv")
    assert list(timings.columns) == ["run_id", "round", "metric", "value"]
    assert sorted(timings[timings.metric == "round_seconds"]["round"]) == list(range(9))
    assert (timings["value"] > 0).all()
    assert not any(e.startswith("checkpoint") for _, e in run_events(a))  # checkpoint-every = 0: never


# ---------------------------------------------------------------------------------- the run store
def _store(tmp_path, **kw) -> RunStore:
    cfg = RunConfig(dataset="synthetic", output_dir=str(tmp_path), run_name="r", **kw)
    return RunStore(run_dir_for(cfg), cfg)


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name not in (RUN_LOG, CHECKPOINT_FILE,
                                                                                  ".lock", "config.json")}


def test_resume_puts_every_file_back_as_it_was_at_the_checkpoint(tmp_path):
    """Appended files are cut back to their length at the checkpoint, rewritten tables get their
    bytes back, files written after it (the final model, DONE's precursors) go; the task gets
    its state back."""
    store = _store(tmp_path, num_rounds=10)
    store.start(10)
    for r in range(3):
        store.log_round(r, {"accuracy": r / 10})
        store.log_timings(r, {"round_seconds": 0.5})
        store.append_rows("aggregation.csv", [{"round": r, "weight": 0.5}])
    store.write_table("rejections.csv", pd.DataFrame({"round": [1], "reason": ["bad"]}))
    state = {"arrays": {"w": torch.arange(3.0)}, "rows": [{"round": 2, "x": 1.5}]}
    store.save_checkpoint(2, state)
    at_checkpoint = _files(store.dir)
    for r in (3, 4):  # the rounds the interrupted attempt added after the checkpoint
        store.log_round(r, {"accuracy": r / 10})
        store.log_timings(r, {"round_seconds": 0.5})
        store.append_rows("aggregation.csv", [{"round": r, "weight": 0.25}])
    store.write_table("rejections.csv", pd.DataFrame({"round": [1, 4], "reason": ["bad", "worse"]}))
    store.write_table("reliability.csv", pd.DataFrame({"count": [1]}))
    store.append_rows("poisoning.csv", [{"round": 4, "crafted": False}])  # first attacker reply after it
    store.save_model({"w": torch.zeros(2)})
    store.release()  # the process died
    again = RunStore(store.dir, store.cfg)
    with again.session(rounds=10) as checkpoint:
        assert checkpoint.round == 2 and torch.equal(checkpoint.state["arrays"]["w"], torch.arange(3.0))
        assert checkpoint.state["rows"] == [{"round": 2, "x": 1.5}]
        assert _files(again.dir) == at_checkpoint
        again.log_round(3, {"accuracy": 0.3})  # the resumed attempt appends where the checkpoint left off
    assert pd.read_csv(again.dir / METRICS_FILE)["round"].tolist() == [0, 1, 2, 3]
    assert [e.split(",")[0] for _, e in run_events(again.dir)][-1] == "resumed from round 2"


def test_a_crash_while_writing_a_checkpoint_leaves_the_previous_one(tmp_path, monkeypatch):
    store = _store(tmp_path)
    store.start()
    store.log_round(0, {"accuracy": 0.1})
    store.save_checkpoint(2, {"x": torch.ones(2)})
    before = (store.dir / CHECKPOINT_FILE).read_bytes()

    def torn(obj, f, *a, **k):  # half a file, then the process "dies"
        f.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", torn)
    with pytest.raises(KeyboardInterrupt):
        store.save_checkpoint(4, {"x": torch.zeros(2)})
    monkeypatch.undo()
    assert (store.dir / CHECKPOINT_FILE).read_bytes() == before
    store.release()
    with RunStore(store.dir, store.cfg).session() as checkpoint:
        assert checkpoint.round == 2 and torch.equal(checkpoint.state["x"], torch.ones(2))


def test_an_unusable_checkpoint_means_starting_over_with_one_warning(tmp_path, caplog):
    store = _store(tmp_path)
    store.start()
    store.log_round(0, {"accuracy": 0.1})
    store.save_checkpoint(2, {})
    store.release()
    (store.dir / METRICS_FILE).write_text("run_id,round,metric,value,config_hash\n")  # shorter than recorded
    with RunStore(store.dir, store.cfg).session() as checkpoint:
        assert checkpoint is None
    assert "cannot resume from its checkpoint (metrics.csv is shorter than at the checkpoint); starting the run " \
           "over" in caplog.text
    (store.dir / CHECKPOINT_FILE).write_bytes(b"garbage")
    with RunStore(store.dir, store.cfg).session() as checkpoint:
        assert checkpoint is None
    events = [e for _, e in run_events(store.dir)]
    assert events[-1].startswith("started") and events[-2].startswith("checkpoint unusable")


def test_one_writer_per_run_directory(tmp_path):
    """A second writer fails at once, naming the directory and the holder's pid — in this process
    or another one — and the run directory is left as it was."""
    store = _store(tmp_path)
    store.start()
    store.log_round(0, {"accuracy": 0.1})
    before = _files(store.dir)
    with pytest.raises(RunLocked) as err:
        RunStore(store.dir, store.cfg).start()
    assert str(err.value) == (f"run directory {str(store.dir)!r} is being written by another process (pid "
                              f"{os.getpid()}); wait for it to end or stop it — one writer at a time")
    assert _files(store.dir) == before
    store.finish()  # the lock goes with the run ...
    RunStore(store.dir, store.cfg).start()  # ... so the next writer gets it
    # a holder in another process: the engine refuses before starting anything
    cfg = _cfg(tmp_path / "held")
    d = run_dir_for(cfg)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from fedcal.results import RunStore; "
                               "from fedcal.config import RunConfig; "
                               f"s = RunStore({str(d)!r}, RunConfig.from_flower({cfg.to_flower()!r})); s.start(); "
                               "print('held', flush=True); time.sleep(60)"],
                              cwd=ROOT, env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLocked, match=f"pid {holder.pid}"):
            simulate(cfg, progress=False)
        assert run_state(d).status == "running" and run_state(d).pid == holder.pid
        assert cli_main(["run", "--no-progress", *_args(cfg)]) == 1
    finally:
        holder.kill()
        holder.wait()


# ---------------------------------------------------------------------------------- fedcal runs
def test_fedcal_runs_says_what_happened_and_check_fails_unless_all_finished(tmp_path, monkeypatch, capsys):
    import fedcal.app.server as server

    out = tmp_path / "runs"
    finished = simulate(_cfg(out, seed=0), progress=False)
    # failed: an exception ended it in round 3 (after the checkpoint of round 2)
    real = server.server_app_for
    with monkeypatch.context() as m:
        m.setattr(server, "server_app_for", lambda c, progress=None, sink=None: real(
            c, lambda r, _: (_ for _ in ()).throw(RuntimeError("disk full")) if r == 3 else None))
        with pytest.raises(RuntimeError):
            simulate(_cfg(out, seed=1), progress=False)
    failed = run_dir_for(_cfg(out, seed=1))
    # unfinished: a process that died without a word (no 'failed' line), after round 5's checkpoint... of 8
    store = RunStore(run_dir_for(_cfg(out, seed=2)), _cfg(out, seed=2))
    store.start(8)
    for r in range(6):
        store.log_round(r, {"accuracy": 0.5})
    store.save_checkpoint(4, {})
    store.release()
    unfinished = store.dir
    # resumed and finished: the failed run, re-run
    assert cli_main(["runs", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{finished}: finished",
                     f"{failed}: failed (RuntimeError: disk full; round 3 of 8; checkpoint: round 2)",
                     f"{unfinished}: unfinished (round 5 of 8; checkpoint: round 4)"]
    assert cli_main(["runs", "--check", str(out)]) == 1
    assert cli_main(["runs", "--check", str(finished)]) == 0
    simulate(_cfg(out, seed=1), progress=False)
    assert run_state(failed).line() == f"{failed}: finished (resumed from round 2)"
    assert cli_main(["runs", "--check", str(finished), str(failed)]) == 0
    assert cli_main(["runs", str(tmp_path / "nothing")]) == 2
    # a run made before run.log existed: finished or not by its DONE alone
    (finished / RUN_LOG).unlink()
    assert run_state(finished).line() == f"{finished}: finished"
    assert find_run_dirs([out]) == sorted([finished, failed, unfinished])


@pytest.mark.parametrize("stop, how", [(KeyboardInterrupt, "Ctrl-C or SIGINT"),
                                       (Terminated, "terminated (signal 15)")])
def test_fedcal_runs_calls_a_stopped_run_interrupted_and_resumable_not_failed(tmp_path, monkeypatch, capsys,
                                                                              stop, how):
    """A run stopped by Ctrl-C / SIGTERM in round 3, after its round-2 checkpoint, is not a failure:
    `fedcal runs` says it is interrupted and from which round a re-run resumes; without its
    checkpoint.pt, that a re-run starts over. `--check` still exits 1 (not finished)."""
    import fedcal.app.server as server

    cfg = _cfg(tmp_path / "runs", seed=4)
    real = server.server_app_for

    def stopping(r, _):
        if r == 3:
            raise stop()

    with monkeypatch.context() as m:
        m.setattr(server, "server_app_for", lambda c, progress=None, sink=None: real(c, stopping))
        with pytest.raises(BaseException):
            simulate(cfg, progress=False)
    d = run_dir_for(cfg)
    assert cli_main(["runs", "--check", str(d)]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"{d}: interrupted, resumable from round 2 ({how}; round 3 of 8)"]
    assert "1 interrupted of 1 run(s)" in err and "failed" not in out + err
    (d / CHECKPOINT_FILE).unlink()
    assert run_state(d).line() == f"{d}: interrupted ({how}; round 3 of 8; no checkpoint: a re-run starts from round 0)"
    simulate(cfg, progress=False)  # the re-run starts over and finishes
    assert run_state(d).status == "finished"


# ---------------------------------------------------------------------------------- sweeps stop
def _children(pid: int) -> set[int]:
    """The pids whose parent is ``pid`` (from /proc)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            if re.search(rf"^PPid:\s+{pid}$", status, re.M):
                out.add(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "status").read_text()
    except OSError:
        return False
    return not re.search(r"^State:\s+Z", state, re.M)  # a zombie has exited


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), pytest.param(signal.SIGINT, 130,
                                                                            marks=pytest.mark.slow)])
def test_a_signal_stops_a_parallel_sweep_and_its_workers(tmp_path, sig, status):
    """`fedcal sweep --jobs 2` of six long cells, signalled once two cells run: it exits at once
    with the shell's status, no further cell starts, its workers are gone, and each cell it ran
    says in its run.log that it was stopped (its lock released: `fedcal runs` calls it interrupted)."""
    out = tmp_path / "runs"
    cfg = _cfg(out, num_rounds=500, checkpoint_every=0)
    args = [a for a in _args(cfg) if not a.startswith("seed=")]
    proc = subprocess.Popen(_fedcal("sweep", "--jobs", "2", "--grid", "seed=0,1,2,3,4,5", "--no-progress",
                                    "--report", str(tmp_path / "rep"), *args),
                            cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while len(started := [d for d in (out.iterdir() if out.exists() else []) if _last_round(d) >= 1]) < 2:
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "two cells did not start"
        time.sleep(0.05)
    workers = _children(proc.pid)
    assert len(workers) >= 2
    proc.send_signal(sig)
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the sweep did not stop within a minute")
    err = proc.stderr.read()
    assert rc == status, err
    assert ("fedcal: terminated" if sig == signal.SIGTERM else "fedcal: interrupted") in err
    time.sleep(0.5)
    assert not [w for w in workers if _alive(w)]  # every worker of the sweep is gone
    assert sorted(out.iterdir()) == sorted(started)  # no cell started after the signal
    for d in started:  # the sweep stopped its workers with SIGTERM, whichever signal stopped the sweep
        state = run_state(d)
        assert state.status == "interrupted" and state.reason == "terminated (signal 15)", state.line()


@pytest.mark.parametrize("sig, status, reason", [
    (signal.SIGINT, 130, "interrupted (Ctrl-C or SIGINT)"),
    pytest.param(signal.SIGTERM, 143, "terminated (signal 15)", marks=pytest.mark.slow)])
def test_a_signal_stops_a_ray_run_within_10_s_and_it_resumes(tmp_path, sig, status, reason):
    """`fedcal run` on the Ray engine (the default), signalled once it has checkpointed: it exits
    within 10 s with the shell's status and one line (Flower left its ServerApp's thread waiting
    for replies forever, so the process never exited; Ray's SIGTERM handler killed it without a
    word in run.log), its run.log says why it stopped, its lock is released and its checkpoint
    kept: the same command resumes from it (here on the in-process engine, the same run)."""
    import tempfile

    from fedcal.results import run_state

    cfg = RunConfig.from_flower(dict(dataset="digits", num_clients=4, clients_per_round=2, num_rounds=5000,
                                     checkpoint_every=2, engine="ray", output_dir=str(tmp_path), run_name="ray"))
    run_dir = run_dir_for(cfg)
    ray_tmp = tempfile.mkdtemp(prefix="fcr", dir="/tmp")  # Ray's own temp dir: short, and this test's alone
    env = {k: v for k, v in _env().items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen(_fedcal("run", "--no-progress", *_args(cfg)), cwd=ROOT, env=dict(env, RAY_TMPDIR=ray_tmp),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not _checkpoints(run_dir):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "no checkpoint within 5 minutes"
            time.sleep(0.05)
        proc.send_signal(sig)
        try:
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"`fedcal run` on Ray did not exit within 10 s of {sig.name}")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    err = proc.stderr.read()
    assert rc == status, err
    assert "Traceback" not in err and err.rstrip().splitlines()[-1] == (
        "fedcal: interrupted" if sig == signal.SIGINT else "fedcal: terminated"), err
    state = run_state(run_dir)
    assert state.status not in ("running", "finished") and state.reason == reason, state.line()  # lock released
    assert (run_dir / CHECKPOINT_FILE).exists()
    kept = _checkpoints(run_dir)[-1]
    again = subprocess.Popen(_fedcal("run", "--no-progress", *_args(cfg.replace(engine="inprocess"))), cwd=ROOT,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not any(e.startswith("resumed from round") for _, e in run_events(run_dir)):
            assert again.poll() is None and time.monotonic() < deadline, "the run did not resume"
            time.sleep(0.05)
    finally:
        again.kill()
        again.wait()
    resumed = [e for _, e in run_events(run_dir) if e.startswith("resumed from round")]
    assert resumed[0].startswith(f"resumed from round {kept}"), resumed


# ---------------------------------------------------------------------------------- clients' state
def _grid(client_app, n: int = 3, seed: int = 0):
    from fedcal.app.flower_private import SUPERLINK_NODE_ID, TaskIdentity
    from fedcal.app.inprocess import InProcessGrid

    grid = InProcessGrid(client_app, n, seed=seed)
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = grid.run.run_id, 1, SUPERLINK_NODE_ID
    return grid, {nid: int(ctx.node_config["partition-id"]) for nid, ctx in grid.contexts.items()}


def test_client_state_travels_to_the_checkpoint_and_back_bit_for_bit(tmp_path, caplog):
    """Each node's Context.state (arrays of any dtype, config and metric records) is fetched by
    partition id, survives torch.save / load(weights_only=True), and is put back into the nodes of
    another run (other node ids) exactly."""
    from flwr.app import ArrayRecord, ConfigRecord, MetricRecord

    from fedcal.app.client import build_client_app
    from fedcal.checkpoint import load, save_atomic
    from fedcal.tasks import client_state

    app = build_client_app()
    grid, parts = _grid(app)
    for nid, part in parts.items():
        ctx = grid.contexts[nid]
        ctx.state["distill-adapter"] = ArrayRecord({"a": torch.randn(3, 4, dtype=torch.float64) + part,
                                                    "b": torch.arange(5, dtype=torch.int16) * part})
        ctx.state["meta"] = ConfigRecord({"name": f"client {part}", "blob": b"\x00\x01", "ks": [1, 2]})
        ctx.state["m"] = MetricRecord({"loss": 0.5 + part})
    states = client_state.collect_states(grid, parts)
    assert sorted(states) == [0, 1, 2]
    save_atomic(tmp_path / "c.pt", states)
    back = load(tmp_path / "c.pt")
    other, other_parts = _grid(app, seed=1)  # a resumed run: new node ids, empty contexts
    assert set(other_parts) != set(parts) and all(not len(c.state) for c in other.contexts.values())
    assert client_state.restore_states(other, other_parts, back) == []
    for nid, part in other_parts.items():
        got = other.contexts[nid].state
        want = grid.contexts[next(n for n, p in parts.items() if p == part)].state
        assert list(got.keys()) == list(want.keys())
        for k in ("a", "b"):
            assert got["distill-adapter"][k].numpy().tobytes() == want["distill-adapter"][k].numpy().tobytes()
            assert got["distill-adapter"][k].dtype == want["distill-adapter"][k].dtype
        assert dict(got["meta"]) == dict(want["meta"]) and dict(got["m"]) == dict(want["m"])
    # a node whose state is missing from the checkpoint is named, and reported as not restored
    del back[1]
    assert client_state.restore_states(other, other_parts, back) == [1]
    assert "no checkpointed state for partition 1" in caplog.text


def test_a_node_that_sends_no_state_is_left_out_of_the_checkpoint(caplog):
    from flwr.app import ArrayRecord

    from fedcal.app.client import build_client_app
    from fedcal.tasks import client_state

    real = client_state.save_state

    def failing(msg, context):
        if int(context.node_config["partition-id"]) == 2:
            raise RuntimeError("disk on fire")
        return real(msg, context)

    client_state.HANDLERS[client_state.SAVE_STATE] = failing
    try:
        grid, parts = _grid(build_client_app())
    finally:
        client_state.HANDLERS[client_state.SAVE_STATE] = real
    for nid in parts:
        grid.contexts[nid].state["x"] = ArrayRecord({"w": torch.ones(2)})
    states = client_state.collect_states(grid, parts)
    assert sorted(states) == [0, 1]
    assert "did not send its state for the checkpoint" in caplog.text and "disk on fire" in caplog.text
