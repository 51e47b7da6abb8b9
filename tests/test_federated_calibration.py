"""Federated calibration (fedcal.calibration_state, fedcal.tasks.federated_eval): the merged state of
the clients' held-out data is the central computation on their union; a client's state is untrusted
input, left out with a logged reason; a Flower run's federated ECE recomputed by hand."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from fedcal.calibration_metrics import estimates
from fedcal.calibration_state import CalibrationState, from_arrays, merged, state_problem
from fedcal.config import RunConfig
from fedcal.metrics import confidence_bins
from tests.strategy_harness import FakeGrid


def _sets(n=3000, parts=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    probs = (torch.randn(n, 10, generator=g, dtype=torch.float64) * 2).softmax(1)
    labels = torch.randint(10, (n,), generator=g)
    labels[: n // 2] = probs[: n // 2].argmax(1)
    cuts = sorted(torch.randperm(n, generator=g)[: parts - 1].tolist())
    return probs, labels, [slice(a, b) for a, b in zip([0, *cuts], [*cuts, n])]


def test_the_merged_state_is_the_central_computation_on_the_union():
    probs, labels, shards = _sets()
    states = [CalibrationState.empty(15).update_probs(probs[s], labels[s]) for s in shards]
    total = merged(states, 15)
    central = CalibrationState.empty(15).update_probs(probs, labels)
    for k in ("count", "acc_sum"):  # integer sums: exactly
        assert torch.equal(getattr(total, k), getattr(central, k))
    assert torch.allclose(total.conf_sum, central.conf_sum, rtol=0, atol=1e-10)
    conf, pred = probs.max(1)
    want = estimates(conf[None], (pred == labels).double()[None], ("mce", "smce", "rmsce"), 15)
    got = total.compute()
    for k in ("ece", "sece", "mce", "smce", "rmsce"):
        assert got[k] == pytest.approx(float(want[k][0]), abs=1e-12), k
    assert got["n"] == len(labels) and got["accuracy"] == pytest.approx(float((pred == labels).double().mean()))
    bins = confidence_bins(probs, labels, 15)
    rel = total.reliability()
    assert torch.equal(rel["count"], bins["count"])
    assert torch.allclose(rel["accuracy"], bins["accuracy"], equal_nan=True)
    # merging is a sum: any order, and an empty state is its identity
    assert torch.equal(merged(states[::-1], 15).count, total.count)
    assert torch.equal(total.merge(CalibrationState.empty(15)).count, total.count)


def test_an_empty_state_computes_nan_not_an_error():
    out = CalibrationState.empty(5).compute()
    assert out["n"] == 0 and np.isnan(out["ece"])


GOOD = CalibrationState.empty(4).update(torch.tensor([0.1, 0.3, 0.3, 0.9], dtype=torch.float64),
                                        torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)).to_arrays()


def _bad(**change):
    return {**GOOD, **change}


@pytest.mark.parametrize("arrays,why", [
    ({"count": GOOD["count"], "conf_sum": GOOD["conf_sum"]}, "without acc_sum"),
    (_bad(count=torch.zeros(5, dtype=torch.float64)), "shape"),
    (_bad(count=torch.tensor([1.0, -1.0, 2.0, 1.0], dtype=torch.float64)), "non-negative integer"),
    (_bad(count=torch.tensor([1.0, 2.5, 0.0, 1.0], dtype=torch.float64)), "non-negative integer"),
    (_bad(conf_sum=torch.tensor([0.1, float("nan"), 0.0, 0.9], dtype=torch.float64)), "not finite"),
    (_bad(acc_sum=torch.tensor([0.0, float("inf"), 0.0, 1.0], dtype=torch.float64)), "not finite"),
    (_bad(acc_sum=torch.tensor([0.0, 3.0, 0.0, 1.0], dtype=torch.float64)), "acc_sum outside"),
    (_bad(acc_sum=torch.tensor([0.0, 0.5, 0.0, 1.0], dtype=torch.float64)), "acc_sum outside"),
    (_bad(acc_sum=torch.tensor([-1.0, 1.0, 0.0, 1.0], dtype=torch.float64)), "acc_sum outside"),
    (_bad(conf_sum=torch.tensor([0.1, 1.2, 0.0, 0.9], dtype=torch.float64)), "conf_sum outside"),  # > 2 x 0.5
    (_bad(conf_sum=torch.tensor([0.1, 0.4, 0.0, 0.9], dtype=torch.float64)), "conf_sum outside"),  # < 2 x 0.25
    (_bad(count=torch.ones(4, dtype=torch.bool)), "dtype"),
])
def test_a_malformed_state_is_named(arrays, why):
    assert why in state_problem(arrays, 4)


def test_a_valid_state_passes_and_reads_back():
    assert state_problem(GOOD, 4) is None
    assert state_problem({k: v.long() if k != "conf_sum" else v for k, v in GOOD.items()}, 4) is None
    assert torch.equal(from_arrays(GOOD).count, GOOD["count"])


def test_the_server_leaves_out_bad_states_with_a_logged_reason(tmp_path, caplog):
    from fedcal.results import RunStore
    from fedcal.tasks.federated_eval import FED_CALIBRATION_FILE, STATE_RECORD, FederatedCalibration

    cfg = RunConfig.from_flower({"dataset": "digits", "num-clients": 4, "clients-per-round": 4, "num-rounds": 1, "n-bins": 4,
                                 "fed-eval-clients": 4})
    nodes = {100 + 7 * p: p for p in range(4)}
    bad = _bad(acc_sum=torch.tensor([0.0, 3.0, 0.0, 1.0], dtype=torch.float64))

    def respond(node, content):
        part = nodes[node]
        if part == 1:
            return None  # an error reply
        if part == 2:
            return RecordDict({STATE_RECORD: ArrayRecord(dict(bad))})
        if part == 3:
            return RecordDict({"metrics": MetricRecord({"ece": 0.0})})  # no state at all
        return RecordDict({STATE_RECORD: ArrayRecord(dict(GOOD))})

    grid = FakeGrid(list(nodes), respond)
    hook = FederatedCalibration(cfg, RunStore(tmp_path, cfg), nodes)
    with caplog.at_level(logging.WARNING):
        record = hook.aggregate(1, grid.send_and_receive(hook.configure(1, ArrayRecord({}), grid)))
    assert grid.sent_to == [sorted(nodes)]
    metrics = hook.metrics_of(1)
    assert metrics["fed_clients"] == 1 and metrics["fed_n"] == 4
    assert metrics["fed_ece"] == pytest.approx(from_arrays(GOOD).compute()["ece"])
    assert float(record["fed_ece"]) == pytest.approx(metrics["fed_ece"])
    table = pd.read_csv(tmp_path / FED_CALIBRATION_FILE).set_index("partition_id")
    assert table.loc[0, "status"] == "ok"
    assert table.loc[1, "status"].startswith("error reply")
    assert "acc_sum outside" in table.loc[2, "status"] and "without a 'calibration'" in table.loc[3, "status"]
    for part in (1, 2, 3):
        assert any(f"node {100 + 7 * part} (partition {part}) left out" in r.message for r in caplog.records)
    assert hook.configure(0, ArrayRecord({}), grid) == []  # round 0 is the central evaluation's alone


def _ece_by_hand(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> float:
    """Σ_b (n_b / n) |acc_b − conf_b| over right-closed equal-width bins, written out in numpy."""
    conf, correct = probs.max(1), (probs.argmax(1) == labels)
    b = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    return sum(abs(correct[b == i].mean() - conf[b == i].mean()) * (b == i).sum() for i in range(n_bins)
               if (b == i).any()) / len(conf)


def test_a_flower_runs_federated_ece_is_recomputed_by_hand(tmp_path):
    from fedcal.app.engine import simulate
    from fedcal.data import client_heldout
    from fedcal.local_training import predict_logits
    from fedcal.results import load_metrics, load_model
    from fedcal.tasks.federated_eval import FED_CALIBRATION_FILE

    cfg = RunConfig.from_flower(dict(dataset="digits", model="mlp", num_clients=6, clients_per_round=3, num_rounds=2,
                                     attacker_ratio=0.34, attack="tsa", tau=5.0, lr=0.05, batch_size=16,
                                     local_steps=2, engine="inprocess", device="cpu", partition="dirichlet",
                                     dirichlet_alpha=0.5, fed_eval_clients=3, output_dir=str(tmp_path)))
    run_dir = simulate(cfg, progress=False)
    metrics = load_metrics(run_dir)
    final = metrics[metrics["round"] == 2].set_index("metric")["value"]
    clients = pd.read_csv(run_dir / FED_CALIBRATION_FILE)
    last = clients[clients["round"] == 2]
    assert len(last) == 3 and (last["status"] == "ok").all() and final["fed_clients"] == 3
    _, model, _ = load_model(run_dir)
    shards = [client_heldout("digits", cfg.data_dir, 6, "dirichlet", 0.5, cfg.seed, int(p))
              for p in last["partition_id"]]
    x, y = torch.cat([s.x for s in shards]), torch.cat([s.y for s in shards])
    probs = predict_logits(model, x).double().softmax(1).numpy()
    assert final["fed_n"] == len(y)
    assert final["fed_ece"] == pytest.approx(_ece_by_hand(probs, y.numpy(), cfg.n_bins), abs=1e-12)
    assert final["fed_accuracy"] == pytest.approx(float((probs.argmax(1) == y.numpy()).mean()), abs=1e-12)
    assert (run_dir / "federated_reliability.csv").exists()
