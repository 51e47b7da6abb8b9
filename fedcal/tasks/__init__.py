"""The Flower side of the tasks of the one Flower App (the run config's ``task``).

Each task is declared once, in its config group module, as a :class:`fedcal.config.Task`; its
declaration names (``"module:function"``) its server side and client handlers in this package, one
module per task. :func:`get_task` and :func:`all_tasks` are what the ServerApp, the ClientApp, the
engines and the command use.

Adding a task (docs/design.md has a worked example):

1. its config group and its :class:`fedcal.config.Task`, in ``fedcal/config/<name>.py`` (one import
   line in ``fedcal/config/__init__.py``);
2. a module ``fedcal/tasks/<name>.py`` with its server side and client handlers, which the
   declaration names.
"""

from fedcal.tasks.registry import Handler, ProgressFn, Task, all_tasks, get_task, preflight

__all__ = ["Handler", "ProgressFn", "Task", "all_tasks", "get_task", "preflight"]
