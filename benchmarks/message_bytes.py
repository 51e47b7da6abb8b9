"""Bytes of the run config in the messages the ServerApp sends, per message and per round: the
whole config (every key, as fedcal sent it before) against ``config_record`` (the keys that
differ from the defaults + the digest), both measured in this run in Flower's wire format
(``message_to_proto`` of a train message holding only the ``config`` record), for the README's
configurations. "bytes/round" multiplies by the messages of one round that carry the config: the
M sampled train messages (train, lm, detect), one per client (distill's round, inference's
``train.local`` and each probit query batch). The same record is what Flower logs when a strategy
starts (its ``str`` length is printed too).

    python benchmarks/message_bytes.py | tee docs/results/benchmarks/message_bytes.txt
"""

from __future__ import annotations

from flwr.app import ConfigRecord, Message, RecordDict

from fedcal.app.flower_private import SUPERLINK_NODE_ID, TaskIdentity, message_to_proto
from fedcal.config import RunConfig
from fedcal.tasks.nodes import config_record

#: (name, run config, train messages per round) — the README's commands
CONFIGS = [
    ("pyproject defaults (MNIST-MLP, M = 5)", {}, None),
    ("README flwr run: digits K=10 M=5 tau=5", {"dataset": "digits", "num-clients": 10, "clients-per-round": 5,
                                                "num-rounds": 20, "tau": 5.0}, None),
    ("README defense: calguard on digits", {"strategy": "calguard", "tau": 5.0, "dataset": "digits", "num-clients": 10,
                                            "num-rounds": 20, "lr": 0.05, "root-size": 50}, None),
    ("README inference: digits K=7 f=2", {"task": "inference", "dataset": "digits", "num-clients": 7, "inf-f": 2}, 7),
    ("README distill: synthetic K=3", {"task": "distill", "dst-corpus": "synthetic", "num-clients": 3,
                                       "dst-ranks": "2,4,8", "dst-backdoor-ratio": 0.3, "dst-rounds": 2}, 3),
]


def wire_bytes(record: ConfigRecord) -> int:
    record = ConfigRecord({**record, "server-round": 7})  # what configure_train adds
    msg = Message(content=RecordDict({"config": record}), dst_node_id=123456789, message_type="train")
    return message_to_proto(msg).ByteSize()


def main() -> None:
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
    print(f"{'configuration':<42} {'keys':>9} {'bytes/message':>15} {'bytes/round':>15} {'logged chars':>14}  ratio")
    for name, overrides, per_round in CONFIGS:
        cfg = RunConfig.from_flower(overrides)
        per_round = per_round or cfg.clients_per_round
        full, sent = ConfigRecord(cfg.to_flower()), config_record(cfg)
        b_full, b_sent = wire_bytes(full), wire_bytes(sent)
        print(f"{name:<42} {len(full):>4}->{len(sent):<4} {b_full:>7}->{b_sent:<7} "
              f"{b_full * per_round:>7}->{b_sent * per_round:<7} {len(str(full)):>6}->{len(str(sent)):<6}  "
              f"{b_sent / b_full:.3f}")


if __name__ == "__main__":
    main()
