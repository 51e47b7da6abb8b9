"""In-process execution of a Flower app: the same ServerApp, ClientApp and strategies, driven
through Flower's ``Grid``/``Message`` interfaces, with every virtual SuperNode run in this
process instead of in Ray actors.

Why: for the paper's small models a round costs milliseconds of compute, and Ray's actor
start-up and per-message scheduling dominate a simulation on a 2-core machine. This engine
keeps the protocol (Messages, Contexts with ``partition-id`` node configs, error replies when a
ClientApp raises) and drops only the transport. Ray stays the engine for scale-out and GPUs.

Messages cross between server and nodes through Flower's own wire format
(``flwr.common.serde``, through ``fedcal.app.flower_private``, the one module holding the
Flower internals fedcal needs), as they would between a SuperLink and a SuperNode: each side gets a
deserialised copy carrying the message id the link assigned, and neither can alter what the
other holds. No private Flower field is written.
"""

from __future__ import annotations

import logging
import random
import traceback
from collections.abc import Iterable
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedcal.app.flower_private import (
    SUPERLINK_NODE_ID,
    ErrorCode,
    Run,
    TaskIdentity,
    message_from_proto,
    message_to_proto,
)
from fedcal.tasks.grids import pulled_ids


# Flower's own logger (a SuperNode logs a raising ClientApp there too).
_FLOWER_LOG = logging.getLogger("flwr")


class InProcessGrid(Grid):
    """A ``Grid`` whose nodes are virtual SuperNodes executing ``client_app`` in this process.

    Node ids are random 63-bit integers (as in Flower's simulation); node ``i`` gets
    ``node_config = {"partition-id": i, "num-partitions": num_nodes}`` and keeps its
    ``Context`` (and its ``state``) across messages, like a SuperNode.
    """

    def __init__(self, client_app: ClientApp, num_nodes: int, run_config: dict | None = None, seed: int | None = None):
        if num_nodes < 1:
            raise ValueError("num_nodes must be >= 1")
        rng = random.Random(seed)
        self._run = Run.create_empty(run_id=rng.getrandbits(63))
        self._run.primary_task_id = rng.getrandbits(63)
        self.client_app = client_app
        ids: list[int] = []
        while len(ids) < num_nodes:
            nid = rng.getrandbits(63)
            if nid not in ids and nid != SUPERLINK_NODE_ID:
                ids.append(nid)
        self.contexts = {
            nid: Context(run_id=self._run.run_id, node_id=nid,
                         node_config={"partition-id": i, "num-partitions": num_nodes},
                         state=RecordDict(), run_config=dict(run_config or {}))
            for i, nid in enumerate(ids)
        }
        self._replies: dict[str, Message] = {}

    # ------------------------------------------------------------------ Grid API
    @property
    def run(self) -> Run:
        return self._run

    def set_run(self, run_id: int) -> None:
        if run_id != self._run.run_id:
            raise ValueError(f"this grid serves run {self._run.run_id}, not {run_id}")

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return Message(content=content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id,
                       ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            message_id = str(uuid4())  # as the SuperLink assigns it
            self._replies[message_id] = self._execute(_transmit(msg, message_id))
            ids.append(message_id)
        return ids

    def pull_messages(self, reply_to_message_ids: Iterable[str] | None = None, *,
                      message_ids: Iterable[str] | None = None) -> Iterable[Message]:
        """The replies to the messages ``reply_to_message_ids`` (Flower 1.43's name; ``message_ids``,
        Flower 1.42's, is taken too; neither: every reply not yet pulled)."""
        ids = pulled_ids(reply_to_message_ids, message_ids)
        return [self._replies.pop(i) for i in (list(self._replies) if ids is None else ids) if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))

    # ------------------------------------------------------------------ execution
    def _execute(self, msg: Message) -> Message:
        node = msg.metadata.dst_node_id
        if node not in self.contexts:
            reply = Message(error=Error(code=ErrorCode.NODE_UNAVAILABLE, reason=f"no node {node}"), reply_to=msg)
            return _transmit(reply, str(uuid4()))
        try:
            reply = self.client_app(msg, self.contexts[node])
        except Exception as ex:  # noqa: BLE001 — like a SuperNode, report it as an error reply
            _FLOWER_LOG.error("ClientApp raised on node %s: %s\n%s", node, ex, traceback.format_exc())
            reply = Message(error=Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                        reason=f"{type(ex)}:<'{ex}'>"), reply_to=msg)
        return _transmit(reply, str(uuid4()))


def _transmit(msg: Message, message_id: str) -> Message:
    """What the receiving side gets: ``msg`` serialised and deserialised in Flower's wire
    format, carrying ``message_id`` (a link assigns ids on arrival)."""
    proto = message_to_proto(msg)
    proto.metadata.message_id = message_id
    return message_from_proto(proto)


def run_inprocess(server_app: ServerApp, client_app: ClientApp, num_supernodes: int,
                  run_config: dict | None = None, seed: int | None = None) -> Context:
    """Run ``server_app`` against ``num_supernodes`` in-process virtual SuperNodes.

    The counterpart of ``flwr.simulation.run_simulation`` without Ray; returns the
    ServerApp's context after the run.
    """
    grid = InProcessGrid(client_app, num_supernodes, run_config, seed)
    # Messages created in this process (by the ServerApp) carry the run and the sender's
    # identity, as in a ServerApp process started by a SuperLink.
    TaskIdentity.run_id = grid.run.run_id
    TaskIdentity.task_id = grid.run.primary_task_id
    TaskIdentity.node_id = SUPERLINK_NODE_ID
    context = Context(run_id=grid.run.run_id, node_id=SUPERLINK_NODE_ID, node_config={}, state=RecordDict(),
                      run_config=dict(run_config or {}))
    server_app(grid, context)
    return context
