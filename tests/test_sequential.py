"""The per-client sequential test (fedcal.sequential) by hand, and the duty-cycled TSA attacker
(tsa-duty) that tries to dilute its evidence."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedcal.attacks import LocalRoundSpec
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
    client_round(model, x, y, 3, behaviour, LocalRoundSpec.from_config(cfg), server_round=server_round, client_id=1)
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


# --------------------------------------------------------------------------- CalGuard with the sequential test
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict  # noqa: E402

from fedcal.aggregate import calguard as cg  # noqa: E402
from fedcal import strategies  # noqa: E402
from tests.strategy_harness import FakeGrid  # noqa: E402


def _root(n: int = 60):
    g = torch.Generator().manual_seed(0)
    y = torch.arange(n) % 3
    return torch.randn(n, 4, generator=g) + 2.0 * torch.nn.functional.one_hot(y, 4).float(), y


def _init_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return {k: v.detach().clone() for k, v in Linear().state_dict().items()}


def _step(current: dict, node: int, rnd: int, factor: float = 1.0) -> RecordDict:
    """One gradient step on the root-like data with a node-specific jitter, its size × ``factor``
    (a small factor: a reply that grows the logit scale less than the others, as τ < 1 does)."""
    x, y = _root()
    model = Linear()
    model.load_state_dict(current)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    g = torch.Generator().manual_seed(1000 * node + rnd)
    arrays = {name: (p - factor * 0.1 * p.grad * (1 + 0.5 * torch.rand(p.shape, generator=g))).detach()
              for name, p in model.named_parameters()}
    return RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 10 * node})})


def _tensors(arrays) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v.numpy(), copy=True)) for k, v in arrays.items()}


def _guard(**extra):
    x, y = _root()
    return strategies.CalGuard(model=Linear(), root_x=x, root_y=y, fraction_train=1.0, fraction_evaluate=0.0,
                               min_train_nodes=5, min_evaluate_nodes=0, min_available_nodes=5,
                               node_label=lambda n: 100 + n, **extra)


def _low_node(node, content):
    current = _tensors(content["arrays"])
    return _step(current, node, int(content["config"]["server-round"]), factor=0.4 if node == 5 else 1.0)


def _shrinking_node(node, content):
    """Node 5 takes the benign step and then shrinks every weight by 3 %: a step of about the
    others' size in a direction that lowers the logit scale (what τ < 1 aims at)."""
    current = _tensors(content["arrays"])
    reply = _step(current, node, int(content["config"]["server-round"]))
    if node == 5:
        arrays = {k: 0.97 * torch.from_numpy(np.array(v.numpy(), copy=True)) for k, v in reply["arrays"].items()}
        reply = RecordDict({"arrays": ArrayRecord(arrays), "metrics": reply["metrics"]})
    return reply


def test_the_ratio_signal_tells_a_smaller_step_from_a_confidence_lowering_direction():
    """Shift per unit of update norm: node 5 of ``_low_node`` moves like the others, only less
    (same direction: its ratio is ordinary, no alarm); node 5 of ``_shrinking_node`` lowers the
    logit scale per unit of movement (alarm on the low side)."""
    outcomes = {}
    for name, respond in (("smaller", _low_node), ("shrinking", _shrinking_node)):
        det = sq.ClientCusum(k=0.5, h_low=3.0, h_high=50.0)
        s = _guard(kappa=50.0, strikes=0, sequential=det, sequential_signal="ratio")
        s.start(grid=FakeGrid([1, 2, 3, 4, 5], respond), initial_arrays=ArrayRecord(_init_state()), num_rounds=8)
        outcomes[name] = (det.statistic(105).alarm, s.last_audit[5]["sequential_score"])
        assert not any(det.alarmed(100 + n) for n in (1, 2, 3, 4))
    assert outcomes["smaller"][0] == "" and outcomes["shrinking"][0] == "low"
    assert outcomes["shrinking"][1] < -3


def test_calguard_drops_a_persistently_low_client_that_no_single_round_flags(caplog):
    """Node 5 always takes a smaller step (its logit-scale shift sits below the others' but, with
    κ = 50, never far enough for the per-round test). The sequential test alarms on it once its
    low CUSUM — recomputed here from the recorded scores with :func:`cusum_path` — passes h; from
    then on it gets weight 0 and the aggregate is the others' mean weighted by their median-capped
    data sizes."""
    det = sq.ClientCusum(k=0.5, h_low=3.0, h_high=50.0, clip=3.0)
    s = _guard(kappa=50.0, strikes=0, sequential=det, sequential_signal="scale")
    audits = []
    orig = s.aggregate_updates

    def record(*a, **k):
        out = orig(*a, **k)
        audits.append({n: dict(v) for n, v in s.last_audit.items()})
        return out

    s.aggregate_updates = record
    with caplog.at_level("INFO"):
        s.start(grid=FakeGrid([1, 2, 3, 4, 5], _low_node), initial_arrays=ArrayRecord(_init_state()), num_rounds=8)
    scores = [a[5]["score"] for a in audits]
    assert not any(a[5]["outlier"] for a in audits) and max(scores) < 0  # always low, never an outlier
    low = sq.cusum_path(np.clip(scores, -3, 3), 0.5, "low")
    alarm = int(np.argmax(low > 3.0)) + 1
    assert low[-1] > 3.0 and 1 < alarm < 8
    assert [a[5]["cusum_low"] for a in audits] == pytest.approx(low.tolist())
    assert [a[5]["sequential"] for a in audits] == [r >= alarm for r in range(1, 9)]
    assert not any(a[n]["sequential"] for a in audits for n in (1, 2, 3, 4))
    assert det.statistic(105).alarm == "low" and det.statistic(105).alarm_round == alarm
    assert s.last_weights[5] == 0.0 and s.last_audit[5]["decision"] == "dropped"
    capped = {n: min(10 * n, 30) for n in (1, 2, 3, 4)}  # the claims 10 … 50 capped at their median, 30
    assert {n: s.last_weights[n] for n in (1, 2, 3, 4)} == pytest.approx({n: c / sum(capped.values())
                                                                         for n, c in capped.items()})
    named = [r.getMessage() for r in caplog.records if "alarmed by the sequential test (" in r.getMessage()]
    assert len(named) == 1 and "partition 105" in named[0] and f"round {alarm}:" in named[0] and "low CUSUM" in named[0]


def test_the_replay_of_a_recorded_audit_gives_the_strategys_decisions():
    """fedcal/pages/detector_replay.py replays recorded signatures through cg.replay: on the audit
    of a strategy run, it must reproduce every score, CUSUM and flag the strategy recorded."""
    for signal in ("ratio", "scale"):
        s = _guard(kappa=2.0, strikes=2, sequential=sq.ClientCusum(k=0.3, h_low=2.0, h_high=2.0), mode="audit",
                   sequential_signal=signal)
        audits = []
        orig = s.aggregate_updates

        def record(server_round, *a, **k):
            out = orig(server_round, *a, **k)
            audits.append((server_round, [100 + n for n in s.last_audit], list(s.last_audit.values())))
            return out

        s.aggregate_updates = record
        s.start(grid=FakeGrid([1, 2, 3, 4, 5], _shrinking_node), initial_arrays=ArrayRecord(_init_state()),
                num_rounds=6)
        rounds = [(r, c, [a["scale_shift"] for a in audit],
                   *([[a["scale_shift"] / a["update_norm"] for a in audit]] if signal == "ratio" else []))
                  for r, c, audit in audits]
        rows = cg.replay(rounds, kappa=2.0, window=10, strikes=2, sequential=sq.ClientCusum(k=0.3, h_low=2.0, h_high=2.0))
        recorded = [a for *_, audit in audits for a in audit]
        assert len(rows) == len(recorded) == 30
        for row, rec in zip(rows, recorded):
            assert row["score"] == pytest.approx(rec["score"]) and row["low"] == pytest.approx(rec["cusum_low"])
            assert row["sequential_score"] == pytest.approx(rec["sequential_score"])
            assert (row["flagged"], row["outlier"], row["struck_out"], row["sequential"]) == (
                rec["flagged"], rec["outlier"], rec["struck_out"], rec["sequential"])
        assert any(r["sequential"] for r in rows)
        if signal == "scale":
            assert all(r["sequential_score"] == r["score"] for r in rows)


def test_replay_by_hand_on_one_round():
    """Shifts 0.1 … 0.5: median 0.3, deviations −0.2 … 0.2, σ = 1.4826 · (low) median of the
    non-zero |d| {0.1, 0.1, 0.2, 0.2} = 1.4826 · 0.1; the low CUSUM of the first client is
    0.2 / σ − k."""
    rows = cg.replay([(1, ["a", "b", "c", "d", "e"], [0.1, 0.2, 0.3, 0.4, 0.5])], kappa=1.2,
                     sequential=sq.ClientCusum(k=0.5, h_low=0.8, h_high=9.0))
    sigma = 1.4826 * 0.1
    assert rows[0]["sigma"] == pytest.approx(sigma)
    assert [r["score"] for r in rows] == pytest.approx([-0.2 / sigma, -0.1 / sigma, 0.0, 0.1 / sigma, 0.2 / sigma])
    assert rows[0]["low"] == pytest.approx(0.2 / sigma - 0.5) and rows[1]["low"] == pytest.approx(0.1 / sigma - 0.5)
    assert [r["outlier"] for r in rows] == [True, False, False, False, True]  # |z| = 1.35 > 1.2
    assert [r["sequential"] for r in rows] == [True, False, False, False, False]  # 0.849 > 0.8; 0.174 < 0.8
    assert [r["flagged"] for r in rows] == [True, False, False, False, True]


def test_the_signal_score_by_hand_over_three_rounds():
    """docs/defense.md's statistic on the ratio signal v, by hand: x = (v − median of the round's
    trusted replies) / σ_v, σ_v = 1.4826 · (low) median of the non-zero |deviations| pooled over
    the rounds so far, x clipped to ±3, L ← max(0, L − x − k). κ is huge and strikes are off, so
    only the sequential test decides; client a is alarmed in round 2 and leaves round 3's median."""
    k, h = 0.5, 2.0
    shifts = [0.1, 0.2, 0.3, 0.4, 0.5]  # ordinary logit-scale shifts: never a per-round outlier
    rounds = [(1, ["a", "b", "c", "d", "e"], shifts, [-0.2, -0.1, 0.0, 0.1, 0.2]),
              (2, ["a", "b", "c", "f", "g"], shifts, [-0.6, 0.0, 0.1, 0.2, 0.3]),
              (3, ["a", "b", "c", "d", "e"], shifts, [-5.0, 0.0, 0.4, 0.8, 1.2])]
    rows = cg.replay(rounds, kappa=1e6, strikes=0, sequential=sq.ClientCusum(k=k, h_low=h, h_high=50.0, clip=3.0))
    by = {(r["round"], r["client"]): r for r in rows}
    # round 1: median 0, |d| pool {0.1, 0.1, 0.2, 0.2} → low median 0.1
    s1 = 1.4826 * 0.1
    assert [by[1, c]["sequential_score"] for c in "abcde"] == pytest.approx([-0.2 / s1, -0.1 / s1, 0, 0.1 / s1, 0.2 / s1])
    la1, lb1 = 0.2 / s1 - k, 0.1 / s1 - k  # 0.849, 0.174
    assert (by[1, "a"]["low"], by[1, "b"]["low"]) == pytest.approx((la1, lb1))
    assert by[1, "e"]["high"] == pytest.approx(0.2 / s1 - k) and not any(r["sequential"] for r in rows[:5])
    # round 2: median 0.1, d = (−0.7, −0.1, 0, 0.1, 0.2); pool of 8: 0.1 ×4, 0.2 ×3, 0.7 → low median 0.1;
    # a's score −4.72 is clipped to −3: L_a = 0.849 + 3 − 0.5 = 3.35 > 2, the alarm
    assert by[2, "a"]["sequential_score"] == pytest.approx(-0.7 / s1)
    assert by[2, "a"]["low"] == pytest.approx(la1 + 3.0 - k) and by[2, "a"]["sequential"] and by[2, "a"]["flagged"]
    lb2 = lb1 + 0.1 / s1 - k
    assert by[2, "b"]["low"] == pytest.approx(lb2) and not by[2, "b"]["sequential"]
    # round 3: a is out of the median: median(0, 0.4, 0.8, 1.2) = 0.6 (all five would give 0.4);
    # trusted d = (−0.6, −0.2, 0.2, 0.6) join the pool: 0.1 ×4, 0.2 ×5, 0.6, 0.6, 0.7 → low median 0.2
    s3 = 1.4826 * 0.2
    assert [by[3, c]["sequential_score"] for c in "abcde"] == pytest.approx(
        [-5.6 / s3, -0.6 / s3, -0.2 / s3, 0.2 / s3, 0.6 / s3])
    assert by[3, "b"]["low"] == pytest.approx(lb2 + 0.6 / s3 - k) and by[3, "b"]["low"] < h  # 1.87: no alarm
    assert by[3, "a"]["sequential"] and by[3, "a"]["flagged"] and not by[3, "a"]["outlier"]  # the alarm stays
    assert [r["client"] for r in rows if r["sequential"]] == ["a", "a"]


def test_calguard_refuses_a_sequential_test_of_another_type_and_records_update_norms():
    with pytest.raises(TypeError, match="ClientCusum"):
        _guard(sequential={"k": 0.5})
    with pytest.raises(ValueError, match="sequential_signal"):
        _guard(sequential=sq.ClientCusum(), sequential_signal="norm")
    s = _guard()
    sent = {}

    def respond(node, content):
        current = _tensors(content["arrays"])
        reply = _step(current, node, 1)
        sent[node] = torch.cat([(torch.from_numpy(np.array(reply["arrays"][k].numpy())) - current[k]).reshape(-1)
                                for k in current])
        return reply

    s.start(grid=FakeGrid([1, 2, 3, 4, 5], respond), initial_arrays=ArrayRecord(_init_state()), num_rounds=1)
    for n in range(1, 6):
        assert s.last_audit[n]["update_norm"] == pytest.approx(float(sent[n].double().norm()), rel=1e-6)
    assert "cusum_low" not in s.last_audit[1]  # no sequential test, no columns


# --------------------------------------------------------------------------- the run-config keys
def test_calguard_cusum_keys_build_the_sequential_test_and_enter_the_hash_only_when_set():
    from fedcal import catalogue

    base = RunConfig.from_flower({"strategy": "calguard", "tau": 0.2})
    assert catalogue.get("rule", "calguard").kwargs(base)["sequential"] is None
    on = RunConfig.from_flower({"strategy": "calguard", "tau": 0.2, "calguard-cusum": True, "calguard-cusum-k": 1.0,
                                "calguard-cusum-h-high": 1e300, "calguard-cusum-signal": "scale"})
    kw = catalogue.get("rule", "calguard").kwargs(on)
    det = kw["sequential"]
    assert isinstance(det, sq.ClientCusum) and kw["sequential_signal"] == "scale"
    assert (det.k, det.h_low, det.h_high) == (1.0, RunConfig().calguard_cusum_h_low, 1e300)
    assert config_hash(base.replace(calguard_cusum=False)) == config_hash(base)  # earlier runs keep their names
    assert len({config_hash(base), config_hash(on), config_hash(on.replace(calguard_cusum_k=0.5))}) == 3
    for bad in (0, math.inf):
        with pytest.raises(ConfigError, match="calguard-cusum-h-low"):
            RunConfig.from_flower({"calguard-cusum": True, "calguard-cusum-h-low": bad})
    with pytest.raises(ConfigError, match="calguard-cusum-signal"):
        RunConfig.from_flower({"calguard-cusum": True, "calguard-cusum-signal": "norm"})


def test_the_defense_table_keeps_calguard_with_and_without_the_sequential_test_apart():
    """Rows that differ only in calguard-cusum (or tsa-duty) are separate table rows, each against
    the one benign FedAvg reference, and the varying columns show in the Markdown."""
    import pandas as pd

    from fedcal.reports.defense import summarise, to_markdown

    def row(strategy, tau, seed, sece, **extra):
        return {"dataset": "mnist", "strategy": strategy, "tau": tau, "attacker_ratio": np.nan if tau == 1 else 0.25,
                "dirichlet_alpha": 1.0, "tsa_step_frac": 1.0, "tsa_blend": 1.0, "tsa_duty": extra.pop("duty", 1.0),
                "seed": seed, "accuracy": 0.9, "ece": abs(sece), "sece": sece, "detection": np.nan if tau == 1 else 0.5,
                "false_positive": 0.01, **extra}

    rows = pd.DataFrame([row("fedavg", 1.0, s, 0.02) for s in (0, 1)]
                        + [row("calguard", 0.2, s, 0.05, calguard_cusum=False, calguard_cusum_signal="ratio")
                           for s in (0, 1)]
                        + [row("calguard", 0.2, s, 0.03, calguard_cusum=True, calguard_cusum_signal="ratio")
                           for s in (0, 1)]
                        + [row("calguard", 0.2, s, 0.025, calguard_cusum=True, calguard_cusum_signal="scale")
                           for s in (0, 1)]
                        + [row("fedavg", 0.2, s, 0.04, duty=0.5) for s in (0, 1)])
    t = summarise(rows)
    guarded = t[t["strategy"] == "calguard"].set_index(["calguard_cusum", "calguard_cusum_signal"])
    assert guarded.loc[(False, "ratio"), "d_sece"] == pytest.approx(3.0)
    assert guarded.loc[(True, "ratio"), "d_sece"] == pytest.approx(1.0)
    assert guarded.loc[(True, "scale"), "d_sece"] == pytest.approx(0.5)
    assert t[(t["strategy"] == "fedavg") & (t["tau"] == 0.2)]["tsa_duty"].tolist() == [0.5]
    md = to_markdown(t)
    assert "calguard_cusum" in md.splitlines()[0] and "tsa_duty" in md.splitlines()[0]
    assert "| ratio |" in md and "| scale |" in md  # a word-valued setting is shown as it is


def test_the_worst_case_line_names_the_duty_share_and_the_sequential_test():
    """The defense table's closing line names the row with the largest |Δ sECE| against CalGuard:
    a duty-cycled or sequential row must not read as the plain attack; a plain row reads as before."""
    import pandas as pd

    from fedcal.reports.defense import summarise, worst_lines

    def row(strategy, tau, seed, sece, duty=1.0, cusum=False):
        return {"dataset": "mnist", "strategy": strategy, "tau": tau, "attacker_ratio": np.nan if tau == 1 else 0.25,
                "dirichlet_alpha": 1.0, "tsa_step_frac": 1.0, "tsa_blend": 1.0, "tsa_duty": duty, "seed": seed,
                "accuracy": 0.9, "ece": abs(sece), "sece": sece, "detection": np.nan if tau == 1 else 0.5,
                "false_positive": 0.01, "calguard_cusum": cusum if strategy == "calguard" else np.nan}

    ref = [row("fedavg", 1.0, s, 0.02) for s in (0, 1)]
    plain = summarise(pd.DataFrame(ref + [row("calguard", 0.2, s, 0.05) for s in (0, 1)]
                                   + [row("calguard", 0.2, s, 0.03, cusum=True) for s in (0, 1)]))
    assert worst_lines(plain) == ["- mnist: the largest |Δ sECE| any attack setting above reaches against CalGuard is "
                                  "+3.00 points (τ = 0.2, step share 1, blend 1, attackers 0.25, α = 1), with 50.0 % "
                                  "of its replies flagged"]
    duty = summarise(pd.DataFrame(ref + [row("calguard", 0.2, s, 0.03, cusum=True) for s in (0, 1)]
                                  + [row("calguard", 0.2, s, 0.045, duty=0.25, cusum=True) for s in (0, 1)]))
    (line,) = worst_lines(duty)
    assert "+2.50 points (τ = 0.2, step share 1, blend 1, duty 0.25, with the sequential test, attackers 0.25" in line


def test_a_flower_run_with_the_sequential_test_drops_the_alarmed_clients_and_records_its_statistics(tmp_path):
    """digits, τ = 0.2 attackers, thresholds low enough to alarm within a few rounds: the run's
    aggregation.csv carries each reply's CUSUMs, and every reply of an alarmed client from its
    alarm on has weight 0."""
    import pandas as pd

    from fedcal.app.engine import simulate
    from fedcal.results import AUDIT_FILE

    cfg = RunConfig.from_flower(dict(dataset="digits", num_clients=8, clients_per_round=4, num_rounds=6, lr=0.05,
                                     attacker_ratio=0.25, tau=0.2, strategy="calguard", root_size=40,
                                     calguard_cusum=True, calguard_cusum_h_low=1.0, calguard_cusum_h_high=1.0,
                                     engine="inprocess", output_dir=str(tmp_path), device="cpu"))
    audit = pd.read_csv(simulate(cfg, progress=False) / AUDIT_FILE)
    assert {"sequential_score", "cusum_low", "cusum_high", "sequential"} <= set(audit.columns)
    for client, g in audit.groupby("partition_id"):
        low = sq.cusum_path(g["sequential_score"].clip(-3, 3), 0.5, "low")
        assert g["cusum_low"].tolist() == pytest.approx(low.tolist())
    alarmed = audit[audit["sequential"].astype(bool)]
    assert len(alarmed) and (alarmed["weight"] == 0).all() and (alarmed["decision"] == "dropped").all()
    first = alarmed.groupby("partition_id")["round"].min()
    later = audit[audit["partition_id"].map(first).le(audit["round"])]
    assert later["sequential"].astype(bool).all()  # the alarm stays


def test_calguard_with_the_sequential_test_resumes_from_its_state_dict_as_if_never_stopped():
    """Three rounds, state_dict, a fresh strategy loaded with it runs rounds 4–6 from the same
    global model: every score, CUSUM and weight equals those of the uninterrupted run."""
    def fresh():
        return _guard(kappa=3.0, strikes=2, sequential=sq.ClientCusum(k=0.3, h_low=2.0, h_high=2.0))

    def rounds(s, first, last, arrays):
        out = []
        for r in range(first, last + 1):
            msgs = list(s.configure_train(r, arrays, ConfigRecord(), grid))
            replies = grid.send_and_receive(msgs)
            arrays, _ = s.aggregate_train(r, replies)
            out.append({n: (a["score"], a["sequential_score"], a["cusum_low"], a["cusum_high"], s.last_weights[n])
                        for n, a in s.last_audit.items()})
        return out, arrays

    grid = FakeGrid([1, 2, 3, 4, 5], _shrinking_node)
    whole, _ = rounds(fresh(), 1, 6, ArrayRecord(_init_state()))
    first = fresh()
    head, arrays = rounds(first, 1, 3, ArrayRecord(_init_state()))
    state = first.state_dict()
    assert set(state) == {"scale", "strikes", "sequential", "signal_scale"} and 105 in state["sequential"]
    second = fresh()
    second.load_state_dict(state, node_of={100 + n: n for n in range(1, 6)})
    tail, _ = rounds(second, 4, 6, arrays)
    assert head + tail == whole
    assert any(v[2] > 2.0 for r in whole for v in r.values())  # an alarm happened on the way
    with pytest.raises(ValueError, match="disagree on the sequential test"):
        _guard().load_state_dict(state, node_of={})


@pytest.mark.parametrize("overrides, warned", [
    ({"clients_per_round": 10}, True),  # 20 replies per client: the thresholds' null climbs further
    ({"clients_per_round": 2}, True),  # 4 per client
    ({}, False),  # 5 of 50 for 100 rounds: what the defaults were calibrated on
    ({"num_clients": 20, "clients_per_round": 10, "num_rounds": 20}, False),  # 10 per client again
    ({"clients_per_round": 10, "calguard_cusum_h_low": 27.49, "calguard_cusum_h_high": 29.41}, False),  # own
])
def test_default_thresholds_at_another_participation_rate_are_warned_about(caplog, overrides, warned):
    import logging

    from fedcal import catalogue

    cfg = RunConfig(strategy="calguard", calguard_cusum=True, **overrides)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        catalogue.get("rule", "calguard").kwargs(cfg)
    said = [r.getMessage() for r in caplog.records if "calguard-cusum: the default thresholds" in r.getMessage()]
    assert bool(said) == warned
    if warned:
        replies = cfg.num_rounds * cfg.clients_per_round / cfg.num_clients
        assert f"replies about {replies:.3g} times" in said[0] and "calibrate calguard-cusum-h-low" in said[0]
