"""The component catalogue: every named choice of a run config, declared once.

A *component* is one value of a run-config key that selects an implementation — an aggregation rule
(``strategy``), a pre-aggregation step, an attack, an inference attack or aggregator, a LoRA method, a
tracker, a task. Each is declared once, as a :class:`Component`: its kind and name (the run-config
value), a lazy reference to its implementation (``"package.module:attribute"``, imported only by
:func:`load`), its own run-config keys — those only it reads declared here with their rules
(``settings``: default, bounds or choices, help, hash-when-set; the config registers them, read only
when the component is chosen) —, how its keyword arguments come from a run config (``params``), what it
needs of the federation (:data:`NEEDS`: a root set, the server's model, …), what its runs' directory
names say of it (``name_part``), the modules besides its implementation's that are its own (a sibling
form, its study, its results page: ``modules``), which of its keys takes the number of Byzantine
clients (``f_key``) and a one-line summary. Everything else is derived from the declarations: the
config's ``choices`` (:func:`names`), the registries that build an implementation (:func:`load` and
``params``), and the questions "which rules need a root set" (:func:`needing`).

This module is flwr-free and torch-free at import: the config imports it to list its choices. The
built-in components are declared in this package's other modules (``rules``, ``attacks``,
``inference``, ``trackers``, ``lora``) and registered when the catalogue is first read; an installed
package adds its own through the entry-point group :data:`ENTRY_POINT_GROUP` (each entry point
loads to a :class:`Component` or an iterable of them), loaded once per process, so that its rule,
attack or task is known to every process of a federation (``flwr run``, SuperNodes, Ray workers).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Component", "ENTRY_POINT_GROUP", "KINDS", "NEEDS", "components", "get", "load", "names", "needing",
           "register"]

#: the kinds of component, each the values of one run-config key (or a list key's items)
KINDS = ("rule", "pre-aggregation", "attack", "inference-attack", "inference-aggregator", "lora-method", "tracker",
         "task")
#: what a component may need or offer, in words:
#: ``root-set`` — a labelled root set of the server's (FLTrust, CalGuard on its root signal);
#: ``server-model`` — a model of the federation's architecture on the server;
#: ``batchable`` — runs in the batched engine (its client step is the benign one, or one the engine batches);
#: ``omniscient`` — an attack crafted from the round's honest updates (a server-side colluders' step);
#: ``history`` — a rule whose result depends on earlier rounds (FoolsGold, CalGuard), not the round's updates alone;
#: ``rule-aware`` — an attack that evaluates the server's rule on candidate updates (it needs a rule
#: without ``history`` or ``root-set``);
#: ``loss-temperature`` — an attack whose client step changes the local loss's temperature and learning rate
#: alone (TSA): the one the lm and detect tasks' clients implement
NEEDS = ("root-set", "server-model", "batchable", "omniscient", "history", "rule-aware", "loss-temperature")
#: the entry-point group an installed package declares its components in
ENTRY_POINT_GROUP = "fedcal.components"
#: the modules declaring fedcal's own components (imported when the catalogue is first read); the tasks
#: are declared by their config group modules (:class:`fedcal.config.Task`), registered by fedcal.config
_BUILTIN = ("fedcal.catalogue.rules", "fedcal.catalogue.attacks", "fedcal.catalogue.inference",
            "fedcal.catalogue.trackers", "fedcal.catalogue.lora", "fedcal.config")


@dataclass(frozen=True)
class Component:
    """One named choice: see the module docstring."""

    kind: str  # one of KINDS
    name: str  # the run-config value, e.g. "trimmed_mean", "alie", "rfd"
    target: str  # lazy reference "package.module:attribute" to the implementation
    keys: tuple[str, ...] = ()  # its own run-config keys (field names), e.g. ("trim_f",); with settings' names
    # its own keys declared here, field name → fedcal.config.setting(...) (default, bounds or choices, help,
    # hash_when_set; the type is the default's): fedcal.config registers each, read only when a run chooses a
    # component declaring it. A key another component declares too (Min-Max's and Min-Sum's direction) is the
    # same declaration in both. Stored as (name, setting) pairs; `keys` lists their names after its own.
    settings: Any = ()
    # its keyword arguments from a run config (a fedcal.config.RunConfig, or a spec holding its keys: the
    # catalogue names no config type, which imports it)
    params: Callable[[Any], dict[str, Any]] | None = None
    needs: frozenset[str] = frozenset()  # of NEEDS
    summary: str = ""  # one line for --help and docs
    # the words its runs' directory names carry for it, from a run config: its own label first (TSA's
    # temperature, "tsa5u"), then details named only when used (TSA's adaptive knobs); default: its name
    name_part: Callable[[Any], Iterable[str]] | None = None
    # modules besides its target's that are its own, each about this component alone (a sibling form of its
    # implementation, its study, its results page): the only modules besides the catalogue that may name it
    modules: tuple[str, ...] = ()
    # which of its own keys takes the number of Byzantine clients f (ByzFL's aggregators' ``f``): what a
    # study that varies f sets; None when it takes none
    f_key: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"component {self.name!r}: unknown kind {self.kind!r}; choose one of {', '.join(KINDS)}")
        if not self.name or self.name != self.name.strip() or "," in self.name:
            raise ValueError(f"{self.kind} component: name {self.name!r} must be a non-empty word without commas")
        module, sep, attr = self.target.partition(":")
        if not (module and sep and attr):
            raise ValueError(f"{self.kind} {self.name!r}: target {self.target!r} is not 'package.module:attribute'")
        settings = tuple(self.settings.items()) if isinstance(self.settings, Mapping) else tuple(self.settings)
        if not all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in settings):
            raise ValueError(f"{self.kind} {self.name!r}: settings must map key names to setting(...) declarations")
        object.__setattr__(self, "settings", settings)
        object.__setattr__(self, "keys", tuple(dict.fromkeys((*self.keys, *(n for n, _ in settings)))))
        object.__setattr__(self, "needs", frozenset(self.needs))
        object.__setattr__(self, "modules", tuple(self.modules))
        bad = [m for m in self.modules if not m or ":" in m or "/" in m]
        if bad:
            raise ValueError(f"{self.kind} {self.name!r}: module {bad[0]!r} is not 'package.module'")
        if self.f_key is not None and self.f_key not in self.keys:
            raise ValueError(f"{self.kind} {self.name!r}: f_key {self.f_key!r} is not one of its keys")
        unknown = sorted(self.needs - set(NEEDS))
        if unknown:
            raise ValueError(f"{self.kind} {self.name!r}: unknown need {unknown[0]!r}; choose from {', '.join(NEEDS)}")

    def kwargs(self, cfg: Any) -> dict[str, Any]:
        """Its keyword arguments from run config ``cfg`` (or a spec holding its keys); {} without ``params``."""
        return dict(self.params(cfg)) if self.params is not None else {}

    def run_label(self, cfg: Any, detail: bool = True) -> str:
        """What a run directory's name says of it for run config ``cfg``: :attr:`name_part`'s words joined
        by "-" (only the first without ``detail``: the tasks whose names never carried the details)."""
        words = [self.name] if self.name_part is None else list(self.name_part(cfg))
        return "-".join(words if detail else words[:1])

    def own_modules(self) -> tuple[str, ...]:
        """The modules that are its own: its target's, then :attr:`modules`."""
        return (self.target.partition(":")[0], *self.modules)

    def load(self) -> Any:
        """Its implementation (imports ``target``)."""
        module, _, attr = self.target.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj


_REGISTRY: dict[str, dict[str, Component]] = {k: {} for k in KINDS}
#: checks a component must pass before it is registered (each raises ValueError in one line): the config
#: installs the one of its declared settings (a key clashing with another's, a type it cannot hold)
_CHECKS: list[Callable[[Component], None]] = []
_log = logging.getLogger("fedcal.catalogue")
_STATE = {"loaded": False, "registered": 0}  # registered: how many register() calls (the config's sync asks)


def register(component: Component) -> Component:
    """Add ``component`` to the catalogue; a second one of the same kind and name is refused (ConfigError,
    one line: the commands print it as such), the same declaration twice is a no-op (a module imported again)."""
    if not isinstance(component, Component):
        raise TypeError(f"register takes a Component, got {type(component).__name__}")
    known = _REGISTRY[component.kind]
    if component.name in known and known[component.name] != component:
        from fedcal.config.errors import ConfigError  # here: see get()

        raise ConfigError(f"{component.kind} {component.name!r} is declared twice ({known[component.name].target} "
                         f"and {component.target})")
    _check(component)
    known[component.name] = component
    _STATE["registered"] += 1
    return component


def _ensure_loaded() -> None:
    if _STATE["loaded"]:
        return
    _STATE["loaded"] = True  # first: a plug-in's module may read the catalogue while it loads
    try:
        for module in _BUILTIN:
            importlib.import_module(module)
        _load_entry_points()
    except BaseException:
        _STATE["loaded"] = False  # what failed here (a built-in module) fails every read, not only the first
        raise


def _load_entry_points() -> None:
    """Register the components of every installed package's entry points (group
    :data:`ENTRY_POINT_GROUP`). A broken one — it fails to import, loads to something else than
    components, or redeclares a known name — is left out with one warning naming its distribution
    and the error; the others still load, so one bad plug-in breaks no run that does not use it."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        where = f"{ep.dist.name if ep.dist is not None else 'an unknown distribution'} (entry point {ep.name!r} = {ep.value!r})"
        try:
            loaded = ep.load()
            items = ([loaded] if isinstance(loaded, Component)
                     else list(loaded) if isinstance(loaded, Iterable) and not isinstance(loaded, (str, bytes)) else None)
            if items is None or not all(isinstance(c, Component) for c in items):
                raise TypeError(f"it must load to a Component or an iterable of them, got {type(loaded).__name__}")
            for c in items:  # all or none: a clash leaves the whole entry point out
                known = _REGISTRY[c.kind].get(c.name)
                if known is not None and known != c:
                    raise ValueError(f"{c.kind} {c.name!r} is declared already ({known.target})")
                _check(c)
            for c in items:
                register(c)
        except Exception as e:  # a broken plug-in names itself instead of failing every run config
            _log.warning("fedcal: plug-in %s of group %r left out: %s: %s", where, ENTRY_POINT_GROUP,
                         type(e).__name__, " ".join(str(e).split()))


def _check(component: Component) -> None:
    """Raise ValueError (a ConfigError, one line, from the installed checks) if ``component`` cannot be registered."""
    for check in _CHECKS:
        check(component)


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown component kind {kind!r}; choose one of {', '.join(KINDS)}")


def components(kind: str) -> dict[str, Component]:
    """The components of ``kind`` by name, in declaration order (built-ins, then entry points')."""
    _check_kind(kind)
    _ensure_loaded()
    return dict(_REGISTRY[kind])


def names(kind: str) -> tuple[str, ...]:
    """The names of ``kind``'s components, in declaration order (the config's choices)."""
    return tuple(components(kind))


def get(kind: str, name: str) -> Component:
    """The component ``name`` of ``kind``; an unknown name is a ConfigError naming the kind, the name
    and the known names."""
    known = components(kind)
    try:
        return known[name]
    except (KeyError, TypeError):
        # imported here, not at the top: fedcal.config imports the catalogue (a Task is a Component), so
        # the catalogue imports nothing of fedcal.config while it is itself imported
        from fedcal.config.errors import ConfigError

        raise ConfigError(f"unknown {kind} {name!r}; choose one of {', '.join(known)}") from None


def load(kind: str, name: str) -> Any:
    """The implementation of component ``name`` of ``kind`` (its target, imported now)."""
    return get(kind, name).load()


def needing(kind: str, need: str) -> tuple[str, ...]:
    """The names of ``kind``'s components that need (or declare) ``need``, in declaration order."""
    if need not in NEEDS:
        raise ValueError(f"unknown need {need!r}; choose one of {', '.join(NEEDS)}")
    return tuple(n for n, c in components(kind).items() if need in c.needs)
