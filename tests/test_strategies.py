"""fedcal.strategies on an in-process fake Grid: bad replies, history, robust behaviour."""

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from fedcal import strategies
from tests.strategy_harness import FakeGrid

SHAPES = {"fc.weight": (3, 2), "fc.bias": (3,), "bn.running_mean": (3,), "bn.num_batches_tracked": ()}


def state(value: float = 0.0, **override) -> dict:
    s = {k: torch.full(v, value, dtype=torch.float32) for k, v in SHAPES.items()}
    s["bn.num_batches_tracked"] = torch.tensor(int(value * 10) if np.isfinite(value) else 0, dtype=torch.int64)
    s.update(override)
    return s


def reply(arrays: dict, n: int = 10, **extra) -> RecordDict:
    return RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": n, **extra})})


def kwargs(k: int):
    return dict(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=k, min_evaluate_nodes=0,
                min_available_nodes=k)


def run_rounds(strategy, grid, rounds=1, init=None):
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(init or state(0.0)), num_rounds=rounds)
    return {k: torch.from_numpy(np.array(v.numpy())) for k, v in result.arrays.items()} if result.arrays else None


def test_bad_replies_are_dropped_and_the_round_continues():
    good = {1: 1.0, 2: 3.0}  # node → value its update moves every weight to

    def respond(node, content):
        if node in good:
            return reply(state(good[node]), n=10 * node)
        if node == 3:
            return reply(state(1.0, **{"fc.bias": torch.tensor([float("nan"), 0.0, 0.0])}))
        if node == 4:
            s = state(1.0)
            del s["fc.bias"]
            return reply(s)
        if node == 5:
            return reply(state(1.0, **{"fc.weight": torch.zeros(2, 3)}))
        if node == 6:
            return reply(state(1.0, **{"fc.weight": torch.zeros(3, 2, dtype=torch.float64)}))
        if node == 7:
            return RecordDict({"arrays": ArrayRecord(state(1.0)), "metrics": MetricRecord({"loss": 1.0})})
        if node == 8:
            return reply(state(1.0), n=-5)
        return None  # node 9: the client crashed

    s = strategies.FedAvg(**kwargs(9))
    out = run_rounds(s, FakeGrid(list(range(1, 10)), respond))
    # weighted mean of the two valid replies: (10·1 + 20·3) / 30
    assert torch.allclose(out["fc.weight"], torch.full((3, 2), 70 / 30))
    assert set(s.last_rejected) == {3, 4, 5, 6, 7, 8}
    assert "NaN" in s.last_rejected[3] and "missing" in s.last_rejected[4]
    assert "shape" in s.last_rejected[5] and "dtype" in s.last_rejected[6]
    assert "num-examples" in s.last_rejected[7] and "num-examples" in s.last_rejected[8]
    assert all(torch.isfinite(v.float()).all() for v in out.values())


@pytest.mark.parametrize("name", ["FedAvg", "FoolsGold", "MultiKrum", "TrimmedMean", "Median", "GeometricMedian",
                                  "MedianOfMeans"])
def test_nothing_valid_keeps_the_global_model(name):
    s = getattr(strategies, name)(**kwargs(4))
    init = state(0.5)
    out = run_rounds(s, FakeGrid([1, 2, 3, 4], lambda n, c: reply(state(float("nan")))), init=init)
    assert out is None  # Flower keeps the previous arrays when aggregation returns None


@pytest.mark.parametrize("name", ["FedAvg", "FoolsGold", "MultiKrum", "TrimmedMean", "Median", "GeometricMedian",
                                  "MedianOfMeans"])
def test_identical_updates_give_that_update(name):
    s = getattr(strategies, name)(**kwargs(5))
    out = run_rounds(s, FakeGrid([1, 2, 3, 4, 5], lambda n, c: reply(state(2.0))))
    # FoolsGold cannot tell identical clients from sybils: all weights 0 → zero update.
    expected = 0.0 if name == "FoolsGold" else 2.0
    assert torch.allclose(out["fc.weight"], torch.full((3, 2), expected), atol=1e-5)


def test_fltrust_with_root_train_fn_rejects_opposite_update():
    def root_train_fn(arrays: ArrayRecord, server_round: int) -> ArrayRecord:
        return ArrayRecord(state(1.0))  # server's own update: +1 everywhere

    def respond(node, content):
        return reply(state(-5.0 if node == 3 else 1.0 + 0.1 * node))

    s = strategies.FLTrust(root_train_fn=root_train_fn, **kwargs(3))
    out = run_rounds(s, FakeGrid([1, 2, 3], respond))
    assert s.last_trust[3] == 0.0 and s.last_trust[1] > 0.99
    # honest updates are rescaled to ‖g_0‖, so the result is exactly +1 on trained arrays
    assert torch.allclose(out["fc.weight"], torch.ones(3, 2), atol=1e-5)


def test_foolsgold_history_survives_rounds_and_down_weights_sybils():
    rng = np.random.default_rng(0)
    honest = {n: rng.normal(size=9).astype(np.float32) for n in (1, 2, 3)}
    sybil = rng.normal(size=9).astype(np.float32)

    def respond(node, content):
        current = {k: torch.from_numpy(np.array(v.numpy())) for k, v in content["arrays"].items()}
        rnd = int(content["config"]["server-round"])
        noise = np.random.default_rng([node, rnd]).normal(size=9).astype(np.float32)  # order-independent
        vec = torch.from_numpy(sybil if node >= 4 else honest[node] + noise)
        new = dict(current)
        new["fc.weight"] = current["fc.weight"] + vec[:6].reshape(3, 2)
        new["fc.bias"] = current["fc.bias"] + vec[6:]
        return reply(new)

    s = strategies.FoolsGold(**kwargs(6))
    grid = FakeGrid([1, 2, 3, 4, 5, 6], respond)
    run_rounds(s, grid, rounds=3)
    assert set(s.history) == {1, 2, 3, 4, 5, 6}
    assert torch.allclose(s.history[4], torch.from_numpy(sybil) * 3, atol=1e-4)  # Σ over 3 rounds
    assert all(s.last_weights[n] == pytest.approx(0.0, abs=1e-6) for n in (4, 5, 6))
    assert all(s.last_weights[n] > 0 for n in (1, 2, 3))


def test_multikrum_excludes_outlier_and_ignores_buffers():
    def respond(node, content):
        if node == 5:
            return reply(state(100.0))  # outlier in trained weights
        # node 4 is an outlier only in BatchNorm statistics: not used for distances
        return reply(state(1.0, **({"bn.running_mean": torch.full((3,), 50.0)} if node == 4 else {})))

    s = strategies.MultiKrum(num_malicious_nodes=1, **kwargs(5))
    out = run_rounds(s, FakeGrid([1, 2, 3, 4, 5], respond))
    assert s.last_weights[5] == 0.0 and s.last_weights[4] > 0
    assert torch.allclose(out["fc.weight"], torch.ones(3, 2))
    # buffers are averaged over all valid replies, data-size weighted
    assert torch.allclose(out["bn.running_mean"], torch.full((3,), (3 * 1.0 + 50.0 + 100.0) / 5))
    assert out["bn.num_batches_tracked"].dtype == torch.int64


def test_seeded_sampling_is_reproducible_and_ordered_by_key():
    order = {10: 2, 20: 0, 30: 1, 40: 3}
    picks = []
    for _ in range(2):
        s = strategies.FedAvg(fraction_train=0.5, min_train_nodes=2, min_available_nodes=4, fraction_evaluate=0.0,
                              sampling_seed=7, node_sort_key=order.get)
        grid = FakeGrid([40, 30, 20, 10], lambda n, c: reply(state(1.0)))
        run_rounds(s, grid, rounds=3)
        picks.append([b for b in grid.sent_to if b])  # (evaluation rounds send nothing)
    assert picks[0] == picks[1]
    assert len(picks[0]) == 3 and all(len(b) == 2 for b in picks[0])
