"""Task ``distill`` (RFD-LoRA over Flower) and the LoRA-adapter strategies.

Every Flower run here uses the in-process engine, the synthetic toy corpus (no files needed) and a
test-sized backbone (hidden 16, one layer, 10 MLM steps, cached under tmp via FEDCAL_CACHE_DIR), so
a round takes a fraction of a second on one CPU thread."""

from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("transformers")

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedcal.cli import main as cli_main
from fedcal.config import ConfigError, RunConfig
from fedcal.results import config_hash, hashed_keys, run_dir_for
from fedcal.strategies.lora import STACKED_A, STACKED_B
from fedcal.strategies.lora_baselines import FedIT, FFALoRA, FlexLoRA, FLoRA
from tests.strategy_harness import FakeGrid

TINY = {"task": "distill", "engine": "inprocess", "device": "cpu", "num-clients": 3, "dst-corpus": "synthetic",
        "dst-rounds": 2, "dst-ranks": "2,4,8", "dst-groups": 3, "dst-backdoor-ratio": 0.3, "dst-bb-hidden": 16,
        "dst-bb-layers": 1, "dst-bb-heads": 2, "dst-bb-intermediate": 32, "dst-bb-vocab": 120, "dst-bb-steps": 10,
        "dst-max-length": 16, "batch-size": 16, "dst-distill-steps": 3, "dst-student-rank": 4, "dst-client-lr": 5e-3,
        # the small local encoder (the default is the MiniLM wheel's), with the adapter it needs
        "dst-backbone": "", "dst-lora-targets": "query,value,word_embeddings"}


pytestmark = pytest.mark.usefixtures("one_thread_and_tmp_cache")


def tiny(tmp_path, **overrides) -> RunConfig:
    return RunConfig.from_flower({**TINY, "output-dir": str(tmp_path / "runs"), **overrides})


def metrics_of(run_dir) -> pd.DataFrame:
    df = pd.read_csv(run_dir / "metrics.csv")
    return df.pivot_table(index="round", columns="metric", values="value")


# ------------------------------------------------------------------------------ end to end
def test_texts_are_tokenised_and_their_frozen_layers_computed_once_not_every_round(tmp_path, monkeypatch):
    """With LoRA on the top layer (dst-lora-layers=1), a run tokenises each of its text sets once
    however many rounds it has, and a second run on the same machine (other rounds, other client
    shards of the same texts, a new process's empty memory) computes no text's lower layers again:
    the per-text cache serves them."""
    from fedcal.app.engine import simulate
    from fedcal.distill import run_data
    from fedcal.text import frozen

    encoded, computed = [], []
    real_encode, real_prefix = run_data._encode_batch, frozen.prefix_features
    monkeypatch.setattr(run_data, "_encode_batch", lambda *a, **k: encoded.append(1) or real_encode(*a, **k))
    monkeypatch.setattr(frozen, "prefix_features",
                        lambda p, ids, *a, **k: computed.append(len(ids)) or real_prefix(p, ids, *a, **k))

    def run(rounds: int, clients: int) -> tuple[int, int]:
        for cache in (run_data._DATA_CACHE, run_data._BATCH_CACHE, frozen._SEGMENTS):
            cache.clear()
        encoded.clear()
        computed.clear()
        simulate(tiny(tmp_path, **{"dst-rounds": rounds, "num-clients": clients, "dst-groups": 2,
                                   "dst-backdoor-ratio": 0.0, "dst-bb-layers": 2, "dst-lora-layers": 1,
                                   "dst-lora-targets": "query,value", "output-dir": str(tmp_path / f"r{rounds}")}))
        return len(encoded), sum(computed)

    once, cold = run(1, clients=3)
    thrice, warm = run(3, clients=3)
    assert once == thrice > 0  # the anchors, test sets and each client's shard: once per run, not per round
    assert cold > 0 and warm == 0
    _, reshuffled = run(2, clients=2)  # the same private texts cut into other shards
    assert reshuffled == 0


def test_rfd_end_to_end_finishes_and_clients_keep_their_adapter_across_rounds(tmp_path, monkeypatch):
    """3 clients of ranks 2, 4, 8 (one a backdoor client), 2 rounds: metrics every round, DONE,
    model.pt; the adapter a client starts round 2 from is the one it ended round 1 with."""
    import fedcal.distill.run_data as setup
    import fedcal.tasks.distill as task
    from fedcal.app.engine import simulate
    from fedcal.distill.clients import adapter_state

    seen = []  # (rank, round index of that client, state before, state after)
    real = task.local_train

    def watch(model, *args, **kwargs):
        before = adapter_state(model)
        out = real(model, *args, **kwargs)
        rank = next(v for k, v in before.items() if ".lora_A." in k).shape[0]
        seen.append((rank, before, adapter_state(model)))
        return out

    monkeypatch.setattr(task, "local_train", watch)
    cfg = tiny(tmp_path)
    assert cfg.num_backdoor_clients == 1 and len(setup.backdoor_clients(setup.DistillRunSpec.from_config(cfg))) == 1
    run_dir = simulate(cfg, progress=False)
    assert (run_dir / "DONE").read_text() == config_hash(cfg) and (run_dir / "model.pt").exists()
    m = metrics_of(run_dir)
    assert list(m.index) == [0, 1, 2]
    for k in ("ca", "ra", "asr"):
        assert m[k].notna().all() and m[k].between(0, 1).all()
    assert (m.loc[[1, 2], "replies_accepted"] == 3).all() and (m.loc[[1, 2], "round_kept"] == 0).all()
    # rfd uploads anchor logits only: the same measured bytes whatever the rank
    anchors = len(setup.distill_data(setup.DistillRunSpec.from_config(cfg)).anchors)
    assert m.loc[1, "upload_bytes_r2"] == m.loc[1, "upload_bytes_r8"] >= anchors * 2 * 4
    assert pd.read_csv(run_dir / "rejections.csv").empty
    by_rank = {}
    for rank, before, after in seen:
        by_rank.setdefault(rank, []).append((before, after))
    assert sorted(by_rank) == [2, 4, 8] and all(len(v) == 2 for v in by_rank.values())
    for rank, ((start1, end1), (start2, _)) in by_rank.items():
        assert start2.keys() == end1.keys()
        assert all(torch.equal(start2[k], end1[k]) for k in end1), f"rank {rank}: round 2 did not resume round 1"
        assert not all(torch.equal(start1[k], end1[k]) for k in end1), f"rank {rank}: round 1 trained nothing"


@pytest.mark.parametrize("method", ["fedit", "ffa", "flora", "flexlora"])
def test_each_baseline_runs_end_to_end(tmp_path, method):
    from fedcal.app.engine import simulate

    ranks = "4" if method in ("fedit", "ffa") else "2,4,8"
    run_dir = simulate(tiny(tmp_path, dst_method=method, dst_ranks=ranks), progress=False)
    m = metrics_of(run_dir)
    assert (run_dir / "DONE").exists() and (m.loc[[1, 2], "replies_accepted"] == 3).all()
    assert m["ca"].notna().all() and (m.loc[[1, 2], "round_kept"] == 0).all()
    bytes_r = [c for c in m.columns if c.startswith("upload_bytes_r")]
    assert bytes_r and all(m.loc[2, c] > 0 for c in bytes_r)
    if method != "ffa":  # A and B of rank r: more bytes for a larger rank
        sizes = [m.loc[2, f"upload_bytes_r{r}"] for r in sorted(int(c.removeprefix("upload_bytes_r")) for c in bytes_r)]
        assert sizes == sorted(sizes)


def _corrupting_app(corrupt):
    """A ClientApp answering the handshake and the distill round, whose replies ``corrupt``
    (partition id, round, reply) may alter."""
    from flwr.clientapp import ClientApp

    from fedcal.tasks.distill import distill_round
    from fedcal.tasks.nodes import client_id, identity, message_config

    app = ClientApp()
    app.query("identity")(identity)

    @app.train("distill")
    def handler(msg, context):
        reply = distill_round(msg, context)
        corrupt(client_id(context), message_config(msg, context)[1], reply)
        return reply

    return app


def _run(cfg, client_app, node_configs=None):
    from fedcal.app.flower_private import SUPERLINK_NODE_ID, TaskIdentity
    from fedcal.app.inprocess import InProcessGrid
    from fedcal.tasks.distill import run_distill

    grid = InProcessGrid(client_app, cfg.num_clients, seed=cfg.seed)
    for ctx in grid.contexts.values():
        ctx.node_config.update((node_configs or {}).get(int(ctx.node_config["partition-id"]), {}))
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = grid.run.run_id, 1, SUPERLINK_NODE_ID
    return run_distill(grid, cfg)


def test_bad_replies_are_dropped_naming_the_node_and_too_few_keep_the_student(tmp_path, monkeypatch):
    """Round 1: partition 1 sends NaN logits, 2 logits for another anchor set, 3 a wrong shape:
    each dropped with its reason in rejections.csv; one valid reply < dst-min-replies = 2, so the
    student is kept (no distillation step). Round 2 is clean and distils."""
    def corrupt(part, rnd, reply):
        if rnd != 1:
            return
        z = torch.from_numpy(reply.content["logits"]["z"].numpy().copy())
        if part == 1:
            reply.content["logits"] = ArrayRecord({"z": torch.full_like(z, float("nan"))})
        elif part == 2:
            reply.content["anchor"] = ConfigRecord({"anchor-set": "0123456789abcdef"})
        elif part == 3:
            reply.content["logits"] = ArrayRecord({"z": z[:, :1].contiguous()})

    from fedcal.distill import student

    steps = []

    real_step = student.distill_step

    def counted(*args, **kwargs):
        steps.append(1)
        return real_step(*args, **kwargs)

    monkeypatch.setattr(student, "distill_step", counted)
    cfg = tiny(tmp_path, num_clients=4, dst_ranks="2,4", dst_min_replies=2, dst_groups=2)
    rows = _run(cfg, _corrupting_app(corrupt))
    run_dir = run_dir_for(cfg)
    rej = pd.read_csv(run_dir / "rejections.csv")
    assert rej["round"].tolist() == [1, 1, 1] and rej["partition_id"].tolist() == [1, 2, 3]
    reasons = dict(zip(rej["partition_id"], rej["reason"]))
    assert "NaN or Inf" in reasons[1] and "another anchor set" in reasons[2] and "shape (" in reasons[3]
    m = metrics_of(run_dir)
    assert m.loc[1, "round_kept"] == 1 and m.loc[1, "replies_accepted"] == 1 and m.loc[1, "replies_rejected"] == 3
    assert m.loc[2, "round_kept"] == 0 and m.loc[2, "replies_accepted"] == 4
    assert len(steps) == 1, "the student took a distillation step in a round with too few valid replies"
    assert (run_dir / "DONE").exists() and len(rows) == 3


def test_a_rank_outside_the_allowed_set_leaves_that_node_out_not_the_run(tmp_path):
    """A node whose own node config gives a rank outside dst-ranks answers every round with an error
    reply naming it: that node is dropped with the reason, every round, and the run finishes on the
    others. An error reply is a client's text: it never stops the run or blames a run-config key."""
    from fedcal.app.client import build_client_app

    cfg = tiny(tmp_path)
    rows = _run(cfg, build_client_app(), node_configs={1: {"lora-rank": 3}})
    run_dir = run_dir_for(cfg)
    assert (run_dir / "DONE").exists() and len(rows) == 3
    rej = pd.read_csv(run_dir / "rejections.csv")
    assert rej["round"].tolist() == [1, 2] and rej["partition_id"].tolist() == [1, 1]
    assert rej["reason"].str.contains(r"error reply .*LoRA rank 3 is not in the allowed set \[2, 4, 8\]").all()
    m = metrics_of(run_dir)
    assert (m.loc[[1, 2], "replies_accepted"] == 2).all() and (m.loc[[1, 2], "round_kept"] == 0).all()


def _claiming(rank_value):
    """A corruption giving partition 1's reply a ``rank`` metric of ``rank_value`` (a string travels
    in a ConfigRecord, the only record that holds one)."""
    def corrupt(part, rnd, reply):
        if part != 1:
            return
        old = dict(reply.content["metrics"])
        if isinstance(rank_value, str):
            reply.content["metrics"] = ConfigRecord({**{k: v for k, v in old.items()}, "rank": rank_value})
        else:
            reply.content["metrics"] = MetricRecord({**old, "rank": rank_value})
    return corrupt


@pytest.mark.parametrize("rank_value", [float("inf"), float("nan"), "4", 99999, 2.5, -4])
def test_a_bad_rank_claim_is_a_bad_reply_not_a_crash_or_a_metric(tmp_path, rank_value):
    """Partition 1 (rank 4) claims another rank in its metrics: its reply is dropped naming 'rank'
    (before: inf and NaN crashed the server, a string stopped it, 99999 became a metric
    upload_bytes_r99999 and 2.5 was taken as rank 2); the other two distil and the run finishes."""
    cfg = tiny(tmp_path, dst_rounds=1)
    _run(cfg, _corrupting_app(_claiming(rank_value)))
    run_dir = run_dir_for(cfg)
    assert (run_dir / "DONE").exists()
    rej = pd.read_csv(run_dir / "rejections.csv")
    assert rej["partition_id"].tolist() == [1] and "'rank'" in rej["reason"][0]
    m = metrics_of(run_dir)
    assert m.loc[1, "replies_accepted"] == 2 and m.loc[1, "round_kept"] == 0
    assert sorted(c for c in m.columns if c.startswith("upload_bytes_r")) == ["upload_bytes_r2", "upload_bytes_r8"]


def test_claimed_rank_by_hand():
    from fedcal.tasks.distill_replies import claimed_rank

    def content(rec):
        return RecordDict({"metrics": rec})

    assert claimed_rank(content(MetricRecord({"rank": 4})), (2, 4)) == (None, 4)
    assert claimed_rank(content(MetricRecord({"rank": 4.0})), (2, 4)) == (None, 4)
    for bad in (3, 4.5, float("inf"), float("nan"), -4, [4]):
        assert "invalid 'rank'" in claimed_rank(content(MetricRecord({"rank": bad})), (2, 4))[0], bad
    assert "invalid 'rank'" in claimed_rank(content(ConfigRecord({"rank": "4"})), (2, 4))[0]
    assert "no 'rank'" in claimed_rank(content(MetricRecord({"num-examples": 3})), (2, 4))[0]
    assert "no 'rank'" in claimed_rank(RecordDict(), (2, 4))[0]


def test_a_flora_client_uploading_a_1e20_adapter_is_dropped_and_the_model_stays_finite(tmp_path):
    """FLoRA merges Σ p_k (α/r_k) B_k A_k into every base weight: one client's finite 1e20 adapter
    (update ~1e41) made the global model Inf — evaluated as CA 0.5, ASR 1.0 and marked DONE. The
    reply is dropped naming the overflow; the model stays finite and is measured."""
    def corrupt(part, rnd, reply):
        if part == 1 and rnd == 1:
            state = reply.content["arrays"]
            reply.content["arrays"] = ArrayRecord(OrderedDict(
                (k, torch.full(state[k].shape, 1e20) if ".lora_" in k else torch.from_numpy(state[k].numpy().copy()))
                for k in state))

    cfg = tiny(tmp_path, dst_method="flora")
    _run(cfg, _corrupting_app(corrupt))
    run_dir = run_dir_for(cfg)
    rej = pd.read_csv(run_dir / "rejections.csv")
    assert rej["round"].tolist() == [1] and rej["partition_id"].tolist() == [1]
    assert "float32" in rej["reason"][0]
    m = metrics_of(run_dir)
    assert (run_dir / "DONE").exists() and m[["ca", "ra", "asr"]].notna().all().all()
    assert (m.loc[[1, 2], "round_kept"] == 0).all()
    assert all(bool(torch.isfinite(v).all()) for v in torch.load(run_dir / "model.pt").values())


@pytest.mark.parametrize("method", ["fedit", pytest.param("ffa", marks=pytest.mark.slow),
                                    pytest.param("flora", marks=pytest.mark.slow),
                                    pytest.param("flexlora", marks=pytest.mark.slow)])
def test_a_client_uploading_a_3e38_head_is_dropped_and_the_run_goes_on(tmp_path, method):
    """Honest adapters and a finite 3e38 classifier head (peft's modules_to_save): the head was never
    range-checked, so it was averaged into the global model, every reply of the next round was NaN
    and the run ended RunFailed. The reply is dropped naming the head (in rejections.csv like any
    rejection), round 2 accepts every client and the run finishes with a finite model."""
    def corrupt(part, rnd, reply):
        if part == 1 and rnd == 1:
            state = reply.content["arrays"]
            reply.content["arrays"] = ArrayRecord(OrderedDict(
                (k, torch.full(state[k].shape, 3e38) if "modules_to_save" in k
                 else torch.from_numpy(state[k].numpy().copy())) for k in state))

    cfg = tiny(tmp_path, dst_method=method, dst_ranks="4" if method in ("fedit", "ffa") else "2,4,8")
    _run(cfg, _corrupting_app(corrupt))
    run_dir = run_dir_for(cfg)
    rej = pd.read_csv(run_dir / "rejections.csv")
    assert rej["round"].tolist() == [1] and rej["partition_id"].tolist() == [1]
    assert "head tensor" in rej["reason"][0] and "modules_to_save" in rej["reason"][0]
    m = metrics_of(run_dir)
    assert (run_dir / "DONE").exists() and m[["ca", "ra", "asr"]].notna().all().all()
    assert m.loc[1, "replies_accepted"] == 2 and m.loc[2, "replies_accepted"] == 3
    assert (m.loc[[1, 2], "round_kept"] == 0).all()
    assert all(bool(torch.isfinite(v).all()) for v in torch.load(run_dir / "model.pt").values())


def test_non_finite_evaluation_is_nan_and_a_failed_run_never_a_number(tmp_path, monkeypatch):
    """The student's logits turn NaN before the last evaluation (its head poisoned here): CA, RA
    and ASR of that round are NaN, not the CA 0.5 / ASR 1.0 an all-NaN model's argmax gives, and
    the run fails without DONE (its rows kept)."""
    import fedcal.tasks.distill as task
    from fedcal.results import RunFailed

    real = task.evaluate_backdoor
    calls = []

    def poisoned(model, data, batch_size):
        calls.append(1)
        if len(calls) == 3:  # round 2, the last
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if "classifier" in name:
                        p.fill_(float("nan"))
        return real(model, data, batch_size=batch_size)

    monkeypatch.setattr(task, "evaluate_backdoor", poisoned)
    cfg = tiny(tmp_path)
    with pytest.raises(RunFailed, match="not finite"):
        _run(cfg, _corrupting_app(lambda *a: None))
    run_dir = run_dir_for(cfg)
    assert not (run_dir / "DONE").exists()
    m = pd.read_csv(run_dir / "metrics.csv")
    last = m[m["round"] == 2].set_index("metric")["value"]
    assert np.isnan(last[["ca", "ra", "asr"]]).all()
    first = m[m["round"] == 1].set_index("metric")["value"]
    assert np.isfinite(first[["ca", "ra", "asr"]]).all()


def test_evaluate_backdoor_of_a_nan_model_is_nan():
    """The core: predict refuses non-finite logits (FloatingPointError), evaluate_backdoor reports NaN."""
    from types import SimpleNamespace

    from fedcal.distill.run_data import evaluate_backdoor, is_finite_evaluation
    from fedcal.distill.student import predict

    class Nan(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.full((2,), float("nan")))

        def forward(self, input_ids, attention_mask):
            return SimpleNamespace(logits=self.w.expand(input_ids.shape[0], 2))

    ids, mask = torch.ones(3, 4, dtype=torch.long), torch.ones(3, 4, dtype=torch.long)
    with pytest.raises(FloatingPointError):
        predict(Nan(), ids, mask)
    data = SimpleNamespace(test_batch={"input_ids": ids, "attention_mask": mask}, test_labels=np.array([0, 1, 1]),
                           triggered=SimpleNamespace(labels=np.array([1])), triggered_batch=None)
    out = evaluate_backdoor(Nan(), data)
    assert sorted(out) == ["asr", "ca", "flip", "ra"] and all(np.isnan(v) for v in out.values())
    assert not is_finite_evaluation(out) and is_finite_evaluation({"ca": 0.5})


def test_the_logit_attack_scales_or_flips_before_clipping(tmp_path):
    """A backdoor client under the logit-energy attack uploads -a·z clipped to [-c, c]."""
    import fedcal.distill.run_data as setup

    got = {}

    def keep(part, rnd, reply):
        got[part] = torch.from_numpy(reply.content["logits"]["z"].numpy().copy())

    cfg = tiny(tmp_path, dst_rounds=1, dst_logit_attack="flip", dst_attack_factor=1e6, dst_clip=3.0)
    _run(cfg, _corrupting_app(keep))
    (bad,) = setup.backdoor_clients(setup.DistillRunSpec.from_config(cfg))
    assert set(got[bad].abs().flatten().tolist()) <= {3.0}  # |a z| >> c: every entry at the clip bound
    assert all(got[k].abs().max() < 3.0 for k in got if k != bad)


def test_check_logit_reply_names_each_problem():
    from fedcal.distill.run_data import anchor_set_id
    from fedcal.tasks.distill_replies import check_logit_reply

    aid = anchor_set_id(np.array([3, 1, 4]))
    assert aid != anchor_set_id(np.array([3, 1, 5])) and len(aid) == 16

    def content(z, anchor=aid):
        return RecordDict({"logits": ArrayRecord({"z": z}), "anchor": ConfigRecord({"anchor-set": anchor})})

    assert check_logit_reply(content(torch.zeros(3, 2)), aid, (3, 2))[0] is None
    assert "NaN" in check_logit_reply(content(torch.tensor([[0.0, float("inf")]] * 3)), aid, (3, 2))[0]
    assert "shape (2, 2)" in check_logit_reply(content(torch.zeros(2, 2)), aid, (3, 2))[0]
    assert "another anchor set" in check_logit_reply(content(torch.zeros(3, 2), "x"), aid, (3, 2))[0]
    assert "no logits" in check_logit_reply(RecordDict({"anchor": ConfigRecord({"anchor-set": aid})}), aid, (3, 2))[0]
    # finite in float64, Inf in the float32 the server computes in
    assert "float32's range" in check_logit_reply(content(torch.full((3, 2), 1e300, dtype=torch.float64)), aid, (3, 2))[0]
    assert check_logit_reply(content(torch.full((3, 2), 3e38, dtype=torch.float64)), aid, (3, 2))[0] is None
    assert "not floating point" in check_logit_reply(content(torch.zeros(3, 2, dtype=torch.int64)), aid, (3, 2))[0]
    assert "another anchor set" in check_logit_reply(content(torch.zeros(3, 2), 7), aid, (3, 2))[0]
    assert "another anchor set" in check_logit_reply(RecordDict({"logits": ArrayRecord({"z": torch.zeros(3, 2)})}),
                                                     aid, (3, 2))[0]


# ------------------------------------------------------------------------ the LoRA strategies
L = "base_model.model.roberta.encoder.layer.0.attention.self.query"
A_KEY, B_KEY = f"{L}.lora_A.default.weight", f"{L}.lora_B.default.weight"
H_KEY = "base_model.model.classifier.modules_to_save.default.out_proj.weight"
D_IN, D_OUT, ALPHA = 6, 5, 8.0


def adapter(rank: int, seed: int, a=None) -> OrderedDict:
    g = torch.Generator().manual_seed(seed)
    return OrderedDict([(A_KEY, torch.randn(rank, D_IN, generator=g) if a is None else a.clone()),
                        (B_KEY, torch.randn(D_OUT, rank, generator=g)), (H_KEY, torch.randn(2, D_OUT, generator=g))])


def reply(state, n, drop=()):
    return RecordDict({"arrays": ArrayRecord(OrderedDict((k, v) for k, v in state.items() if k not in drop)),
                       "metrics": MetricRecord({"num-examples": n})})


def one_round(strategy, arrays, answers: dict):
    """Configure, answer with ``answers[node]`` (a RecordDict or None = error), aggregate."""
    grid = FakeGrid(list(answers), lambda node, content: answers[node])
    replies = grid.send_and_receive(strategy.configure_train(1, arrays, ConfigRecord(), grid))
    return strategy.aggregate_train(1, replies)


def state_of(record):
    return {k: torch.from_numpy(record[k].numpy().copy()) for k in record}


def test_fedit_averages_a_and_b_separately_and_drops_another_rank():
    s1, s2, wrong = adapter(4, 1), adapter(4, 2), adapter(2, 3)
    strategy = FedIT(alpha=ALPHA)
    new, _ = one_round(strategy, ArrayRecord(adapter(4, 0)), {11: reply(s1, 1), 12: reply(s2, 3), 13: reply(wrong, 5)})
    out = state_of(new)
    for k in (A_KEY, B_KEY, H_KEY):
        torch.testing.assert_close(out[k], (1 * s1[k] + 3 * s2[k]) / 4)
    (node, reason), = strategy.replies[1].rejections
    assert node == 13 and "shape" in reason and "another rank" in reason


def test_ffa_keeps_the_frozen_a_averages_b_and_refuses_an_uploaded_a():
    glob = adapter(4, 0)
    s1, s2 = adapter(4, 1, a=glob[A_KEY]), adapter(4, 2, a=glob[A_KEY])
    strategy = FFALoRA(alpha=ALPHA)
    new, _ = one_round(strategy, ArrayRecord(glob), {1: reply(s1, 2, drop=(A_KEY,)), 2: reply(s2, 2, drop=(A_KEY,)),
                                                      3: reply(adapter(4, 9), 2)})
    out = state_of(new)
    torch.testing.assert_close(out[A_KEY], glob[A_KEY])
    torch.testing.assert_close(out[B_KEY], (s1[B_KEY] + s2[B_KEY]) / 2)
    torch.testing.assert_close(out[H_KEY], (s1[H_KEY] + s2[H_KEY]) / 2)
    assert [n for n, _ in strategy.replies[1].rejections] == [3]


def test_flora_stacks_with_folded_scales_and_accumulates_the_merged_update():
    s1, s2 = adapter(2, 1), adapter(8, 2)
    strategy = FLoRA(alpha=ALPHA)
    new, _ = one_round(strategy, ArrayRecord(), {1: reply(s1, 1), 2: reply(s2, 3)})
    out = state_of(new)
    p = (0.25, 0.75)
    torch.testing.assert_close(out[L + STACKED_A], torch.cat([s1[A_KEY], s2[A_KEY]]))
    torch.testing.assert_close(out[L + STACKED_B], torch.cat([p[0] * ALPHA / 2 * s1[B_KEY],
                                                                p[1] * ALPHA / 8 * s2[B_KEY]], dim=1))
    want = p[0] * ALPHA / 2 * s1[B_KEY] @ s1[A_KEY] + p[1] * ALPHA / 8 * s2[B_KEY] @ s2[A_KEY]
    torch.testing.assert_close(strategy.merged[L], want)
    torch.testing.assert_close(out[H_KEY], p[0] * s1[H_KEY] + p[1] * s2[H_KEY])


def test_flexlora_gives_each_node_the_truncated_svd_at_its_rank():
    s1, s2 = adapter(2, 1), adapter(4, 2)
    strategy = FlexLoRA(alpha=ALPHA, ranks=(2, 4))
    answers = {1: reply(s1, 1), 2: reply(s2, 1)}
    new, _ = one_round(strategy, ArrayRecord(), answers)
    W = 0.5 * ALPHA / 2 * s1[B_KEY] @ s1[A_KEY] + 0.5 * ALPHA / 4 * s2[B_KEY] @ s2[A_KEY]
    U, S, Vh = torch.linalg.svd(W, full_matrices=False)
    full = state_of(new)  # the global record: rank min(d_out, d_in) = 5, the average itself
    torch.testing.assert_close(ALPHA / 5 * full[B_KEY] @ full[A_KEY], W, atol=1e-5, rtol=1e-5)
    grid = FakeGrid([1, 2], lambda node, content: None)
    sent = {m.metadata.dst_node_id: state_of(m.content["arrays"])
            for m in strategy.configure_train(2, new, ConfigRecord(), grid)}
    for node, r in ((1, 2), (2, 4)):
        got = sent[node]
        assert got[A_KEY].shape == (r, D_IN) and got[B_KEY].shape == (D_OUT, r)
        best = U[:, :r] @ torch.diag(S[:r]) @ Vh[:r]
        torch.testing.assert_close(ALPHA / r * got[B_KEY] @ got[A_KEY], best, atol=1e-5, rtol=1e-5)


def test_lora_strategies_drop_nan_and_error_replies_and_keep_the_global_with_too_few():
    s1 = adapter(4, 1)
    bad = adapter(4, 2)
    bad[B_KEY][0, 0] = float("nan")
    strategy = FedIT(alpha=ALPHA, min_replies=2, node_label=lambda n: n * 10)
    new, _ = one_round(strategy, ArrayRecord(adapter(4, 0)), {1: reply(s1, 1), 2: reply(bad, 1), 3: None})
    assert new is None and not strategy.replies[1].aggregated
    reasons = dict(strategy.replies[1].rejections)
    assert "NaN or Inf" in reasons[2] and "error reply" in reasons[3]
    assert strategy.who(2) == "node 2 (partition 20)"


# ------------------------------------------------------------------------------ config and CLI
def test_distill_keys_hash_with_the_common_group_only():
    keys = hashed_keys("distill")
    assert {"task", "seed", "dst_method", "dst_ranks"} <= keys and not keys & {"tau", "inf_f", "krum_f", "device"}
    cfg = RunConfig.from_flower(TINY)
    assert config_hash(cfg) != config_hash(cfg.replace(dst_groups=4))
    assert config_hash(cfg) == config_hash(cfg.replace(tau=3.0, device="cuda"))
    assert run_dir_for(cfg).name.startswith("distill-synthetic-rfd-iid-bd0.3-s0-")


@pytest.mark.parametrize("overrides,key", [
    ({"dst-method": "fedit", "dst-ranks": "2,4"}, "dst-ranks"),
    ({"dst-ranks": "2,x"}, "dst-ranks"),
    ({"dst-ranks": "0,4"}, "dst-ranks"),
    ({"dst-target": 2}, "dst-target"),
    ({"dst-corpus": "tweets", "dst-target": 2}, "dst-target"),  # two authors
    ({"dst-method": "fedavg"}, "dst-method"),
    ({"dst-anchor-frac": 1.0}, "dst-anchor-frac"),
    ({"dst-bb-hidden": 30, "dst-bb-heads": 4}, "dst-bb-heads"),
    ({"dst-trigger": "two words"}, "dst-trigger"),
    # values that passed validation and failed later (issue 30): bounds that mean something
    ({"dst-clip": 1e308}, "dst-clip"),  # not even a float32: every client's clamp failed
    ({"dst-t0": 1e-300}, "dst-t0"),  # z / T overflowed: the server crashed on the student's NaN logits
    ({"dst-kappa": 1e308}, "dst-kappa"),  # κ · 0 in float32 is NaN: the same crash
    ({"dst-lambda": 1e300}, "dst-lambda"),
    ({"dst-min-replies": 51}, "dst-min-replies"),  # more than num-clients (50): every round kept, then RunFailed
])
def test_config_errors_are_one_line_naming_the_key(overrides, key, capsys):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        RunConfig.from_flower({"task": "distill", **overrides})
    assert cli_main(["distill", *[f"{k}={v}" if not isinstance(v, str) else f'{k}="{v}"'
                                  for k, v in overrides.items()], "--methods", "fedit" if "fedit" in str(overrides)
                     else "rfd", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedcal: error:") and f"'{key}'" in err[0]


def test_the_one_rank_methods_refuse_a_mix_of_ranks_the_others_take_it():
    """FedIT, FFA-LoRA and LoRA-FAIR average A and B entry-wise (their method's ``one_rank``): several
    ranks are a config error naming dst-ranks; RFD-LoRA, FLoRA and FlexLoRA take any mix."""
    from fedcal import catalogue

    assert [m for m in catalogue.names("lora-method") if catalogue.load("lora-method", m).one_rank] == [
        "fedit", "ffa", "lorafair"]
    for method in ("fedit", "ffa", "lorafair"):
        with pytest.raises(ConfigError, match=f"'dst-ranks' must name one rank for dst-method={method}"):
            RunConfig.from_flower({"task": "distill", "dst-method": method, "dst-ranks": "2,4"})
        assert RunConfig.from_flower({"task": "distill", "dst-method": method, "dst-ranks": "4,4"}).distill_ranks == (4, 4)
    for method in ("rfd", "flora", "flexlora"):
        assert RunConfig.from_flower({"task": "distill", "dst-method": method, "dst-ranks": "2,4"}).dst_method == method


def test_the_bounds_of_the_distillation_keys_give_a_finite_run(tmp_path):
    """At the edges of their ranges — the widest clip, the coldest and the hottest CAT temperature
    (T0 · (1 + κ (1 − τ)) with τ = 0), the heaviest moment term — and a scaling attacker pushing
    its logits to the clip, a run is still a computation: finite loss and metrics, DONE."""
    from fedcal.app.engine import simulate
    from fedcal.config import setting_of

    edge = {"dst_clip": setting_of("dst-clip").le, "dst_t0": setting_of("dst-t0").ge,
            "dst_kappa": setting_of("dst-kappa").le, "dst_lambda": setting_of("dst-lambda").le}
    for t0 in (edge["dst_t0"], setting_of("dst-t0").le):
        cfg = tiny(tmp_path / str(t0), **{**edge, "dst_t0": t0}, dst_tau=0.0, dst_rounds=1,
                   dst_logit_attack="scale", dst_attack_factor=1e6)
        run_dir = simulate(cfg, progress=False)
        m = metrics_of(run_dir)
        assert (run_dir / "DONE").exists() and np.isfinite(m.loc[1, "distill_loss"]) and m["ca"].notna().all()


@pytest.mark.parametrize("overrides,key", [
    ({"dst-anchor-frac": 1e-9}, "dst-anchor-frac"),  # 0 anchors of 400 texts
    ({"dst-train-size": 1}, "dst-train-size"),  # one text: no anchor
    ({"dst-test-size": 1}, "dst-test-size"),  # one test text: a class missing, the ASR undefined
    ({"num-clients": 500}, "num-clients"),  # 500 clients, 360 private texts
])
def test_data_sizes_that_leave_nothing_fail_before_the_run_starts(tmp_path, overrides, key, capsys):
    """Sizes the config alone cannot judge (they depend on the corpus) are checked once the corpus
    is loaded, before the backbone is built and before the run directory exists: one line naming
    the key, through `fedcal run` too."""
    import fedcal.distill.run_data as setup

    built = []
    real = setup.backbone_of
    setup_backbone = lambda cfg: built.append(cfg) or real(cfg)  # noqa: E731
    cfg = tiny(tmp_path, **overrides)
    try:
        setup.backbone_of = setup_backbone
        with pytest.raises(ConfigError, match=f"^run-config key '{key}'"):
            setup.distill_data(setup.DistillRunSpec.from_config(cfg))
    finally:
        setup.backbone_of = real
    assert not built
    argv = ["run", *[f"{k}={v}" if not isinstance(v, str) else f'{k}="{v}"' for k, v in
                     {**TINY, "output-dir": str(tmp_path / "cli"), **overrides}.items()], "--no-progress"]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"'{key}'" in err[0]
    assert not (tmp_path / "cli").exists() or not any((tmp_path / "cli").iterdir())


def test_cli_distill_writes_the_tables_and_resumes(tmp_path, capsys):
    report = tmp_path / "report"
    argv = ["distill", "--methods", "rfd,fedit", "--rhos", "0.3", "--partitions", "iid", "--seeds", "0",
            "--aggregators", "mean,mom", "--report", str(report), "--no-progress",
            *[f"{k}={v}" if not isinstance(v, str) else f'{k}="{v}"' for k, v in TINY.items()
              if k not in ("task", "dst-ranks", "dst-rounds")], 'dst-ranks="4"', "dst-rounds=1"]
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "distill: 3 runs" in out
    for name in ("table.md", "table.csv", "ablation.md", "communication.md", "communication.csv", "runs.csv",
                 "rounds.csv", "curves.png"):
        assert (report / name).exists(), name
    table = pd.read_csv(report / "table.csv")
    assert set(table["method"]) == {"RFD-LoRA", "FedIT"} and set(table["aggregator"]) == {"mean", "mom", "–"}
    comm = pd.read_csv(report / "communication.csv")
    assert set(comm["method"]) == {"RFD-LoRA", "FedIT"} and (comm["bytes per client per round"] > 0).all()
    assert "full" in (report / "ablation.md").read_text()
    # resumable: every run is finished, nothing runs again; `fedcal report` reads the same runs
    assert cli_main(argv) == 0
    runs = sorted(p for p in (report / "runs").iterdir() if p.is_dir())
    assert len(runs) == 3
    assert cli_main(["report", *map(str, runs), "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "table.md").read_text() == (report / "table.md").read_text()


def test_distill_configs_expand_the_ablation_grid():
    from fedcal.studies.distill import distill_configs

    base = RunConfig.from_flower({"task": "distill", "dst-ranks": "4"})
    cells = distill_configs(base, ["rfd", "fedit"], [0.0, 0.3], ["iid"], [0, 1], ["mean", "mom"], [1, 5],
                            ablation=True)
    rfd = [c for c in cells if c.dst_method == "rfd"]
    assert len(rfd) == 2 * 2 * 2 * 2 * 8 and len(cells) - len(rfd) == 2 * 2
    assert {(c.dst_cat, c.dst_mmd, c.dst_dis) for c in rfd} == {(a, b, c) for a in (0, 1) for b in (0, 1)
                                                                 for c in (0, 1)}


# ------------------------------------------------------------------------- server-side replays
SERVER_METRICS = ["ca", "ra", "asr", "distill_loss", "mom_groups", "round_kept"]


def test_a_replay_is_the_run_its_server_setting_would_have_produced(tmp_path):
    """The clients never depend on RFD-LoRA's server, so replaying a run's recorded uploads under
    another server setting gives exactly the live run of that setting; under the run's own setting
    it gives the run back. A client-side change is refused, naming the key."""
    from fedcal.app.engine import simulate
    from fedcal.distill.replay import REPLAY_FILE, find_source, load_uploads, replay

    source = simulate(tiny(tmp_path), progress=False)
    uploads = load_uploads(source)
    assert sorted(uploads) == [1, 2] and all(len(u) == 3 for u in uploads.values())
    variant = dict(dst_aggregator="mean", dst_cat=False, dst_distill_steps=2)
    live = simulate(tiny(tmp_path / "live", **variant), progress=False)
    cfg = tiny(tmp_path / "replayed", **variant)
    assert find_source(cfg, [live, source]) in (live, source)
    replayed = replay(source, cfg)
    assert json.loads((replayed / REPLAY_FILE).read_text())["replayed_from"] == source.name
    assert (replayed / "DONE").read_text() == config_hash(cfg)
    pd.testing.assert_frame_equal(metrics_of(replayed)[SERVER_METRICS], metrics_of(live)[SERVER_METRICS])
    same = replay(source, tiny(tmp_path / "again"))
    pd.testing.assert_frame_equal(metrics_of(same)[SERVER_METRICS], metrics_of(source)[SERVER_METRICS])
    with pytest.raises(ValueError, match=r"client-side keys \['seed'\]"):
        replay(source, tiny(tmp_path / "other", seed=5))
    assert find_source(tiny(tmp_path, seed=5), [source]) is None


def test_cli_distill_replay_runs_each_client_side_once(tmp_path, capsys):
    """--replay: of the three aggregators of one client side, the base setting (mom) runs through
    Flower and mean / median are replayed on its uploads; a second call has nothing left to do."""
    report = tmp_path / "report"
    argv = ["distill", "--methods", "rfd", "--rhos", "0.3", "--partitions", "iid", "--seeds", "0",
            "--aggregators", "mean,median,mom", "--replay", "--report", str(report), "--no-progress",
            *[f"{k}={v}" if not isinstance(v, str) else f'{k}="{v}"' for k, v in TINY.items()
              if k not in ("task", "dst-rounds")], "dst-rounds=1"]
    assert cli_main(argv) == 0
    assert "distill: 3 runs (2 replayed on recorded uploads)" in capsys.readouterr().out
    runs = {RunConfig.from_flower(json.loads((p / "config.json").read_text())["config"]).dst_aggregator: p
            for p in (report / "runs").iterdir() if p.is_dir()}
    assert sorted(runs) == ["mean", "median", "mom"]
    assert not (runs["mom"] / "replay.json").exists() and (runs["mom"] / "uploads.npz").exists()
    for agg in ("mean", "median"):
        assert json.loads((runs[agg] / "replay.json").read_text())["replayed_from"] == runs["mom"].name
        assert (runs[agg] / "DONE").exists()
    assert set(pd.read_csv(report / "table.csv")["aggregator"]) == {"mean", "median", "mom"}
    before = {p: (p / "metrics.csv").stat().st_mtime_ns for p in runs.values()}
    assert cli_main(argv) == 0
    assert before == {p: (p / "metrics.csv").stat().st_mtime_ns for p in runs.values()}


def test_an_unloadable_hub_backbone_fails_at_once_naming_dst_backbone(tmp_path, monkeypatch):
    """dst-backbone names a Hub model: checked with one request at most (offline: none) before the
    corpus is split or anything loads, instead of from_pretrained's minute of retries."""
    import fedcal.distill.run_data as setup

    cfg = tiny(tmp_path, dst_backbone="no-such-org/no-such-backbone")
    with pytest.raises(ConfigError, match=r"^run-config key 'dst-backbone': 'no-such-org/no-such-backbone' is not"):
        setup.backbone_of(setup.DistillRunSpec.from_config(cfg))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="'dst-backbone'.*offline"):
        setup.backbone_of(setup.DistillRunSpec.from_config(cfg))
