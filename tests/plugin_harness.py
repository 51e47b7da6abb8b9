"""What the plug-in tests share: a component registered with the catalogue for a block of tests only."""

from __future__ import annotations

import contextlib

import pytest

from fedcal import catalogue


@contextlib.contextmanager
def registered(kind: str, component: catalogue.Component):
    """The catalogue with ``component`` (of ``kind``) registered inside the block; the kind's registry is a
    copy of fedcal's own, put back after, so that the other tests see fedcal's components alone."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(catalogue._REGISTRY, kind, dict(catalogue.components(kind)))
        catalogue.register(component)
        yield
