"""A minimal in-process Grid for testing strategies without a Simulation Engine."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid
from fedcal.app.flower_private import TaskIdentity  # Flower's, not public (see that module)


def set_task_identity() -> None:
    # Messages read the run/task identity of the process; a ServerApp sets it in real runs.
    TaskIdentity.run_id = 1
    TaskIdentity.task_id = 1
    TaskIdentity.node_id = 0


class FakeGrid(Grid):
    """Nodes are python functions ``respond(node_id, content) -> RecordDict | None | list``
    (None → an error reply; a list → several replies from that node, in order)."""

    def __init__(self, node_ids: list[int], respond: Callable[[int, RecordDict], RecordDict | None]):
        set_task_identity()
        self.nodes, self.respond = list(node_ids), respond
        self.sent_to: list[list[int]] = []

    @property
    def run(self):  # pragma: no cover - unused
        return None

    def set_run(self, run_id: int) -> None:  # pragma: no cover - unused
        pass

    def create_message(self, *a, **k):  # pragma: no cover - unused
        raise NotImplementedError

    def get_node_ids(self) -> Iterable[int]:
        return list(self.nodes)

    def push_messages(self, messages):  # pragma: no cover - unused
        raise NotImplementedError

    def pull_messages(self, message_ids):  # pragma: no cover - unused
        raise NotImplementedError

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        from flwr.app import Error

        replies, batch = [], []
        for msg in messages:
            node = msg.metadata.dst_node_id
            batch.append(node)
            answer = self.respond(node, msg.content)
            for content in answer if isinstance(answer, list) else [answer]:
                if content is None:
                    replies.append(Message(error=Error(code=0, reason="client crashed"), reply_to=msg))
                else:
                    replies.append(Message(content=content, reply_to=msg))
        self.sent_to.append(batch)
        return replies
