"""The setting machinery: how a run-config key is declared, registered, parsed, validated and listed.

The single source of configuration is Flower's run config (``[tool.flwr.app.config]`` in
``pyproject.toml``, plus ``--run-config`` overrides). Its kebab-case keys map one-to-one to the
snake_case attributes of :class:`RunConfig`, one flat namespace (Flower's run config is flat).

Keys come in *groups* (``common``, ``train``, ``defense``, …), each declared in its own module of
this package with :func:`group`: its fields (each with :func:`setting`: default, help, bounds or
choices) and its own cross-field rules. A task is declared once, as a :class:`Task` its group
module registers with :func:`register_task`: the groups its run hash covers, its run-directory
name, the rules that hold only for it, and by name its Flower side. A task defined outside
``fedcal`` registers its group and its :class:`Task` the same way, so the field set is a registry, not
a class body fixed at import: :class:`RunConfig` instances hold their values as plain attributes
(writes blocked) and list their fields from the registry.

One generic validator (:meth:`RunConfig.validate`) checks every field against its declaration,
then the groups' rules, then the chosen task's rules. :meth:`RunConfig.from_flower` parses a run
config once; unknown keys, wrong types and out-of-range values raise :class:`ConfigError` with one
line naming the key.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

Rule = Callable[["RunConfig"], None]

from fedcal.config.task import Task, all_tasks, get_task, register_task, task_names  # noqa: E402,F401  (the task modules import them from here)

if TYPE_CHECKING:
    # the fields and the groups' properties with their types, for type checkers only (fedcal/config/stub.py)
    from fedcal.config.run_config import RunConfigFields as _Fields
else:
    _Fields = object


from fedcal.config.components import ComponentNames  # noqa: E402,F401  (re-exported: fedcal.config.ComponentNames)
from fedcal.config.errors import ConfigError  # noqa: E402,F401  (re-exported: fedcal.config.ConfigError)


def key_of(field_name: str) -> str:
    """Run-config key (kebab-case) of a :class:`RunConfig` field."""
    return field_name.replace("_", "-")


# ---------------------------------------------------------------------- field declarations
@dataclass(frozen=True)
class Setting:
    """What :func:`setting` declares about one run-config field (name, group and type are filled
    in when its group registers)."""

    help: str
    default: Any = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    # the allowed values; a callable for a set that grows at run time (the registered task names)
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None
    finite: bool = False  # also reject inf/nan
    hashed: bool | None = None  # part of the run's identity (False: where/how it runs, not what it computes)
    note: str = ""  # appended to the range, e.g. "0 = all"
    number_list: bool = False  # a comma-separated list of numbers: one bare number (dst-ranks=8) is a list of one
    # hashed only when set to another value than its default: a key added to a group whose runs were
    # already named, so that those runs keep their hash (and their directory name)
    hash_when_set: bool = False
    aliases: Mapping[Any, Any] | None = None  # values accepted and normalised (an old name of a value)
    # read only when another key names one of these values (("strategy", ("calguard",)): CalGuard's keys;
    # a comma-separated value such as pre-aggregation's names each of its items); see Setting.read_by.
    # ComponentNames(kind) as the values: the components of the catalogue that declare this key their own
    only_with: tuple[str, Sequence[str]] | None = None
    name: str = ""
    group: str = ""
    type: str = ""

    @property
    def options(self) -> tuple[str, ...] | None:
        """The allowed values (None: any value of the type within the bounds)."""
        return self.choices() if callable(self.choices) else self.choices

    def range_text(self) -> str:
        """The allowed values in words: ``>= 1``, ``in [0, 1)``, ``one of a, b``; "" if any."""
        if self.options is not None:
            text = "one of " + ", ".join(self.options)
        else:
            lo = f"[{_num(self.ge)}" if self.ge is not None else f"({_num(self.gt)}" if self.gt is not None else None
            hi = f"{_num(self.le)}]" if self.le is not None else f"{_num(self.lt)})" if self.lt is not None else None
            if lo and hi:
                text = f"in {lo}, {hi}"
            elif lo:
                text = (">= " if lo[0] == "[" else "> ") + lo[1:]
            elif hi:
                text = ("<= " if hi[-1] == "]" else "< ") + hi[:-1]
            else:
                text = ""
            if self.finite:
                text = f"a finite number {text}".strip()
        return f"{text} ({self.note})" if self.note and text else text or self.note

    def read_by(self, cfg: RunConfig) -> bool:
        """Whether a run of ``cfg`` reads this key (always, unless it is declared ``only_with``
        another key's values: MultiKrum's ``krum-f`` is read with ``strategy = multikrum`` only)."""
        if self.only_with is None:
            return True
        field, values = self.only_with
        return bool({v.strip() for v in str(getattr(cfg, field)).split(",")} & set(values))

    def only_with_text(self) -> str:
        """``strategy names calguard`` (the condition of :meth:`read_by`); "" if always read."""
        if self.only_with is None:
            return ""
        field, values = self.only_with
        return f"{key_of(field)} names {' or '.join(values)}"

    def check(self, key: str, value: Any) -> None:
        """Raise :class:`ConfigError` naming ``key`` if ``value`` breaks this declaration."""
        options = self.options
        if options is not None:
            if value not in options:
                raise ConfigError(f"run-config key {key!r}: unknown value {value!r}; choose one of "
                                  f"{', '.join(options)}")
            return
        ok = ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
              and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt)
              and (not self.finite or math.isfinite(value)))
        if not ok:
            text = self.range_text()
            verb = "lie" if text.startswith("in ") else "be"
            raise ConfigError(f"run-config key {key!r} must {verb} {text}, got {value!r}")


def _num(x: float) -> str:
    return f"{x:g}"


def setting(default: Any, help: str, *, ge: float | None = None, gt: float | None = None,
            le: float | None = None, lt: float | None = None,
            choices: tuple[str, ...] | Callable[[], tuple[str, ...]] | None = None, finite: bool = False,
            hashed: bool | None = None, note: str = "", number_list: bool = False, hash_when_set: bool = False,
            aliases: Mapping[Any, Any] | None = None, only_with: tuple[str, Sequence[str]] | None = None,
            group: str = "") -> Any:
    """One field of a config group: default, help and bounds/choices, declared together.

    ``hashed`` defaults to False in the ``execution`` group and True elsewhere; ``hash_when_set``
    hashes the key only at a value other than its default (a key added to a group whose runs were
    already named). ``only_with`` = (field, values): the key is read only when that field names one
    of the values (:meth:`Setting.read_by`; ``ComponentNames(kind)``: the catalogue's components of that
    kind which declare this key among their own); a command refuses it, set, where no run reads it
    (:func:`fedcal.studies.common.refuse_unread_keys`).

    A component's own key (``Component(..., settings={name: setting(...)})``,
    :mod:`fedcal.config.component_keys`) is read only when a run chooses it (``only_with`` derived), its
    type is its default's, and ``group`` names the group it joins (default: one of the component's own,
    which a run's hash covers when it is chosen).
    """
    return Setting(help, default, ge, gt, le, lt, choices, finite, hashed, note, number_list, hash_when_set, aliases,
                   only_with, group=group)


# ---------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Group:
    """One config group: its fields (declaration order) and its cross-field rules, checked for
    every task."""

    name: str
    help: str
    fields: tuple[str, ...]
    rules: tuple[Rule, ...] = ()


_GROUPS: dict[str, Group] = {}
#: what brings the fields in line with the catalogue's components' own keys (fedcal.config.component_keys
#: installs its sync once fedcal.config has registered its groups): this module imports nothing of it
_SYNC: list[Callable[[], None]] = []


def _sync_components() -> None:
    for sync in _SYNC:
        sync()


_SETTINGS: dict[str, Setting] = {}  # by field name, in registration order
_KEY_ORDER: list[tuple[str, ...]] = [()]  # the built-in keys' order (set once by fedcal.config)
_ORDER_CACHE: list[tuple[str, ...]] = []


def set_key_order(names: Sequence[str]) -> None:
    """Fix the order of the built-in keys in :meth:`RunConfig.to_flower` (``config.json`` and the
    sweep tables' config columns follow it); keys not named follow in registration order."""
    _KEY_ORDER[0] = tuple(names)
    _ORDER_CACHE.clear()


def _ordered() -> tuple[str, ...]:
    _sync_components()  # the catalogue's components' own keys
    if not _ORDER_CACHE:
        legacy = [n for n in _KEY_ORDER[0] if n in _SETTINGS]
        seen = set(legacy)
        _ORDER_CACHE.append(tuple(legacy + [n for n in _SETTINGS if n not in seen]))
    return _ORDER_CACHE[0]


_TYPES = {"int": int, "float": float, "bool": bool, "str": str}


def group(name: str, help: str, *, rules: Sequence[Rule] = ()) -> Callable[[type], Group]:
    """Class decorator registering a config group: the class body's annotated attributes are its
    fields (``x: int = setting(...)``), its properties become :class:`RunConfig` properties, and
    ``rules`` are checked for every task. Returns the :class:`Group`."""

    def register(cls: type) -> Group:
        if name in _GROUPS:
            raise ValueError(f"config group {name!r} is registered twice")
        names = []
        for field_name, typ in cls.__dict__.get("__annotations__", {}).items():
            decl = cls.__dict__.get(field_name)
            typ = typ if isinstance(typ, str) else typ.__name__
            if not isinstance(decl, Setting) or typ not in _TYPES:
                raise TypeError(f"config group {name!r}: field {field_name!r} needs a type of int, float, bool or str "
                                "and a setting(...) value")
            if field_name in _SETTINGS or hasattr(RunConfig, field_name):
                raise ValueError(f"run-config field {field_name!r} of group {name!r} is declared twice")
            hashed = name != "execution" if decl.hashed is None else decl.hashed
            only_with = decl.only_with
            if only_with is not None and isinstance(only_with[1], ComponentNames) and only_with[1].key is None:
                only_with = (only_with[0], ComponentNames(only_with[1].kind, field_name))  # the components owning it
            _SETTINGS[field_name] = dataclasses.replace(decl, name=field_name, group=name, type=typ, hashed=hashed,
                                                        only_with=only_with)
            names.append(field_name)
        for attr, value in cls.__dict__.items():
            if isinstance(value, property):
                setattr(RunConfig, attr, value)
        _GROUPS[name] = Group(name, help, tuple(names), tuple(rules))
        _ORDER_CACHE.clear()
        return _GROUPS[name]

    return register


def groups() -> dict[str, str]:
    """Every registered group's name and help, in registration order."""
    _sync_components()
    return {g.name: g.help for g in _GROUPS.values()}


def setting_of(name: str) -> Setting:
    """The :class:`Setting` of a field (snake_case or kebab-case name)."""
    _sync_components()
    return _SETTINGS[name.replace("-", "_")]


def config_fields() -> tuple[Setting, ...]:
    """Every field's :class:`Setting`, in :meth:`RunConfig.to_flower` order."""
    return tuple(_SETTINGS[n] for n in _ordered())


def field_names() -> tuple[str, ...]:
    """Every field name (snake_case), in :meth:`RunConfig.to_flower` order."""
    return _ordered()


def fields_of(*group_names: str) -> tuple[str, ...]:
    """Field names (snake_case) in the given groups, in declaration order."""
    return tuple(n for n in _ordered() if _SETTINGS[n].group in group_names)


def defaults() -> dict[str, Any]:
    """Every field's default, by field name."""
    return {n: _SETTINGS[n].default for n in _ordered()}


# ---------------------------------------------------------------------- the run config
class RunConfig(_Fields):
    """Everything one federated run needs: one flat, frozen object. Defaults are SPEC §2's
    MNIST–MLP table row.

    ``RunConfig(**fields)`` fills the fields not given with their defaults without validating;
    :meth:`from_flower` parses and validates.

    Its fields are registered by the groups at import, so for a type checker they come from the
    generated stub ``fedcal/config/run_config.pyi`` (:class:`RunConfigFields`, the base class seen
    only while type checking): ``cfg.num_roundz`` or ``cfg.tau + "x"`` is a type error in an editor.
    """

    def __init__(self, **values: Any) -> None:
        all_tasks()  # the catalogue, with the plug-ins' components: their groups' keys are fields too
        _sync_components()  # and the keys the components declare themselves
        unknown = sorted(set(values) - set(_SETTINGS))
        if unknown:
            raise TypeError(f"RunConfig got unknown field(s) {', '.join(unknown)}")
        state = {}
        for n in _ordered():
            s = _SETTINGS[n]
            v = values.get(n, s.default)
            if s.aliases and v in s.aliases:  # an old name of a value (old run directories' config.json)
                v = s.aliases[v]
            state[n] = v
        object.__setattr__(self, "__dict__", state)

    if not TYPE_CHECKING:  # hidden from type checkers, for which any attribute would then exist
        def __getattr__(self, name: str) -> Any:
            # a field of a group registered after this object was made: its default
            if name in _SETTINGS:
                return _SETTINGS[name].default
            raise AttributeError(f"RunConfig has no field {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in _ordered())

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return "RunConfig(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in _ordered()) + ")"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.to_dict(),))

    @classmethod
    def fields(cls) -> tuple[Setting, ...]:
        """Every field's :class:`Setting`, in :meth:`to_flower` order."""
        return config_fields()

    # ------------------------------------------------------------------ parsing
    @classmethod
    def from_flower(cls, run_config: Mapping[str, Any] | None = None, **overrides: Any) -> RunConfig:
        """Build from a Flower run config (kebab-case keys) plus keyword overrides.

        Keyword overrides may use either snake_case or kebab-case names.
        """
        all_tasks()  # the catalogue, with the plug-ins' components: their groups' keys are known keys too
        raw: dict[str, Any] = {}
        for source in (run_config or {}), overrides:
            for k, v in source.items():
                raw[str(k).replace("_", "-")] = v
        known = {key_of(n): _SETTINGS[n] for n in _ordered()}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown run-config key {unknown[0]!r}"
                + (f" (and {unknown[1:]})" if len(unknown) > 1 else "")
                + _did_you_mean(unknown[0], known)
            )
        values = {}
        for k, v in raw.items():
            if known[k].number_list and isinstance(v, (int, float)) and not isinstance(v, bool):
                v = str(v)  # `dst-ranks=8` on a command line arrives as the TOML number 8
            values[known[k].name] = _coerce(k, v, known[k].type)
        cfg = cls(**values)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Raise :class:`ConfigError` for the first value outside its declared range, then for the
        first broken cross-field rule: the groups' rules, then the task's own."""
        for s in config_fields():
            s.check(key_of(s.name), getattr(self, s.name))
        for g in _GROUPS.values():
            for rule in g.rules:
                rule(self)
        for rule in get_task(self.task).rules:
            rule(self)

    # ------------------------------------------------------------------ output
    def to_flower(self) -> dict[str, Any]:
        """Kebab-case dict of every key: a valid Flower run config / ConfigRecord."""
        return {key_of(n): getattr(self, n) for n in _ordered()}

    def to_dict(self) -> dict[str, Any]:
        """Snake-case dict of every field (what the run hashes are computed from)."""
        return {n: getattr(self, n) for n in _ordered()}

    def replace(self, **changes: Any) -> RunConfig:
        """A validated copy with some fields changed (snake_case or kebab-case names)."""
        return RunConfig.from_flower(self.to_flower(), **changes)


def _rebuild(values: dict[str, Any]) -> RunConfig:
    return RunConfig(**values)


# ---------------------------------------------------------------------- rules' helpers
def check(key: str, ok: bool, value: Any, why: str) -> None:
    """Raise :class:`ConfigError` naming ``key`` with ``why`` unless ``ok`` (for cross-field rules)."""
    if not ok:
        raise ConfigError(f"run-config key {key!r} {why}, got {value!r}")


def tasks_reading(group_name: str) -> tuple[str, ...]:
    """The registered tasks that read ``group_name`` (a group's rule that names where its keys apply)."""
    return tuple(t.name for t in all_tasks() if group_name in t.groups)


def identity_includes(cfg: RunConfig, group_name: str) -> bool:
    """Whether the hash of ``cfg``'s task covers ``group_name`` (a group's rule that holds only for
    the tasks that read the group)."""
    return group_name in get_task(cfg.task).identity_groups


# ---------------------------------------------------------------------- description
class FieldInfo(NamedTuple):
    """One run-config key as :func:`describe` lists it."""

    key: str
    default: Any
    type: str
    group: str
    range: str  # allowed values in words ("" = any value of the type)
    help: str
    hashed: bool  # part of the run's identity


def describe(group: str | None = None) -> list[FieldInfo]:
    """Every run-config key with its default, type, group, range and help, grouped in group
    registration order (declaration order within a group); only ``group``'s keys if given."""
    out = []
    for g in groups():
        if group is not None and g != group:
            continue
        for n in fields_of(g):
            s = _SETTINGS[n]
            out.append(FieldInfo(key_of(n), s.default, s.type, g, s.range_text(), s.help, bool(s.hashed)))
    return out


# ---------------------------------------------------------------------- parsing values
def _did_you_mean(key: str, known: Any) -> str:
    """``; did you mean 'a', 'b'?`` for the valid keys closest to a mistyped ``key`` (difflib's
    ratio), or a pointer to the list: ~200 keys in one line are read by nobody."""
    import difflib

    close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
    if close:
        return "; did you mean " + ", ".join(repr(k) for k in close) + "? (fedcal run --help lists every key)"
    return "; fedcal run --help lists every key"


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``key=value`` override; values are TOML (``tau=5``, ``coupled=false``).

    Bare words that are not TOML are taken as strings (``dataset=digits``).
    """
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value")
    key, value = (s.strip() for s in text.split("=", 1))
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    return key, parsed


def _coerce(key: str, value: Any, type_name: str) -> Any:
    typ = _TYPES[type_name]
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(f"run-config key {key!r} must be a bool, got {value!r}")
    if typ in (int, float):
        kind = "an integer" if typ is int else "a number"
        if not isinstance(value, bool):
            if typ is int and isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, int) or (typ is float and isinstance(value, float)):
                return typ(value)
            if isinstance(value, str):
                try:
                    return typ(value)
                except ValueError:
                    pass
        raise ConfigError(f"run-config key {key!r} must be {kind}, got {value!r}")
    if not isinstance(value, str):
        raise ConfigError(f"run-config key {key!r} must be a string, got {value!r}")
    return value
