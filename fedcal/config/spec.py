"""Typed specs: the few run-config values one core module reads, as a small frozen dataclass.

Core code (everything outside the Flower shell, the tasks, the studies, the run store and the
reports) never receives the whole :class:`~fedcal.config.RunConfig`: a run config has ~200 keys
and a function that takes it hides which of them it depends on, so a test must build a whole
config and a reader cannot tell what changes its result. Instead each core module declares a
frozen dataclass of exactly the keys it reads and subclasses :class:`ConfigSpec`; its task builds
it with ``Spec.from_config(cfg)``.

The builder is generic so that no spec repeats a setting's default or fills its fields by
position: every field takes the config field of the same name (``lr`` ← ``cfg.lr``), or the one
``CONFIG_KEYS`` names for it (``image_size`` ← ``cfg.det_size``: a name that reads well in the
core); a field whose type is itself a :class:`ConfigSpec` is built from the same config; the
fields named in ``GIVEN`` are what the caller knows and the config does not (the number of
classes of the loaded data), passed as keywords; the fields named in ``OWN`` are not run-config
keys at all (a pretraining schedule fixed in the core) and keep their dataclass defaults.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any, ClassVar, Mapping, TypeVar

from fedcal.config.schema import RunConfig, field_names

S = TypeVar("S", bound="ConfigSpec")


class ConfigSpec:
    """Mixin of a frozen dataclass built from a run config by :meth:`from_config` (module docstring)."""

    #: spec field → config field, where the two names differ
    CONFIG_KEYS: ClassVar[Mapping[str, str]] = {}
    #: spec fields the caller passes to :meth:`from_config` (not read from the config)
    GIVEN: ClassVar[tuple[str, ...]] = ()
    #: spec fields that are no run-config key (they keep their dataclass defaults)
    OWN: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def config_keys(cls) -> dict[str, str]:
        """Spec field → the config field it is read from (nested specs and ``GIVEN`` fields left out)."""
        hints = _hints(cls)
        return {f.name: cls.CONFIG_KEYS.get(f.name, f.name) for f in dataclasses.fields(cls)
                if f.name not in cls.GIVEN + cls.OWN and not _is_spec(hints.get(f.name))}

    @classmethod
    def from_config(cls: type[S], cfg: RunConfig | ConfigSpec, **given: Any) -> S:
        """The spec of run config ``cfg`` (or of a larger spec holding the same keys under the
        config's names); ``given`` holds exactly the ``GIVEN`` fields."""
        if set(given) != set(cls.GIVEN):
            raise TypeError(f"{cls.__name__}.from_config takes the given field(s) {', '.join(cls.GIVEN) or 'none'}, "
                            f"got {', '.join(sorted(given)) or 'none'}")
        hints = _hints(cls)
        values = dict(given)
        for f in dataclasses.fields(cls):
            if f.name in given or f.name in cls.OWN:
                continue
            if _is_spec(hints.get(f.name)):
                values[f.name] = hints[f.name].from_config(cfg)
            else:
                values[f.name] = getattr(cfg, cls.CONFIG_KEYS.get(f.name, f.name))
        return cls(**values)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    # resolved once per class: from_config runs per client and round
    return typing.get_type_hints(cls)


def _is_spec(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, ConfigSpec)


def check_spec(cls: type[ConfigSpec]) -> None:
    """Raise TypeError unless every field of ``cls`` (a frozen dataclass) is a config field, a
    nested spec or a ``GIVEN`` field (what a test runs over every spec)."""
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__} must be a frozen dataclass")
    known = set(field_names())
    props = {n for n in dir(RunConfig) if isinstance(getattr(RunConfig, n, None), property)}
    missing = sorted(f"{name} <- {key}" for name, key in cls.config_keys().items() if key not in known | props)
    if missing:
        raise TypeError(f"{cls.__name__}: no run-config field for {', '.join(missing)}")
