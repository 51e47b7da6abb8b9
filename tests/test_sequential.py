"""The per-client sequential test (fedcal.sequential) by hand, and the duty-cycled TSA attacker
(tsa-duty) that tries to dilute its evidence."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedcal import sequential as sq
from fedcal.attacks import BENIGN, Behaviour, client_round
from fedcal.attacks.registry import behaviour_kind
from fedcal.config import ConfigError, RunConfig
from fedcal.results import config_hash, default_run_name


# --------------------------------------------------------------------------- CUSUM and SPRT by hand
def test_cusum_by_hand_on_a_short_sequence():
    # x = 1, -2, -1.5, 0.5, -3 with k = 0.5:
    # low:  max(0, 0-1-0.5)=0; 0+2-0.5=1.5; 1.5+1.5-0.5=2.5; 2.5-0.5-0.5=1.5; 1.5+3-0.5=4.0
    # high: 0+1-0.5=0.5; max(0, 0.5-2-0.5)=0; max(0, -1.5-0.5)=0; 0+0.5-0.5=0; 0
    x = [1.0, -2.0, -1.5, 0.5, -3.0]
    assert sq.cusum_path(x, 0.5, "low").tolist() == [0.0, 1.5, 2.5, 1.5, 4.0]
    assert sq.cusum_path(x, 0.5, "high").tolist() == [0.5, 0.0, 0.0, 0.0, 0.0]
    assert sq.running_max([0.0, 1.5, 2.5, 1.5, 4.0]).tolist() == [0.0, 1.5, 2.5, 2.5, 4.0]


def test_the_cusum_is_the_gaussian_log_likelihood_ratio_over_delta_restarted_at_zero():
    """Second implementation: Page's recursion on the per-observation log-likelihood ratio of
    N(−δ, 1) against N(0, 1), computed from the densities, divided by δ."""
    rng = np.random.default_rng(0)
    x = rng.normal(-0.3, 1.2, size=40)
    delta = 1.2
    llr = -0.5 * (x + delta) ** 2 + 0.5 * x ** 2  # log N(x; −δ, 1) − log N(x; 0, 1)
    s, path = 0.0, []
    for v in llr:
        s = max(0.0, s + v)
        path.append(s / delta)
    assert np.allclose(sq.cusum_path(x, delta / 2, "low"), path, atol=1e-12)


def test_wald_thresholds_from_the_error_rates():
    lower, upper = sq.wald_thresholds(0.01, 0.1)
    assert lower == pytest.approx(math.log(0.1 / 0.99)) and upper == pytest.approx(math.log(0.9 / 0.01))
    assert upper == pytest.approx(4.49980967033, abs=1e-9)  # ln 90
    assert sq.cusum_threshold(0.01, 0.1, delta=2.0) == pytest.approx(upper / 2)
    for bad in ((0.0, 0.1), (0.5, 0.6), (0.1, 1.0)):
        with pytest.raises(ValueError, match="error rates"):
            sq.wald_thresholds(*bad)


def test_wald_sprt_error_rates_hold_by_simulation():
    """Wald's boundaries bound the error rates (approximately, by overshoot, from above): an SPRT
    of N(−1, 1) against N(0, 1) with α = 0.05, β = 0.1 on simulated data."""
    lower, upper = sq.wald_thresholds(0.05, 0.1)
    rng = np.random.default_rng(1)

    def decide(mu: float) -> bool:  # True = accept H1
        llr = 0.0
        while lower < llr < upper:
            v = rng.normal(mu, 1.0)
            llr += -v - 0.5  # δ = 1: δ·(−x − δ/2)
        return llr >= upper

    false_alarm = np.mean([decide(0.0) for _ in range(2000)])
    miss = 1 - np.mean([decide(-1.0) for _ in range(2000)])
    assert false_alarm <= 0.05 and miss <= 0.1


def test_calibrated_threshold_flags_at_most_the_target_share():
    m = np.array([0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 9.0])
    # 10 values, target 0.2: rank ceil(0.8·10) = 8 → h = 6; mean(m > 6) = 2/10
    assert sq.calibrate_threshold(m, 0.2) == 6.0 and np.mean(m > 6.0) == 0.2
    # target 0.15: rank ceil(8.5) = 9 → h = 7 (1 of 10 above), 6 would flag 2 > 1.5
    assert sq.calibrate_threshold(m, 0.15) == 7.0
    assert sq.calibrate_threshold(m, 0.0) == 9.0
    rng = np.random.default_rng(2)
    big = rng.exponential(size=997)
    for target in (0.01, 0.05, 0.3):
        h = sq.calibrate_threshold(big, target)
        assert np.mean(big > h) <= target < np.mean(big >= h) + 1e-12  # the smallest such h
    with pytest.raises(ValueError, match="target"):
        sq.calibrate_threshold(m, 1.0)
    with pytest.raises(ValueError, match="no null"):
        sq.calibrate_threshold([], 0.1)


def test_client_cusum_accumulates_per_client_over_sparse_rounds_and_alarms_stay():
    det = sq.ClientCusum(k=0.5, h_low=2.0, h_high=2.5, clip=3.0)
    # round 1: a −1.5, b +0.2; round 2: only a (−2); round 3: a +4 (clipped to 3), b +1.7, c −9 (clipped)
    assert det.update(["a", "b"], [-1.5, 0.2], server_round=1).tolist() == [False, False]
    assert (det.statistic("a").low, det.statistic("b").low) == (1.0, 0.0)
    assert det.update(["a"], [-2.0], server_round=2).tolist() == [True]  # 1 + 2 − 0.5 = 2.5 > 2
    assert det.statistic("a").alarm == "low" and det.statistic("a").alarm_round == 2
    assert det.update(["a", "b", "c"], [4.0, 1.7, -9.0], server_round=3).tolist() == [True, False, True]
    a, b, c = det.statistic("a"), det.statistic("b"), det.statistic("c")
    assert a.low == 0.0 and a.alarm == "low"  # the statistic follows the data, the alarm stays
    assert b.high == pytest.approx(0.0 + 1.7 - 0.5 + 0.0) and b.count == 2  # H: max(0, 0.2−0.5)=0, then 1.2
    assert c.low == pytest.approx(3.0 - 0.5) and c.alarm == "low" and c.count == 1
    assert det.statistic("never-seen").count == 0 and not det.alarmed("never-seen")
    # non-finite scores count as the clip value on their side, NaN as 0
    det2 = sq.ClientCusum(k=0.0, h_low=10.0, h_high=10.0, clip=2.0)
    det2.update(["x", "y", "z"], [math.inf, -math.inf, math.nan])
    assert (det2.statistic("x").high, det2.statistic("y").low, det2.statistic("z").low) == (2.0, 2.0, 0.0)


def test_client_cusum_high_side_and_state_round_trip():
    det = sq.ClientCusum(k=0.5, h_low=math.inf, h_high=1.0)
    det.update([7], [1.0], 1)
    det.update([7], [1.2], 2)  # H = 0.5 + 0.7 = 1.2 > 1
    assert det.statistic(7).alarm == "high" and det.statistic(7).alarm_round == 2
    clone = sq.ClientCusum(k=0.5, h_low=math.inf, h_high=1.0)
    clone.load_state_dict(det.state_dict())
    assert clone.state_dict() == det.state_dict() and clone.alarmed(7)
    det.update([8], [-100.0], 3)
    assert not det.alarmed(8)  # the low side is switched off


def test_client_cusum_refuses_bad_arguments():
    with pytest.raises(ValueError, match="k must"):
        sq.ClientCusum(k=-1)
    with pytest.raises(ValueError, match="h_low"):
        sq.ClientCusum(h_low=0)
    with pytest.raises(ValueError, match="clip"):
        sq.ClientCusum(clip=0)
    det = sq.ClientCusum()
    with pytest.raises(ValueError, match="2 clients but 1 scores"):
        det.update([1, 2], [0.0])
    with pytest.raises(ValueError, match="twice"):
        det.update([1, 1], [0.0, 0.0])


# --------------------------------------------------------------------------- the duty-cycled attacker
class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)


def _after(behaviour: Behaviour, cfg: RunConfig, server_round: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = Linear()
    g = torch.Generator().manual_seed(3)
    y = torch.arange(80) % 3
    x = torch.randn(80, 4, generator=g) + torch.nn.functional.one_hot(y, 4).float()
    client_round(model, x, y, 3, behaviour, cfg, server_round=server_round, client_id=1)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_a_duty_cycled_attacker_attacks_in_a_seeded_share_of_its_rounds_and_is_benign_otherwise():
    kind = behaviour_kind("tsa")
    half = Behaviour("tsa", tau=5.0, duty=0.5)
    on = [r for r in range(1, 401) if kind.attacks_in_round(half, 0, r, 1)]
    assert 160 < len(on) < 240  # Binomial(400, 1/2): ±4 standard deviations
    assert on == [r for r in range(1, 401) if kind.attacks_in_round(half, 0, r, 1)]  # deterministic
    assert on != [r for r in range(1, 401) if kind.attacks_in_round(half, 1, r, 1)]  # per seed
    assert all(kind.attacks_in_round(Behaviour("tsa", tau=5.0), 0, r, 1) for r in range(1, 50))
    assert all(behaviour_kind("benign").attacks_in_round(BENIGN, 0, r, 1) for r in range(1, 50))
    cfg = RunConfig(local_steps=4, batch_size=16, lr=0.1)
    off = next(r for r in range(1, 50) if r not in on)
    attack = on[0]
    benign_off, tsa_on = _after(BENIGN, cfg, off), _after(Behaviour("tsa", tau=5.0), cfg, attack)
    for k, v in _after(half, cfg, off).items():
        assert torch.equal(v, benign_off[k])  # an off-duty round is the benign client's round
    for k, v in _after(half, cfg, attack).items():
        assert torch.equal(v, tsa_on[k])  # an on-duty round is plain TSA's
    assert not torch.equal(tsa_on["fc.weight"], _after(BENIGN, cfg, attack)["fc.weight"])


def test_tsa_duty_key_bounds_hash_and_run_name():
    cfg = RunConfig.from_flower({"tau": 0.2, "tsa-duty": 0.5})
    assert cfg.tsa_duty == 0.5
    for bad in (0, 1.5):
        with pytest.raises(ConfigError, match="tsa-duty"):
            RunConfig.from_flower({"tsa-duty": bad})
    base = RunConfig.from_flower({"tau": 0.2})
    assert config_hash(base.replace(tsa_duty=1.0)) == config_hash(base)  # old runs keep their names
    assert config_hash(base.replace(tsa_duty=0.5)) != config_hash(base)
    assert default_run_name(base.replace(tsa_duty=0.5)).startswith("mnist-mlp-fedavg-tsa0.2-d0.5-s0-")
    with pytest.raises(ValueError, match="duty"):
        behaviour_kind("tsa").check(Behaviour("tsa", tau=0.2, duty=0.0))


def test_the_detect_task_and_the_batched_engine_refuse_the_duty_cycled_attacker():
    from fedcal.app.batched import batched_unsupported
    from fedcal.tasks.detect import check_detect_config

    with pytest.raises(ConfigError, match="tsa-duty"):
        check_detect_config(RunConfig.from_flower({"task": "detect", "tau": 0.2, "tsa-duty": 0.5}))
    assert "tsa-duty" in batched_unsupported(RunConfig.from_flower({"dataset": "digits", "tau": 0.2, "tsa-duty": 0.5}))
