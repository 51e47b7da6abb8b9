"""The Flower side of the tasks: what the ServerApp, the ClientApp, the engines and the commands
ask of a task, chosen by the run config's ``task``.

A task is declared once, flwr-free, as a :class:`fedcal.config.Task` in its config group module
(``fedcal/config/<task>.py``): its configuration facts, and by name (``"module:function"``) its
server side, its ClientApp handlers by message type, its preflight and its report. Each task's
Flower side lives in its own module of this package (``fedcal/tasks/<task>.py``), imported only
when a process calls into it; :mod:`fedcal.app.server` and :mod:`fedcal.app.client` dispatch
through :func:`get_task` and :func:`all_tasks` and know no task by name.
"""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import Context, Message

from fedcal.config import RunConfig, Task, all_tasks, get_task

# progress(round, metrics) → None, called by a task's server side after each round.
ProgressFn = Callable[[int, dict[str, float]], None]
Handler = Callable[[Message, Context], Message]

__all__ = ["Handler", "ProgressFn", "Task", "all_tasks", "get_task", "preflight"]


def preflight(cfg: RunConfig) -> None:
    """Run the task's preflight (if any) on a validated config, after checking its extras: what
    every entry point (the commands, :func:`fedcal.app.engine.simulate`, the ServerApp) checks
    before a run starts."""
    from fedcal.extras import require_extras

    task = get_task(cfg.task)
    require_extras(*task.extras)  # a missing extra: one line naming it, before anything else
    task.check_preflight(cfg)
