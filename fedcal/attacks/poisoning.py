"""The model-poisoning attacks of Byzantine-robust FL, findable by name (flwr-free).

Each is a function of the round's honest updates ``(n_h, d)``, the number f of malicious
clients and its own parameters, returning the ``(f, d)`` malicious updates — a crafted reply,
not a locally trained one, so these are not :class:`~fedcal.attacks.BehaviourKind` s (those change
how a client trains). :func:`craft_malicious` calls one by name.

Threat model (docs/attacks.md): the literature evaluates these attacks with *omniscient*
colluding attackers, who see every honest update of the round before they reply; in simulation
that is a server-side step between the honest replies and the aggregation. On a real
federation the same functions run on the colluders' own benign updates (trained on their own
data), the papers' "partial knowledge" setting; Fang's Krum variant also assumes the attackers
know the rule and its f.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fedcal import catalogue


@dataclass(frozen=True)
class ModelPoisoning:
    """One model-poisoning attack: ``craft(honest, f, **params) → (f, d)``.

    ``seeded``: ``craft`` draws random numbers and takes ``generator=`` (give it a seeded one,
    so a round's attack is reproducible). ``needs_rule``: ``craft`` takes the server's rule as
    ``aggregate=`` (an (n, d) → (d,) function) and searches its parameter against it. ``source``:
    the paper (the component's summary)."""

    name: str
    craft: Callable[..., torch.Tensor]
    source: str
    seeded: bool = False
    needs_rule: bool = False


def _of(component: catalogue.Component) -> ModelPoisoning:
    craft = component.load()
    return ModelPoisoning(component.name, craft, component.summary,
                          seeded="generator" in inspect.signature(craft).parameters,
                          needs_rule="rule-aware" in component.needs)


def __getattr__(name: str) -> Any:
    # POISONING: name → ModelPoisoning of every attack of the catalogue that the omniscient colluders craft
    # (need ``omniscient``), read when asked
    if name == "POISONING":
        return {n: _of(catalogue.get("attack", n)) for n in catalogue.needing("attack", "omniscient")}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def model_poisoning(name: str) -> ModelPoisoning:
    """The registered attack ``name`` (ValueError naming the choices otherwise)."""
    crafted = catalogue.needing("attack", "omniscient")
    if name not in crafted:
        raise ValueError(f"unknown model-poisoning attack {name!r}; choose one of {', '.join(crafted)}")
    return _of(catalogue.get("attack", name))


def craft_malicious(name: str, honest: torch.Tensor, f: int, generator: torch.Generator | None = None,
                    aggregate: Callable[[torch.Tensor], torch.Tensor] | None = None, **params) -> torch.Tensor:
    """The (f, d) malicious updates of attack ``name`` against the ``honest`` updates; ``params``
    go to the attack, ``generator`` only to the seeded ones (the deterministic ones draw
    nothing, so a caller can hand every attack its round's generator alike), ``aggregate`` (the
    server's rule) only to those that need it (ValueError when one of them gets none)."""
    attack = model_poisoning(name)
    if attack.needs_rule:
        if aggregate is None:
            raise ValueError(f"attack {name!r} searches its parameter against the server's rule: give aggregate=")
        params = {**params, "aggregate": aggregate}
    if attack.seeded:
        return attack.craft(honest, f, generator=generator, **params)
    return attack.craft(honest, f, **params)
