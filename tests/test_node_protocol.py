"""What the ServerApp sends the nodes and what they send back: the run config as the keys that
differ from the defaults plus a digest (the server stays the one authority over every key), and
train replies whose MetricRecord holds metrics only (who answered travels beside it)."""

import logging

import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict

from fedcal.app.flower_private import SUPERLINK_NODE_ID, TaskIdentity
from fedcal.config import RunConfig
from fedcal.tasks.nodes import CONFIG_DIGEST, config_digest, config_record, message_config

CONFIGS = [
    {},
    {"dataset": "digits", "num-clients": 10, "clients-per-round": 5, "num-rounds": 20, "tau": 5.0},
    {"strategy": "calguard", "tau": 0.2, "dataset": "digits", "num-clients": 10, "lr": 0.05, "root-size": 50,
     "calguard-kappa": 3.5, "output-dir": "/somewhere/runs", "run-name": "x"},
    {"task": "inference", "dataset": "digits", "num-clients": 7, "inf-f": 2, "inf-attacks": "cpa,lma"},
    {"task": "distill", "dst-corpus": "synthetic", "num-clients": 3, "dst-ranks": "2,4,8", "dst-backdoor-ratio": 0.3},
    {"attack": "none", "coupled": False, "momentum": 0.5, "seed": 3, "eval-every": 2, "data-dir": "../shared/data"},
]


@pytest.fixture(autouse=True)
def _identity():
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID


def _node(run_config=None) -> Context:
    return Context(run_id=1, node_id=5, node_config={"partition-id": 0, "num-partitions": 10}, state=RecordDict(),
                   run_config=dict(run_config or {}))


def _received(record: ConfigRecord | None, server_round: int = 4) -> Message:
    content = RecordDict()
    if record is not None:
        record = ConfigRecord({**record, "server-round": server_round})  # what configure_train adds
        content["config"] = record
    return Message(content=content, dst_node_id=5, message_type="train")


@pytest.mark.parametrize("overrides", CONFIGS)
def test_a_node_rebuilds_exactly_the_servers_config_from_what_it_is_sent(overrides):
    cfg = RunConfig.from_flower(overrides)
    record = config_record(cfg)
    assert set(record) - {CONFIG_DIGEST} == set(overrides) - {k for k, v in overrides.items()
                                                               if v == RunConfig().to_flower()[k]}
    # a node started with other run-config values (its app's defaults, or a stale file) still
    # trains with the server's
    got, rnd = message_config(_received(record), _node({"tau": 3.0, "num-clients": 99}))
    assert got == cfg and rnd == 4
    assert config_digest(got) == record[CONFIG_DIGEST]


def test_the_default_config_travels_as_its_digest_alone():
    record = config_record(RunConfig())
    assert list(record) == [CONFIG_DIGEST]
    # not the node's own run config: the server said "every default"
    got, _ = message_config(_received(record), _node({"tau": 3.0}))
    assert got == RunConfig()


def test_a_node_with_other_defaults_refuses_the_config_in_one_line():
    """The digest is of the server's whole config: when the node's defaults would fill in a value
    the server did not choose, the node fails (its reply is an error the strategy logs and drops)
    instead of training with it."""
    server = RunConfig(tau=5.0)
    record = config_record(server)
    del record["tau"]  # as if tau = 5 were the default where the server runs
    with pytest.raises(ValueError, match=r"^run config digest \w{16} rebuilt on this node .* differs from the "
                                         rf"server's {record[CONFIG_DIGEST]}: .*other defaults") as err:
        message_config(_received(record), _node())
    assert "\n" not in str(err.value)


def test_a_message_with_every_key_and_one_without_a_config_still_parse():
    cfg = RunConfig(dataset="digits", tau=2.0)
    full = ConfigRecord(cfg.to_flower())  # what a server of the previous protocol sends
    assert message_config(_received(full), _node())[0] == cfg
    # no config at all (run_simulation's apps): the node's own run config
    got, rnd = message_config(_received(None), _node({"tau": 3.0}))
    assert got == RunConfig(tau=3.0) and rnd == 0


def test_a_train_round_logs_metrics_not_client_identities(tmp_path, monkeypatch, caplog):
    """A whole train run through the ServerApp and ClientApp (in-process): the config Flower logs
    at the start is the few keys of this run and the digest; each round's aggregated MetricRecord
    holds the training loss, not an averaged partition id or attacker flag; the identities ride in
    the replies' ``client`` record."""
    from fedcal.app.client import build_client_app
    from fedcal.app.inprocess import run_inprocess
    from fedcal.app.server import server_app_for
    from fedcal.tasks import train as train_task

    cfg = RunConfig(dataset="digits", num_clients=4, clients_per_round=2, num_rounds=2, attacker_ratio=0.5,
                    output_dir=str(tmp_path / "runs"))
    replies = []
    real = train_task.train

    def spy(msg, context):
        reply = real(msg, context)
        replies.append(reply.content)
        return reply

    monkeypatch.setattr(train_task, "train", spy)  # the handler the train task's declaration names
    with caplog.at_level(logging.INFO, logger="flwr"):
        run_inprocess(server_app_for(cfg), build_client_app(), cfg.num_clients, seed=cfg.seed)
    logged = [r.getMessage() for r in caplog.records]
    config_line = next(m for m in logged if "ConfigRecord (train)" in m)
    assert CONFIG_DIGEST in config_line and "inf-attacks" not in config_line, config_line
    aggregated = [m for m in logged if "Aggregated MetricRecord" in m]
    assert len(aggregated) == 2 and all("train-loss" in m for m in aggregated)
    assert not [m for m in aggregated if "partition-id" in m or "malicious" in m], aggregated
    assert len(replies) == 4
    for content in replies:
        assert set(content["metrics"]) == {"train-loss", "num-examples"}
        assert set(content["client"]) == {"partition-id", "malicious"}
        assert content["client"]["partition-id"] in range(4)
