"""The Ray path's speed-ups compute what they replace: Ray's settings, the prompt Grid, the
shared client shards (the end-to-end equality of the Ray and in-process engines is
tests/test_reference.py's)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from fedcal.app.engine import PromptGrid, backend_config
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


def test_client_shards_equal_the_partitions(tmp_path):
    # the first partition of a split is gathered alone, the later ones from one reordered copy
    split = ("digits", str(tmp_path), 7, "dirichlet", 0.5, 3)
    ds = load_dataset("digits", str(tmp_path))
    parts = client_partitions(*split)
    for pid in (4, 0, 6, 4, 1):
        got = client_data(*split, partition_id=pid)
        idx = torch.from_numpy(parts[pid])
        assert torch.equal(got.x, ds.x_train[idx]) and torch.equal(got.y, ds.y_train[idx])
