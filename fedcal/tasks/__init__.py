"""The tasks of the one Flower App, by name (the run config's ``task``).

Importing this package registers the built-in tasks; :func:`get_task` and :func:`all_tasks`
are what the ServerApp, the ClientApp, the engines and the command use.

Adding a task (docs/design.md has a worked example):

1. its config group and :class:`fedcal.config.TaskConfig`, in ``fedcal/config/<name>.py``;
2. a module ``fedcal/tasks/<name>.py`` with its server side, client handlers and report, that
   builds a :class:`Task` and calls :func:`register`;
3. one import line below.
"""

from fedcal.tasks.registry import Handler, ProgressFn, Task, all_tasks, get_task, preflight, register

from fedcal.tasks import train, inference, distill, lm, detect  # noqa: E402,F401,I001 — each registers itself

__all__ = ["Handler", "ProgressFn", "Task", "all_tasks", "get_task", "preflight", "register"]
