"""The Ray path's speed-ups compute what they replace: the actor count, the prompt Grid, the
shared client shards (the end-to-end equality of the Ray and in-process engines is
tests/test_reference.py's)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch

from fedcal.app.engine import PromptGrid, _round_span, backend_config, ray_actor_cpus
from fedcal.config import RunConfig
from fedcal.data import client_data, client_partitions, load_dataset


def test_round_span_by_hand():
    # M = 5 client runs of length 1 on 2 cores: 2 actors → waves 2, 2, 1 → 3 runs long;
    # 3 actors time-sharing 2 cores → a wave of 3 takes 1.5, then a wave of 2 takes 1 → 2.5
    assert _round_span(5, 2, 2.0) == 3.0
    assert _round_span(5, 3, 2.0) == 2.5
    assert _round_span(5, 5, 2.0) == 2.5  # one wave of 5 on 2 cores
    assert _round_span(4, 2, 2.0) == 2.0
    assert _round_span(10, 4, 8.0) == 3.0  # enough cores: plain waves


def test_ray_actor_cpus_counts_more_cpus_only_where_a_round_runs_in_uneven_waves():
    cfg = RunConfig(clients_per_round=5)
    assert ray_actor_cpus(cfg, cores=2) == 3.0  # fewest actors with the shortest round
    assert ray_actor_cpus(cfg, cores=8) is None  # every client has a core
    assert ray_actor_cpus(cfg.replace(clients_per_round=4), cores=2) is None  # waves are even
    assert ray_actor_cpus(cfg.replace(client_gpus=0.5), cores=2) is None  # GPUs bound actors
    # half a CPU each: 4 actors → waves 4, 1 (2 runs long); 5 actors on 4 slots → 1.25
    assert ray_actor_cpus(cfg.replace(client_cpus=0.5), cores=2) == 2.5
    assert ray_actor_cpus(cfg.replace(client_cpus=2.0), cores=2) is None  # one slot: nothing to share
    # brute force: no actor count gives a shorter round than the one chosen
    for m, cores in itertools.product(range(1, 12), range(1, 6)):
        got = ray_actor_cpus(RunConfig(clients_per_round=m), cores=cores)
        actors = int(got) if got else min(cores, m)
        best = min(_round_span(m, n, cores) for n in range(1, m + 1))
        assert _round_span(m, actors, cores) == pytest.approx(best), (m, cores)


def test_backend_config_keeps_client_resources(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = RunConfig(client_cpus=1.0, client_gpus=0.25)
    bc = backend_config(cfg)
    assert bc["client_resources"] == {"num_cpus": 1.0, "num_gpus": 0.25}
    assert bc["init_args"]["_system_config"]["max_direct_call_object_size"] > 4 * 1024 * 1024
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
