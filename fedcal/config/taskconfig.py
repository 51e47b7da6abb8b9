"""A task's configuration facts (:class:`TaskConfig`), which its group module registers with
:func:`fedcal.config.schema.register_task`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# The RunConfig type lives in fedcal.config.schema, which imports this module: the annotations
# name it as Any so that this module imports nothing of fedcal.
RunConfig = Any
Rule = Callable[[Any], None]


@dataclass(frozen=True)
class TaskConfig:
    """The configuration facts of one task, registered by its group module.

    Attributes
    ----------
    name : str
        The run config's ``task`` value.
    groups : tuple of str
        The groups the task reads besides ``common``.
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
        ``dataset`` key (what ``fedcal robustness --runs`` can attack); a run of another task leaves
        its dataset key at the image default, which means nothing for it.
    """

    name: str
    groups: tuple[str, ...] = ()
    hash_groups: tuple[str, ...] | None = None
    hash_task_key: bool = True
    run_name: Callable[[RunConfig, str], str] | None = None
    rules: tuple[Rule, ...] = ()
    schedule: tuple[str, str, str] | None = None
    tables: tuple[tuple[str, tuple[str, ...]], ...] = ()
    image_classifier: bool = False

    @property
    def identity_groups(self) -> tuple[str, ...]:
        """The groups a run's hash covers."""
        return self.hash_groups if self.hash_groups is not None else ("common", *self.groups)

    def default_run_name(self, cfg: RunConfig, short_hash: str) -> str:
        if self.run_name is not None:
            return self.run_name(cfg, short_hash)
        return f"{cfg.dataset}-{cfg.model}-{cfg.task}-s{cfg.seed}-{short_hash}"
