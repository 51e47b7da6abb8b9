"""A setting's choices read from the component catalogue (:mod:`fedcal.catalogue`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class ComponentNames(Sequence):
    """The names of a kind of component of :mod:`fedcal.catalogue`, read when asked (the catalogue
    loads plug-ins' components once, after the config is imported): as a setting's ``choices``, every
    name of ``kind``; as the values of its ``only_with``, the components that declare the setting
    among their own keys (``key``, filled in when the setting's group registers)."""

    def __init__(self, kind: str, key: str | None = None) -> None:
        self.kind, self.key = kind, key

    def __call__(self) -> tuple[str, ...]:
        from fedcal import catalogue

        if self.key is None:
            return catalogue.names(self.kind)
        return tuple(n for n, c in catalogue.components(self.kind).items() if self.key in c.keys)

    def __getitem__(self, i: Any) -> Any:
        return self()[i]

    def __len__(self) -> int:
        return len(self())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ComponentNames) and (self.kind, self.key) == (other.kind, other.key)

    def __hash__(self) -> int:
        return hash((self.kind, self.key))

    def __repr__(self) -> str:
        return f"ComponentNames({self.kind!r}{'' if self.key is None else f', key={self.key!r}'})"
