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

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fedcal.attacks.alie import alie
from fedcal.attacks.baselines import inf, mimic, sign_flipping
from fedcal.attacks.fang import fang_krum, fang_trimmed_mean
from fedcal.attacks.ipm import ipm
from fedcal.attacks.optimal import optimal_alie, optimal_ipm
from fedcal.attacks.minmax import min_max, min_sum


@dataclass(frozen=True)
class ModelPoisoning:
    """One model-poisoning attack: ``craft(honest, f, **params) → (f, d)``.

    ``seeded``: ``craft`` draws random numbers and takes ``generator=`` (give it a seeded one,
    so a round's attack is reproducible). ``targets``: the rule the attack is tailored to, or
    ``None`` for an attack that ignores the rule. ``needs_rule``: ``craft`` takes the server's
    rule as ``aggregate=`` (an (n, d) → (d,) function) and searches its parameter against it."""

    name: str
    craft: Callable[..., torch.Tensor]
    source: str
    seeded: bool = False
    targets: str | None = None
    needs_rule: bool = False


POISONING: dict[str, ModelPoisoning] = {
    p.name: p
    for p in (
        ModelPoisoning("alie", alie, "Baruch et al., A Little Is Enough (NeurIPS 2019)"),
        ModelPoisoning("ipm", ipm, "Xie et al., inner-product manipulation (UAI 2019)"),
        ModelPoisoning("minmax", min_max, "Shejwalkar & Houmansadr, Min-Max (NDSS 2021)"),
        ModelPoisoning("minsum", min_sum, "Shejwalkar & Houmansadr, Min-Sum (NDSS 2021)"),
        ModelPoisoning("fang-trmean", fang_trimmed_mean, "Fang et al. (USENIX Security 2020)", seeded=True,
                       targets="trimmed mean / median"),
        ModelPoisoning("fang-krum", fang_krum, "Fang et al. (USENIX Security 2020)", targets="krum"),
        ModelPoisoning("signflip", sign_flipping, "Allen-Zhu et al. (ICLR 2021); ByzFL's SignFlipping"),
        ModelPoisoning("mimic", mimic, "Karimireddy, He & Jaggi (ICLR 2022); ByzFL's Mimic"),
        ModelPoisoning("inf", inf, "ByzFL's Inf (a test of the server's input validation)"),
        ModelPoisoning("opt-alie", optimal_alie, "ByzFL's Optimal_ALittleIsEnough (Allouah et al., AISTATS 2023)",
                       targets="the run's rule", needs_rule=True),
        ModelPoisoning("opt-ipm", optimal_ipm,
                       "ByzFL's Optimal_InnerProductManipulation (Allouah et al., AISTATS 2023)",
                       targets="the run's rule", needs_rule=True),
    )
}


def model_poisoning(name: str) -> ModelPoisoning:
    """The registered attack ``name`` (ValueError naming the choices otherwise)."""
    try:
        return POISONING[name]
    except KeyError:
        raise ValueError(f"unknown model-poisoning attack {name!r}; choose one of {', '.join(POISONING)}") from None


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
