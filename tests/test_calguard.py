"""CalGuard (fedcal.aggregate.calguard + fedcal.strategies.CalGuard), the adaptive TSA attacker and the
defense report: hand-computed signatures, the decision rule, a TSA-like reply dropped while
benign ones are kept, audit mode, bad root sets, a Flower run writing the audit table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from fedcal.attacks import AttackSpec, LocalRoundSpec
from fedcal.aggregate import calguard as cg
from fedcal import strategies
from fedcal.attacks import BENIGN, Behaviour, client_round
from fedcal.config import ConfigError, RunConfig
from fedcal.results import config_hash, default_run_name
from fedcal.local_training import local_train
from tests.strategy_harness import FakeGrid


# --------------------------------------------------------------------------- the signature by hand
def test_logit_scale_by_hand():
    z = torch.tensor([[1.0, 1.0], [0.0, 2.0], [3.0, 0.0]])
    expected = [math.log(2), math.log(1 + math.e ** 2) - 1, math.log(math.e ** 3 + 1) - 1.5]
    assert torch.allclose(cg.logit_scale(z), torch.tensor(expected, dtype=torch.float64))
    # constant logits reach the minimum log C, and scaling the logits up raises it
    assert float(cg.logit_scale(torch.full((1, 4), 7.0))) == pytest.approx(math.log(4))
    base = cg.logit_scale(torch.tensor([[0.3, -1.0, 2.0]]))
    assert float(cg.logit_scale(torch.tensor([[0.6, -2.0, 4.0]]))) > float(base)
    with pytest.raises(ValueError, match="C >= 2"):
        cg.logit_scale(torch.zeros(3, 1))


def test_root_stats_and_signature_by_hand():
    z = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 0])
    stats = cg.RootStats.of(z, y)
    p1, p2 = 1 / (1 + math.exp(-2)), 1 / (1 + math.exp(-1))  # top-label confidences
    assert stats.confidence == pytest.approx((p1 + p2) / 2)
    assert stats.nll == pytest.approx((math.log(1 + math.exp(-2)) + math.log(1 + math.e)) / 2)
    assert stats.accuracy == 0.5
    assert stats.scale == pytest.approx((math.log(math.e ** 2 + 1) - 1 + math.log(1 + math.e) - 0.5) / 2)
    scaled = cg.RootStats.of(3 * z, y)
    sig = cg.signature(scaled, stats)
    assert sig["scale_shift"] == pytest.approx(scaled.scale - stats.scale) and sig["scale_shift"] > 0
    assert sig["conf_shift"] > 0 and sig["root_accuracy"] == 0.5
    assert tuple(sig) == cg.SIGNATURE_COLUMNS
    assert math.isnan(cg.RootStats.of(torch.tensor([[math.inf, 0.0]]), torch.tensor([0])).scale)


def test_median_deviations_use_the_true_median_and_the_trusted_replies():
    v = torch.tensor([1.0, 5.0, 2.0, 9.0])
    assert cg.median_deviations(v).tolist() == [-2.5, 1.5, -1.5, 5.5]  # median (2 + 5) / 2
    assert cg.median_deviations(torch.tensor([4.0, 1.0, 7.0])).tolist() == [0.0, -3.0, 3.0]
    trusted = torch.tensor([True, True, True, False])  # 9 left out of the median: median 2
    assert cg.median_deviations(v, trusted).tolist() == [-1.0, 3.0, 0.0, 7.0]
    assert cg.median_deviations(v, torch.zeros(4, dtype=torch.bool)).tolist() == [-2.5, 1.5, -1.5, 5.5]


def test_deviation_scale_pools_a_window_and_ignores_exact_zeros():
    scale = cg.DeviationScale(window=2)
    z, sigma = scale.score(torch.tensor([0.0, -1.0, 2.0]))
    assert sigma == pytest.approx(1.4826 * 1.0)  # low median |d| of {1, 2} (the 0 is left out)
    assert z.tolist() == pytest.approx([0.0, -1 / sigma, 2 / sigma])
    scale.push(torch.tensor([0.0, -1.0, 2.0]))
    scale.push(torch.tensor([4.0, 4.0]))
    assert len(scale) == 4
    assert scale.sigma(torch.tensor([3.0])) == pytest.approx(1.4826 * 3.0)  # {1, 2, 4, 4, 3}
    assert scale.sigma(torch.tensor([])) == pytest.approx(1.4826 * 2.0)  # {1, 2, 4, 4}: the low median
    scale.push(torch.tensor([10.0]))  # the window holds 2 rounds: the first leaves
    assert scale.sigma(torch.tensor([])) == pytest.approx(1.4826 * 4.0)  # {4, 4, 10}
    empty = cg.DeviationScale()
    z, sigma = empty.score(torch.tensor([0.0, 0.0]))
    assert sigma == 0.0 and z.tolist() == [0.0, 0.0]
    z, _ = empty.score(torch.tensor([0.0, 1.0]), pooled=torch.tensor([0.0]))
    assert z.tolist() == [0.0, math.inf]
    with pytest.raises(ValueError, match="window"):
        cg.DeviationScale(0)


def test_strikes_exclude_a_client_after_the_limit_only():
    s = cg.Strikes(2)
    s.record("a", True)
    assert not s.banned("a")
    s.record("a", False)
    s.record("a", True)
    assert s.banned("a") and not s.banned("b")
    never = cg.Strikes(0)
    for _ in range(5):
        never.record("a", True)
    assert not never.banned("a")


@pytest.mark.parametrize("x,y,match", [
    (torch.zeros(10, 4), torch.arange(10) % 2, "too small"),
    (torch.zeros(30, 4), torch.zeros(30, dtype=torch.long), "one class"),
    (torch.zeros(30, 4), torch.arange(30) % 2 + 5, r"\[0, 3\)"),
    (torch.full((30, 4), float("nan")), torch.arange(30) % 2, "NaN"),
    (torch.zeros(30, 4), torch.arange(29) % 2, "labels of shape"),
    (torch.zeros(30, 4), (torch.arange(30) % 2).float(), "integer"),
])
def test_bad_root_sets_are_refused(x, y, match):
    with pytest.raises(ValueError, match=match):
        cg.check_root_set(x, y, num_classes=3)


# --------------------------------------------------------------------------- the strategy
class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)


def _root(n: int = 60):
    g = torch.Generator().manual_seed(0)
    y = torch.arange(n) % 3
    x = torch.randn(n, 4, generator=g) + 2.0 * torch.nn.functional.one_hot(y, 4).float()
    return x, y


def _init_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return {k: v.detach().clone() for k, v in Linear().state_dict().items()}


def _reply(arrays: dict, n: int = 10) -> RecordDict:
    return RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": n})})


def _kwargs(k: int, **extra):
    x, y = _root()
    return dict(model=Linear(), root_x=x, root_y=y, fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=k,
                min_evaluate_nodes=0, min_available_nodes=k, **extra)


def _benign_step(current: dict, node: int, rnd: int) -> dict:
    """A benign reply: one gradient step on the root-like data with a small node-specific jitter."""
    x, y = _root()
    model = Linear()
    model.load_state_dict(current)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    g = torch.Generator().manual_seed(1000 * node + rnd)
    out = {}
    for name, p in model.named_parameters():
        out[name] = (p - 0.1 * p.grad * (1 + 0.2 * torch.rand(p.shape, generator=g))).detach()
    return out


def _as_tensors(arrays) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v.numpy(), copy=True)) for k, v in arrays.items()}


def test_a_tsa_like_reply_is_dropped_while_benign_replies_are_kept():
    """Node 5 sends the benign direction with its logits scaled ×3 (what τ > 1 does to a model):
    its logit-scale shift is an outlier, so it gets weight 0 in every round and the aggregate is
    the other replies' mean weighted by their median-capped data sizes."""
    def respond(node, content):
        current = _as_tensors(content["arrays"])
        step = _benign_step(current, node, int(content["config"]["server-round"]))
        if node == 5:
            step = {k: 3.0 * v for k, v in step.items()}  # same direction, logits × 3
        return _reply(step, n=10 * node)

    s = strategies.CalGuard(**_kwargs(5))
    grid = FakeGrid([1, 2, 3, 4, 5], respond)
    s.start(grid=grid, initial_arrays=ArrayRecord(_init_state()), num_rounds=4)
    for rnd in range(1, 5):
        assert s.replies[rnd].aggregated
    assert s.last_weights[5] == 0.0 and s.last_audit[5]["flagged"] and s.last_audit[5]["decision"] == "dropped"
    assert s.last_audit[5]["scale_shift"] > max(s.last_audit[n]["scale_shift"] for n in (1, 2, 3, 4))
    kept = {n: w for n, w in s.last_weights.items() if n != 5}
    assert all(not s.last_audit[n]["flagged"] for n in kept)
    # data-size weights of the kept replies, each claim (10 … 50) capped at the round's median claim, 30
    capped = {n: min(10 * n, 30) for n in kept}
    assert kept == pytest.approx({n: c / sum(capped.values()) for n, c in capped.items()})
    assert s.strikes.banned(5)  # flagged in every round: struck out
    rows = s.audit_rows()
    assert [r["node_id"] for r in rows] == [1, 2, 3, 4, 5]
    assert set(rows[0]) >= {"weight", "score", "sigma", "decision", *cg.SIGNATURE_COLUMNS}


def test_audit_mode_records_the_flags_but_averages_every_reply():
    def respond(node, content):
        current = _as_tensors(content["arrays"])
        step = _benign_step(current, node, int(content["config"]["server-round"]))
        return _reply({k: 3.0 * v for k, v in step.items()} if node == 5 else step)

    s = strategies.CalGuard(**_kwargs(5, mode="audit"))
    fedavg = strategies.FedAvg(**{k: v for k, v in _kwargs(5).items() if k not in ("model", "root_x", "root_y")})
    outs = []
    for strategy in (s, fedavg):
        result = strategy.start(grid=FakeGrid([1, 2, 3, 4, 5], respond), initial_arrays=ArrayRecord(_init_state()),
                                num_rounds=3)
        outs.append(_as_tensors(result.arrays))
    assert s.last_audit[5]["flagged"] and s.last_audit[5]["decision"] == "would drop"
    assert s.last_weights[5] == pytest.approx(0.2)
    for k in outs[0]:
        assert torch.allclose(outs[0][k], outs[1][k], atol=1e-6)  # exactly FedAvg's model


def test_a_reply_that_overflows_the_logits_is_flagged_not_a_crash():
    def respond(node, content):
        current = _as_tensors(content["arrays"])
        step = _benign_step(current, node, 1)
        if node == 4:  # finite weights whose logits overflow float32 on the root set
            step = {k: v * 1e38 for k, v in step.items()}
        if node == 3:  # finite logits of absurd scale
            step = {k: v * 1e20 for k, v in step.items()}
        return _reply(step)

    s = strategies.CalGuard(**_kwargs(5))
    result = s.start(grid=FakeGrid([1, 2, 3, 4, 5], respond), initial_arrays=ArrayRecord(_init_state()),
                     num_rounds=1)
    for node in (3, 4):
        assert s.last_weights[node] == 0.0 and abs(s.last_audit[node]["score"]) > 4
    assert all(torch.isfinite(v).all() for v in _as_tensors(result.arrays).values())


def test_constructor_refuses_bad_arguments():
    x, y = _root()
    with pytest.raises(ValueError, match="one class"):
        strategies.CalGuard(model=Linear(), root_x=x, root_y=torch.zeros_like(y))
    with pytest.raises(ValueError, match="too small"):
        strategies.CalGuard(model=Linear(), root_x=x[:5], root_y=y[:5])
    with pytest.raises(ValueError, match="do not fit the model"):
        strategies.CalGuard(model=Linear(), root_x=torch.zeros(60, 7), root_y=y)
    with pytest.raises(ValueError, match="outputs"):
        strategies.CalGuard(model=Linear(), root_x=x, root_y=y + 5)
    with pytest.raises(ValueError, match="mode"):
        strategies.CalGuard(model=Linear(), root_x=x, root_y=y, mode="block")
    with pytest.raises(ValueError, match="kappa"):
        strategies.CalGuard(model=Linear(), root_x=x, root_y=y, kappa=0)
    with pytest.raises(TypeError, match="nn.Module"):
        strategies.CalGuard(model="mlp", root_x=x, root_y=y)


@pytest.mark.parametrize("change,match", [
    (lambda st: {**st, "fc.weight": torch.zeros(3, 5)}, r"'fc.weight' has shape \(3, 5\), the model's \(3, 4\)"),
    (lambda st: {k: v for k, v in st.items() if k != "fc.bias"}, r"missing \['fc.bias'\]"),
    (lambda st: {**st, "head.weight": torch.zeros(2)}, r"unexpected \['head.weight'\]"),
])
def test_a_model_that_does_not_fit_the_arrays_is_refused_at_start_not_in_round_one(change, match):
    """CalGuard applies every reply to its own model: arrays of another architecture used to pass
    the constructor and crash round 1 (a RuntimeError from load_state_dict) after every client had
    trained. start refuses them before any message is sent, naming the array."""
    x, y = _root()
    s = strategies.CalGuard(**_kwargs(3))
    grid = FakeGrid([1, 2, 3], lambda node, content: _reply(_benign_step(_as_tensors(content["arrays"]), node, 1)))
    with pytest.raises(ValueError, match=match):
        s.start(grid=grid, initial_arrays=ArrayRecord(change(_init_state())), num_rounds=1)
    assert grid.sent_to == []
    s.check_arrays(ArrayRecord(_init_state()))  # the arrays of its own model pass


def test_config_keys_and_their_errors():
    cfg = RunConfig.from_flower({"strategy": "calguard", "calguard-kappa": 3.0, "calguard-mode": "audit"})
    assert (cfg.calguard_kappa, cfg.calguard_mode, cfg.calguard_window, cfg.calguard_strikes) == (3.0, "audit", 10, 3)
    with pytest.raises(ConfigError, match="root-size"):
        RunConfig.from_flower({"strategy": "calguard", "root-size": 5})
    with pytest.raises(ConfigError, match="clients-per-round"):
        RunConfig.from_flower({"strategy": "calguard", "clients-per-round": 2})
    with pytest.raises(ConfigError, match="calguard-mode"):
        RunConfig.from_flower({"calguard-mode": "block"})
    with pytest.raises(ConfigError, match="tsa-step-frac"):
        RunConfig.from_flower({"tsa-step-frac": 0})
    with pytest.raises(ConfigError, match="tsa-blend"):
        RunConfig.from_flower({"tsa-blend": -1})


def test_new_keys_enter_the_hash_only_when_set():
    base = RunConfig.from_flower({"tau": 5.0})
    assert config_hash(base.replace(calguard_kappa=5.0, tsa_blend=1.0)) == config_hash(base)
    assert len({config_hash(base), config_hash(base.replace(calguard_kappa=3.0)),
                config_hash(base.replace(tsa_blend=0.5)), config_hash(base.replace(tsa_step_frac=0.4))}) == 4
    assert default_run_name(base.replace(tsa_blend=0.5, tsa_step_frac=0.4)).startswith(
        "mnist-mlp-fedavg-tsa5-f0.4-b0.5-s0-")


# --------------------------------------------------------------------------- the adaptive attacker
def _data():
    g = torch.Generator().manual_seed(3)
    y = torch.arange(80) % 3
    return torch.randn(80, 4, generator=g) + torch.nn.functional.one_hot(y, 4).float(), y


def _state_after(behaviour: Behaviour, cfg: RunConfig) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = Linear()
    x, y = _data()
    client_round(model, x, y, 3, behaviour, LocalRoundSpec.from_config(cfg), server_round=2, client_id=1)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_blend_sends_benign_plus_lambda_times_the_attack():
    cfg = RunConfig(local_steps=4, batch_size=16, lr=0.1, momentum=0.5)
    benign = _state_after(BENIGN, cfg)
    tsa = _state_after(Behaviour("tsa", tau=5.0), cfg)
    blended = _state_after(Behaviour("tsa", tau=5.0, blend=0.3), cfg)
    for k in benign:
        assert torch.allclose(blended[k], benign[k] + 0.3 * (tsa[k] - benign[k]), atol=1e-6)
    assert not torch.allclose(tsa["fc.weight"], benign["fc.weight"])


def test_step_frac_trains_the_first_steps_at_tau_and_the_rest_benignly():
    """A second implementation: two local_train calls on the halves of the same batch schedule
    (plain SGD, so no optimiser state crosses the switch)."""
    from fedcal.attacks.behaviour import round_generator
    from fedcal.local_training import batch_schedule

    cfg = RunConfig(local_steps=5, batch_size=16, lr=0.1)
    got = _state_after(Behaviour("tsa", tau=5.0, step_frac=0.4), cfg)  # round(0.4 · 5) = 2 steps at τ
    torch.manual_seed(0)
    model = Linear()
    x, y = _data()
    batches = batch_schedule(len(y), 5, 16, round_generator(cfg.seed, 2, 1))
    local_train(model, x, y, steps=2, batch_size=16, lr=0.1, tau=5.0, batches=batches[:2])
    local_train(model, x, y, steps=3, batch_size=16, lr=0.1, tau=1.0, batches=batches[2:])
    for k, v in model.state_dict().items():
        assert torch.allclose(got[k], v, atol=1e-6)
    full = _state_after(Behaviour("tsa", tau=5.0), cfg)
    assert torch.equal(_state_after(Behaviour("tsa", tau=5.0, step_frac=1.0, blend=1.0), cfg)["fc.weight"],
                       full["fc.weight"])


# --------------------------------------------------------------------------- report and a Flower run
def test_report_rates_and_deltas_from_hand_made_rows():
    from fedcal.reports.defense import summarise, to_markdown

    rows = pd.DataFrame([
        {"dataset": "mnist", "strategy": "fedavg", "tau": 1.0, "attacker_ratio": np.nan, "dirichlet_alpha": 1.0,
         "tsa_step_frac": 1.0, "tsa_blend": 1.0, "seed": s, "accuracy": a, "ece": 0.1, "sece": e,
         "detection": np.nan, "false_positive": 0.0} for s, a, e in ((0, 0.88, 0.10), (1, 0.90, 0.12))
    ] + [
        {"dataset": "mnist", "strategy": "calguard", "tau": 5.0, "attacker_ratio": 0.25, "dirichlet_alpha": 1.0,
         "tsa_step_frac": 1.0, "tsa_blend": 1.0, "seed": s, "accuracy": a, "ece": 0.1, "sece": e,
         "detection": d, "false_positive": f} for s, a, e, d, f in ((0, 0.885, 0.115, 0.8, 0.01),
                                                                     (1, 0.885, 0.125, 0.6, 0.03))
    ])
    t = summarise(rows).set_index("strategy")
    assert t.loc["fedavg", "accuracy"] == pytest.approx(89.0) and t.loc["fedavg", "d_sece"] == pytest.approx(0.0)
    assert t.loc["calguard", "d_accuracy"] == pytest.approx(88.5 - 89.0)
    assert t.loc["calguard", "d_sece"] == pytest.approx(12.0 - 11.0)
    assert t.loc["calguard", "detection"] == pytest.approx(0.7) and t.loc["calguard", "target"] == "yes"
    rows.loc[rows["strategy"] == "calguard", "sece"] += 0.03  # Δ sECE = +4 points: misses the target
    assert summarise(rows).set_index("strategy").loc["calguard", "target"] == "no"
    rows.loc[rows["strategy"] == "calguard", "sece"] -= 0.03
    rows["stalled"] = (rows["strategy"] == "calguard") & (rows["seed"] == 1)  # its last round accepted no reply
    t = summarise(rows).set_index("strategy")
    # the stalled seed is no result of its setting: out of the means (seed 0 alone: sECE 11.5), counted, named
    assert t.loc["calguard", "d_sece"] == pytest.approx(11.5 - 11.0) and t.loc["calguard", "seeds"] == 1
    assert t.loc["calguard", "stalled"] == 1 and t.loc["calguard", "target"] == "no"
    md = to_markdown(summarise(rows))
    row = next(line for line in md.splitlines() if "| calguard |" in line)
    assert "| 1 | 88.50 |" in row and row.endswith("| seed 1: stalled: its last round accepted no reply |")


def test_a_flower_run_writes_the_audit_table_and_the_report_reads_it(tmp_path):
    from fedcal.app.engine import simulate
    from fedcal.attacks import attackers_of
    from fedcal.reports.defense import defense_report, run_rows
    from fedcal.results import AUDIT_FILE

    cfg = RunConfig.from_flower(dict(dataset="digits", num_clients=8, clients_per_round=4, num_rounds=3, lr=0.05,
                                     attacker_ratio=0.25, tau=5.0, strategy="calguard", root_size=40,
                                     engine="inprocess", output_dir=str(tmp_path), device="cpu"))
    run_dir = simulate(cfg, progress=False)
    audit = pd.read_csv(run_dir / AUDIT_FILE)
    assert list(audit["round"].unique()) == [1, 2, 3] and (audit.groupby("round").size() == 4).all()
    assert {"partition_id", "weight", "scale_shift", "score", "decision"} <= set(audit.columns)
    assert audit.groupby("round")["weight"].sum().tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert set(audit["partition_id"]) <= set(range(8))
    rows = run_rows([run_dir])
    expected = audit.loc[audit["partition_id"].isin(attackers_of(AttackSpec.from_config(cfg))), "flagged"].mean()
    assert rows.loc[0, "detection"] == pytest.approx(expected)
    md = defense_report([run_dir], tmp_path / "report")
    assert "calguard" in md and (tmp_path / "report" / "audit-tau5.png").exists()


def test_defense_cells_share_benign_runs_and_add_the_fedavg_reference():
    from fedcal.studies.defense import defense_configs

    base = RunConfig()
    cells = defense_configs(base, ["calguard"], [0.2, 1.0, 5.0], [0, 1],
                            {"calguard_kappa": [4.0, 6.0], "attacker_ratio": [0.1, 0.4]})
    guard = [c for c in cells if c.strategy == "calguard"]
    fedavg = [c for c in cells if c.strategy == "fedavg"]
    # CalGuard: 2 κ × 2 seeds × (2 attacked τ × 2 ratios + one benign run shared by both ratios)
    assert len(guard) == 2 * 2 * (2 * 2 + 1)
    # FedAvg (the reference, added though not asked for): κ is not its key, so no copy per κ
    assert len(fedavg) == 2 * (2 * 2 + 1) and {c.calguard_kappa for c in fedavg} == {base.calguard_kappa}
    benign = [c for c in cells if c.attack == "none"]
    assert {c.attacker_ratio for c in benign} == {base.attacker_ratio} and all(c.tau == 1.0 for c in benign)
