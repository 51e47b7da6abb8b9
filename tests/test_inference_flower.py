"""Federated inference end to end: the responder ClientApp and the inference ServerApp through a
Flower Grid (in-process engine), with a client that answers garbage."""

import torch

import fedcal.clients.responder as responder
from fedcal.config import RunConfig
from fedcal.inference.federated import assemble, client_indices, server_split
from fedcal.simulations.inference import InferenceOptions, server_app_for
from fedcal.simulations.inprocess import run_inprocess


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


def test_federated_inference_round_trip(monkeypatch):
    cfg = RunConfig.from_flower(dict(dataset="digits", num_clients=5, clients_per_round=5, dirichlet_alpha=0.5,
                                     lr=0.1, batch_size=32, seed=0))
    real = responder.probits

    def garbage_from_client_4(msg, context):  # one client answers with non-probits
        reply = real(msg, context)
        if int(context.node_config["partition-id"]) == 4:
            from flwr.app import ArrayRecord, RecordDict
            from flwr.app import Message as M
            return M(content=RecordDict({"probits": ArrayRecord({"p": torch.full((len(msg.content["queries"]["x"].numpy()), 10), float("nan"))})}), reply_to=msg)
        return reply

    monkeypatch.setitem(responder.app._registered_funcs, "query.probits", garbage_from_client_4)
    sink = []
    opts = InferenceOptions(f=1, local_epochs=5, agg_epochs=300, agg_lr=3e-3, agg_hidden=32, query_batch=150)
    run_inprocess(server_app_for(cfg, opts, sink), responder.app, num_supernodes=5, seed=0)
    (res,) = sink
    assert set(res.accuracy) == {"mean", "median", "geometric_median", "trimmed_mean", "deepset", "deepset_tm"}
    assert all(n == 4 for n in res.clients_per_answer)  # the garbage client is left out of every answer
    assert 4 in res.dropped and all("probit" in r for r in res.dropped[4])
    assert res.accuracy["mean"] > 0.7  # locally trained clients agree on digits
    assert res.accuracy["deepset"] > 0.7  # the aggregator learned from the server's held-out split
    assert all(0 <= a <= 1 for a in res.accuracy.values())


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
        content = RecordDict({"config": ConfigRecord({**cfg.to_flower(), "server-frac": 0.1, "local-epochs": 1})})
        responder.train_local(Message(content=content, message_type="train.local", dst_node_id=7), ctx)
        states.append(ctx.state[responder.MODEL_KEY].to_torch_state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
