"""The ``[tool.flwr.app.config]`` block of ``pyproject.toml``, generated from the settings.

Flower reads a run's default configuration from that block, and :class:`RunConfig` declares the
same keys with their defaults in ``fedcal/config/<group>.py``. Two hand-kept lists of ~190 keys
drift (a key added to a group and forgotten in the block), so the block is written from the
settings: every key in :meth:`RunConfig.to_flower` order with its default in TOML form, under a
comment that says so. ``python -m fedcal.config --write-pyproject`` rewrites it in place (nothing
else in the file changes); ``--check-pyproject`` fails in one line when the committed block is
not the generated one (tests/test_config.py runs it).

The block holds fedcal's own keys: those of its built-in groups, which its own components' keys join
(:func:`fedcal.config.component_keys.builtin_groups`). An installed plug-in's keys — its task's group, its
rule's or attack's own keys — are left out, with the plug-in installed or not: a process without the
plug-in would refuse them (a plug-in's keys take their defaults, or ``--run-config`` values).

The TOML values are written here rather than with a TOML writer: Python's standard library reads
TOML (``tomllib``) but does not write it, the block is flat scalars only (str, int, float, bool),
and a writer package (tomli-w, tomlkit) would be a dependency for ~15 lines; each value is read
back with ``tomllib`` and compared, so a value this module cannot write faithfully fails loudly.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

from fedcal.config.component_keys import builtin_groups
from fedcal.config.schema import config_fields

HEADER = "[tool.flwr.app.config]"
#: The Flower App's own defaults where they differ from :class:`RunConfig`'s. ``flwr run .`` with no
#: ``--run-config`` then runs on what Flower gives it out of the box: its default local federation
#: of 2 SuperNodes (``num-supernodes`` of Flower's local simulation, 2 in Flower 1.42 and 1.43) and a
#: dataset that needs no download (scikit-learn's digits), for 3 rounds as Flower's templates. Only
#: the block changes: ``fedcal run`` keeps RunConfig's defaults (the paper's MNIST configuration), and
#: the run hashes of its runs, which rest on them, stay as they were.
FLOWER_APP_DEFAULTS: dict[str, Any] = {"dataset": "digits", "num-clients": 2, "clients-per-round": 2, "num-rounds": 3}
COMMENT = (
    "# Generated from fedcal/config/<group>.py and the components' own keys (fedcal/catalogue/) by\n"
    "# `python -m fedcal.config --write-pyproject`: do not edit by hand (a test checks it is current).\n"
    "# Keys in RunConfig.to_flower() order; `fedcal run --help` and\n"
    "# docs/configuration.md say what each one means. Four differ from `fedcal run`'s defaults (the paper's\n"
    "# MNIST configuration) so that a plain `flwr run .` runs on Flower's default local federation (2\n"
    "# SuperNodes) with no download: dataset, num-clients, clients-per-round, num-rounds\n"
    "# (fedcal/config/pyproject.py FLOWER_APP_DEFAULTS; docs/configuration.md).\n")


def toml_value(value: Any, type_name: str) -> str:
    """``value`` of a field of type ``type_name`` (int, float, bool, str) as a TOML value that
    reads back as the same type and value."""
    if type_name == "bool":
        text = "true" if value else "false"
    elif type_name == "int":
        text = str(int(value))
    elif type_name == "float":
        v = float(value)
        text = ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")) if not math.isfinite(v) else repr(v)
    elif type_name == "str":
        # a JSON string is a TOML basic string (the same escapes, \uXXXX for non-ASCII)
        text = json.dumps(str(value))
    else:
        raise TypeError(f"no TOML form for a field of type {type_name!r}")
    back = tomllib.loads(f"x = {text}")["x"]
    same = (math.isnan(back) and math.isnan(value)) if type_name == "float" and math.isnan(float(value)) \
        else back == value and type(back).__name__ == type_name
    if not same:
        raise ValueError(f"{value!r} does not survive TOML as {text!r}")
    return text


def pyproject_block() -> str:
    """The generated ``[tool.flwr.app.config]`` block: its header, the comment, one ``key = value``
    line per field of fedcal's own (module docstring) in :meth:`RunConfig.to_flower` order (its default, or the
    Flower App's
    own of :data:`FLOWER_APP_DEFAULTS`)."""
    def default(s: Any) -> Any:
        return FLOWER_APP_DEFAULTS.get(s.name.replace("_", "-"), s.default)

    lines = [f"{s.name.replace('_', '-')} = {toml_value(default(s), s.type)}" for s in config_fields()
             if s.group in builtin_groups()]
    return HEADER + "\n" + COMMENT + "\n".join(lines) + "\n"


def _block_span(lines: list[str], path: Path) -> tuple[int, int]:
    """(first, end) line indices of the block in ``lines``: its header, up to the next table
    header or the end of the file (blank lines before the next header stay outside)."""
    starts = [i for i, line in enumerate(lines) if line.strip() == HEADER]
    if len(starts) != 1:
        raise ValueError(f"{path}: expected one {HEADER} table, found {len(starts)}")
    end = next((i for i in range(starts[0] + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
    while end > starts[0] + 1 and not lines[end - 1].strip():
        end -= 1
    return starts[0], end


def with_block(text: str, path: Path = Path("pyproject.toml")) -> str:
    """``text`` (a pyproject.toml) with its ``[tool.flwr.app.config]`` block replaced by the
    generated one; every other line as it was."""
    lines = text.splitlines(keepends=True)
    first, end = _block_span(lines, path)
    return "".join(lines[:first]) + pyproject_block() + "".join(lines[end:])


def stale_keys(text: str, path: Path = Path("pyproject.toml")) -> str:
    """"" when the block of ``text`` is the generated one, else what differs, in one line."""
    lines = text.splitlines(keepends=True)
    first, end = _block_span(lines, path)
    if "".join(lines[first:end]) == pyproject_block():
        return ""
    have = tomllib.loads("".join(lines[first:end]))["tool"]["flwr"]["app"]["config"]
    want = tomllib.loads(pyproject_block())["tool"]["flwr"]["app"]["config"]
    def some(items: list[str]) -> str:
        return ", ".join(items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")

    unknown = [k for k in have if k not in want]
    differ = [f"{k} = {have[k]!r} (default {want[k]!r})" for k in want if k in have and have[k] != want[k]]
    missing = [k for k in want if k not in have]
    what = "; ".join([*([f"unknown {some(unknown)}"] if unknown else []), *([some(differ)] if differ else []),
                      *([f"missing {some(missing)}"] if missing else [])]) or "the keys' order or the comment"
    return f"{path}: [tool.flwr.app.config] is not generated from the settings ({what}): " \
           "run python -m fedcal.config --write-pyproject"
