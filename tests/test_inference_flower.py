"""Federated inference end to end: the one ClientApp and ServerApp running task 'inference'
through a Flower Grid (in-process engine), with a client that answers garbage."""

import pytest
import torch

import pandas as pd

import fedcal.tasks.inference as inference
from fedcal.app.client import app as client_app
from fedcal.app.client import build_client_app
from fedcal.app.inprocess import run_inprocess
from fedcal.app.server import server_app_for
from fedcal.config import RunConfig
from fedcal.inference.evaluate import AGGREGATOR_NAMES
from fedcal.inference.federated import assemble, client_indices, server_split
from fedcal.tasks.inference import query_all


def test_server_split_is_never_given_to_clients():
    labels = torch.randint(0, 10, (1000,)).numpy()
    srv, pool = server_split(labels, 0.1, seed=0)
    assert len(srv) == 100 and not set(srv) & set(pool)
    parts = client_indices(labels, 5, 0.5, 0.1, seed=0)
    assert sorted(int(i) for p in parts for i in p) == sorted(int(i) for i in pool)


def test_assemble_drops_invalid_replies():
    good = torch.full((4, 3), 1 / 3)
    bad_sum = torch.full((4, 3), 0.5)
    neg = good.clone()
    neg[0] = torch.tensor([1.5, -0.5, 0.0])
    p, used, dropped = assemble({0: good, 1: bad_sum, 2: neg, 3: torch.ones(4, 2) / 2, 4: None, 5: good}, 4, 3)
    assert used == [0, 5] and p.shape == (4, 2, 3)
    assert set(dropped) == {1, 2, 3, 4}


CFG = dict(task="inference", dataset="digits", num_clients=5, clients_per_round=5, dirichlet_alpha=0.5, lr=0.1,
           batch_size=32, seed=0, inf_f=1, inf_local_epochs=5, agg_epochs=150, agg_adv_epochs=2, agg_lr=3e-3,
           agg_hidden=32, inf_query_batch=150, inf_pgd_steps=5, inf_amp_curve="1,4")


def _garbage_from_client_4(real):
    def handler(msg, context):  # one client answers with non-probits
        reply = real(msg, context)
        if int(context.node_config["partition-id"]) == 4:
            from flwr.app import ArrayRecord, RecordDict
            from flwr.app import Message as M
            n = len(msg.content["queries"]["x"].numpy())
            return M(content=RecordDict({"probits": ArrayRecord({"p": torch.full((n, 10), float("nan"))})}),
                     reply_to=msg)
        return reply
    return handler


def test_federated_inference_round_trip(monkeypatch, tmp_path):
    """The main ClientApp answers inference queries; a client answering NaN is left out of every
    answer; the run directory holds the tables; a re-run resumes from the saved probits."""
    cfg = RunConfig.from_flower(dict(CFG, output_dir=str(tmp_path)))
    # the handler the inference task's declaration names, swapped
    monkeypatch.setattr(inference, "probits", _garbage_from_client_4(inference.probits))
    garbage_app = build_client_app()  # the one ClientApp, with the task's handler swapped
    sink = []
    run_inprocess(server_app_for(cfg, sink=sink), garbage_app, num_supernodes=5, seed=0)
    (res,) = sink
    acc = res.accuracy.set_index(["aggregator", "attack"])["accuracy"]
    assert set(res.accuracy["aggregator"]) == {a for a in AGGREGATOR_NAMES if not a.endswith("_logit")}  # probits
    assert set(res.accuracy["attack"]) == set(cfg.inference_attacks)
    assert all(n == 4 for n in res.clients_per_answer)  # the garbage client is left out of every answer
    assert 4 in res.dropped and all("probit" in r for r in res.dropped[4])
    assert acc["mean", "none"] > 0.7  # locally trained clients agree on digits
    assert acc["deepset", "none"] > 0.7  # the aggregator learned from the server's held-out split
    assert acc["mean", "sia_whitebox"] < acc["mean", "none"]  # the attack bites the plain mean
    files = {p.name for p in res.run_dir.iterdir()}
    assert {"probits.pt", "accuracy.csv", "curve_f.csv", "curve_amp.csv", "answers.csv", "DONE"} <= files
    curve = pd.read_csv(res.run_dir / "curve_f.csv")
    assert sorted(curve["f_adv"].unique()) == [0, 1]  # 4 valid clients: at most 1 adversary is a minority
    assert sorted(pd.read_csv(res.run_dir / "curve_amp.csv")["amplification"].unique()) == [1.0, 4.0]

    # Interrupted after collecting the probits: the re-run neither trains nor queries the clients.
    (res.run_dir / "DONE").unlink()
    (res.run_dir / "accuracy.csv").unlink()

    def no_clients(*a, **k):
        raise AssertionError("clients were queried again")

    monkeypatch.setattr(inference, "collect_probits", no_clients)
    again = []
    run_inprocess(server_app_for(cfg, sink=again), client_app, num_supernodes=5, seed=0)
    assert again[0].accuracy.equals(res.accuracy)  # same probits, same seeds: the same table

    # Other aggregator settings, same clients: the run copies the probits instead of collecting.
    other = []
    run_inprocess(server_app_for(cfg.replace(agg_epochs=20, inf_attacks="none"), sink=other), client_app,
                  num_supernodes=5, seed=0)
    assert other[0].run_dir != res.run_dir and (other[0].run_dir / "probits.pt").exists()
    assert other[0].accuracy.set_index(["aggregator", "attack"])["accuracy"]["mean", "none"] == acc["mean", "none"]

    # Other attacks, the same aggregator settings: the trained aggregators are loaded, not trained again,
    # and every cell the two runs share is the same
    import fedcal.inference.evaluate as evaluate

    def no_training(*a, **k):
        raise AssertionError("an aggregator was trained again")

    monkeypatch.setattr(evaluate, "train_deepset", no_training)
    monkeypatch.setattr(evaluate, "train_fusion", no_training)
    third = []
    run_inprocess(server_app_for(cfg.replace(inf_attacks="lma,sia_whitebox_raise", inf_f_curve=False, inf_amp_curve=""),
                                 sink=third), client_app, num_supernodes=5, seed=0)
    again_acc = third[0].accuracy.set_index(["aggregator", "attack"])["accuracy"]
    assert all(again_acc[a, "lma"] == acc[a, "lma"] for a in set(res.accuracy["aggregator"]))
    assert (third[0].run_dir / "aggregators.pt").exists()
    # another autoencoder width: the fusions are trained anew, the DeepSet (which does not depend on it) is loaded
    monkeypatch.undo()
    monkeypatch.setattr(evaluate, "train_deepset", no_training)
    fourth = []
    run_inprocess(server_app_for(cfg.replace(inf_attacks="lma", inf_f_curve=False, inf_amp_curve="", agg_latent=8,
                                             inf_aggregators="deepset_tm,copur"), sink=fourth),
                  client_app, num_supernodes=5, seed=0)
    fourth_acc = fourth[0].accuracy.set_index(["aggregator", "attack"])["accuracy"]
    assert fourth_acc["deepset_tm", "lma"] == acc["deepset_tm", "lma"]
    # a run that trains the DeepSet but evaluates DeepSet-TM alone saves the DeepSet of before the adversarial
    # phase too, so the next run with other attacks loads it instead of training again (another width: no
    # earlier run's DeepSet matches)
    monkeypatch.undo()
    narrow = cfg.replace(inf_f_curve=False, inf_amp_curve="", agg_hidden=12, inf_aggregators="deepset_tm")
    run_inprocess(server_app_for(narrow.replace(inf_attacks="none"), sink=[]), client_app, num_supernodes=5, seed=0)
    monkeypatch.setattr(evaluate, "train_deepset", no_training)
    fifth = []
    run_inprocess(server_app_for(narrow.replace(inf_attacks="lma"), sink=fifth), client_app, num_supernodes=5, seed=0)
    assert set(fifth[0].accuracy["aggregator"]) == {"deepset_tm"}


class _SilentGrid:
    """A Grid whose send_and_receive returns only some replies (the rest timed out)."""

    def __init__(self, answer_from):
        self.answer_from = answer_from

    def send_and_receive(self, messages, *, timeout=None):
        from flwr.app import ArrayRecord, RecordDict
        from flwr.app import Message as M

        out = []
        for m in messages:
            if m.metadata.dst_node_id in self.answer_from:
                n = len(m.content["queries"]["x"].numpy())
                reply = M(content=RecordDict({"probits": ArrayRecord({"p": torch.full((n, 3), 1 / 3)})}), reply_to=m)
                out.append(reply)
        return out


def test_a_client_that_does_not_answer_in_time_is_absent():
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 1
    cfg = RunConfig.from_flower(CFG)
    dropped = {}
    p, used = query_all(_SilentGrid({11, 13}), {11: 0, 12: 1, 13: 2}, torch.zeros(4, 8), cfg, 3, dropped)
    assert used == [0, 2] and p.shape == (4, 2, 3)
    assert dropped == {1: ["no reply"]}


def test_local_models_are_seeded_per_client():
    """Two runs of train.local give the same client models (init and batches are seeded)."""
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 1
    cfg = RunConfig.from_flower(dict(dataset="digits", num_clients=3, clients_per_round=3, lr=0.1, batch_size=32))
    states = []
    for _ in range(2):
        ctx = Context(run_id=1, node_id=7, node_config={"partition-id": 1, "num-partitions": 3}, state=RecordDict(),
                      run_config={})
        content = RecordDict({"config": ConfigRecord(cfg.to_flower())})
        inference.train_local(Message(content=content, message_type="train.local", dst_node_id=7), ctx)
        states.append(ctx.state[inference.MODEL_KEY].to_torch_state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_local_classifiers_train_with_the_configured_sgd_and_augmentation(monkeypatch):
    """train.local hands momentum, weight decay and (inf-augment=crop-flip) a crop-flip augmenter to the
    local SGD; at the defaults it trains as before (plain SGD, no augmentation). inf-augment joins the
    collection hash only when set, and is CIFAR's augmentation only."""
    import fedcal.inference.federated as federated
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from fedcal.config import ConfigError
    from fedcal.data import Dataset
    from fedcal.results import collection_hash

    seen = []
    monkeypatch.setattr(federated, "local_train", lambda *a, **k: seen.append(k) or type("S", (), {"loss": 0.0}))
    g = torch.Generator().manual_seed(0)
    tiny = Dataset("cifar10", torch.randn(200, 3, 32, 32, generator=g), torch.arange(200) % 10,
                   torch.randn(20, 3, 32, 32, generator=g), torch.arange(20) % 10, 10)
    monkeypatch.setattr(inference, "load_dataset", lambda *a: tiny)
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 1

    def train(**overrides):
        cfg = RunConfig.from_flower(dict(dataset="cifar10", model="cnn", num_clients=2, clients_per_round=2,
                                         inf_local_epochs=1, **overrides))
        ctx = Context(run_id=1, node_id=7, node_config={"partition-id": 1, "num-partitions": 2}, state=RecordDict(),
                      run_config={})
        inference.train_local(Message(content=RecordDict({"config": ConfigRecord(cfg.to_flower())}),
                                      message_type="train.local", dst_node_id=7), ctx)
        return seen[-1], cfg

    plain, base = train()
    assert (plain["momentum"], plain["weight_decay"], plain["augment"]) == (0.0, 0.0, None)
    tuned, cfg = train(momentum=0.9, weight_decay=5e-4, inf_augment="crop-flip")
    assert (tuned["momentum"], tuned["weight_decay"]) == (0.9, 5e-4)
    x = torch.rand(8, 3, 32, 32)
    moved = tuned["augment"](x)
    assert moved.shape == x.shape and not torch.equal(moved, x)
    assert collection_hash(cfg.replace(inf_augment="none", momentum=0.9, weight_decay=5e-4)) != collection_hash(cfg)
    assert collection_hash(base) == collection_hash(base.replace(inf_augment="none"))
    with pytest.raises(ConfigError, match="'inf-augment'"):
        RunConfig.from_flower(dict(task="inference", dataset="mnist", inf_augment="crop-flip"))


def test_inference_command_runs_cells_and_reports(tmp_path, capsys):
    from fedcal.cli import main

    args = ["inference", "--nf", "5:1", "--seeds", "0-1", "--report", str(tmp_path / "rep"), "--no-progress",
            "dataset=digits", "engine=inprocess", f"output-dir={tmp_path / 'runs'}", "dirichlet-alpha=0.5", "lr=0.1",
            "batch-size=32", "inf-local-epochs=2", "agg-epochs=20", "agg-adv-epochs=1", "agg-hidden=16",
            "inf-pgd-steps=2", "inf-f-curve=false", 'inf-amp-curve=""', "inf-attacks=none,lma,sia_whitebox"]
    assert main(args) == 0
    out = capsys.readouterr().out
    table = pd.read_csv(tmp_path / "rep" / "table_n5_f1.csv", index_col=0)
    assert list(table.columns) == ["none", "sia_whitebox", "lma", "worst case"]  # registry order
    probit_aggregators = [a for a in AGGREGATOR_NAMES if not a.endswith("_logit")]  # the clients sent probits
    assert list(table.index) == probit_aggregators
    cells = pd.read_csv(tmp_path / "rep" / "cells.csv")
    assert sorted(cells["seed"].unique()) == [0, 1] and len(cells) == 2 * len(probit_aggregators) * 3
    assert "worst case" in out and "± " in out
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*/accuracy.csv")}
    assert len(stamps) == 2
    assert main(args) == 0  # finished cells are skipped: the report is rebuilt from the run store
    assert stamps == {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*/accuracy.csv")}
    # `fedcal report` on the same run directories dispatches to the inference task's report
    runs = sorted(str(p.parent) for p in stamps)
    assert main(["report", *runs, "--out", str(tmp_path / "again")]) == 0
    again = pd.read_csv(tmp_path / "again" / "table_n5_f1.csv", index_col=0)
    pd.testing.assert_frame_equal(again, table)
    capsys.readouterr()
    assert main(["inference", "--nf", "5", "dataset=digits"]) == 2
    assert "--nf" in capsys.readouterr().err


def test_clients_answering_with_logits(tmp_path):
    """inf-client-output=logits: the clients send their logits, the server keeps them beside the probits it
    derives (their softmax: the probits a probits-answering client sends, to float rounding), a client whose
    logits are not finite is absent, and the collection is told apart from a probits one."""
    from flwr.app import ArrayRecord, RecordDict
    from flwr.app import Message as M
    from flwr.supercore.task_identity import TaskIdentity

    from fedcal.inference.evaluate import ProbitData
    from fedcal.inference.federated import assemble_logits
    from fedcal.results import collection_hash

    z = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]])
    bad = z.clone()
    bad[1, 2] = float("inf")
    p, logits, used, dropped = assemble_logits({0: z, 1: bad, 2: None, 3: torch.zeros(2, 4), 4: 3 * z}, 2, 3)
    assert used == [0, 4] and set(dropped) == {1, 2, 3} and "logit" in dropped[1]
    assert torch.equal(logits[:, 1], 3 * z)
    expected = torch.exp(z) / torch.exp(z).sum(-1, keepdim=True)
    assert torch.allclose(p[:, 0], expected, atol=1e-7)

    class LogitGrid:
        def send_and_receive(self, messages, *, timeout=None):
            out = []
            for m in messages:
                n = len(m.content["queries"]["x"].numpy())
                out.append(M(content=RecordDict({"logits": ArrayRecord({"z": z[:1].expand(n, 3).clone()})}),
                             reply_to=m))
            return out

    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 1
    cfg = RunConfig.from_flower(dict(CFG, inf_client_output="logits"))
    kept = []
    q, used = query_all(LogitGrid(), {11: 0, 12: 1}, torch.zeros(4, 8), cfg, 3, {}, kept)
    assert used == [0, 1] and torch.equal(kept[0], z[:1].expand(4, 2, 3))
    assert torch.allclose(q, expected[:1].expand(4, 2, 3), atol=1e-7)
    assert collection_hash(cfg) != collection_hash(cfg.replace(inf_client_output="probits"))
    assert collection_hash(cfg.replace(inf_client_output="probits")) == collection_hash(RunConfig.from_flower(CFG))

    # end to end: the saved collection holds the logits, the probits are their softmax; the logit CoPur is
    # evaluated on them, on the first inf-eval-queries test queries only, beside the aggregators asked for
    sink = []
    run_inprocess(server_app_for(cfg.replace(output_dir=str(tmp_path), inf_attacks="none,logit_flip",
                                             inf_f_curve=False, inf_amp_curve="", agg_epochs=5, agg_adv_epochs=0,
                                             inf_eval_queries=60, inf_aggregators="mean,copur_logit"),
                                  sink=sink),
                  client_app, num_supernodes=5, seed=0)
    table = sink[0].accuracy
    assert sorted(table["aggregator"].unique()) == ["copur_logit", "mean"] and (table["queries"] == 60).all()
    data = ProbitData.load(sink[0].run_dir / "probits.pt")
    assert data.test_logits is not None and data.test_logits.shape == data.test_probits.shape
    assert torch.allclose(torch.softmax(data.test_logits, -1), data.test_probits, atol=1e-6)
    assert data.server_logits.shape == data.server_probits.shape
