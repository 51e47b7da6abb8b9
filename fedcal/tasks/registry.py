"""The task registry: what the one Flower App can run, chosen by the run config's ``task``.

A task is one kind of federated job: its server side (what the ServerApp does on the grid),
its client side (the ClientApp handlers it answers, by message type) and its report (tables
and plots from finished run directories). Each task lives in its own module of this package
and registers itself with :func:`register` when imported; :mod:`fedcal.app.server` and
:mod:`fedcal.app.client` dispatch through :func:`get_task` and :func:`all_tasks` and know no
task by name.

The registry itself imports no task; ``fedcal/tasks/__init__.py`` imports the task modules
(each registers itself), so the import graph stays acyclic: tasks → registry, never back.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flwr.app import Context, Message
from flwr.serverapp import Grid

from fedcal.config import RunConfig, task_names

# progress(round, metrics) → None, called by a task's server side after each round.
ProgressFn = Callable[[int, dict[str, float]], None]
Handler = Callable[[Message, Context], Message]


@dataclass(frozen=True)
class Task:
    """One kind of federated job of the Flower App: everything the engines, the ServerApp, the
    ClientApp and the command need to know about it, so that none of them names a task.

    Attributes
    ----------
    name : str
        The run config's ``task`` value (its :class:`fedcal.config.TaskConfig` is registered first:
        the task's config group module holds its pure-config facts).
    summary : str
        One line for ``--help`` and logs.
    run : callable
        ``run(grid, cfg, progress)``: the server side, on a Flower ``Grid``. It writes its
        results to the run store (``fedcal.results``) and finishes the run (``DONE``).
    handlers : mapping
        ClientApp handlers by Flower message type (``"train"``, ``"train.local"``,
        ``"query.probits"``, …). Two tasks may not claim the same type.
    rounds : callable, optional
        ``rounds(cfg)``: how many progress steps ``run`` reports (None: no round structure).
    report : str, optional
        ``"module:function"`` of ``report(run_dirs, out_dir, title) -> str``: tables and plots from
        finished run directories (from the run store only); returns the Markdown of its tables.
        Named, not imported, so that no ClientApp process imports the reports (pandas, matplotlib).
    preflight : callable, optional
        ``preflight(cfg)``: what must hold before a run starts beyond the pure config rules (its
        data is there, a model name resolves); raises :class:`fedcal.config.ConfigError` naming the
        key. Every entry point runs it (:func:`preflight`) before any engine starts.
    batched : bool
        Whether the batched engine (:mod:`fedcal.tasks.train_batched`) can run it.
    label : callable, optional
        ``label(cfg) -> str``: the progress bar's label of a run ("" = the run directory's name).
    final_summary : callable, optional
        ``final_summary(run_dir) -> str``: what ``fedcal run`` prints after the run (default: the
        files the run wrote).
    extras : tuple of str, optional
        The optional extras (:data:`fedcal.extras.EXTRAS`) the task cannot run without: every
        entry point checks them before starting (:func:`preflight`), so a missing one fails at once
        in one line.
    """

    name: str
    summary: str
    run: Callable[[Grid, RunConfig, ProgressFn | None], Any]
    handlers: Mapping[str, Handler] = field(default_factory=dict)
    rounds: Callable[[RunConfig], int | None] = lambda cfg: None
    report: str | None = None
    preflight: Callable[[RunConfig], None] | None = None
    batched: bool = False
    label: Callable[[RunConfig], str] = lambda cfg: ""
    final_summary: Callable[[Path], str] | None = None
    extras: tuple[str, ...] = ()

    def load_report(self) -> Callable[[Sequence[Path], Path, str], str] | None:
        """The report function :attr:`report` names (imported now), or None."""
        if self.report is None:
            return None
        module, _, function = self.report.partition(":")
        return getattr(importlib.import_module(module), function)

    def summarise(self, run_dir: Path) -> str:
        """What ``fedcal run`` prints after a run of this task."""
        if self.final_summary is not None:
            return self.final_summary(run_dir)
        return "files: " + ", ".join(sorted(p.name for p in run_dir.iterdir()))


_REGISTRY: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add ``task`` to the registry (its name must be a config ``task`` value, its message
    types unclaimed). Returns it, so a module can write ``TASK = register(Task(...))``."""
    if task.name in _REGISTRY and _REGISTRY[task.name] is not task:
        raise ValueError(f"task {task.name!r} is registered twice")
    if task.name not in task_names():
        raise ValueError(f"task {task.name!r} is not a value of run-config key 'task' ({', '.join(task_names())}): "
                         "register its fedcal.config.TaskConfig (and its config group) first")
    for other in _REGISTRY.values():
        clash = set(other.handlers) & set(task.handlers)
        if other is not task and clash:
            raise ValueError(f"tasks {other.name!r} and {task.name!r} both handle message type(s) {sorted(clash)}")
    _REGISTRY[task.name] = task
    return task


def get_task(name: str) -> Task:
    """The registered task called ``name`` (a clear error naming the known ones otherwise)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; registered tasks: {', '.join(sorted(_REGISTRY))}") from None


def all_tasks() -> list[Task]:
    """Every registered task, in registration order."""
    return list(_REGISTRY.values())


def preflight(cfg: RunConfig) -> None:
    """Run the task's :attr:`Task.preflight` (if any) on a validated config: what every entry point
    (the commands, :func:`fedcal.app.engine.simulate`, the ServerApp) checks before a run starts."""
    from fedcal.extras import require_extras

    task = get_task(cfg.task)
    require_extras(*task.extras)  # a missing extra: one line naming it, before anything else
    if task.preflight is not None:
        task.preflight(cfg)
