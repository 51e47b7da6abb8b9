"""The federated temperature (fedcal.temperature, the evaluate round of
fedcal.tasks.federated_eval): the server's weighted median by hand, a client's bad report left out
with its reason, one client's lie moving the median by one neighbour at most, and a tiny Flower run
that records ``fed_temperature`` and ``fedtemp_*`` (the final model's test logits divided by it, on the
test samples outside the clients' seeded fitting halves), which the defense table shows as its
``fedavg + TS(fed)`` row."""

from __future__ import annotations

import logging
import math

import numpy as np

import pandas as pd
import pytest
import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from fedcal.calibrate import TemperatureScaling
from fedcal.temperature import (T_MAX, client_temperature, federated_temperature, temperature_problem,
                                        weighted_median)
from fedcal.calibration_state import CalibrationState
from fedcal.config import RunConfig
from fedcal.data import temperature_fit_positions
from tests.strategy_harness import FakeGrid


def _unfitted_by_hand(cfg, partitions, n_test):
    """The test indices outside the fitting halves of ``partitions``, written out: each share the
    test labels' partition (as client_heldout splits them), each half the first n // 2 of a
    permutation seeded by the run's seed, the partition id and the split's tag."""
    from fedcal.data import load_dataset, partition_indices

    y = load_dataset(cfg.dataset, cfg.data_dir).y_test.numpy()
    parts = partition_indices(y, cfg.num_clients, cfg.partition, cfg.dirichlet_alpha, cfg.seed)
    fitted = set()
    for p in partitions:
        rng = np.random.default_rng([cfg.seed, p, 0x7E3])
        fitted |= set(parts[p][rng.permutation(len(parts[p]))[: len(parts[p]) // 2]].tolist())
    return torch.tensor(sorted(set(range(n_test)) - fitted), dtype=torch.long)


def test_the_weighted_median_by_hand():
    assert weighted_median(torch.tensor([4.0, 1.0, 2.0]), torch.ones(3)) == 2.0
    assert weighted_median(torch.tensor([1.0, 3.0]), torch.tensor([3.0, 1.0])) == 1.0
    assert weighted_median(torch.tensor([1.0, 3.0]), torch.tensor([1.0, 3.0])) == 3.0
    # half the weight reached exactly at the first value: the lower median
    assert weighted_median(torch.tensor([1.0, 3.0]), torch.tensor([1.0, 1.0])) == 1.0


def test_the_federated_temperature_by_hand():
    # counts 10, 30, 1000 capped at the median count 30: weights 10, 30, 30 → cumulative 10, 40, 70 ≥ 35 at T = 2
    out = federated_temperature({"a": (0.5, 10), "b": (2.0, 30), "c": (4.0, 1000)})
    assert out.temperature == 2.0 and out.clients == ["a", "b", "c"] and out.left_out == {}
    # without the cap the client claiming 1000 samples would be the median alone
    assert weighted_median(torch.tensor([0.5, 2.0, 4.0]), torch.tensor([10.0, 30.0, 1000.0])) == 4.0


@pytest.mark.parametrize("report,why", [
    ((float("nan"), 50), "not finite"),
    ((-1.5, 50), "outside"),
    ((0.0, 50), "outside"),
    ((T_MAX * 10, 50), "outside"),
    ((float("inf"), 50), "not finite"),
    ((None, 50), "no temperature reported"),
    (([1.0, 2.0], 50), "not a number"),
    ((True, 50), "not a number"),
    ((1.5, 0), "not a positive integer"),
    ((1.5, 2.5), "not a positive integer"),
])
def test_a_bad_report_is_left_out_with_its_reason(report, why):
    assert why in temperature_problem(*report)
    out = federated_temperature({"good": (1.5, 40), "bad": report})
    assert out.temperature == 1.5 and out.clients == ["good"] and why in out.left_out["bad"]


def test_no_valid_report_gives_nan_not_an_error():
    out = federated_temperature({"x": (float("nan"), 3)})
    assert math.isnan(out.temperature) and out.clients == []


def test_one_liar_moves_the_median_by_one_neighbour_at_most():
    honest = {k: (t, 100) for k, t in enumerate([0.8, 0.9, 1.0, 1.1, 1.2])}
    base = federated_temperature(honest).temperature
    assert base == 1.0
    for lie in (1e-3, T_MAX):
        moved = federated_temperature({**honest, "liar": (lie, 10**9)}).temperature
        assert moved in (0.9, 1.0, 1.1)


def test_a_clients_temperature_is_temperature_scaling_on_its_data():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 5, generator=g, dtype=torch.float64) * 4
    labels = torch.randint(5, (200,), generator=g)
    assert client_temperature(logits, labels) == TemperatureScaling().fit(logits, labels).temperature_
    assert client_temperature(logits, labels) > 1  # over-confident random logits are cooled
    assert math.isnan(client_temperature(logits[:1], labels[:1]))


def test_the_evaluate_round_leaves_out_a_bad_temperature_with_a_logged_reason(tmp_path, caplog):
    from fedcal.results import RunStore
    from fedcal.tasks.federated_eval import FED_CALIBRATION_FILE, STATE_RECORD, FederatedCalibration

    cfg = RunConfig.from_flower({"dataset": "digits", "num-clients": 4, "clients-per-round": 4, "num-rounds": 1,
                                 "n-bins": 4, "fed-eval-clients": 4})
    nodes = {100 + 7 * p: p for p in range(4)}
    state = CalibrationState.empty(4).update(torch.tensor([0.1, 0.3, 0.3, 0.9], dtype=torch.float64),
                                             torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)).to_arrays()
    temperature = {0: 1.5, 1: float("nan"), 2: -2.0, 3: None}

    def respond(node, content):
        t = temperature[nodes[node]]
        metrics = {"num-examples": 4} if t is None else {"num-examples": 4, "temperature": t}
        return RecordDict({STATE_RECORD: ArrayRecord(dict(state)), "metrics": MetricRecord(metrics)})

    grid = FakeGrid(list(nodes), respond)
    hook = FederatedCalibration(cfg, RunStore(tmp_path, cfg), nodes)
    with caplog.at_level(logging.WARNING):
        hook.aggregate(1, grid.send_and_receive(hook.configure(1, ArrayRecord({}), grid)))
    assert hook.temperature(1) == 1.5
    metrics = hook.metrics_of(1)
    assert metrics["fed_temperature"] == 1.5 and metrics["fed_temperature_clients"] == 1
    assert metrics["fed_clients"] == 4  # the states themselves are valid: only the temperatures are left out
    table = pd.read_csv(tmp_path / FED_CALIBRATION_FILE).set_index("partition_id")
    assert table.loc[0, "temperature_status"] == "ok" and table.loc[0, "temperature"] == 1.5
    assert "not finite" in table.loc[1, "temperature_status"]
    assert "outside" in table.loc[2, "temperature_status"]
    assert table.loc[3, "temperature_status"] == "no temperature reported"
    for part in (1, 2, 3):
        assert any(f"temperature of node {100 + 7 * part} (partition {part}) left out" in r.message
                   for r in caplog.records)


def test_a_flower_run_records_the_federated_temperature_and_the_rescaled_metrics(tmp_path):
    from fedcal.app.engine import simulate
    from fedcal.data import client_heldout, load_dataset
    from fedcal.local_training import predict_logits
    from fedcal.metrics import calibration_metrics
    from fedcal.results import load_metrics, load_model
    from fedcal.tasks.federated_eval import FED_CALIBRATION_FILE

    cfg = RunConfig.from_flower(dict(dataset="digits", model="mlp", num_clients=4, clients_per_round=2, num_rounds=2,
                                     attacker_ratio=0.25, attack="tsa", tau=5.0, lr=0.05, batch_size=16,
                                     local_steps=2, engine="inprocess", device="cpu", fed_eval_clients=3, checkpoint_every=1,
                                     output_dir=str(tmp_path)))
    run_dir = simulate(cfg, progress=False)
    metrics = load_metrics(run_dir)
    final = metrics[metrics["round"] == 2].set_index("metric")["value"]
    clients = pd.read_csv(run_dir / FED_CALIBRATION_FILE)
    last = clients[clients["round"] == 2]
    assert (last["temperature_status"] == "ok").all() and final["fed_temperature_clients"] == 3
    _, model, _ = load_model(run_dir)
    # each client's temperature is temperature scaling on the fitting half of its held-out data; the server's their median
    mine = []
    for part in last["partition_id"]:
        shard = client_heldout("digits", cfg.data_dir, 4, cfg.partition, cfg.dirichlet_alpha, cfg.seed, int(part))
        fit = torch.from_numpy(temperature_fit_positions(len(shard), cfg.seed, int(part)))
        mine.append(TemperatureScaling().fit(predict_logits(model, shard.x[fit]).double(), shard.y[fit]).temperature_)
    assert sorted(last["temperature"]) == pytest.approx(sorted(mine), rel=1e-9)
    # the weighted median written out: counts capped at their median, the first T reaching half the weight
    n = sorted(last["n"])[1]
    pairs = sorted(zip(mine, [min(c, n) for c in last["n"]]))
    half, acc = sum(w for _, w in pairs) / 2, 0.0
    for t, w in pairs:
        acc += w
        if acc >= half:
            break
    assert final["fed_temperature"] == pytest.approx(t, rel=1e-9)
    # fedtemp_* are scored on the test samples outside the 3 evaluating clients' fitting halves
    ds = load_dataset("digits", cfg.data_dir)
    held = _unfitted_by_hand(cfg, [int(p) for p in last["partition_id"]], len(ds.y_test))
    assert final["fedtemp_n"] == len(held) < len(ds.y_test)
    logits = predict_logits(model, ds.x_test)
    want = calibration_metrics(logits[held].double() / final["fed_temperature"], ds.y_test[held], cfg.n_bins)
    for k in ("accuracy", "ece", "sece", "nll"):
        assert final[f"fedtemp_{k}"] == pytest.approx(want[k], abs=1e-9), k
    # dividing keeps the argmax: the accuracy is the plain one on the same samples
    assert final["fedtemp_accuracy"] == pytest.approx(
        float((logits[held].argmax(1) == ds.y_test[held]).double().mean()), abs=1e-12)
    assert "fedtemp_ece" not in set(metrics[metrics["round"] == 0]["metric"])
    # the defense table's federated-temperature row is the run's final fedtemp_* metrics
    from fedcal.reports.defense import FEDTEMP, POSTHOC, run_rows

    rows = run_rows([run_dir]).set_index("strategy")
    assert set(rows.index) == {"fedavg", POSTHOC, FEDTEMP}
    for k in ("accuracy", "ece", "sece"):
        assert rows.loc[FEDTEMP, k] == pytest.approx(want[k], abs=1e-9), k


def test_the_fitting_half_is_seeded_and_half_of_the_share():
    a = temperature_fit_positions(181, seed=3, partition_id=2)
    assert (a == temperature_fit_positions(181, seed=3, partition_id=2)).all()  # same seed, same split
    assert len(a) == 90 and len(set(a.tolist())) == 90 and (np.diff(a) > 0).all() and 0 <= a.min() and a.max() < 181
    assert (a != temperature_fit_positions(181, seed=4, partition_id=2)).any()
    assert (a != temperature_fit_positions(181, seed=3, partition_id=1)).any()
    assert len(temperature_fit_positions(1, 0, 0)) == 0


def test_with_every_client_evaluating_the_temperature_is_scored_off_its_fit(tmp_path):
    """All clients evaluate, so their shares cover the test set: fedtemp_* are scored on exactly
    the test samples outside the union of their fitting halves, never on a sample a client fitted on."""
    from fedcal.app.engine import simulate
    from fedcal.data import client_heldout, load_dataset
    from fedcal.local_training import predict_logits
    from fedcal.metrics import calibration_metrics
    from fedcal.results import load_metrics, load_model

    cfg = RunConfig.from_flower(dict(dataset="digits", model="mlp", num_clients=3, clients_per_round=3, num_rounds=1,
                                     lr=0.05, batch_size=16, local_steps=2, engine="inprocess", device="cpu",
                                     fed_eval_clients=3, checkpoint_every=1, output_dir=str(tmp_path)))
    run_dir = simulate(cfg, progress=False)
    metrics = load_metrics(run_dir)
    final = metrics[metrics["round"] == 1].set_index("metric")["value"]
    assert final["fed_temperature_clients"] == 3
    ds = load_dataset("digits", cfg.data_dir)
    shares = [len(client_heldout("digits", cfg.data_dir, 3, cfg.partition, cfg.dirichlet_alpha, cfg.seed, p))
              for p in range(3)]
    assert sum(shares) == len(ds.y_test)
    assert final["fedtemp_n"] == len(ds.y_test) - sum(s // 2 for s in shares)
    held = _unfitted_by_hand(cfg, [0, 1, 2], len(ds.y_test))
    _, model, _ = load_model(run_dir)
    want = calibration_metrics(predict_logits(model, ds.x_test[held]).double() / final["fed_temperature"],
                               ds.y_test[held], cfg.n_bins)
    assert final["fedtemp_ece"] == pytest.approx(want["ece"], abs=1e-9)
    assert final["fedtemp_sece"] == pytest.approx(want["sece"], abs=1e-9)
