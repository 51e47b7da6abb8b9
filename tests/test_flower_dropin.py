"""fedcal's strategies where Flower's stand: every fedcal strategy with a counterpart in
``flwr.serverapp.strategy`` takes exactly the counterpart's constructor arguments (names and
defaults) and, driven through the same grid with the same clean replies, ends with the model the
counterpart ends with (to float tolerance: Flower aggregates full models, fedcal updates)."""

import functools
import inspect
import random

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp import strategy as flower

from fedcal import aggregate as agg
from fedcal import strategies
from fedcal.strategies.base import UpdateAggregationStrategy
from fedcal.strategies.options import StrategyOptions
from tests.strategy_harness import FakeGrid

#: fedcal class of each Flower strategy that has one, and the argument sets each is compared with
#: ({} = every default; the issue's own example for MultiKrum)
COUNTERPARTS = {
    "FedAvg": (strategies.FedAvg, [{}]),
    "MultiKrum": (strategies.MultiKrum, [{}, {"num_malicious_nodes": 2, "num_nodes_to_select": 3},
                                         {"num_malicious_nodes": 1, "num_nodes_to_select": 20}]),
    "Krum": (strategies.Krum, [{}, {"num_malicious_nodes": 2}]),
    "FedMedian": (strategies.FedMedian, [{}]),
    "FedTrimmedAvg": (strategies.FedTrimmedAvg, [{}, {"beta": 0.0}, {"beta": 0.1}, {"beta": 0.45}]),
    "Bulyan": (strategies.Bulyan, [{}, {"num_malicious_nodes": 1}, {"num_malicious_nodes": 2}]),
}
CASES = [(name, args) for name, (_, sets) in COUNTERPARTS.items() for args in sets]
NODES = list(range(101, 112))  # 11 nodes: enough for Bulyan with f = 2 (4f + 3)
SHAPES = {"fc1.weight": (4, 3), "fc1.bias": (4,), "fc2.weight": (2, 4), "fc2.bias": (2,)}


@pytest.fixture(autouse=True)
def _no_full_gc_per_array(monkeypatch):
    """Flower's Bulyan converts every selected reply with ``to_numpy_ndarrays(keep_input=False)``,
    which runs a full ``gc.collect()`` per record: seconds per round in a test process holding
    torch. Collecting garbage changes no value, so the comparison skips it."""
    import types

    from flwr.app.message import arrayrecord

    monkeypatch.setattr(arrayrecord, "gc", types.SimpleNamespace(collect=lambda *a: 0))


def _initial() -> ArrayRecord:
    g = torch.Generator().manual_seed(0)
    return ArrayRecord({k: torch.randn(s, generator=g) for k, s in SHAPES.items()})


def _size(node: int) -> int:
    return 10 + 7 * (node % 5)


#: the median of the round's claimed sizes (every node replies): what MultiKrum caps them at
MEDIAN_SIZE = int(np.median([_size(n) for n in NODES]))


def _respond(node: int, content: RecordDict, cap: int | None = None) -> RecordDict:
    """A clean reply: the sent model plus the node's own step, different per node and round (its
    size grows with the node, so Krum scores are far apart and both sides rank them alike), and a
    node-dependent data size (at most ``cap`` when given)."""
    rnd = int(content["config"]["server-round"]) if "server-round" in content["config"] else 0
    g = torch.Generator().manual_seed(node * 1000 + rnd)
    scale = 0.05 * (1 + (node - NODES[0]))
    arrays = {k: torch.from_numpy(np.array(v.numpy())) + scale * torch.randn(v.shape, generator=g)
              for k, v in content["arrays"].items()}
    return RecordDict({"arrays": ArrayRecord(arrays),
                       "metrics": MetricRecord({"num-examples": _size(node) if cap is None else min(_size(node), cap),
                                                "train-loss": 1.0 / node})})


def _run(strategy, rounds: int = 3, respond=_respond) -> dict[str, np.ndarray]:
    random.seed(0)  # Flower's own sampling draws from the global random (every node is sampled here)
    result = strategy.start(grid=FakeGrid(NODES, respond), initial_arrays=_initial(), num_rounds=rounds)
    return {k: np.array(v.numpy()) for k, v in result.arrays.items()}


def _accepted(cls) -> dict[str, inspect.Parameter]:
    """The keyword arguments a fedcal strategy class accepts, with their declared defaults: its own
    and the shared StrategyOptions (whose defaults are the base's)."""
    own = {k: p for k, p in inspect.signature(cls).parameters.items() if p.kind is not p.VAR_KEYWORD}
    base = inspect.signature(UpdateAggregationStrategy).parameters
    return {**{k: base[k] for k in StrategyOptions.__annotations__}, **own}


@pytest.mark.parametrize("name", sorted(COUNTERPARTS))
def test_accepts_exactly_the_flower_counterparts_arguments_with_its_defaults(name):
    theirs = flower.__dict__[name]
    ours, _ = COUNTERPARTS[name]
    flower_params = inspect.signature(theirs).parameters
    accepted = _accepted(ours)
    missing = sorted(set(flower_params) - set(accepted))
    assert not missing, f"fedcal's {ours.__name__} does not take Flower's {missing}"
    # The defaults mean the same: both built with no argument hold the same settings.
    a, b = theirs(), ours()
    for arg, param in flower_params.items():
        if arg == "selection_rule":  # Flower stores its default (select_multikrum); fedcal None = MultiKrum
            assert param.default is None and b.selection_rule is None
            continue
        assert getattr(b, arg) == getattr(a, arg), (name, arg, getattr(b, arg), getattr(a, arg))


@pytest.mark.parametrize(("name", "args"), CASES, ids=[f"{n}-{a}" for n, a in CASES])
def test_aggregates_what_flower_aggregates_on_clean_replies(name, args):
    """Where fedcal caps the claimed sizes at the round's median (MultiKrum's mean of the selected
    replies; Flower weighs them as claimed), Flower's counterpart is given the capped claims: the
    cap is the only difference (:func:`test_multikrum_differs_from_flower_by_the_size_cap_only`)."""
    ours, _ = COUNTERPARTS[name]
    capped = ours.size_weighting == "capped"
    expected = _run(flower.__dict__[name](**args), respond=functools.partial(_respond, cap=MEDIAN_SIZE) if capped
                    else _respond)
    got = _run(ours(**args))
    assert set(got) == set(expected)
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-5, atol=1e-5, err_msg=f"{name}{args} {k}")


def test_multikrum_differs_from_flower_by_the_size_cap_only():
    """Flower's MultiKrum averages its selection weighted by the claimed sizes; fedcal's caps each
    claim at the round's median first (one selected client claiming 1e30 examples must not be the
    whole aggregate). On replies whose claims differ (10 … 38, median 24) the two differ; given
    the capped claims, Flower's is fedcal's; the selection itself never read the sizes."""
    args = {"num_malicious_nodes": 2, "num_nodes_to_select": 3}
    ours = _run(strategies.MultiKrum(**args))
    raw = _run(flower.MultiKrum(**args))
    capped = _run(flower.MultiKrum(**args), respond=functools.partial(_respond, cap=MEDIAN_SIZE))
    assert MEDIAN_SIZE == 24
    assert max(float(np.abs(ours[k] - raw[k]).max()) for k in ours) > 1e-3
    for k in ours:
        np.testing.assert_allclose(ours[k], capped[k], rtol=1e-5, atol=1e-5)
    # Krum (one update) and every rule that ignores sizes are Flower's on the raw claims
    assert {c.size_weighting for c in (strategies.FedMedian, strategies.FedTrimmedAvg, strategies.Bulyan)} == {"ignored"}


def test_the_comparison_tells_the_rules_apart():
    """The replies are not so alike that any rule matches any other: MultiKrum's Flower default
    (Krum, one update) differs from averaging n − f (fedcal's MultiKrum before it took Flower's
    arguments), and the trimmed mean's beta changes the result."""
    krum = _run(flower.MultiKrum())
    n_minus_f = _run(strategies.MultiKrum(num_malicious_nodes=0, num_nodes_to_select=None))
    assert np.abs(krum["fc1.weight"] - n_minus_f["fc1.weight"]).max() > 1e-2
    trimmed = [_run(strategies.FedTrimmedAvg(beta=b))["fc1.weight"] for b in (0.0, 0.45)]
    assert np.abs(trimmed[0] - trimmed[1]).max() > 1e-3


def test_bulyan_takes_flowers_selection_rule_hook(caplog):
    """``selection_rule`` gets the accepted replies' contents (full models), as in Flower: passing
    Flower's own ``select_multikrum`` gives Flower's aggregate; a rule returning replies that were
    not in its list fails the round (the model is kept), never the run."""
    from flwr.serverapp.strategy.multikrum import select_multikrum

    expected = _run(flower.Bulyan(num_malicious_nodes=1))
    got = _run(strategies.Bulyan(num_malicious_nodes=1, selection_rule=select_multikrum))
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-5, atol=1e-5)

    def foreign(contents, f, theta):
        return [RecordDict(dict(c)) for c in contents[:theta]]  # copies: not the replies it was given

    s = strategies.Bulyan(num_malicious_nodes=1, selection_rule=foreign)
    with caplog.at_level("WARNING", logger="flwr"):
        s.start(grid=FakeGrid(NODES, _respond), initial_arrays=_initial(), num_rounds=1)
    assert s.rounds_aggregated == 0 and s.replies[1].received == len(NODES)
    assert "selection_rule must return distinct replies" in caplog.text


def test_bulyan_with_too_few_replies_applies_the_median(caplog):
    """Flower skips a round with fewer than 4f + 3 replies; fedcal applies their coordinate-wise
    median (documented), so the round still moves the model."""
    s = strategies.Bulyan(num_malicious_nodes=3, fraction_evaluate=0.0)  # needs 15 replies, gets 11
    with caplog.at_level("WARNING", logger="flwr"):
        got = _run(s, rounds=1)
    init = {k: np.array(v.numpy()) for k, v in _initial().items()}
    replies = [_respond(n, RecordDict({"arrays": _initial(), "config": _round(1)})) for n in NODES]
    expected = {k: np.median(np.stack([np.array(r["arrays"][k].numpy()) for r in replies]) - init[k], axis=0) + init[k]
                for k in init}
    for k in init:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-5, atol=1e-6)
    assert "needs 15 valid replies, got 11" in caplog.text


def _round(r: int):
    from flwr.app import ConfigRecord

    return ConfigRecord({"server-round": r})


# ---------------------------------------------------------------------------- the core rule
def test_mean_around_median_by_hand():
    x = torch.tensor([[0.0, 10.0], [1.0, -3.0], [5.0, 4.0], [9.0, 5.0]])
    # column 0: median 3, distances 3 2 2 6; column 1: median 4.5, distances 5.5 7.5 .5 .5
    assert torch.equal(agg.mean_around_median(x, 2), torch.tensor([3.0, 4.5]))
    assert torch.allclose(agg.mean_around_median(x, 3), torch.tensor([2.0, 19.0 / 3.0]))
    with pytest.raises(ValueError, match="k ≤ n"):
        agg.mean_around_median(x, 5)


def test_bulyan_by_hand():
    # f = 1, n = 7: Krum scores over 4 neighbours are 30 15 10 10 15 30 (and huge for 100);
    # the 5 lowest (ties to the lower index) are 0..4; their median is 2 and the 3 closest
    # values to it are 1, 2, 3.
    x = torch.tensor([0.0, 1, 2, 3, 4, 5, 100]).unsqueeze(1)
    assert torch.equal(agg.bulyan(x, 1), torch.tensor([2.0]))
    with pytest.raises(ValueError, match="4f \\+ 3"):
        agg.bulyan(x, 2)


def test_mean_around_median_equals_flowers_numpy_rule():
    """A second implementation: Flower's ``aggregate_n_closest_weights`` on the same selection."""
    from flwr.serverapp.strategy.bulyan import aggregate_n_closest_weights

    g = torch.Generator().manual_seed(3)
    x = torch.randn(9, 40, generator=g, dtype=torch.float64)
    arrays = [[row.numpy()] for row in x]
    for k in (1, 4, 9):
        theirs = aggregate_n_closest_weights([np.median(x.numpy(), axis=0)], arrays, k)[0]
        np.testing.assert_allclose(agg.mean_around_median(x, k).numpy(), theirs, rtol=1e-12)


# ---------------------------------------------------------------------------- Flower 1.43's start
@pytest.mark.parametrize("name", ["FedAvg", "MultiKrum", "FedMedian", "FedTrimmedAvg"])
def test_start_accepts_and_honours_should_stop(name):
    """``should_stop(round, result)`` (Flower 1.43's early stop) ends the run after the round it
    returns True for: here round 2 of 5, so two training rounds reach the nodes, and it is called
    once per round with the results so far (never for round 0). Positional arguments, as Flower's
    ``start`` takes them, work too."""
    calls = []

    def should_stop(server_round, result):
        calls.append((server_round, sorted(result.train_metrics_clientapp)))
        return server_round >= 2

    grid = FakeGrid(NODES, _respond)
    strategy = COUNTERPARTS[name][0](fraction_evaluate=0.0)
    result = strategy.start(grid, _initial(), 5, should_stop=should_stop)
    assert len([b for b in grid.sent_to if b]) == 2, grid.sent_to  # train messages of rounds 1 and 2 only
    assert calls == [(1, [1]), (2, [1, 2])]
    assert sorted(result.train_metrics_clientapp) == [1, 2] and sorted(strategy.replies) == [1, 2]


def test_should_stop_ends_a_resumed_run_too():
    grid = FakeGrid(NODES, _respond)
    strategy = strategies.FedAvg(fraction_evaluate=0.0)
    strategy.start(grid=grid, initial_arrays=_initial(), num_rounds=9, first_round=4,
                   should_stop=lambda r, result: r == 5)
    assert sorted(strategy.replies) == [4, 5]


# ---------------------------------------------------------------------------- drop-in details
@pytest.mark.parametrize("name", sorted(COUNTERPARTS) + ["FoolsGold", "GeometricMedian", "MedianOfMeans"])
def test_a_wrong_keyword_names_the_class_called(name):
    """``MultiKrum(foo=1)``: the TypeError names MultiKrum (Python would name the base class that
    receives the shared options), and a near-miss of an accepted name is suggested. (FedMedian and
    FedTrimmedAvg are the classes Median and TrimmedMean under Flower's names: those are named.)"""
    cls = getattr(strategies, name)
    with pytest.raises(TypeError) as err:
        cls(foo=1)
    assert str(err.value) == f"{cls.__name__}.__init__() got an unexpected keyword argument 'foo'", err.value
    with pytest.raises(TypeError, match=rf"^{cls.__name__}\.__init__\(\) .* 'min_train_node' \(did you mean "
                                        r"'min_train_nodes'\?\)$"):
        cls(min_train_node=3)


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_unlabelled_nodes_are_named_by_node_id_with_one_note(caplog):
    """Without ``node_label`` a rejection names ``node <id>`` (not "partition unknown"), and one
    INFO line says how to name nodes by partition, however many lines name nodes."""
    def respond(node, content):
        return None if node in (101, 102) else _respond(node, content)

    strategy = strategies.MultiKrum(fraction_evaluate=0.0)
    with caplog.at_level("INFO", logger="flwr"):
        strategy.start(grid=FakeGrid(NODES, respond), initial_arrays=_initial(), num_rounds=2)
    dropped = [w for w in _warnings(caplog) if "dropped reply" in w]
    assert len(dropped) == 4 and all("unknown" not in w for w in dropped), dropped
    assert any(w.endswith("dropped reply of node 101: error reply (client crashed)") for w in dropped), dropped
    assert caplog.text.count("pass node_label=") == 1
    labelled = strategies.MultiKrum(fraction_evaluate=0.0, node_label=lambda n: n - 100)
    caplog.clear()
    with caplog.at_level("INFO", logger="flwr"):
        labelled.start(grid=FakeGrid(NODES, respond), initial_arrays=_initial(), num_rounds=1)
    assert any("node 101 (partition 1)" in w for w in _warnings(caplog)) and "pass node_label=" not in caplog.text


def _fltrust(root_scale: float):
    """FLTrust whose root step is the clients' mean direction, ``root_scale`` times their size."""
    def root_train_fn(arrays, server_round):
        return ArrayRecord({k: torch.from_numpy(np.array(v.numpy())) + root_scale * 0.1 for k, v in arrays.items()})

    def respond(node, content):
        arrays = {k: torch.from_numpy(np.array(v.numpy())) + 0.1 + 0.01 * (node % 3) for k, v in
                  content["arrays"].items()}
        return RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 10})})

    return strategies.FLTrust(root_train_fn=root_train_fn, fraction_evaluate=0.0), FakeGrid(NODES, respond)


def test_fltrust_warns_once_when_the_root_step_is_too_short_to_move_the_model(caplog):
    """Every trusted update is rescaled to ‖g_0‖: a root step 1/1000 of the clients' moves the model by
    1/1000 of what they agree on. One warning, with both norms (26 trained weights: g_0 moves each by
    1e-4, the median client by 0.11), for a 3-round run; none when the root step is the clients' size."""
    strategy, grid = _fltrust(0.001)
    with caplog.at_level("INFO", logger="flwr"):
        strategy.start(grid=grid, initial_arrays=_initial(), num_rounds=3)
    warned = [w for w in _warnings(caplog) if "root update" in w]
    assert len(warned) == 1, warned
    g0, median = 1e-4 * np.sqrt(26), 0.11 * np.sqrt(26)
    assert f"norm {g0:.3g} is" in warned[0] and f"median update norm {median:.3g}" in warned[0], warned
    assert warned[0].startswith("FLTrust round 1:") and "once per run" in warned[0]
    strategy, grid = _fltrust(1.0)
    caplog.clear()
    with caplog.at_level("INFO", logger="flwr"):
        strategy.start(grid=grid, initial_arrays=_initial(), num_rounds=3)
    assert not [w for w in _warnings(caplog) if "root update" in w]


def test_fltrust_warns_when_no_client_is_trusted(caplog):
    strategy, grid = _fltrust(-1.0)  # the root step points away from every client
    with caplog.at_level("INFO", logger="flwr"):
        strategy.start(grid=grid, initial_arrays=_initial(), num_rounds=2)
    warned = [w for w in _warnings(caplog) if "every trust score is ~0" in w]
    assert len(warned) == 1 and all(t == 0 for t in strategy.last_trust.values()), warned


def test_the_lora_strategies_name_unlabelled_nodes_by_id_too(caplog):
    from fedcal.strategies.lora_baselines import FedIT

    s = FedIT()
    with caplog.at_level("INFO", logger="flwr"):
        names = [s.who(7), s.who(8)]
    assert names == ["node 7", "node 8"] and caplog.text.count("pass node_label=") == 1
    assert FedIT(node_label=lambda n: n - 5).who(7) == "node 7 (partition 2)"
