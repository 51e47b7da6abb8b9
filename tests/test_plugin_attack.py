"""An attack is a plug-in: the toy attack of tests/toy_attack.py, defined outside ``fedcal/``,
registered with the catalogue, is a value of the ``attack`` key and poisons a digits run through
``fedcal run`` and the in-process engine.

Its registration lasts for this module's tests only (the catalogue's registry is copied before and
put back after), so that the other tests see fedcal's attacks alone.
"""

from __future__ import annotations

import pytest
import torch

from fedcal import catalogue


@pytest.fixture(scope="module", autouse=True)
def toy():
    import toy_attack

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(catalogue._REGISTRY, "attack", dict(catalogue.components("attack")))
        catalogue.register(toy_attack.MIRROR)
        yield toy_attack


def test_the_attack_reflects_the_honest_median_by_hand(toy):
    honest = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]])  # coordinate-wise medians 3 and 2
    assert toy.mirror_median(honest, 2).tolist() == [[-3.0, -2.0], [-3.0, -2.0]]
