"""Issue 36 §2–§3 wired in: the model-poisoning attacks as run-config values (crafted server-side
by the omniscient colluders), the pixel backdoor as a client behaviour with its ASR, the
``pre-aggregation`` key on every strategy, and the strategy × attack study's cells."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from fedcal.attacks import AttackSpec
from fedcal import strategies
from fedcal.aggregate import arc, compose, nnm, static_clip, trimmed_mean
from fedcal.attacks import POISONING, attackers_of
from fedcal.config import ConfigError, RunConfig
from fedcal.strategies.registry import strategy_from_config
from tests.strategy_harness import FakeGrid, set_task_identity


def state(w: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"fc.weight": w.clone(), "fc.bias": b.clone()}


def reply(arrays: dict, n: int = 10) -> RecordDict:
    return RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": n})})


def kwargs(k: int):
    return dict(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=k, min_evaluate_nodes=0,
                min_available_nodes=k)


# ---------------------------------------------------------------------------------- config
def test_bad_byzantine_keys_fail_naming_the_key():
    with pytest.raises(ConfigError, match="'pre-aggregation'"):
        RunConfig.from_flower({"pre-aggregation": "nnm,bucketing"})
    with pytest.raises(ConfigError, match="'pre-f'"):
        RunConfig.from_flower({"pre-aggregation": "nnm", "pre-f": 5})  # M = 5
    with pytest.raises(ConfigError, match="'backdoor-target'"):
        RunConfig.from_flower({"attack": "backdoor", "backdoor-target": 10})
    with pytest.raises(ConfigError, match="'attack'"):
        RunConfig.from_flower({"attack": "backdoor", "dataset": "synthetic"})
    with pytest.raises(ConfigError, match="'minmax-direction'"):
        RunConfig.from_flower({"minmax-direction": "random"})
    assert RunConfig.from_flower({"pre-aggregation": " nnm , clip "}).pre_aggregations == ("nnm", "clip")
    with pytest.raises(ConfigError, match="'mimic-target'"):
        RunConfig.from_flower({"attack": "mimic", "mimic-target": -1})
    for strategy in ("fltrust", "foolsgold", "calguard"):  # a rule the line search cannot evaluate
        with pytest.raises(ConfigError, match="'attack'.*searches against the server's rule"):
            RunConfig.from_flower({"attack": "opt-alie", "strategy": strategy})
    assert RunConfig.from_flower({"attack": "opt-ipm", "strategy": "median_of_means"}).attack == "opt-ipm"


def test_new_keys_leave_existing_run_names_alone():
    from fedcal.results import config_hash

    base = RunConfig()
    # every new key is hashed only when set: a run at their defaults keeps its hash
    assert config_hash(base) == config_hash(base.replace(alie_z=0.0, pre_aggregation="", clip_c=1.0))
    assert config_hash(base) != config_hash(base.replace(pre_aggregation="nnm"))
    assert config_hash(base) != config_hash(base.replace(ipm_epsilon=0.5))


def test_the_batched_engine_covers_crafted_attacks_and_pre_aggregation_the_reference_loop_refuses():
    from fedcal.app.batched import batched_unsupported
    from fedcal.reference import ReferenceSpec, global_state

    # the batched train task crafts and pre-aggregates with the Flower path's own code
    # (tests/test_batched_poisoning.py compares the runs)
    assert batched_unsupported(RunConfig(dataset="digits", num_clients=10, pre_aggregation="nnm,clip",
                                          strategy="trimmed_mean")) is None
    assert batched_unsupported(RunConfig(dataset="digits", num_clients=10, attack="alie")) is None
    with pytest.raises(ValueError, match="crafting"):
        global_state(ReferenceSpec.from_config(RunConfig(dataset="digits", attack="ipm", num_rounds=1)), 1)


# ---------------------------------------------------------------------------------- pre-aggregation
UPDATES = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [9.0, -9.0]])


def _strategy_aggregate(steps, rule_strategy):
    """One round of ``rule_strategy`` on UPDATES (from a zero model), all clients the same size."""
    zero_w, zero_b = torch.zeros(1, 2), torch.zeros(1)

    def respond(node, content):
        u = UPDATES[node - 1]
        return reply(state(u.reshape(1, 2), torch.zeros(1)))

    s = rule_strategy(pre_aggregation=steps, **kwargs(5))
    result = s.start(grid=FakeGrid([1, 2, 3, 4, 5], respond), initial_arrays=ArrayRecord(state(zero_w, zero_b)),
                     num_rounds=1)
    return result.arrays.to_torch_state_dict()["fc.weight"].reshape(-1)


def test_strategy_with_nnm_aggregates_what_the_core_composition_gives():
    set_task_identity()
    got = _strategy_aggregate([partial(nnm, f=1)], partial(strategies.TrimmedMean, f=1))
    # the bias is 0 in every update: the flat rows are (w1, w2, b)
    rows = torch.cat([UPDATES, torch.zeros(5, 1)], dim=1)
    expected = compose([partial(nnm, f=1)], partial(trimmed_mean, f=1))(rows)[:2]
    assert torch.allclose(got, expected, atol=1e-6)
    # and by hand: NNM with f = 1 averages each row's 4 nearest rows (itself included); the far row
    # 5 is never among the 4 nearest of rows 1-4, so their mixtures are all mean(rows 1-4) = (0.5, 0.75)
    mixed = nnm(rows, 1)
    assert torch.allclose(mixed[:4, :2], torch.tensor([0.5, 0.75]).expand(4, 2))
    # without pre-aggregation the strategy is the plain rule, which differs here
    plain = _strategy_aggregate(None, partial(strategies.TrimmedMean, f=1))
    assert not torch.allclose(plain, got)


def test_strategy_with_clipping_bounds_every_update_under_fedavg():
    set_task_identity()
    got = _strategy_aggregate([partial(static_clip, c=1.0)], strategies.FedAvg)
    rows = torch.cat([UPDATES, torch.zeros(5, 1)], dim=1)
    norms = rows.norm(dim=1, keepdim=True)
    expected = (rows * torch.clamp(1.0 / norms.clamp_min(1e-30), max=1.0)).mean(0)[:2]  # x · min(1, c/‖x‖)
    assert torch.allclose(got, expected, atol=1e-6)


def test_a_row_changing_step_keeps_the_global_model_instead_of_crashing():
    set_task_identity()
    s = strategies.FedAvg(pre_aggregation=[lambda x: x[:2]], **kwargs(5))
    s.start(grid=FakeGrid([1, 2, 3, 4, 5], lambda n, c: reply(state(UPDATES[n - 1].reshape(1, 2), torch.zeros(1)))),
            initial_arrays=ArrayRecord(state(torch.zeros(1, 2), torch.zeros(1))), num_rounds=1)
    assert s.replies[1].received == 5 and not s.replies[1].aggregated


def test_strategy_from_config_binds_the_steps_parameters():
    cfg = RunConfig(strategy="median", pre_aggregation="arc,clip", pre_f=2, clip_c=0.5)
    s = strategy_from_config(cfg)
    assert [step.func for step in s.pre_aggregation] == [arc, static_clip]
    assert s.pre_aggregation[0].keywords == {"f": 2} and s.pre_aggregation[1].keywords == {"c": 0.5}


# ---------------------------------------------------------------------------------- crafting
def _train_msg(node: int, arrays: dict, server_round: int = 1) -> Message:
    content = RecordDict({"arrays": ArrayRecord(arrays), "config": ConfigRecord({"server-round": server_round})})
    return Message(content=content, dst_node_id=node, message_type=MessageType.TRAIN)


def test_poisoning_grid_replaces_the_attackers_replies_by_ipm_of_the_honest_updates():
    from fedcal.tasks.poisoning import PoisoningGrid

    set_task_identity()
    cfg = RunConfig(dataset="digits", num_clients=6, attacker_ratio=0.34, attack="ipm", ipm_epsilon=0.5)
    bad = sorted(attackers_of(AttackSpec.from_config(cfg)))
    assert len(bad) == 2
    sent = state(torch.ones(2, 2), torch.zeros(2))
    honest_w = {p: torch.full((2, 2), 1.0 + p) for p in range(6)}  # update of client p: p on every weight

    def respond(node, content):
        p = node - 1
        if p == 5 and p not in bad:
            return None  # an honest error reply: not part of the honest view
        return reply(state(honest_w[p], torch.full((2,), float(p))))

    node_to_client = {p + 1: p for p in range(6)}
    rows = []
    grid = PoisoningGrid(FakeGrid(list(node_to_client), respond), cfg, node_to_client, rows.extend)
    replies = grid.send_and_receive([_train_msg(n, sent) for n in node_to_client])
    honest = [p for p in range(6) if p not in bad and not (p == 5)]
    mean = np.mean(honest)  # every coordinate of an honest update is p (weights: 1 + p − 1; bias: p − 0)
    for msg in replies:
        p = msg.metadata.src_node_id - 1
        if msg.has_error():
            continue
        arrays = msg.content["arrays"].to_torch_state_dict()
        if p in bad:  # sent + (−ε · mean of the honest updates), by hand
            assert torch.allclose(arrays["fc.weight"], torch.full((2, 2), 1.0 - 0.5 * mean))
            assert torch.allclose(arrays["fc.bias"], torch.full((2,), -0.5 * mean))
        else:
            assert torch.equal(arrays["fc.weight"], honest_w[p])
    assert sorted(r["partition_id"] for r in rows) == bad
    assert {r["honest"] for r in rows} == {len(honest)}


def test_poisoning_grid_mimic_copies_the_honest_update_of_the_target_index_in_partition_order():
    from fedcal.tasks.poisoning import PoisoningGrid

    set_task_identity()
    cfg = RunConfig(dataset="digits", num_clients=6, attacker_ratio=0.34, attack="mimic", mimic_target=1)
    bad = sorted(attackers_of(AttackSpec.from_config(cfg)))
    honest = [p for p in range(6) if p not in bad]
    sent = state(torch.zeros(2, 2), torch.zeros(2))
    node_to_client = {10 - p: p for p in range(6)}  # node ids in the reverse order of the partitions

    def respond(node, content):
        p = node_to_client[node]
        return reply(state(torch.full((2, 2), float(p)), torch.full((2,), 10.0 * p)))

    grid = PoisoningGrid(FakeGrid(list(node_to_client), respond), cfg, node_to_client)
    replies = grid.send_and_receive([_train_msg(n, sent) for n in node_to_client])
    target = honest[1]  # index 1 of the honest updates in partition-id order, whatever the arrival order
    for msg in replies:
        p = node_to_client[msg.metadata.src_node_id]
        arrays = msg.content["arrays"].to_torch_state_dict()
        expected = target if p in bad else p
        assert torch.equal(arrays["fc.weight"], torch.full((2, 2), float(expected)))
        assert torch.equal(arrays["fc.bias"], torch.full((2,), 10.0 * expected))



def test_each_attacker_gets_the_same_crafted_update_whatever_order_the_replies_arrive_in():
    """Fang's attackers each get their own crafted row (sampled between the honest extreme and beyond it);
    which row a colluder gets follows its partition id, not the order its reply arrived in, so a run on
    Ray (replies in arrival order) is the run in process."""
    from fedcal.tasks.poisoning import PoisoningGrid

    set_task_identity()
    cfg = RunConfig(dataset="digits", num_clients=7, clients_per_round=7, attacker_ratio=0.3, attack="fang-trmean",
                    strategy="trimmed_mean")
    bad = sorted(attackers_of(AttackSpec.from_config(cfg)))
    assert len(bad) == 2
    sent = state(torch.zeros(2, 2), torch.zeros(2))
    node_to_client = {p + 1: p for p in range(7)}

    def respond(node, content):
        p = node - 1
        return reply(state(torch.full((2, 2), 1.0 + p), torch.arange(2.0) * p))

    class ReversedGrid(FakeGrid):  # the replies come back in the reverse order of the messages
        def send_and_receive(self, messages, *, timeout=None):
            return list(reversed(list(super().send_and_receive(messages, timeout=timeout))))

    crafted = []
    for grid_type in (FakeGrid, ReversedGrid):
        grid = PoisoningGrid(grid_type(list(node_to_client), respond), cfg, node_to_client)
        replies = grid.send_and_receive([_train_msg(n, sent) for n in node_to_client])
        crafted.append({node_to_client[m.metadata.src_node_id]: m.content["arrays"].to_torch_state_dict()["fc.weight"]
                        for m in replies if node_to_client[m.metadata.src_node_id] in bad})
    assert not torch.equal(crafted[0][bad[0]], crafted[0][bad[1]])  # the two colluders' rows differ
    for p in bad:
        assert torch.equal(crafted[0][p], crafted[1][p]), p


@pytest.mark.parametrize("strategy", ["fedavg", "median", "multikrum"])
def test_inf_replies_are_dropped_by_the_strategy_naming_the_attackers(strategy):
    # ByzFL's Inf attack exercises the server's input validation: the crafted +inf replies never
    # reach the rule, the round aggregates the honest ones
    from fedcal.tasks.poisoning import PoisoningGrid

    set_task_identity()
    cfg = RunConfig(dataset="digits", num_clients=5, clients_per_round=5, attacker_ratio=0.2, attack="inf",
                    strategy=strategy)
    bad = sorted(attackers_of(AttackSpec.from_config(cfg)))
    assert len(bad) == 1
    node_to_client = {p + 1: p for p in range(5)}

    def respond(node, content):
        return reply(state(torch.full((2, 2), 1.0), torch.full((2,), 1.0)))  # every honest update: +1

    s = strategy_from_config(cfg.replace(clients_per_round=5))
    grid = PoisoningGrid(FakeGrid(list(node_to_client), respond), cfg, node_to_client)
    result = s.start(grid=grid, initial_arrays=ArrayRecord(state(torch.zeros(2, 2), torch.zeros(2))), num_rounds=1)
    assert set(s.last_rejected) == {bad[0] + 1} and "NaN or Inf" in s.last_rejected[bad[0] + 1]
    out = result.arrays.to_torch_state_dict()
    assert torch.equal(out["fc.weight"], torch.ones(2, 2)) and torch.equal(out["fc.bias"], torch.ones(2))


@pytest.mark.parametrize("strategy, extra", [
    ("fedavg", {}), ("median", {}), ("trimmed_mean", {"trim_f": 2}), ("trimmed_mean", {"trim_f": 4}),
    ("multikrum", {"krum_f": 2}), ("multikrum", {"krum_f": 1, "krum_m": 3}), ("geometric_median", {}),
    ("median_of_means", {"mom_groups": 3}),
    ("trimmed_mean", {"trim_f": 1, "pre_aggregation": "nnm", "pre_f": 2}),
    ("median", {"pre_aggregation": "clip", "clip_c": 0.5})])
def test_the_rule_the_line_search_attacks_evaluate_is_the_strategys(strategy, extra):
    # the strategy's own aggregate of the same updates (equal weights), its pre-aggregation first
    from fedcal.tasks.poisoning import attack_rule

    set_task_identity()
    cfg = RunConfig(dataset="digits", num_clients=8, clients_per_round=8, attack="opt-ipm", strategy=strategy, **extra)
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    s = strategy_from_config(cfg)
    pre = s.pre_aggregate(x) if s.pre_aggregation else x
    theirs, _ = s.aggregate_updates(4, list(range(1, 8)), pre, torch.ones(7, dtype=torch.float64))
    assert torch.allclose(attack_rule(cfg, 4)(x), theirs, atol=1e-10)


def test_attack_rule_refuses_a_strategy_it_cannot_evaluate():
    from fedcal.tasks.poisoning import attack_rule

    with pytest.raises(ValueError, match="fltrust"):
        attack_rule(RunConfig(dataset="digits", strategy="fltrust"), 1)


def test_poisoning_grid_opt_ipm_searches_against_the_runs_rule():
    from fedcal.tasks.poisoning import PoisoningGrid

    set_task_identity()
    sent = state(torch.ones(2, 2), torch.zeros(2))
    node_to_client = {p + 1: p for p in range(6)}

    def respond(node, content):  # update of client p: p on every coordinate
        p = node - 1
        return reply(state(torch.full((2, 2), 1.0 + p), torch.full((2,), float(p))))

    for strategy, tau in (("fedavg", 10.0 * (2 ** 19 - 1)), ("median", None)):
        cfg = RunConfig(dataset="digits", num_clients=6, attacker_ratio=0.34, attack="opt-ipm", strategy=strategy)
        bad = sorted(attackers_of(AttackSpec.from_config(cfg)))
        mean = float(np.mean([p for p in range(6) if p not in bad]))
        grid = PoisoningGrid(FakeGrid(list(node_to_client), respond), cfg, node_to_client)
        replies = grid.send_and_receive([_train_msg(n, sent) for n in node_to_client])
        got = {node_to_client[m.metadata.src_node_id]: m.content["arrays"].to_torch_state_dict()["fc.bias"]
               for m in replies}
        if tau is None:
            # honest 1, 3, 4, 5 (attackers 0 and 2), μ = 3.25: two copies of −τμ ≤ 0 sit below every honest
            # value for every τ ≥ 0, so the median of the six is (1 + 3) / 2 at every τ: no step improves
            # strictly and τ stays at the start, 0 — against the median IPM's line search sends zero
            assert bad == [0, 2]
            tau = 0.0
        assert all(torch.allclose(got[p], torch.full((2,), -tau * mean), rtol=1e-9) for p in bad)
        assert all(torch.equal(got[p], torch.full((2,), float(p))) for p in got if p not in bad)


def _three_client_round(attack: str, respond, server_round: int = 1) -> tuple[int, list, list[dict]]:
    """One train round of three clients (one of them the attacker) through a PoisoningGrid:
    (the attacker's partition, the replies, the poisoning rows recorded)."""
    from fedcal.tasks.poisoning import PoisoningGrid

    set_task_identity()
    cfg = RunConfig(dataset="digits", num_clients=3, clients_per_round=3, attacker_ratio=0.34, attack=attack)
    bad = next(iter(attackers_of(AttackSpec.from_config(cfg))))
    sent = state(torch.zeros(2, 2), torch.zeros(2))
    rows: list[dict] = []
    grid = PoisoningGrid(FakeGrid([1, 2, 3], lambda n, c: respond(n, bad)), cfg, {1: 0, 2: 1, 3: 2}, rows.extend)
    return bad, grid.send_and_receive([_train_msg(n, sent, server_round) for n in (1, 2, 3)]), rows


def test_poisoning_grid_leaves_a_round_without_two_honest_updates_alone():
    bad, replies, rows = _three_client_round(
        "alie", lambda n, bad: None if n - 1 != bad else reply(state(torch.ones(2, 2), torch.ones(2))), server_round=4)
    mine = [m for m in replies if not m.has_error()]
    assert torch.equal(mine[0].content["arrays"].to_torch_state_dict()["fc.weight"], torch.ones(2, 2))
    # the reply left as trained is recorded as such, with the reason: a table can count it
    assert len(rows) == 1 and rows[0]["crafted"] is False and rows[0]["partition_id"] == bad
    assert rows[0]["round"] == 4 and rows[0]["honest"] == 0 and "needs 2" in rows[0]["reason"]


def test_an_attack_that_refuses_its_input_is_recorded_uncrafted_with_its_reason():
    # Fang against Krum needs at least 3 honest updates; this round has 2
    bad, replies, rows = _three_client_round(
        "fang-krum", lambda n, bad: reply(state(torch.full((2, 2), float(n)), torch.ones(2))))
    trained = replies[bad].content["arrays"].to_torch_state_dict()["fc.weight"]
    assert torch.equal(trained, torch.full((2, 2), float(bad + 1)))  # left as trained
    assert [(r["crafted"], r["honest"]) for r in rows] == [(False, 2)] and "3 honest" in rows[0]["reason"]


# ---------------------------------------------------------------------------------- Flower runs
def _tiny(tmp_path, **kw) -> RunConfig:
    return RunConfig.from_flower({**dict(dataset="digits", num_clients=8, clients_per_round=8, num_rounds=2, lr=0.05,
                                         attacker_ratio=0.25, engine="inprocess", output_dir=str(tmp_path),
                                         device="cpu"), **kw})


@pytest.mark.parametrize("attack", sorted(set(POISONING) - {"inf"}))  # inf: rejected by design (above)
def test_crafted_replies_reach_the_aggregation(tmp_path, attack):
    from fedcal.app.engine import simulate
    from fedcal.results import AUDIT_FILE
    from fedcal.results import POISONING_FILE

    # the line-search attacks against FedAvg send ~5e6 × the mean (τ unbounded: the run's model is
    # not finite after round 1, and round 2's replies with it); against the median they stay bounded
    cfg = _tiny(tmp_path, attack=attack, strategy="median" if attack.startswith("opt-") else "fedavg")
    run_dir = simulate(cfg, progress=False)
    crafted = pd.read_csv(run_dir / POISONING_FILE)
    audit = pd.read_csv(run_dir / AUDIT_FILE)
    # every round, each attacker's reply was crafted and then aggregated by FedAvg with its weight
    assert sorted(crafted["round"].unique()) == [1, 2]
    assert set(crafted["partition_id"]) == set(attackers_of(AttackSpec.from_config(cfg)))
    merged = crafted.merge(audit, on=["round", "node_id", "partition_id"])
    assert len(merged) == len(crafted) and (merged["weight"] > 0).all()
    assert (crafted["attack"] == attack).all() and crafted["crafted"].all()


def test_alie_against_fedavg_changes_the_model_of_the_benign_run(tmp_path):
    from fedcal.app.engine import simulate

    benign = simulate(_tiny(tmp_path, attack="none"), progress=False)
    attacked = simulate(_tiny(tmp_path, attack="alie", alie_z=1.5), progress=False)
    a = torch.load(benign / "model.pt")
    b = torch.load(attacked / "model.pt")
    a, b = (x.get("state_dict", x) if isinstance(x, dict) else x for x in (a, b))
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_backdoor_run_logs_asr_above_the_benign_models(tmp_path):
    from fedcal.app.engine import simulate
    from fedcal.attacks import PixelBackdoor, attack_success_rate, triggered_test_set
    from fedcal.data import load_dataset, pixel_space
    from fedcal.models import build_model
    from fedcal.local_training import predict_logits

    kw = dict(num_rounds=6, attacker_ratio=0.5, backdoor_frac=0.5, backdoor_target=3)
    benign = simulate(_tiny(tmp_path, attack="none", **kw), progress=False)
    attacked = simulate(_tiny(tmp_path, attack="backdoor", **kw), progress=False)
    metrics = pd.read_csv(attacked / "metrics.csv")
    asr = metrics[metrics["metric"] == "asr"]
    assert sorted(asr["round"]) == list(range(0, 7))  # every evaluated round, beside accuracy
    # the benign run's final model on the same triggered test set, computed here
    ds = load_dataset("digits", "")
    test = triggered_test_set(ds.x_test, ds.y_test, PixelBackdoor(3, 0.5), pixel_space("digits"))
    model = build_model("mlp", ds.input_shape, ds.num_classes)
    saved = torch.load(benign / "model.pt")
    model.load_state_dict(saved.get("state_dict", saved))
    benign_asr = attack_success_rate(predict_logits(model, test.x, 1000, "cpu").argmax(1), test.labels, 3)
    final_asr = float(asr.loc[asr["round"] == 6, "value"].iloc[0])
    assert final_asr > benign_asr + 0.2


# ---------------------------------------------------------------------------------- the study's cells
def test_byzantine_cells_set_f_per_ratio_and_share_f_free_benign_runs():
    from fedcal.studies.byzantine import byzantine_cells, byzantine_configs

    base = RunConfig(dataset="digits", num_clients=20, clients_per_round=10)
    cells = byzantine_cells(base, ["fedavg", "nnm+trimmed_mean", "multikrum"], ["alie", "backdoor"], [0.1, 0.25], [0])
    assert len(cells) == 2 * 3 * 3  # ratios × specs × (benign + 2 attacks)
    by = {(g.ratio, c.pre_aggregation, c.strategy, c.attack): c for g, _, c in cells}
    # f = ceil(ratio · M): 1 of 10 and 3 of 10 (2.5 rounded up)
    assert by[(0.1, "nnm", "trimmed_mean", "alie")].trim_f == 1 and by[(0.1, "nnm", "trimmed_mean", "alie")].pre_f == 1
    assert by[(0.25, "nnm", "trimmed_mean", "alie")].trim_f == 3 and by[(0.25, "nnm", "trimmed_mean", "alie")].pre_f == 3
    assert by[(0.25, "", "multikrum", "alie")].krum_f == 3
    # FedAvg reads no f: one benign run serves both ratios; the f-taking rules' benign runs differ
    assert by[(0.1, "", "fedavg", "none")] == by[(0.25, "", "fedavg", "none")]
    assert by[(0.1, "", "multikrum", "none")] != by[(0.25, "", "multikrum", "none")]
    assert len(byzantine_configs(cells)) == len(cells) - 1


def test_a_strategy_switch_is_a_row_of_its_own_and_reads_back_from_the_run():
    """``calguard:cusum`` is CalGuard with its sequential test (``calguard-cusum=true``): its runs
    differ from plain CalGuard's, and the table's row name is rebuilt from each run's config; a
    switch that names no boolean key of the strategy fails naming the key."""
    from fedcal.reports.byzantine import spec_of
    from fedcal.results import config_hash
    from fedcal.studies.byzantine import DEFAULT_STRATEGIES, byzantine_cells, parse_spec

    assert parse_spec("calguard:cusum") == ("calguard", "", {"calguard_cusum": True})
    assert parse_spec("nnm+trimmed_mean") == ("trimmed_mean", "nnm", {})
    base = RunConfig(dataset="digits", num_clients=20, clients_per_round=10)
    cells = byzantine_cells(base, list(DEFAULT_STRATEGIES), ["alie"], [0.25], [0])
    assert [spec_of(c) for _, _, c in cells] == [s for s in DEFAULT_STRATEGIES for _ in range(2)]
    by = {spec_of(c): c for _, _, c in cells if c.attack == "alie"}
    assert by["calguard:cusum"].calguard_cusum and not by["calguard"].calguard_cusum
    assert config_hash(by["calguard:cusum"]) != config_hash(by["calguard"])
    for bad, key in (("calguard:bogus", "calguard-bogus"), ("calguard:kappa", "calguard-kappa"), ("calguard:", "calguard-")):
        with pytest.raises(ConfigError, match=key):
            parse_spec(bad)


def test_byzantine_report_averages_seeds_and_names_each_strategys_worst_attack(tmp_path):
    from fedcal.reports.byzantine import byzantine_report
    from fedcal.studies.byzantine import byzantine_cells, byzantine_configs
    from fedcal.results import RunStore, run_dir_for

    base = RunConfig(dataset="digits", output_dir=str(tmp_path / "runs"), num_rounds=1, clients_per_round=10,
                     num_clients=20)
    cells = byzantine_cells(base, ["fedavg", "nnm+trimmed_mean"], ["alie", "backdoor"], [0.25], [0, 1])
    acc = {("fedavg", "none"): 0.9, ("fedavg", "alie"): 0.5, ("fedavg", "backdoor"): 0.8,
           ("trimmed_mean", "none"): 0.88, ("trimmed_mean", "alie"): 0.85, ("trimmed_mean", "backdoor"): 0.7}
    for c in byzantine_configs(cells):
        store = RunStore(run_dir_for(c), c)
        store.start()
        metrics = {"accuracy": acc[(c.strategy, c.attack)] + 0.02 * c.seed, "ece": 0.1, "sece": 0.05 - 0.1 * c.seed,
                   "brier": 0.2, "nll": 0.3}
        if c.attack == "backdoor":
            metrics["asr"] = 0.6 if c.strategy == "fedavg" else 0.1
        store.log_round(0, {**metrics, "accuracy": 0.1})
        store.log_round(1, metrics)
        store.finish()
    md = byzantine_report(cells, tmp_path / "out")
    table = pd.read_csv(tmp_path / "out" / "table.csv")
    row = table[(table["strategy"] == "fedavg") & (table["attack"] == "alie")].iloc[0]
    assert row["seeds"] == 2 and row["accuracy"] == pytest.approx(0.51)  # mean of 0.50 and 0.52
    assert row["sece"] == pytest.approx(0.0)
    # the worst attack per strategy: ALIE for FedAvg (51 %), the backdoor for NNM + trimmed mean (71 %)
    # with the spread over the two seeds of the worst cell: sd(0.50, 0.52) = 1.4 points
    assert "| fedavg | 91.0 | 51.0 | 81.0 | 51.0 ± 1.4 | 40.0 | alie | 1.4 |" in md
    assert "| nnm+trimmed_mean | 89.0 | 86.0 | 71.0 | 71.0 ± 1.4 | 18.0 | backdoor | 1.4 |" in md
    assert "| fedavg | 60.0 ± 0.0 |" in md and "| nnm+trimmed_mean | 10.0 ± 0.0 |" in md  # the ASR table
    # the sECE worst case: the signed cell farthest from 0 (0.05 and -0.05 -> mean 0), sd 7.1 points
    assert "| fedavg | 0.0 | 0.0 | 0.0 | 0.0 ± 7.1 |" in md
    # no poisoning.csv in these hand-made runs: no attacker replied, and the table says so
    assert "Attacker replies crafted (%" in md and "alie no attacker reply" in md


def _finished_cells(tmp_path, strategies, attacks, seeds, accuracy=lambda cfg: 0.9, accepted=lambda cfg: 10):
    """The cells of a 20-client, 10-a-round study at ratio 0.25, each a hand-made finished run
    (two logged rounds of flat metrics: ``accuracy(cfg)``, 90 % unless given; round 1 received 10
    replies and accepted ``accepted(cfg)``, all unless given)."""
    from fedcal.studies.byzantine import byzantine_cells, byzantine_configs
    from fedcal.results import RunStore, run_dir_for

    base = RunConfig(dataset="digits", output_dir=str(tmp_path / "runs"), num_rounds=1, clients_per_round=10,
                     num_clients=20)
    cells = byzantine_cells(base, strategies, attacks, [0.25], seeds)
    for c in byzantine_configs(cells):
        store = RunStore(run_dir_for(c), c)
        store.start()
        for rnd in (0, 1):
            store.log_round(rnd, {"accuracy": accuracy(c), "ece": 0.1, "sece": 0.05, "brier": 0.2, "nll": 0.3,
                                  **({"replies_received": 10, "replies_accepted": accepted(c)} if rnd else {})})
        store.finish()
    return cells


def test_the_table_counts_the_attacker_replies_that_were_crafted(tmp_path):
    from fedcal.reports.byzantine import byzantine_rows, crafted_line, crafted_share
    from fedcal.studies.byzantine import byzantine_configs
    from fedcal.results import POISONING_FILE, run_dir_for

    cells = _finished_cells(tmp_path, ["fedavg", "median"], ["alie", "ipm"], [0])
    made = {("fedavg", "alie"): [True, True, False], ("median", "alie"): [True], ("fedavg", "ipm"): None}
    for c in byzantine_configs(cells):
        flags = made.get((c.strategy, c.attack), [True])
        if flags is None:  # a run from before the uncrafted replies were recorded: crafted rows, no column
            pd.DataFrame({"round": [1], "honest": [5]}).to_csv(run_dir_for(c) / POISONING_FILE, index=False)
        else:
            pd.DataFrame({"round": range(len(flags)), "crafted": flags}).to_csv(run_dir_for(c) / POISONING_FILE,
                                                                                index=False)
    rows = byzantine_rows(cells)
    alie = next(c for _, _, c in cells if c.strategy == "fedavg" and c.attack == "alie")
    assert crafted_share(run_dir_for(alie)) == (2, 3)
    # alie: 2 of 3 (fedavg) + 1 of 1 (median) = 3 of 4; ipm: one run without the record
    assert crafted_line(rows) == ("Attacker replies crafted (%; a reply is left as trained where the round has "
                                        "too few honest updates or the attack refuses them): alie 75.0 (3 of 4); "
                                        "ipm not recorded in 1 of 2 runs.\n")
    assert rows.loc[rows["attack"] == "benign", "crafted"].isna().all()


def test_a_strategy_with_an_attack_not_run_yet_has_no_worst_case(tmp_path):
    """A worst case over some of the attacks would rank a half-measured strategy as robust: the
    row says it is incomplete instead."""
    from fedcal.reports.byzantine import byzantine_report
    from fedcal.studies.byzantine import byzantine_cells, byzantine_configs
    from fedcal.results import RunStore, run_dir_for

    base = RunConfig(dataset="digits", output_dir=str(tmp_path / "runs"), num_rounds=1, clients_per_round=10,
                     num_clients=20)
    cells = byzantine_cells(base, ["fedavg"], ["alie", "ipm"], [0.25], [0])
    for c in byzantine_configs(cells):
        if c.attack == "ipm":
            continue  # not run yet
        store = RunStore(run_dir_for(c), c)
        store.start()
        for rnd in (0, 1):
            store.log_round(rnd, {"accuracy": 0.9 if c.attack == "none" else 0.6, "ece": 0.1, "sece": 0.05,
                                  "brier": 0.2, "nll": 0.3})
        store.finish()
    md = byzantine_report(cells, tmp_path / "out")
    assert "| fedavg | 90.0 | 60.0 |  |  |  | incomplete (1 of 2 attacks) |  |" in md, md


def test_table_only_builds_the_table_from_finished_runs_and_starts_none(tmp_path):
    """``fedcal byzantine --table-only``: the table of the finished runs; an unfinished cell stays
    blank and no run directory is created for it."""
    from fedcal.cli import main
    from fedcal.results import RunStore, run_dir_for
    from fedcal.studies.byzantine import byzantine_cells

    keys = ["dataset=digits", f"output-dir={tmp_path / 'runs'}", "num-rounds=1", "clients-per-round=10",
            "num-clients=20"]
    base = RunConfig.from_flower(dict(k.split("=", 1) for k in keys))
    cells = byzantine_cells(base.replace(num_rounds=1), ["fedavg"], ["alie"], [0.25], [0])
    done = next(c for _, _, c in cells if c.attack == "none")
    store = RunStore(run_dir_for(done), done)
    store.start()
    for rnd, acc in ((0, 0.1), (1, 0.9)):
        store.log_round(rnd, {"accuracy": acc, "ece": 0.1, "sece": 0.05, "brier": 0.2, "nll": 0.3})
    store.finish()
    assert main(["byzantine", "--table-only", "--strategies", "fedavg", "--attacks", "alie", "--ratios", "0.25",
                 "--seeds", "0", "--report", str(tmp_path / "out"), "--no-progress", *keys]) == 0
    attacked = next(c for _, _, c in cells if c.attack == "alie")
    assert not run_dir_for(attacked).exists()  # nothing started
    table = pd.read_csv(tmp_path / "out" / "table.csv")
    assert list(table["attack"]) == ["benign"] and table["accuracy"].iloc[0] == pytest.approx(0.9)


def test_the_table_shows_the_replies_each_rule_excluded(tmp_path):
    """Per strategy and attack, the share of attacker / benign replies given weight 0 (or flagged),
    from each run's aggregation.csv; a rule that never excluded a reply is named, not tabulated."""
    from fedcal.reports.byzantine import byzantine_report, byzantine_rows
    from fedcal.studies.byzantine import byzantine_configs
    from fedcal.results import AUDIT_FILE, run_dir_for

    cells = _finished_cells(tmp_path, ["fedavg", "multikrum"], ["alie"], [0, 1])
    for c in byzantine_configs(cells):
        bad = sorted(attackers_of(AttackSpec.from_config(c)))
        good = [p for p in range(20) if p not in bad][:6]
        # one round: 4 attacker replies and 6 benign; the benign run (no attackers) 10 benign replies
        ids = bad[:4] + good if bad else list(range(10))
        if c.strategy == "multikrum":
            # seed 0 excludes 3 of 4 attackers and 1 of 6 benign, seed 1 all 4 attackers and none benign;
            # the benign run (no attacker) excludes 2 of its 10 replies
            out = ({0, 1, 2, 4} if c.seed == 0 else {0, 1, 2, 3}) if c.attack == "alie" else {0, 1}
            weight = [0.0 if i in out else 0.2 for i in range(len(ids))]
        else:
            weight = [0.1] * len(ids)
        pd.DataFrame({"round": 1, "node_id": range(len(ids)), "partition_id": ids, "weight": weight}).to_csv(
            run_dir_for(c) / AUDIT_FILE, index=False)
    rows = byzantine_rows(cells)
    mk = rows[(rows["strategy"] == "multikrum") & (rows["attack"] == "alie")].set_index("seed")
    assert mk.loc[0, "detected"] == pytest.approx(3 / 4) and mk.loc[0, "benign_flagged"] == pytest.approx(1 / 6)
    assert mk.loc[1, "detected"] == 1.0 and mk.loc[1, "benign_flagged"] == 0.0
    md = byzantine_report(cells, tmp_path / "out")
    # means over the two seeds: attackers (75 + 100) / 2 = 87.5 %, benign (16.7 + 0) / 2 = 8.3 %; benign run 20 %
    assert "| multikrum | 20.0 | 87.5 / 8.3 |" in md, md
    assert "\nNo reply excluded in any run: fedavg.\n" in md and "| fedavg | 0.0" not in md


def test_a_cell_whose_model_ended_at_chance_is_marked_where_it_stands_and_in_the_worst_case(tmp_path):
    """A diverged seed stays in its cell's mean (the attack won there) but the table says the model is
    no result: the chance marker on the cell and on the worst case, how many seeds, and the footnote."""
    from fedcal.reports.byzantine import byzantine_report
    from fedcal.reports.chance import MARK

    # digits' test set: a model at 5 % is below chance (1/10); one seed of FedAvg under IPM ends there
    cells = _finished_cells(tmp_path, ["fedavg", "median"], ["ipm"], [0, 1],
                            accuracy=lambda c: 0.05 if (c.strategy, c.attack, c.seed) == ("fedavg", "ipm", 1) else 0.9)
    md = byzantine_report(cells, tmp_path / "out")
    # the mean of 0.90 and 0.05 = 47.5 %, marked with 1 of its 2 seeds; sd of the two = 60.1 points
    assert f"| fedavg | 90.0 | 47.5 {MARK} (1 of 2 seeds) | 47.5 ± 60.1 {MARK} (1 of 2 seeds) | 42.5 | ipm | 60.1 |" in md
    assert "| median | 90.0 | 90.0 | 90.0 ± 0.0 | 0.0 | ipm | 0.0 |" in md  # nothing marked where no seed is at chance
    assert md.count("within noise of chance") == 1  # the footnote, once under the accuracy table
    rows = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert rows["chance_level"].sum() == 1
    assert pd.read_csv(tmp_path / "out" / "table.csv")["chance"].tolist().count(1) == 1


def test_a_stalled_cell_is_marked_where_it_stands_and_in_the_worst_case(tmp_path):
    """A seed whose last round accepted none of its replies keeps an earlier model — above chance here — which
    stays in the cell's mean (the attack broke the training) and is marked, with the line that says why."""
    from fedcal.reports.byzantine import byzantine_report

    broken = lambda c: (c.strategy, c.attack, c.seed) == ("fedavg", "ipm", 1)  # noqa: E731
    cells = _finished_cells(tmp_path, ["fedavg", "median"], ["ipm"], [0, 1],
                            accuracy=lambda c: 0.6 if broken(c) else 0.9, accepted=lambda c: 0 if broken(c) else 10)
    md = byzantine_report(cells, tmp_path / "out")
    assert "| fedavg | 90.0 | 75.0 (1 of 2 seeds stalled) | 75.0 ± 21.2 (1 of 2 seeds stalled) | 15.0 | ipm | 21.2 |" in md
    assert "| median | 90.0 | 90.0 | 90.0 ± 0.0 | 0.0 | ipm | 0.0 |" in md
    assert md.count("stalled: the run's last round accepted none") == 1 and "within noise of chance" not in md
    assert pd.read_csv(tmp_path / "out" / "runs.csv")["stalled"].sum() == 1


# ---------------------------------------------------------------------------------- ALIE's n and f in a round
@pytest.mark.parametrize("crashed", [0, 1])
def test_alies_paper_z_uses_the_rounds_replies_n_and_the_rounds_attackers_f(crashed):
    """With partial participation the paper's z is computed per round from that round's replies:
    n = honest updates received + the round's attacker replies, f = the round's attacker replies —
    not the federation's K and attackers, nor the rules' assumed f. Here K = 20 with 5 attackers
    (z(20, 5) = Φ⁻¹(0.7)), 7 clients a round (the rules' f would be ⌈0.25 · 7⌉ = 2, z(7, 2) = Φ⁻¹(5/7)),
    and the round holds 3 attackers and 4 honest clients: z(7, 3), s = ⌊7/2 + 1⌋ − 3 = 1, Φ⁻¹(6/7).
    A honest client whose reply is an error is no update: with one of them, n = 6, Φ⁻¹(5/6)."""
    from scipy.stats import norm

    from fedcal.tasks.poisoning import PoisoningGrid

    set_task_identity()
    cfg = RunConfig(dataset="digits", num_clients=20, clients_per_round=7, attacker_ratio=0.25, attack="alie")
    bad = sorted(attackers_of(AttackSpec.from_config(cfg)))
    good = [p for p in range(20) if p not in bad]
    assert len(bad) == 5
    in_round = bad[:3] + good[:4]  # partition ids of the round's 7 clients; node i + 1 is partition in_round[i]
    node_of = {i + 1: p for i, p in enumerate(in_round)}
    value = {p: float(k + 1) for k, p in enumerate(good[:4])}  # honest updates 1, 2, 3, 4 in every coordinate
    dead = set(good[:crashed])  # the honest client of update 1 crashes: its reply is an error

    def respond(node, content):
        p = node_of[node]
        if p in dead:
            return None
        return reply(state(torch.full((2, 2), value.get(p, 99.0)), torch.full((2,), value.get(p, 99.0))))

    grid = PoisoningGrid(FakeGrid(list(node_of), respond), cfg, node_of)
    replies = grid.send_and_receive([_train_msg(n, state(torch.zeros(2, 2), torch.zeros(2))) for n in node_of])
    honest = [2.0, 3.0, 4.0] if crashed else [1.0, 2.0, 3.0, 4.0]
    mu, sd = float(np.mean(honest)), float(np.std(honest, ddof=1))
    n, f = len(honest) + 3, 3
    z = norm.ppf((n - 1) / n)  # s = 1 supporter in both cases
    assert z == pytest.approx(norm.ppf(6 / 7) if not crashed else norm.ppf(5 / 6))
    for msg in replies:
        if msg.has_error():
            continue
        p = node_of[msg.metadata.src_node_id]
        got = msg.content["arrays"].to_torch_state_dict()["fc.weight"]
        expected = mu - z * sd if p in bad else value[p]
        assert torch.allclose(got.double(), torch.full((2, 2), expected, dtype=torch.float64), atol=1e-5), (p, got)
    assert f == 3 and not any(node_of[m.metadata.src_node_id] in bad and m.has_error() for m in replies)


# ---------------------------------------------------------------------------------- the study's settings and specs
def test_attack_and_strategy_specs_parse_to_their_keys():
    from fedcal.studies.byzantine import parse_attack, parse_spec

    assert parse_attack("alie") == ("alie", {})  # alie-z stays 0: the paper's z of each round
    assert parse_attack("alie:z=1.5") == ("alie", {"alie_z": 1.5})
    assert parse_attack("alie:z=-2") == ("alie", {"alie_z": -2.0})
    assert parse_attack("ipm:eps=10") == ("ipm", {"ipm_epsilon": 10.0})
    assert parse_attack("minmax:std") == ("minmax", {"minmax_direction": "std"})
    assert parse_attack("minsum:sign") == ("minsum", {"minmax_direction": "sign"})
    assert parse_attack("minsum:direction=unit") == ("minsum", {"minmax_direction": "unit"})
    assert parse_attack("fang-trmean:b=3") == ("fang-trmean", {"fang_b": 3.0})
    assert parse_attack("mimic:target=2") == ("mimic", {"mimic_target": 2})
    assert parse_attack("backdoor:frac=0.5:target=7") == ("backdoor", {"backdoor_frac": 0.5, "backdoor_target": 7})
    assert parse_attack("signflip") == ("signflip", {})
    # krum is Multi-Krum averaging one update; pre-aggregation steps compose with it and with any rule
    assert parse_spec("krum") == ("multikrum", "", {"krum_m": 1})
    assert parse_spec("nnm+krum") == ("multikrum", "nnm", {"krum_m": 1})
    assert parse_spec("cclip+median") == ("median", "cclip", {})
    assert parse_spec("nnm+cclip+trimmed_mean") == ("trimmed_mean", "nnm,cclip", {})


def test_cross_silo_cells_by_hand():
    """honest 10, f ∈ {1, 3}, α ∈ {inf, 0.5}: n + f clients all every round, exactly f attackers, the
    rules given f, IID for inf, every attack spec's key set, and the krum row Multi-Krum with m = 1."""
    import math

    from fedcal.reports.byzantine import spec_of
    from fedcal.results import config_hash
    from fedcal.studies.byzantine import byzantine_cells, byzantine_configs

    base = RunConfig(dataset="digits")
    cells = byzantine_cells(base, ["fedavg", "krum", "nnm+trimmed_mean"], ["alie", "ipm:eps=10", "minmax:std"], [],
                            [0, 1], setting="cross-silo", honest=10, byzantine=[1, 3], alphas=[math.inf, 0.5])
    assert len(cells) == 2 * 2 * 3 * 2 * 4  # alphas × f × specs × seeds × (benign + 3 attacks)
    assert len(byzantine_configs(cells)) == len(cells)  # n + f differs per f: no run serves two cells
    groups = list(dict.fromkeys(g for g, _, _ in cells))
    assert [(g.setting, g.alpha, g.f) for g in groups] == [("cross-silo", math.inf, 1), ("cross-silo", math.inf, 3),
                                                           ("cross-silo", 0.5, 1), ("cross-silo", 0.5, 3)]
    for g, attack, c in cells:
        assert c.num_clients == c.clients_per_round == 10 + g.f
        assert (c.partition, c.dirichlet_alpha) == (("iid", 1.0) if math.isinf(g.alpha) else ("dirichlet", 0.5))
        if attack == "benign":
            assert c.attack == "none" and c.num_attackers == 0
        else:
            assert len(attackers_of(AttackSpec.from_config(c))) == g.f == c.num_attackers
        if c.strategy == "multikrum":
            assert (c.krum_f, c.krum_m, spec_of(c)) == (g.f, 1, "krum")
        if c.strategy == "trimmed_mean":
            assert (c.trim_f, c.pre_f, c.pre_aggregation) == (g.f, g.f, "nnm")
    one = {(g.f, a): c for g, a, c in cells if g.alpha == 0.5 and c.seed == 0 and c.strategy == "fedavg"}
    assert one[(3, "ipm:eps=10")].ipm_epsilon == 10.0 and one[(3, "minmax:std")].minmax_direction == "std"
    assert one[(3, "alie")].alie_z == 0.0 and one[(3, "alie")].attacker_ratio == pytest.approx(3 / 13)
    # the IID runs carry the default alpha, so they are one run whatever alpha the base config had
    iid = [c for g, _, c in cells if math.isinf(g.alpha)]
    other = byzantine_cells(base.replace(dirichlet_alpha=0.3), ["fedavg", "krum", "nnm+trimmed_mean"],
                            ["alie", "ipm:eps=10", "minmax:std"], [], [0, 1], setting="cross-silo", honest=10,
                            byzantine=[1, 3], alphas=[math.inf])
    assert [config_hash(c) for c in iid] == [config_hash(c) for _, _, c in other]


def test_a_line_search_attack_has_no_cell_against_a_rule_it_cannot_evaluate_and_the_table_says_na(tmp_path):
    from fedcal.reports.byzantine import NOT_APPLICABLE, byzantine_report

    cells = _finished_cells(tmp_path, ["fedavg", "fltrust"], ["ipm", "opt-ipm"], [0],
                            accuracy=lambda c: 0.5 if c.attack == "opt-ipm" else 0.9)
    assert {(c.strategy, a) for _, a, c in cells} == {("fedavg", "benign"), ("fedavg", "ipm"), ("fedavg", "opt-ipm"),
                                                      ("fltrust", "benign"), ("fltrust", "ipm")}
    md = byzantine_report(cells, tmp_path / "out")
    # FLTrust's worst case is over the attacks it met (not "incomplete"); FedAvg's is opt-ipm's 50 %
    assert f"| fltrust | 90.0 | 90.0 | {NOT_APPLICABLE} | 90.0 | 0.0 | ipm |" in md, md
    assert "| fedavg | 90.0 | 90.0 | 50.0 | 50.0 | 40.0 | opt-ipm |" in md, md


def test_the_worst_case_counts_a_diverged_run_at_chance_and_the_rule_choice_follows_the_numbers(tmp_path):
    """FedAvg under ipm:eps=10 diverges in both seeds (final accuracy NaN): its cell is the test set's
    chance rate, marked, its worst case and drop follow from it; the median keeps 85 %; "which rule for
    which threat" reads these numbers."""
    from fedcal.data import load_dataset
    from fedcal.reports.byzantine import byzantine_report, worst_cases
    from fedcal.reports.chance import MARK

    y = load_dataset("digits", "").y_test.numpy()
    chance = max(0.1, np.bincount(y).max() / y.size)  # digits' test set: the majority-class rate

    def accuracy(c):
        if c.attack == "ipm" and c.ipm_epsilon == 10:
            return float("nan") if c.strategy == "fedavg" else 0.85
        return 0.9 if c.attack == "none" else 0.88 if c.strategy == "median" else 0.7 + 0.02 * c.seed

    cells = _finished_cells(tmp_path, ["fedavg", "median"], ["ipm:eps=0.1", "ipm:eps=10"], [0, 1], accuracy=accuracy)
    md = byzantine_report(cells, tmp_path / "out")
    c = f"{100 * chance:.1f}"
    drop = f"{100 * (0.9 - chance):.1f}"
    assert f"| fedavg | 90.0 | 71.0 | {c} {MARK} (2 diverged) | {c} ± 0.0 {MARK} (2 diverged) | {drop} | ipm:eps=10 | 1.4 |" in md, md
    assert "| median | 90.0 | 88.0 | 85.0 | 85.0 ± 0.0 | 5.0 | ipm:eps=10 | 0.0 |" in md, md
    assert "diverged: the run's final accuracy is NaN" in md and "within noise of chance" in md
    assert f"- The attack that bites: ipm:eps=10 costs FedAvg {drop} points (90.0 → {c} %)." in md
    assert "- Best worst case: median, 85.0 % under ipm:eps=10 (5.0 points below its benign run)." in md
    assert "- Worst case within 10 points of their benign run: median (5.0)." in md
    assert "  - ipm:eps=0.1: median (88.0 %)\n" in md  # FedAvg's 71 ± 1.4 is 17 points off: not within the spread
    assert "| fedavg | 5.0 | 5.0 | diverged |" in md  # no sECE of a model that has none
    worst = pd.read_csv(tmp_path / "out" / "worst.csv").set_index("strategy")
    assert worst.loc["fedavg", "worst"] == pytest.approx(chance) and worst.loc["fedavg", "worst_attack"] == "ipm:eps=10"
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert runs["diverged"].sum() == 2 and runs.loc[runs["diverged"], "chance_level"].all()
    # worst_cases by itself on a hand-made table: a tie goes to the first column, a missing cell leaves no worst case
    t = pd.DataFrame({"strategy": ["a"] * 3 + ["b"] * 2, "attack": ["benign", "x", "y", "benign", "x"],
                      "accuracy": [0.9, 0.5, 0.5, 0.8, 0.6], "accuracy_sd": [0.0, 0.1, 0.2, 0.0, 0.0]})
    w = worst_cases(t, {"a": ["benign", "x", "y"], "b": ["benign", "x", "y"]}).set_index("strategy")
    assert (w.loc["a", "worst_attack"], w.loc["a", "worst_sd"], w.loc["a", "drop"]) == ("x", 0.1, pytest.approx(0.4))
    assert not w.loc["b", "complete"] and w.loc["b", "worst_attack"] == "" and w.loc["b", "attacks_run"] == 1


def test_a_rule_whose_benign_run_is_at_chance_is_not_ranked(tmp_path):
    """A rule that did not train without attack (benign at chance) loses nothing to any attack: it is
    named as not ranked, never as keeping its worst case within 10 points."""
    from fedcal.reports.byzantine import byzantine_report

    cells = _finished_cells(tmp_path, ["fedavg", "median"], ["ipm"], [0],
                            accuracy=lambda c: 0.05 if c.strategy == "median" else 0.9 if c.attack == "none" else 0.85)
    md = byzantine_report(cells, tmp_path / "out")
    assert "- Worst case within 10 points of their benign run: fedavg (5.0)." in md, md
    assert "- Best worst case: fedavg, 85.0 % under ipm" in md
    assert "- Not ranked (a seed of its benign run at chance: it did not train in this setting): median." in md


def test_several_tables_lead_with_each_rules_worst_case_per_table(tmp_path):
    """Two heterogeneity tables (IID and α = 0.5, cross-silo f = 1 of 4 honest): a summary, per rule and
    table, of the worst case, its drop and the attack, before the tables themselves."""
    import math

    from fedcal.reports.byzantine import byzantine_report
    from fedcal.results import RunStore, run_dir_for
    from fedcal.studies.byzantine import byzantine_cells, byzantine_configs

    base = RunConfig(dataset="digits", output_dir=str(tmp_path / "runs"), num_rounds=1)
    cells = byzantine_cells(base, ["fedavg", "median"], ["alie", "ipm:eps=10"], [], [0], setting="cross-silo",
                            honest=4, byzantine=[1], alphas=[math.inf, 0.5])
    acc = {("iid", "fedavg", "none"): 0.9, ("iid", "fedavg", "alie"): 0.8, ("iid", "fedavg", "ipm"): 0.6,
           ("iid", "median", "none"): 0.88, ("iid", "median", "alie"): 0.86, ("iid", "median", "ipm"): 0.87,
           ("dirichlet", "fedavg", "none"): 0.85, ("dirichlet", "fedavg", "alie"): 0.3,
           ("dirichlet", "fedavg", "ipm"): 0.5, ("dirichlet", "median", "none"): 0.8,
           ("dirichlet", "median", "alie"): 0.6, ("dirichlet", "median", "ipm"): 0.79}
    for c in byzantine_configs(cells):
        store = RunStore(run_dir_for(c), c)
        store.start()
        for rnd in (0, 1):
            store.log_round(rnd, {"accuracy": acc[(c.partition, c.strategy, c.attack)], "ece": 0.1, "sece": 0.0,
                                  "brier": 0.2, "nll": 0.3})
        store.finish()
    md = byzantine_report(cells, tmp_path / "out")
    assert "| strategy | IID, f = 1 | α = 0.5, f = 1 |" in md
    assert "| fedavg | 60.0 (−30.0, ipm:eps=10) | 30.0 (−55.0, alie) |" in md, md
    assert "| median | 86.0 (−2.0, alie) | 60.0 (−20.0, alie) |" in md, md
    assert md.index("worst case per rule and table") < md.index("accuracy (%), cross-silo")
    from fedcal.reports.byzantine import _change

    assert (_change(-0.18), _change(0.004), _change(-0.0001)) == ("−18.0", "+0.4", "0.0")  # an attack can help


def test_a_store_still_filling_gives_a_table_with_the_unrun_rule_blank_and_incomplete(tmp_path):
    """The table of a store whose runs are still going: a rule with no finished run yet is a blank
    row marked incomplete (it once failed the whole table with a KeyError), the finished rule's cells
    are as run."""
    import shutil

    from fedcal.reports.byzantine import byzantine_report
    from fedcal.results import run_dir_for
    from fedcal.studies.byzantine import byzantine_configs

    cells = _finished_cells(tmp_path, ["fedavg", "median"], ["ipm"], [0],
                            accuracy=lambda c: 0.9 if c.attack == "none" else 0.7)
    for c in byzantine_configs(cells):
        if c.strategy == "median":
            shutil.rmtree(run_dir_for(c))
    md = byzantine_report(cells, tmp_path / "out")
    assert "| fedavg | 90.0 | 70.0 | 70.0 | 20.0 | ipm |" in md, md
    assert "| median |  |  |  |  | incomplete (0 of 1 attacks) |" in md, md
