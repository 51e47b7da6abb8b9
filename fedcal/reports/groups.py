"""Which runs a table may put in one row: the grouping rule of every report (flwr-free).

A row of a table averages runs over seeds. It may only hold runs that computed the same thing
but for their seed — or but for the keys the table shows as its own columns (τ, strategy, the
attack setting, …). "Computed the same thing" is decided on the run's *hashed* keys
(:func:`fedcal.results.hashed_keys`): the keys that make up a run's identity, so keys that only
say where or how a run executed (``output-dir``, ``engine``, ``device``, ``data-dir`` …) never
split a row, and a key that changes the computation always does.

* :func:`config_labels` — for runs of several configurations, each run's ``config`` label naming
  the keys in which the configurations differ (``"num-clients=10 num-rounds=20"``), "" for all of
  them when they share one configuration (so a table of one configuration keeps its format);
* :func:`frame_config_labels` — the same from a table's config columns (kebab-case keys);
* :func:`require_one_config` — for tables that cannot show a ``config`` column (an analysis that
  compares each run with a benign reference), an error naming the keys that differ.

Why not pandas' ``groupby`` on every config column: most config columns are execution keys or
constant, and the hashed set depends on the task (``fedcal.results.hashed_keys``); the label must
name only the keys that differ, in the run config's field order.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pandas as pd

from fedcal.config import ConfigError, RunConfig, defaults, field_names, key_of, setting_of
from fedcal.results import hashed_keys

SEED = "seed"
#: the label column a table gains when its runs belong to several configurations
CONFIG = "config"


class MixedConfigError(ConfigError):
    """Runs of different configurations were given to a table that cannot show them apart; the
    message names the keys that differ."""


def _fields(cfg: RunConfig | Mapping[str, Any]) -> dict[str, Any]:
    """A run's field values by snake-case name (a :class:`RunConfig`, or a mapping with snake- or
    kebab-case keys such as a row of a table's config columns). A key the mapping lacks, or holds
    as NaN (a run made before the key existed), is the key's default, as when its config is parsed."""
    if isinstance(cfg, RunConfig):
        return cfg.to_dict()
    values = {str(k).replace("-", "_"): _plain(v) for k, v in cfg.items()}
    return {**defaults(), **{k: v for k, v in values.items() if v is not None}}


def _plain(v: Any) -> Any:
    """Numpy scalars as Python values and NaN (a column a run never had) as None, so that values read
    back from tables compare equal to the config's own."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def _same(v: Any) -> str:
    """A value as compared between runs: numbers by value (a float key read back from a table as an
    integer column is the same value), everything else by its repr."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return repr(float(v))
    return repr(v)


def _task(values: Mapping[str, Any]) -> str:
    """The task of a run's config values: the ``task`` key's default where absent (the oldest runs),
    an old name of a task mapped by the key's aliases."""
    task_key = setting_of("task")
    task = values.get("task") or task_key.default
    return str((task_key.aliases or {}).get(task, task))


def identity_keys(configs: Sequence[Mapping[str, Any]], shown: Collection[str] = ()) -> list[str]:
    """The hashed keys of ``configs`` (each run's own task's; ``task`` itself when tasks differ)
    less ``seed`` and the ``shown`` keys (snake- or kebab-case), in the run config's field order."""
    shown = {s.replace("-", "_") for s in shown} | {SEED}
    keys: set[str] = set()
    for values in configs:
        keys |= hashed_keys(_task(values))
    if len({_task(v) for v in configs}) > 1:
        keys.add("task")
    order = {n: i for i, n in enumerate(field_names())}
    return sorted(keys - shown, key=lambda k: order.get(k, len(order)))


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    if v is None:
        return "unset"
    return '""' if v == "" else str(v)


def differing_keys(configs: Sequence[RunConfig | Mapping[str, Any]], shown: Collection[str] = ()) -> list[str]:
    """The hashed keys (less seed and ``shown``) whose values differ between ``configs``."""
    values = [_fields(c) for c in configs]
    keys = identity_keys(values, shown)
    return [k for k in keys if len({_same(v.get(k)) for v in values}) > 1]


def config_labels(configs: Sequence[RunConfig | Mapping[str, Any]], shown: Collection[str] = ()) -> list[str]:
    """Per run, the ``config`` label of its row: ``"num-clients=10 num-rounds=20"`` — its values of the
    keys in which the given runs' configurations differ (hashed keys less seed and ``shown``), in
    field order; "" for every run when they all share one configuration."""
    values = [_fields(c) for c in configs]
    keys = differing_keys(values, shown)
    return [" ".join(f"{key_of(k)}={_text(v.get(k))}" for k in keys) for v in values]


def frame_config_labels(frame: pd.DataFrame, shown: Collection[str] = ()) -> list[str]:
    """:func:`config_labels` of the runs in the rows of a table with config columns (kebab-case
    keys, as :func:`fedcal.results.load_metrics` joins them); keys the table has no column for are
    taken as equal."""
    names = set(field_names())
    cols = [c for c in frame.columns if str(c).replace("-", "_") in names]
    rows = frame[cols].to_dict("records")
    return config_labels(rows, shown)


def require_one_config(configs: Sequence[RunConfig | Mapping[str, Any]], shown: Collection[str], what: str,
                       names: Sequence[str] | None = None) -> None:
    """Raise :class:`MixedConfigError` — one line naming the keys that differ and, with ``names``,
    one run of each configuration — when ``configs`` are not all one configuration (up to seed and
    ``shown``): ``what`` cannot show them apart."""
    keys = differing_keys(configs, shown)
    if not keys:
        return
    first: dict[tuple, int] = {}  # one run of each configuration
    values = [_fields(c) for c in configs]
    for i, v in enumerate(values):
        first.setdefault(tuple(_same(v.get(k)) for k in keys), i)
    examples = "; ".join(f"{names[i]}: " + " ".join(f"{key_of(k)}={_text(values[i].get(k))}" for k in keys)
                         for i in list(first.values())[:3]) if names is not None else ""
    allowed = ", ".join(["seed", *sorted(key_of(s) for s in shown)])
    raise MixedConfigError(f"{what} needs runs of one configuration (up to {allowed}); these differ in "
                           f"{', '.join(map(key_of, keys))}" + (f" ({examples})" if examples else "")
                           + ": give the runs of one configuration")
