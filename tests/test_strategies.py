"""fedcal.strategies on an in-process fake Grid: bad replies, history, robust behaviour."""

import inspect
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, MessageType, MetricRecord, RecordDict

from fedcal import strategies
from tests.strategy_harness import FakeGrid

SHAPES = {"fc.weight": (3, 2), "fc.bias": (3,), "bn.running_mean": (3,), "bn.num_batches_tracked": ()}


def state(value: float = 0.0, **override) -> dict:
    s = {k: torch.full(v, value, dtype=torch.float32) for k, v in SHAPES.items()}
    s["bn.num_batches_tracked"] = torch.tensor(abs(int(value * 10)) if np.isfinite(value) else 0, dtype=torch.int64)
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
    assert set(s.last_rejected) == {3, 4, 5, 6, 7, 8, 9}  # 9: the error reply
    assert "error reply" in s.last_rejected[9] and "client crashed" in s.last_rejected[9]
    assert s.replies[1].received == 9 and s.replies[1].accepted == [1, 2] and s.replies[1].aggregated
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
    # Flower keeps the previous arrays when aggregation returns None: its start returns no arrays
    # (Flower 1.42) or the initial ones (from 1.43 on)
    assert out is None or all(torch.equal(out[k], v) for k, v in init.items())
    assert s.rounds_aggregated == 0


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

    s = strategies.MultiKrum(num_malicious_nodes=1, num_nodes_to_select=None, **kwargs(5))
    out = run_rounds(s, FakeGrid([1, 2, 3, 4, 5], respond))
    assert s.last_weights[5] == 0.0 and s.last_weights[4] > 0
    assert torch.allclose(out["fc.weight"], torch.ones(3, 2))
    # buffers: the coordinate median over the selected replies (1-4), so node 4's 50 is outvoted
    assert torch.equal(out["bn.running_mean"], torch.full((3,), 1.0))
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


# ---------------------------------------------------------------------------- registry, kwargs, summary

COMMON_KWARGS = ("fraction_train", "fraction_evaluate", "min_train_nodes", "min_evaluate_nodes",
                 "min_available_nodes", "weighted_by_key", "arrayrecord_key", "configrecord_key",
                 "train_metrics_aggr_fn", "evaluate_metrics_aggr_fn", "sampling_seed", "node_sort_key", "node_label",
                 "buffer_key", "message_type", "pre_aggregation")
RULE_KWARGS = {"fedavg": (), "fltrust": ("root_train_fn",), "foolsgold": ("kappa", "norm_bound"), "multikrum": ("num_malicious_nodes", "num_nodes_to_select"),
               "trimmed_mean": ("beta", "f"), "median": (), "geometric_median": ("max_iter", "tol"),
               "median_of_means": ("num_groups", "seed"),
               "calguard": ("model", "root_x", "root_y", "kappa", "window", "strikes", "mode",
                            "sequential", "sequential_signal", "signal")}


def _root(arrays: ArrayRecord, server_round: int) -> ArrayRecord:
    return arrays


def _guard() -> dict:
    """CalGuard's required arguments: a model of SHAPES' architecture and a root set."""
    model = torch.nn.Sequential()
    model.add_module("fc", torch.nn.Linear(2, 3))
    return {"model": model, "root_x": torch.randn(30, 2), "root_y": torch.arange(30) % 3}


def test_every_rule_is_a_strategy_class_in_a_module_of_its_own():
    assert set(RULE_KWARGS) == set(strategies.STRATEGIES)
    for name, cls in strategies.STRATEGIES.items():
        assert issubclass(cls, strategies.UpdateAggregationStrategy)
        assert getattr(strategies, cls.__name__) is cls
        assert cls.__module__ == f"fedcal.strategies.{name}"  # one module per rule, named after it


@pytest.mark.parametrize("name", sorted(RULE_KWARGS))
def test_each_strategy_takes_explicit_documented_keyword_arguments(name):
    """A rule's own arguments are explicit keyword-only parameters documented on its class; the
    shared ones are StrategyOptions (Flower's FedAvg arguments + sampling options), typed once
    and documented once on the base, and an unknown name is refused."""
    from typing import get_args, get_type_hints

    from fedcal.strategies.options import StrategyOptions

    cls = strategies.STRATEGIES[name]
    params = inspect.signature(cls).parameters
    own = {k: p for k, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    assert inspect.Parameter.VAR_POSITIONAL not in {p.kind for p in params.values()}
    assert {p.kind for p in own.values()} <= {inspect.Parameter.KEYWORD_ONLY}
    shared = set(COMMON_KWARGS)
    if set(own) != set(COMMON_KWARGS):  # a rule with parameters of its own forwards the shared ones
        assert set(own) == set(RULE_KWARGS[name])
        (var,) = [p for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
        hint = get_type_hints(cls.__init__, include_extras=True)[var.name]
        assert get_args(hint) == (StrategyOptions,)  # **options: Unpack[StrategyOptions]
    assert set(StrategyOptions.__annotations__) == shared
    base_params = inspect.signature(strategies.UpdateAggregationStrategy).parameters
    assert set(base_params) == shared
    for arg in shared:
        assert f"{arg} :" in strategies.UpdateAggregationStrategy.__doc__, arg
    for arg in RULE_KWARGS[name]:  # the rule's own arguments are documented on the class itself
        assert f"{arg} :" in cls.__doc__, (name, arg)
    kwargs = {"root_train_fn": _root} if name == "fltrust" else _guard() if name == "calguard" else {}
    with pytest.raises(TypeError, match="fraction_trian"):
        cls(fraction_trian=0.5, **kwargs)


SUMMARY_SETTINGS = {  # name → (kwargs, strings summary() must log)
    "fedavg": ({}, ["FedAvg"]),
    "fltrust": ({"root_train_fn": _root}, ["FLTrust", "_root"]),
    "foolsgold": ({"kappa": 0.25}, ["FoolsGold", "kappa: 0.25"]),
    "multikrum": ({"num_malicious_nodes": 2, "num_nodes_to_select": 4},
                  ["MultiKrum", "Number of malicious nodes: 2", "Number of nodes to select: 4"]),
    "trimmed_mean": ({"f": 3}, ["TrimmedMean", "f (values dropped per side): 3"]),
    "median": ({}, ["Median"]),
    "geometric_median": ({"max_iter": 17, "tol": 1e-3}, ["GeometricMedian", "max_iter: 17", "tol: 0.001"]),
    "median_of_means": ({"num_groups": 4, "seed": 9}, ["MedianOfMeans", "num_groups: 4", "seed: 9"]),
    "calguard": ({**_guard(), "kappa": 3.5, "strikes": 3}, ["CalGuard", "Root set: 30 samples, 3 classes",
                                                             "kappa 3.5, window 10 rounds, strikes 3"]),
}


@pytest.mark.parametrize("name", sorted(SUMMARY_SETTINGS))
def test_summary_logs_the_rules_settings(name, caplog):
    rule_kwargs, expected = SUMMARY_SETTINGS[name]
    s = strategies.STRATEGIES[name](sampling_seed=11, fraction_train=0.4, **rule_kwargs)
    with caplog.at_level("INFO", logger="flwr"):
        s.summary()
    text = "\n".join(r.getMessage() for r in caplog.records)
    for line in expected + ["Sampling seed: 11", "Fraction: train (0.40)", "Weighted by: 'num-examples'"]:
        assert line in text, (name, line, text)


def test_multikrum_summary_names_the_default_m(caplog):
    with caplog.at_level("INFO", logger="flwr"):
        strategies.MultiKrum(num_malicious_nodes=1, num_nodes_to_select=None).summary()
    assert "Number of nodes to select: n - f" in caplog.text


def test_invalid_rule_parameters_fail_at_construction():
    with pytest.raises(ValueError, match="num_malicious_nodes >= 0"):
        strategies.MultiKrum(num_malicious_nodes=-1)
    with pytest.raises(ValueError, match="num_nodes_to_select >= 1"):
        strategies.MultiKrum(num_malicious_nodes=1, num_nodes_to_select=0)
    with pytest.raises(ValueError, match="f >= 0"):
        strategies.TrimmedMean(f=-1)
    with pytest.raises(ValueError, match=r"beta in \[0, 0.5\)"):
        strategies.TrimmedMean(beta=0.5)
    with pytest.raises(ValueError, match="not both"):
        strategies.TrimmedMean(beta=0.1, f=1)
    with pytest.raises(ValueError, match="num_malicious_nodes >= 0"):
        strategies.Bulyan(num_malicious_nodes=-1)
    with pytest.raises(ValueError, match="num_groups >= 1"):
        strategies.MedianOfMeans(num_groups=0)
    with pytest.raises(ValueError, match="kappa"):
        strategies.FoolsGold(kappa=0.0)
    with pytest.raises(TypeError, match="root_train_fn"):
        strategies.FLTrust(root_train_fn=None)
    with pytest.raises(TypeError):
        strategies.FedAvg(0.5)  # keyword-only: a positional argument is a mistake


# What fedcal.simulations.tsa.build_strategy chose for each name (before the registry replaced it),
# for K = 12 clients, M = 6 per round, seed 3, krum-f 1, krum-m 2, trim-f 2, mom-groups 2, kappa 0.5.
EXPECTED_FROM_CONFIG = {
    "fedavg": (strategies.FedAvg, {}),
    "fltrust": (strategies.FLTrust, {"root_train_fn": _root}),
    "foolsgold": (strategies.FoolsGold, {"kappa": 0.5}),
    "multikrum": (strategies.MultiKrum, {"num_malicious_nodes": 1, "num_nodes_to_select": 2}),
    "trimmed_mean": (strategies.TrimmedMean, {"f": 2, "beta": None}),
    "median": (strategies.Median, {}),
    "geometric_median": (strategies.GeometricMedian, {"max_iter": 100, "tol": 1e-6}),
    "median_of_means": (strategies.MedianOfMeans, {"num_groups": 2, "seed": 3}),
}


def _cfg(name: str, **override):
    from fedcal.config import RunConfig

    values = dict(strategy=name, num_clients=12, clients_per_round=6, seed=3, krum_f=1, krum_m=2, trim_f=2,
                  mom_groups=2, foolsgold_kappa=0.5)
    values.update(override)
    return RunConfig(**values)


@pytest.mark.parametrize("name", sorted(EXPECTED_FROM_CONFIG))
def test_strategy_from_config_reproduces_the_simulations_choices(name):
    order = {101: 1, 102: 0}.get
    s = strategies.strategy_from_config(_cfg(name), node_sort_key=order, root_train_fn=_root)
    cls, rule = EXPECTED_FROM_CONFIG[name]
    assert type(s) is cls
    assert (s.fraction_train, s.fraction_evaluate) == (6 / 12, 0.0)
    assert (s.min_train_nodes, s.min_evaluate_nodes, s.min_available_nodes) == (6, 0, 12)
    assert (s.weighted_by_key, s.arrayrecord_key, s.configrecord_key) == ("num-examples", "arrays", "config")
    assert s.sampling_seed == 3 and s.node_sort_key is order
    for attr, value in rule.items():
        assert getattr(s, attr) == value, (name, attr)


def test_strategy_from_config_defaults_and_errors():
    s = strategies.strategy_from_config(_cfg("multikrum", krum_m=0))
    assert s.num_nodes_to_select is None and s.node_sort_key(42) == 42  # krum-m = 0 → n − f; nodes ordered by id
    with pytest.raises(TypeError, match="FLTrust needs root_train_fn"):  # the rule checks what it needs
        strategies.strategy_from_config(_cfg("fltrust"))
    with pytest.raises(ValueError, match="unknown rule 'nope'; choose one of fedavg, "):
        strategies.strategy_from_config(SimpleNamespace(strategy="nope"))


# ---------------------------------------------------------------------------- public Flower API only

def test_error_replies_are_logged_with_node_and_reason(caplog):
    def respond(node, content):
        return None if node == 2 else reply(state(1.0))

    s = strategies.FedAvg(**kwargs(3))
    with caplog.at_level("INFO", logger="flwr"):
        out = run_rounds(s, FakeGrid([1, 2, 3], respond))
    assert torch.allclose(out["fc.weight"], torch.ones(3, 2))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("node 2" in w and "client crashed" in w for w in warnings), warnings
    assert "received 2 results and 1 failures" in caplog.text
    assert "error reply" in s.last_rejected[2]  # error replies are counted among the rejections


def test_seeded_sampling_waits_for_the_minimum_of_nodes(monkeypatch):
    from fedcal.strategies import replies

    grid = FakeGrid([1, 2], lambda n, c: reply(state(1.0)))
    sleeps = []

    def connect_one_more(seconds):
        sleeps.append(seconds)
        grid.nodes.append(len(grid.nodes) + 1)

    monkeypatch.setattr(replies.time, "sleep", connect_one_more)
    s = strategies.FedAvg(fraction_train=0.5, min_train_nodes=2, min_available_nodes=4, fraction_evaluate=0.0,
                          sampling_seed=0)
    messages = list(s.configure_train(1, ArrayRecord(state(0.0)), ConfigRecord(), grid))
    assert sleeps == [1, 1] and len(grid.nodes) == 4
    assert len(messages) == 2 and {m.metadata.dst_node_id for m in messages} <= {1, 2, 3, 4}
    assert all(m.metadata.message_type == MessageType.TRAIN for m in messages)
    assert all(m.content["config"]["server-round"] == 1 for m in messages)
    # the sample is random.Random("0/1") over the nodes in node_sort_key order
    assert [m.metadata.dst_node_id for m in messages] == random.Random("0/1").sample([1, 2, 3, 4], 2)
