"""The clients' persistent state across a checkpoint: what a node keeps in its ``Context.state``
between rounds (RFD-LoRA's adapters, FLoRA's merged base weights) must be in a run's checkpoint,
or a resumed run would restart every client from scratch.

Where it is kept — the server. At each checkpoint the server asks every node for its state
(``query.save_state``: the node replies with a copy of its ``Context.state``) and stores it, per
partition id, in the run's checkpoint; on resume it sends each node the state of its partition
(``query.load_state``: the node replaces its ``Context.state`` with it) before the first resumed
round. This works wherever the ClientApp runs: with the in-process engine and Ray's Simulation
Engine every node process of a resumed run is new (Ray's actors, ``Context`` objects and their
state are gone with the old run), and on real SuperNodes a resumed run is a new Flower run,
whose ``Context`` starts empty too. Nothing is kept on the nodes' disks, so a resumed run needs
no node to keep files or to be the same machine — only the same partition ids.

The price on a real deployment: at a checkpoint each node's state travels to the server (for
RFD-LoRA, a LoRA adapter of a few hundred kB, which the protocol itself never uploads). A
federation that must not reveal it sets ``checkpoint-every = 0`` (no checkpoints: an
interrupted run starts over). docs/deployment.md says the same.

A node's state is untrusted input like any reply: an error or a reply that is not a state is
logged with the node named and that node resumes with an empty state (its client starts over;
the run goes on). States are kept as Flower's own array fields (dtype, shape, stype, bytes), so
a restored state is bit-for-bit the saved one.
"""

from __future__ import annotations

from logging import WARNING
from typing import Any

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

SAVE_STATE = "query.save_state"  # a node replies with its Context.state
LOAD_STATE = "query.load_state"  # a node's Context.state becomes the message's content


# ---------------------------------------------------------------------------------- node side
def save_state(msg: Message, context: Context) -> Message:
    """Reply with a copy of this node's ``Context.state``."""
    return Message(content=RecordDict(dict(context.state.items())), reply_to=msg)


def load_state(msg: Message, context: Context) -> Message:
    """Replace this node's ``Context.state`` with the message's records."""
    for name in list(context.state.keys()):
        del context.state[name]
    for name, record in msg.content.items():
        context.state[name] = record
    return Message(content=RecordDict(), reply_to=msg)


HANDLERS = {SAVE_STATE: save_state, LOAD_STATE: load_state}


# ---------------------------------------------------------------------------------- plain values
def to_plain(records: RecordDict) -> dict[str, dict[str, Any]]:
    """A RecordDict as values a checkpoint holds (``torch.load(weights_only=True)`` reads them):
    every array as its dtype, shape, stype and bytes, config and metric records as dicts."""
    out: dict[str, dict[str, Any]] = {}
    for name, record in records.items():
        if isinstance(record, ArrayRecord):
            out[name] = {"kind": "array", "arrays": {k: {"dtype": a.dtype, "shape": list(a.shape), "stype": a.stype,
                                                         "data": bytes(a.data)} for k, a in record.items()}}
        elif isinstance(record, ConfigRecord):
            out[name] = {"kind": "config", "values": dict(record)}
        elif isinstance(record, MetricRecord):
            out[name] = {"kind": "metric", "values": dict(record)}
        else:
            raise TypeError(f"record {name!r} is a {type(record).__name__}, not an Array/Config/MetricRecord")
    return out


def from_plain(plain: dict[str, dict[str, Any]]) -> RecordDict:
    """:func:`to_plain` undone."""
    records: dict[str, Any] = {}
    for name, item in plain.items():
        if item["kind"] == "array":
            records[name] = ArrayRecord({k: Array(dtype=a["dtype"], shape=tuple(a["shape"]), stype=a["stype"],
                                                  data=a["data"]) for k, a in item["arrays"].items()})
        elif item["kind"] == "config":
            records[name] = ConfigRecord(dict(item["values"]))
        else:
            records[name] = MetricRecord(dict(item["values"]))
    return RecordDict(records)


# ---------------------------------------------------------------------------------- server side
def collect_states(grid: Grid, node_to_client: dict[int, int], timeout: float = 600.0) -> dict[int, dict]:
    """Every node's ``Context.state`` as plain values, by partition id. A node that errs, does not
    answer or sends something that is not a state is named in a warning and left out (it resumes
    with an empty state)."""
    messages = [Message(RecordDict(), message_type=SAVE_STATE, dst_node_id=n) for n in node_to_client]
    states: dict[int, dict] = {}
    for reply in grid.send_and_receive(messages, timeout=timeout):
        node = reply.metadata.src_node_id
        part = node_to_client.get(node)
        if part is None:
            continue
        if reply.has_error():
            log(WARNING, "node %s (partition %s) did not send its state for the checkpoint: %s", node, part,
                reply.error.reason)
            continue
        try:
            states[part] = to_plain(reply.content)
        except Exception as exc:  # noqa: BLE001 — a malformed state is a bad reply, not a crash
            log(WARNING, "node %s (partition %s) sent an unusable state (%s); it is not checkpointed", node, part, exc)
    for node, part in node_to_client.items():
        if part not in states:
            log(WARNING, "checkpoint without the state of node %s (partition %s): it would resume from scratch",
                node, part)
    return states


def restore_states(grid: Grid, node_to_client: dict[int, int], states: dict[int, dict],
                   timeout: float = 600.0) -> list[int]:
    """Send each node the checkpointed state of its partition; returns the partitions that could
    not be restored (no state in the checkpoint, or an error reply), each named in a warning."""
    messages, failed = [], []
    for node, part in sorted(node_to_client.items(), key=lambda item: item[1]):
        if part not in states:
            failed.append(part)
            log(WARNING, "no checkpointed state for partition %s (node %s): its client starts from scratch", part, node)
            continue
        messages.append(Message(from_plain(states[part]), message_type=LOAD_STATE, dst_node_id=node))
    answered = set()
    for reply in grid.send_and_receive(messages, timeout=timeout):
        part = node_to_client.get(reply.metadata.src_node_id)
        if reply.has_error():
            log(WARNING, "partition %s did not take back its state: %s", part, reply.error.reason)
        else:
            answered.add(part)
    for node, part in node_to_client.items():
        if part in states and part not in answered:
            failed.append(part)
    return sorted(set(failed))
