"""CalGuard without a root set (``calguard-signal = clients``): each reply's calibration drift from the
two calibration states its client reports, by hand; a malformed drift record flagged with its reason;
a reply whose confidence shift is an outlier dropped by the unchanged rule; the key's config rules and
hash; and a tiny digits run where the clients' signal flags the τ = 5 attackers more often than benign
clients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord

from fedcal import strategies
from fedcal.aggregate import calguard as cg
from fedcal.calibration_state import CalibrationState
from fedcal.config import ConfigError, RunConfig
from fedcal.results import config_hash
from fedcal.strategies.calguard import DRIFT_RECORD
from tests.strategy_harness import FakeGrid
from tests.test_calguard import Linear, _as_tensors, _benign_step, _init_state, _kwargs, _reply


def _state(conf, correct, n_bins=10):
    return CalibrationState.empty(n_bins).update(torch.tensor(conf, dtype=torch.float64),
                                                 torch.tensor(correct, dtype=torch.float64))


def test_a_clients_drift_by_hand():
    current = _state([0.6, 0.8], [1, 0])  # accuracy 0.5, mean confidence 0.7: sECE −0.2
    candidate = _state([0.9, 0.95], [1, 1])  # accuracy 1, mean confidence 0.925: sECE +0.075
    sig, reason = cg.client_drift(cg.drift_arrays(current, candidate))
    assert reason == ""
    assert sig == pytest.approx({"sece_drift": 0.275, "conf_shift": 0.225, "accuracy_shift": 0.5, "held_out": 2.0})


GOOD = cg.drift_arrays(_state([0.6, 0.8], [1, 0]), _state([0.9, 0.95], [1, 1]))


@pytest.mark.parametrize("change,why", [
    ({"drop": "candidate.acc_sum"}, "drift record with fields"),
    ({"candidate.count": torch.zeros(10, dtype=torch.float64)}, "candidate calibration state"),  # sums in empty bins
    ({"global.acc_sum": torch.full((10,), 3.0, dtype=torch.float64)}, "global calibration state acc_sum outside"),
    ({"candidate.conf_sum": torch.full((10,), float("nan"), dtype=torch.float64)}, "not finite"),
    ({"global.count": torch.zeros(3, dtype=torch.float64)}, "shape"),
    ({"extra": torch.zeros(10)}, "drift record with fields"),
])
def test_a_malformed_drift_record_is_named(change, why):
    arrays = dict(GOOD)
    arrays.pop(change.pop("drop", None), None)
    arrays.update(change)
    sig, reason = cg.client_drift(arrays)
    assert sig is None and why in reason


def test_states_over_different_samples_are_no_drift():
    arrays = cg.drift_arrays(_state([0.6, 0.8], [1, 0]), _state([0.9], [1]))
    assert "over 2 and 1 samples" in cg.client_drift(arrays)[1]
    empty = cg.drift_arrays(CalibrationState.empty(10), CalibrationState.empty(10))
    assert "need the same, >= 1" in cg.client_drift(empty)[1]


def test_the_rule_drops_an_outlying_confidence_shift_and_flags_a_reply_without_a_drift_record(caplog):
    """Nodes 1–4 report candidates a little more confident than the global model (shift 0.01·node),
    node 5 one 0.3 more confident (what τ > 1 does to its candidate), node 6 no drift record: 5 is
    dropped, 6 flagged with its reason, 1–4 kept. No root set is given."""
    conf = [0.5, 0.55, 0.6, 0.65, 0.7]
    correct = [1, 0, 1, 1, 0]

    def respond(node, content):
        step = _benign_step(_as_tensors(content["arrays"]), node, int(content["config"]["server-round"]))
        reply = _reply(step)
        shift = 0.3 if node == 5 else 0.01 * node
        if node != 6:
            reply[DRIFT_RECORD] = ArrayRecord(cg.drift_arrays(_state(conf, correct),
                                                              _state([c + shift for c in conf], correct)))
        return reply

    kwargs = {k: v for k, v in _kwargs(6).items() if k not in ("root_x", "root_y")}
    s = strategies.CalGuard(signal="clients", **kwargs)
    s.start(grid=FakeGrid([1, 2, 3, 4, 5, 6], respond), initial_arrays=ArrayRecord(_init_state()), num_rounds=3)
    assert s.last_audit[5]["decision"] == "dropped" and s.last_weights[5] == 0.0
    assert s.last_audit[5]["conf_shift"] == pytest.approx(0.3)
    assert s.last_audit[6]["decision"] == "dropped" and "no 'calibration-drift'" in s.last_audit[6]["drift_status"]
    assert all(s.last_audit[n]["decision"] == "kept" and s.last_audit[n]["drift_status"] == "ok" for n in (1, 2, 3, 4))
    assert any("flagged: no 'calibration-drift'" in r.message for r in caplog.records)
    with pytest.raises(ValueError, match="signal must be one of"):
        strategies.CalGuard(signal="server", **kwargs)
    with pytest.raises(ValueError, match="root set must be tensors"):  # the root signal still needs its root set
        strategies.CalGuard(**kwargs)


def test_the_key_keeps_earlier_run_names_and_needs_no_root_set():
    base = RunConfig.from_flower({"strategy": "calguard", "tau": 5.0})
    assert config_hash(base.replace(calguard_signal="root")) == config_hash(base)
    assert config_hash(base.replace(calguard_signal="clients")) != config_hash(base)
    RunConfig.from_flower({"strategy": "calguard", "calguard-signal": "clients", "root-size": 1})  # no root set read
    with pytest.raises(ConfigError, match="root-size"):
        RunConfig.from_flower({"strategy": "calguard", "root-size": 1})
    with pytest.raises(ConfigError, match="calguard-signal"):
        RunConfig.from_flower({"strategy": "calguard", "calguard-signal": "server"})
    with pytest.raises(ConfigError, match="calguard-signal.*not task=lm"):
        RunConfig.from_flower({"task": "lm", "strategy": "calguard", "calguard-signal": "clients"})


def test_a_digits_run_flags_tsa_attackers_more_often_than_benign_clients(tmp_path):
    from fedcal.app.engine import simulate
    from fedcal.reports.defense import flag_rates

    cfg = RunConfig.from_flower({"dataset": "digits", "num-clients": 10, "clients-per-round": 10, "num-rounds": 12,
                                 "lr": 0.05, "attack": "tsa", "tau": 5.0, "strategy": "calguard",
                                 "calguard-signal": "clients", "calguard-kappa": 3.0, "eval-every": 4,
                                 "engine": "inprocess", "device": "cpu", "output-dir": str(tmp_path)})
    run_dir = simulate(cfg, progress=False)
    detected, benign_flagged, attacker_replies = flag_rates(run_dir, cfg)
    assert attacker_replies == 36
    assert detected > 2 * benign_flagged  # seed 0: 36 % of the attackers' replies against 13 % of benign ones
    import pandas as pd

    audit = pd.read_csv(run_dir / "aggregation.csv")
    assert (audit["drift_status"] == "ok").all() and np.isfinite(audit["conf_shift"]).all()
