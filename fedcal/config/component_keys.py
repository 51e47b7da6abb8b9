"""The run-config keys the components of the catalogue (:mod:`fedcal.catalogue`) declare themselves.

A component declares the keys only it reads in its own declaration (``Component(..., settings={"alie_z":
setting(...)})``): default, bounds or choices, help, hash-when-set. The config registers them as
fields like a group's (their type is their default's), read only when a run chooses a component declaring
them (``only_with`` = the kind's choosing key, :data:`CHOOSERS`). A key names the group it joins
(``setting(..., group="train")``): fedcal's own components' keys join the groups whose hashes covered them
before they moved into their components, so every run keeps its hash; without a group a key gets one of its
component's own (``attack:<name>``), which no task's hash covers: such a key counts in a run's hash only when
the run chooses its component (:func:`fedcal.results.identity.chosen_component_keys`). A component whose
implementation lies outside fedcal may not join a built-in group (its keys would enter every run's hash).

The registry of the catalogue may change in a process (a plug-in registered by a test, and removed after
it): :func:`sync` brings the config's fields in line with it whenever the catalogue changed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fedcal.config import schema
from fedcal.config.components import ComponentNames

#: the run-config key choosing each kind of component (a comma-separated list key names several)
CHOOSERS = {"rule": "strategy", "pre-aggregation": "pre_aggregation", "attack": "attack",
            "inference-attack": "inf_attacks", "inference-aggregator": "inf_aggregators", "lora-method": "dst_method",
            "tracker": "tracker"}
_TYPES = (bool, int, float, str)  # bool first: True is an int too
_STATE: dict[str, Any] = {"ready": False, "seen": None, "owned": {}, "builtin_groups": frozenset()}


def own_group(component: Any) -> str:
    """The group of a component's keys that name none: ``<kind>:<name>``."""
    return f"{component.kind}:{component.name}"


def declared(component: Any, name: str, decl: Any) -> Any:
    """The :class:`~fedcal.config.schema.Setting` field ``name`` of ``component`` registers as: its group
    (its own or the one it names), its type (its default's), hashed, read only with the component's kind's
    choosing key naming a component that declares it. ValueError (one line) when it cannot be one."""
    where = f"{component.kind} {component.name!r}: key {name!r}"
    if not isinstance(decl, schema.Setting):
        raise ValueError(f"{where} must be declared with fedcal.config.setting(...), got {type(decl).__name__}")
    if not name.isidentifier() or name != name.lower():
        raise ValueError(f"{where} must be a snake_case field name (its run-config key is {name.replace('_', '-')!r})")
    if component.kind not in CHOOSERS:
        raise ValueError(f"{where}: a {component.kind} has no run-config key choosing it, so no key of its own")
    typ = next((t.__name__ for t in _TYPES if isinstance(decl.default, t)), None)
    if typ is None:
        raise ValueError(f"{where}: default {decl.default!r} is none of bool, int, float, str (its type)")
    group = decl.group or own_group(component)
    if decl.group and not component.target.startswith("fedcal."):
        raise ValueError(f"{where}: a component from outside fedcal keeps its keys in a group of its own (its keys "
                         f"would enter the hash of every run of the groups' tasks), not group {decl.group!r}")
    hashed = True if decl.hashed is None else decl.hashed
    return dataclasses.replace(decl, name=name, group=group, type=typ, hashed=hashed,
                               only_with=(CHOOSERS[component.kind], ComponentNames(component.kind, name)))


def check_component(component: Any) -> None:
    """The catalogue's check of a component's declared keys (installed by :func:`ready`): each a setting
    that can be a field, none clashing with a group's key or with another component's other declaration
    of the same key. ConfigError, one line."""
    from fedcal import catalogue
    from fedcal.config.errors import ConfigError

    _SETTINGS = schema._SETTINGS
    owned = _STATE["owned"]
    for name, decl in component.settings:
        try:
            setting = declared(component, name, decl)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if name in _SETTINGS and name not in owned:
            raise ConfigError(f"{component.kind} {component.name!r}: key {name!r} is a key of group "
                              f"{_SETTINGS[name].group!r} already")
        for kind, known in catalogue._REGISTRY.items():
            for other in known.values():
                mine = dict(other.settings).get(name)
                if mine is not None and (kind, other.name) != (component.kind, component.name) and \
                        declared(other, name, mine) != setting:
                    raise ConfigError(f"{component.kind} {component.name!r}: key {name!r} is declared otherwise by "
                                      f"{kind} {other.name!r}")


def ready() -> None:
    """Called once fedcal.config has registered its own groups: from now on the catalogue's components'
    keys are fields (:func:`sync`), and the catalogue checks a component's keys before registering it."""
    from fedcal import catalogue

    _STATE["builtin_groups"] = frozenset(schema._GROUPS)
    if check_component not in catalogue._CHECKS:
        catalogue._CHECKS.append(check_component)
    if sync not in schema._SYNC:
        schema._SYNC.append(sync)
    _STATE["ready"] = True


def builtin_groups() -> frozenset[str]:
    """The groups fedcal.config declares (its own components' keys join them): what the generated
    pyproject block and RunConfig stub hold — never a plug-in's keys, which a process without the plug-in
    would refuse."""
    return _STATE["builtin_groups"]


def sync() -> None:
    """Bring the config's fields in line with the catalogue's components' declared keys: a key of a newly
    registered component becomes a field, a key no registered component declares any more is no field."""
    if not _STATE["ready"]:
        return
    from fedcal import catalogue

    catalogue._ensure_loaded()
    # a component registered, or a kind's registry replaced or shrunk (a test's scratch registry put back)
    seen = (catalogue._STATE["registered"], *((id(d), len(d)) for d in catalogue._REGISTRY.values()))
    if seen == _STATE["seen"]:
        return
    _STATE["seen"] = seen
    want: dict[str, Any] = {}
    for known in catalogue._REGISTRY.values():
        for component in known.values():
            for name, decl in component.settings:
                want.setdefault(name, declared(component, name, decl))
    owned: dict[str, Any] = _STATE["owned"]
    for name in [n for n in owned if n not in want]:  # its component left the catalogue
        del owned[name], schema._SETTINGS[name]
    for name, setting in want.items():
        if owned.get(name) != setting:
            owned[name] = schema._SETTINGS[name] = setting
    for group in {s.group for s in owned.values()} - set(schema._GROUPS):
        component = group.partition(":")
        schema._GROUPS[group] = schema.Group(group, f"the own keys of {component[0]} {component[2]!r}", ())
    for group in [g for g in schema._GROUPS if ":" in g and not any(s.group == g for s in owned.values())]:
        del schema._GROUPS[group]
    schema._ORDER_CACHE.clear()
