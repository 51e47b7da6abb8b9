"""A wrong keyword to a fedcal strategy names the class the user called: the strategies hand
their ``**options`` to :class:`fedcal.strategies.base.UpdateAggregationStrategy`, so Python's own
``TypeError`` would name that base class instead."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any


def unexpected_keyword(cls: type, name: str) -> str:
    """``<Class>.__init__() got an unexpected keyword argument 'name'`` for the class the user
    called (not the base that received ``**options``), with the closest accepted name."""
    accepted = [p for c in cls.__mro__ for p in _init_names(c)]
    close = difflib.get_close_matches(name, accepted, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{cls.__name__}.__init__() got an unexpected keyword argument {name!r}{hint}"


def naming_the_class_called(init: Callable) -> Callable:
    """The base's ``__init__``, refusing an unknown keyword with :func:`unexpected_keyword`: the
    subclasses hand it their ``**options``, so Python's own TypeError would name this base class.
    (``functools.wraps``: ``inspect.signature`` still shows the base's arguments.)"""
    names = set(inspect.signature(init).parameters) - {"self"}

    @functools.wraps(init)
    def checked(self, *args: Any, **kwargs: Any) -> None:
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise TypeError(unexpected_keyword(type(self), unknown[0]))
        init(self, *args, **kwargs)

    return checked


def _init_names(cls: type) -> list[str]:
    init = cls.__dict__.get("__init__")
    if init is None:
        return []
    return [n for n, p in inspect.signature(init).parameters.items()
            if n != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
