"""Every piece of Flower that fedcal uses outside Flower's public API, in one place.

fedcal is written against Flower's public modules (``flwr.app``, ``flwr.serverapp``,
``flwr.clientapp``, the ``flwr`` CLI). The engines need a few things those modules do not
export in the supported Flower releases (pyproject's range: 1.42.0, and 1.43's nightly
``flwr-nightly`` 1.43.0.dev20261026, where each is still where it was and none has gained a public
replacement; ``benchmarks/flwr_newest.py`` checks the newest again). They are imported
here, and only here, so that a Flower upgrade that moves or removes one breaks this module with an ImportError naming it, not the
engines; ``tests/test_inprocess.py`` imports this module. Each piece, why it is needed, and
what replaces it when Flower removes it:

- ``run_simulation`` (``flwr.simulation``; deprecated since Flower 1.28 in favour of ``flwr run``;
  Flower 1.42's deprecation banner says "will be removed in a future version" and names none): the
  only in-process entry to Flower's Ray Simulation Engine (``engine=ray``). fedcal needs it in
  process because the run's progress callback and the in-memory ServerApp are Python objects.
  Flower's replacement, ``flwr run .`` (local SuperLink, ``--federation-config
  "num-supernodes=K"``), already runs the same apps (README, ``tests/test_flwr_run.py``); if
  ``run_simulation`` goes, ``engine=ray`` becomes a ``flwr run`` subprocess and
  ``engine=inprocess`` (which does not use it) is unaffected. Its deprecation banner is dropped
  from fedcal's log by ``fedcal.app.engine``.
- ``message_to_proto`` / ``message_from_proto`` (``flwr.common.serde``): Flower's wire format
  for a ``Message``. The in-process engine passes every message through it, as a SuperLink and
  a SuperNode would, so that each side gets a deserialised copy with a link-assigned message id
  and neither can alter what the other holds. No public (de)serialisation of ``Message`` exists.
- ``Run`` (``flwr.supercore.run``): the type the public ``flwr.serverapp.Grid`` ABC requires
  its ``run`` property to return; Flower does not re-export it publicly.
- ``TaskIdentity`` (``flwr.supercore.task_identity``): where a ``Message`` created in a process
  takes its run id and sender node id from. Flower's ServerApp process sets it on start-up;
  the in-process engine sets it the same way, since it plays that process.
- ``SUPERLINK_NODE_ID`` and ``ErrorCode`` (``flwr.common.constant``): the SuperLink's node id
  (the ServerApp's sender id) and the error codes a SuperNode puts in an error reply
  (``CLIENT_APP_RAISED_EXCEPTION``, ``NODE_UNAVAILABLE``); ``flwr.app`` exports ``Error`` but
  not its codes.
"""

from __future__ import annotations

from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.common.serde import message_from_proto, message_to_proto
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

__all__ = [
    "ErrorCode",
    "Run",
    "SUPERLINK_NODE_ID",
    "TaskIdentity",
    "message_from_proto",
    "message_to_proto",
    "run_simulation",
]


def run_simulation(**kwargs):
    """``flwr.simulation.run_simulation`` (deprecated; see the module docstring), imported on
    call: importing it pulls in Ray, which ``engine=inprocess`` never needs."""
    from flwr.simulation import run_simulation as _run_simulation

    return _run_simulation(**kwargs)
