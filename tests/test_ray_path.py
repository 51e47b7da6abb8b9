"""The Ray path's speed-ups compute what they replace: Ray's settings, the prompt Grid, the
shared client shards (the end-to-end equality of the Ray and in-process engines is
tests/test_reference.py's)."""

from __future__ import annotations

import shutil
import tempfile
import threading
from types import SimpleNamespace

import pytest
import torch

from fedcal.app.engine import EngineStopped, EngineWatch, PromptGrid, backend_config
from fedcal.config import RunConfig
from fedcal.data import client_data, client_partitions, load_dataset


def test_backend_config_keeps_client_resources(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = RunConfig(client_cpus=1.0, client_gpus=0.25)
    bc = backend_config(cfg)
    assert bc["client_resources"] == {"num_cpus": 1.0, "num_gpus": 0.25}
    assert bc["init_args"]["_system_config"]["max_direct_call_object_size"] > 4 * 1024 * 1024
    monkeypatch.setenv("FEDCAL_RAY_DEFAULTS", "1")  # the benchmark's baseline: Ray's own settings
    assert "_system_config" not in backend_config(cfg)["init_args"]
    monkeypatch.delenv("FEDCAL_RAY_DEFAULTS")
    monkeypatch.setenv("RAY_ADDRESS", "auto")  # a Ray cluster started elsewhere: no start-up settings
    assert "_system_config" not in backend_config(cfg)["init_args"]


class _SlowGrid:
    """Replies to message i after ``delay[i]`` pulls."""

    def __init__(self, delays):
        self.delays, self.pulls = delays, 0

    def push_messages(self, messages):
        return [f"m{i}" for i, _ in enumerate(messages)]

    def pull_messages(self, ids):
        self.pulls += 1
        return [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=i))
                for i in ids if self.delays[int(i[1:])] == self.pulls]


def test_prompt_grid_returns_every_reply_once():
    grid = PromptGrid(_SlowGrid([1, 3, 3, 5]), poll=0.0)
    replies = grid.send_and_receive([object()] * 4)
    assert sorted(r.metadata.reply_to_message_id for r in replies) == ["m0", "m1", "m2", "m3"]
    assert grid.grid.pulls == 5  # stopped at the last reply


def test_prompt_grid_timeout_returns_what_came():
    grid = PromptGrid(_SlowGrid([1, 10**9]), poll=0.001)
    replies = grid.send_and_receive([object()] * 2, timeout=0.05)
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0"]


class _StoppingGrid(_SlowGrid):
    """Never replies; the engine stops (``watch.stop(cause)``) at its third pull."""

    def __init__(self, watch, cause):
        super().__init__([10**9])
        self.watch, self.cause = watch, cause

    def pull_messages(self, ids):
        if self.pulls == 2:
            self.watch.stop(self.cause)
        return super().pull_messages(ids)


@pytest.mark.parametrize("cause, raised", [(KeyboardInterrupt(), KeyboardInterrupt),
                                           (RuntimeError("Simulation Runtime crashed."), EngineStopped)])
def test_prompt_grid_stops_waiting_when_the_engine_stopped(cause, raised):
    """A ServerApp waiting for replies with no timeout (Flower's own calls do) is not left waiting
    forever when the engine under it stops: its next grid call raises what stopped it
    (Ctrl-C as KeyboardInterrupt, anything else as EngineStopped naming it), and no call after."""
    watch = EngineWatch()
    grid = PromptGrid(_StoppingGrid(watch, cause), poll=0.0, watch=watch)
    with pytest.raises(raised) as info:
        grid.send_and_receive([object()])
    assert grid.grid.pulls == 3 and info.value is watch.raised
    if raised is EngineStopped:
        assert str(info.value) == "Flower's simulation engine stopped: RuntimeError: Simulation Runtime crashed."
    with pytest.raises(raised):
        grid.get_node_ids()


def test_a_crashed_simulation_engine_ends_the_run_in_one_line(tmp_path, monkeypatch, capfd):
    """Flower's Simulation Engine crashing under a running ServerApp (here its Ray backend failing
    to build its actor pool with Flower's own error, as on a cluster whose last worker left) ends
    `fedcal run` with rc 1 and one line naming the cause — not Flower's two tracebacks and a
    ServerApp thread waiting forever for replies (the process never exited) — and the run's
    run.log says why it stopped."""
    import flwr.simulation.ray_transport.ray_actor as ray_actor
    import ray

    from fedcal.cli import main
    from fedcal.results import run_events

    def empty_pool(client_resources):
        raise ValueError("ActorPool is empty. Stopping Simulation. Check `num_cpus` and/or `num_gpus` passed to "
                         "the simulation engine")

    monkeypatch.setattr(ray_actor, "pool_size_from_resources", empty_pool)
    ray_tmp = tempfile.mkdtemp(prefix="fcr", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    monkeypatch.setenv("RAY_TMPDIR", ray_tmp)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    before = set(threading.enumerate())
    try:
        rc = main(["run", "--no-progress", "engine=ray", "dataset=digits", "num-clients=4", "clients-per-round=2",
                   "num-rounds=3", f"output-dir={tmp_path}", "run-name=crashed"])
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    err = capfd.readouterr().err
    assert rc == 1, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == ["fedcal: run failed: Flower's simulation engine stopped: ValueError: ActorPool is empty. Stopping "
                     "Simulation. Check `num_cpus` and/or `num_gpus` passed to the simulation engine; partial results "
                     f"in {tmp_path / 'crashed'}"], err
    left = [t for t in set(threading.enumerate()) - before if not t.daemon and t.is_alive()]
    assert not left, left  # the ServerApp's thread ended: the process can exit
    assert not ray.is_initialized()
    events = [e for _, e in run_events(tmp_path / "crashed")]
    assert events[-1].startswith("failed: EngineStopped: Flower's simulation engine stopped: ValueError: ActorPool "
                                 "is empty"), events


def test_client_shards_equal_the_partitions(tmp_path):
    # the first partition of a split is gathered alone, the later ones from one reordered copy
    split = ("digits", str(tmp_path), 7, "dirichlet", 0.5, 3)
    ds = load_dataset("digits", str(tmp_path))
    parts = client_partitions(*split)
    for pid in (4, 0, 6, 4, 1):
        got = client_data(*split, partition_id=pid)
        idx = torch.from_numpy(parts[pid])
        assert torch.equal(got.x, ds.x_train[idx]) and torch.equal(got.y, ds.y_train[idx])
