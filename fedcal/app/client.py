"""The one ClientApp of the Flower App (``[tool.flwr.app.components] clientapp``).

Every node answers the identity handshake (:func:`fedcal.tasks.nodes.identity`) and every
message type a registered task handles (:mod:`fedcal.tasks`): ``train`` for federated
training, ``train.local`` and ``query.probits`` for robust federated inference, … What a node
does with a message is chosen from the run config the message carries and the node's
partition id, so one ClientApp serves every task, in simulation and on real SuperNodes.
"""

from __future__ import annotations

import functools
import os

# Ray warns (a FutureWarning, in every `flwr run` log) at ray.init unless this is set: from a future
# version on it will stop emptying CUDA_VISIBLE_DEVICES for tasks with num_gpus=0; 0 opts in now, as
# fedcal.app.engine.simulate does for fedcal's own runs. Set here because Flower's simulation process
# loads the ClientApp (flwr.server.superlink.fleet.vce.vce_api.start_vce) before its Ray backend calls
# ray.init, and the Ray workers inherit the driver's environment. A user's own value wins.
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

from flwr.clientapp import ClientApp  # noqa: E402 - after the environment Ray reads

from fedcal.tasks import Handler, Task, all_tasks  # noqa: E402
from fedcal.tasks.client_state import HANDLERS as STATE_HANDLERS  # noqa: E402
from fedcal.tasks.nodes import IDENTITY, identity  # noqa: E402


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


def _named(task: Task, message_type: str) -> Handler:
    """The handler ``task`` names for ``message_type``, imported when its first message arrives (a
    node imports the modules of the tasks it runs only)."""

    def handler(msg, context):
        return task.handler(message_type)(msg, context)

    handler.__name__ = handler.__qualname__ = f"{task.name}:{message_type}"
    return handler


def build_client_app() -> ClientApp:
    """A ClientApp with the handshake, the checkpoint's state transfer
    (:mod:`fedcal.tasks.client_state`) and the handlers of every registered task."""
    client = ClientApp()
    _register(client, IDENTITY, identity)
    for message_type, handler in STATE_HANDLERS.items():
        _register(client, message_type, handler)
    claimed: dict[str, str] = {}
    for task in all_tasks():  # fedcal's and the installed plug-ins' (fedcal.catalogue)
        for message_type in task.handlers:
            if message_type in claimed:
                raise ValueError(f"tasks {claimed[message_type]!r} and {task.name!r} both handle message type "
                                 f"{message_type!r}")
            claimed[message_type] = task.name
            _register(client, message_type, _named(task, message_type))
    return client


app = build_client_app()
