"""A task, declared once (:class:`Task`): its configuration facts and, by name, its Flower side.

A task's group module (``fedcal/config/<task>.py``) declares it with
:func:`fedcal.config.schema.register_task`; nothing else declares it again. A task is a component of
the catalogue (:mod:`fedcal.catalogue`, kind ``task``), so an installed package's task comes in
through the catalogue's entry points like its rules and attacks. The declaration is flwr-free: the server side, the ClientApp handlers, the preflight, the report and the progress
texts are lazy references (``"package.module:function"``), imported only by the process that
calls them (:mod:`fedcal.tasks` does, for the ServerApp, the ClientApp and the commands). So
the config knows every task (its ``task`` key's choices, its groups, its hash, its rules) without
importing flwr, and the ClientApp imports a task's modules only when a message of it arrives.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from fedcal import catalogue
from fedcal.catalogue import Component
from fedcal.config.errors import ConfigError

# The RunConfig type lives in fedcal.config.schema, which imports this module: the annotations
# name it as Any.
RunConfig = Any
Rule = Callable[[Any], None]


def resolve(ref: str) -> Any:
    """The object a lazy reference ``"package.module:attribute"`` names (imported now)."""
    module, sep, attr = ref.partition(":")
    if not (module and sep and attr):
        raise ValueError(f"{ref!r} is not a reference 'package.module:attribute'")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True, kw_only=True)
class Task(Component):
    """One kind of federated job of the Flower App, declared once: everything the config, the
    engines, the ServerApp, the ClientApp and the commands need to know about it, so that none of
    them names a task. It is the catalogue's component of kind ``task`` (``name`` and ``target``
    positional, the rest by keyword).

    Attributes
    ----------
    name : str
        The run config's ``task`` value.
    target : str
        ``"module:function"`` of the server side ``run(grid, cfg, progress)``, on a Flower ``Grid``:
        it writes its results to the run store (``fedcal.results``) and finishes the run (``DONE``).
    summary : str
        One line for ``--help`` and logs.
    groups : tuple of str
        The config groups the task reads besides ``common``.
    hash_groups : tuple of str
        The groups whose hashed keys make up a run's identity (default: ``common`` and ``groups``).
    hash_task_key : bool
        Whether the ``task`` key itself is hashed.
    run_name : callable, optional
        ``run_name(cfg, short_hash) -> str``: the run directory's default name (default:
        ``<dataset>-<model>-<task>-s<seed>-<hash>``).
    rules : tuple of callables
        Cross-field rules checked only for this task, after the groups' rules.
    schedule : (str, str, str), optional
        (metric, rounds key, evaluation-period key): the metric a run logs at round 0, every
        ``period`` rounds and the last, and the keys of its number of rounds and of the period
        (what the run store's readers check a run's rows against). None: no round structure.
    tables : tuple of (file name, column names)
        The tables besides ``metrics.csv`` a finished run of the task must hold, with the columns
        they need (the report gate leaves a run without them out: the inference task's
        ``accuracy.csv``).
    image_classifier : bool
        Whether a finished run's ``model.pt`` is an image classifier of the ``model`` key on the
        ``dataset`` key (what ``fedcal robustness --runs`` can attack).
    handlers : mapping of str to str
        The ClientApp handlers by Flower message type (``"train"``, ``"train.local"``,
        ``"query.probits"``, …), each ``"module:function"`` of ``handler(msg, context) -> Message``.
        Two tasks may not claim the same type.
    rounds : callable, optional
        ``rounds(cfg)``: how many progress steps the server side reports (None: no round structure).
    report : str, optional
        ``"module:function"`` of ``report(run_dirs, out_dir, title) -> str``: tables and plots from
        finished run directories (from the run store only); returns the Markdown of its tables.
    preflight : str, optional
        ``"module:function"`` of ``preflight(cfg)``: what must hold before a run starts beyond the
        config rules (its data is there, a model name resolves); raises
        :class:`fedcal.config.ConfigError` naming the key. Every entry point runs it
        (:func:`fedcal.tasks.preflight`) before any engine starts.
    needs : frozenset of str
        ``{"batchable"}``: the batched engine (:mod:`fedcal.tasks.train_batched`) can run it (:attr:`batched`).
    label : str, optional
        ``"module:function"`` of ``label(cfg) -> str``: the progress bar's label of a run (None: the
        run directory's name).
    final_summary : str, optional
        ``"module:function"`` of ``final_summary(run_dir) -> str``: what ``fedcal run`` prints after
        the run (default: the files the run wrote).
    extras : tuple of str
        The optional extras (:data:`fedcal.extras.EXTRAS`) the task cannot run without: every entry
        point checks them before starting, so a missing one fails at once in one line.
    """

    kind: str = "task"
    groups: tuple[str, ...] = ()
    hash_groups: tuple[str, ...] | None = None
    hash_task_key: bool = True
    run_name: Callable[[RunConfig, str], str] | None = None
    rules: tuple[Rule, ...] = ()
    schedule: tuple[str, str, str] | None = None
    tables: tuple[tuple[str, tuple[str, ...]], ...] = ()
    image_classifier: bool = False
    handlers: Mapping[str, str] = field(default_factory=dict)
    rounds: Callable[[RunConfig], int | None] = lambda cfg: None
    report: str | None = None
    preflight: str | None = None
    label: str | None = None
    final_summary: str | None = None
    extras: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind != "task":
            raise ValueError(f"task {self.name!r}: a Task is a component of kind 'task', not {self.kind!r}")
        refs = [("target", self.target)] + [(f"handlers[{t!r}]", r) for t, r in self.handlers.items()] + [
            (n, getattr(self, n)) for n in ("report", "preflight", "label", "final_summary")
            if getattr(self, n) is not None]
        for what, ref in refs:
            module, sep, attr = ref.partition(":") if isinstance(ref, str) else ("", "", "")
            if not (module and sep and attr):
                raise ValueError(f"task {self.name!r}: {what} must be a reference 'package.module:function', "
                                 f"got {ref!r}")
        for message_type in self.handlers:
            if message_type.partition(".")[0] not in ("train", "evaluate", "query"):
                raise ValueError(f"task {self.name!r}: message type {message_type!r} must start with train, "
                                 "evaluate or query")
        super().__post_init__()

    # ------------------------------------------------------------------ configuration facts
    @property
    def batched(self) -> bool:
        """Whether the batched engine can run it (it declares the need ``batchable``)."""
        return "batchable" in self.needs

    @property
    def identity_groups(self) -> tuple[str, ...]:
        """The groups a run's hash covers."""
        return self.hash_groups if self.hash_groups is not None else ("common", *self.groups)

    def default_run_name(self, cfg: RunConfig, short_hash: str) -> str:
        if self.run_name is not None:
            return self.run_name(cfg, short_hash)
        return f"{cfg.dataset}-{cfg.model}-{cfg.task}-s{cfg.seed}-{short_hash}"

    # ------------------------------------------------------------------ the Flower side, by name
    def run(self, grid: Any, cfg: RunConfig, progress: Callable[[int, dict[str, float]], None] | None) -> Any:
        """Run the server side (imports :attr:`target` now)."""
        return self.load()(grid, cfg, progress)

    def handler(self, message_type: str) -> Callable[[Any, Any], Any]:
        """The ClientApp handler of ``message_type`` (imported now)."""
        return resolve(self.handlers[message_type])

    def load_report(self) -> Callable[..., str] | None:
        """The report function :attr:`report` names (imported now), or None."""
        return None if self.report is None else resolve(self.report)

    def check_preflight(self, cfg: RunConfig) -> None:
        """Run :attr:`preflight` on ``cfg`` (if the task has one)."""
        if self.preflight is not None:
            resolve(self.preflight)(cfg)

    def progress_label(self, cfg: RunConfig) -> str:
        """The progress bar's label of a run of ``cfg`` ("" = the run directory's name)."""
        return "" if self.label is None else resolve(self.label)(cfg)

    def summarise(self, run_dir: Path) -> str:
        """What ``fedcal run`` prints after a run of this task."""
        if self.final_summary is not None:
            return resolve(self.final_summary)(run_dir)
        return "files: " + ", ".join(sorted(p.name for p in Path(run_dir).iterdir()))


# ---------------------------------------------------------------------- the registered tasks
def register_task(task: Task) -> Task:
    """Register a task in the catalogue (:mod:`fedcal.catalogue`, kind ``task``): its name becomes a
    value of the ``task`` key; its message types must be unclaimed. Its groups may register after it
    (the train task names the defense group, declared in a later module). Returns it, so a module
    can write ``TASK = register_task(Task(...))``."""
    if not isinstance(task, Task):
        raise TypeError(f"register_task takes a fedcal.config.Task, got {type(task).__name__}")
    known = catalogue._REGISTRY["task"]  # not components(): no plug-in is loaded while fedcal.config imports
    if task.name in known and known[task.name] != task:
        raise ValueError(f"task {task.name!r} is registered twice")
    for other in known.values():
        clash = set(other.handlers) & set(task.handlers)
        if other.name != task.name and clash:
            raise ValueError(f"tasks {other.name!r} and {task.name!r} both handle message type(s) {sorted(clash)}")
    return catalogue.register(task)


def _tasks() -> dict[str, Task]:
    return catalogue.components("task")  # type: ignore[return-value]


def get_task(name: str) -> Task:
    """The registered :class:`Task` called ``name`` (a ConfigError naming the known ones otherwise)."""
    tasks = _tasks()
    try:
        return tasks[name]
    except KeyError:
        raise ConfigError(f"run-config key 'task': unknown value {name!r}; choose one of "
                          f"{', '.join(tasks)}") from None


def all_tasks() -> tuple[Task, ...]:
    """Every registered task, in registration order (fedcal's, then the plug-ins')."""
    return tuple(_tasks().values())


def task_names() -> tuple[str, ...]:
    """The registered tasks, in registration order (the ``task`` key's choices)."""
    return tuple(_tasks())
