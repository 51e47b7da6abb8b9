"""The one ClientApp of the Flower App (``[tool.flwr.app.components] clientapp``).

Every node answers the identity handshake (:func:`fedcal.tasks.nodes.identity`) and every
message type a registered task handles (:mod:`fedcal.tasks`): ``train`` for federated
training, ``train.local`` and ``query.probits`` for robust federated inference, … What a node
does with a message is chosen from the run config the message carries and the node's
partition id, so one ClientApp serves every task, in simulation and on real SuperNodes.
"""

from __future__ import annotations

import functools

from flwr.clientapp import ClientApp

from fedcal.tasks import Handler, all_tasks
from fedcal.tasks.client_state import HANDLERS as STATE_HANDLERS
from fedcal.tasks.nodes import IDENTITY, identity


def _register(app: ClientApp, message_type: str, handler: Handler) -> None:
    """``"train"`` → ``@app.train()``, ``"query.probits"`` → ``@app.query("probits")``."""
    kind, _, action = message_type.partition(".")
    if kind not in ("train", "evaluate", "query"):
        raise ValueError(f"message type {message_type!r} must start with train, evaluate or query")
    getattr(app, kind)(action or "default")(_placed(handler))


def _placed(handler: Handler) -> Handler:
    """``handler`` whose replies say which Ray node made them when it runs in Flower's Simulation
    Engine (:func:`fedcal.app.cluster.add_placement`; the ServerApp's grid records and strips it)."""
    from fedcal.app.cluster import add_placement

    @functools.wraps(handler)
    def wrapped(msg, context):
        return add_placement(handler(msg, context), context)

    return wrapped


def build_client_app() -> ClientApp:
    """A ClientApp with the handshake, the checkpoint's state transfer
    (:mod:`fedcal.tasks.client_state`) and the handlers of every registered task."""
    client = ClientApp()
    _register(client, IDENTITY, identity)
    for message_type, handler in STATE_HANDLERS.items():
        _register(client, message_type, handler)
    for task in all_tasks():
        for message_type, handler in task.handlers.items():
            _register(client, message_type, handler)
    return client


app = build_client_app()
