"""Client behaviours of the Byzantine-robust FL attacks (flwr-free): the colluders of the model-poisoning
attacks, and the pixel-pattern image backdoor.

- :class:`ModelPoisoningClient` (``attack`` = alie, ipm, minmax, minsum, fang-trmean,
  fang-krum, signflip, mimic, inf,
  opt-alie, opt-ipm): the client trains benignly; its reply is a crafted update, a function of the
  round's honest updates (:func:`fedcal.attacks.craft_malicious`). In simulation that crafting is
  the omniscient colluders' server-side step between the honest replies and the aggregation
  (``fedcal.tasks.poisoning``); this kind only marks the client as malicious and keeps its
  training the benign protocol's (its own benign update is what a real colluder would craft
  from: the papers' partial-knowledge setting).
- :class:`ImageBackdoor` (``attack`` = backdoor): the client stamps the trigger on
  ``backdoor-frac`` of its images and relabels them to ``backdoor-target``
  (:func:`fedcal.attacks.poison_images`), then trains normally — a realistic attack: it needs
  nothing but its own data.
"""

from __future__ import annotations

import torch

from fedcal.attacks.backdoor import PixelBackdoor, poison_images
from fedcal.attacks.behaviour import AttackSpec, Behaviour, BehaviourKind, round_generator
from fedcal.data import pixel_space


class ModelPoisoningClient(BehaviourKind):
    """A colluding client of a model-poisoning attack: trains as a benign client; its reply is
    replaced by the attack's crafted update before aggregation (see the module docstring)."""

    def __init__(self, attack: str):
        self.kind = attack
        self.attack = attack

    def from_spec(self, spec: AttackSpec) -> Behaviour:
        return Behaviour(kind=self.kind)


class ImageBackdoor(BehaviourKind):
    """BadNets-style pixel-pattern backdoor (Gu et al., 2017; the data-poisoning backdoor of
    Bagdasaryan et al., AISTATS 2020): ``round(frac · N)`` of the client's images, chosen once
    per client (the same poisoned set every round, as a client's data set is fixed), carry the
    trigger and the target label."""

    kind = "backdoor"
    attack = "backdoor"
    defaults = {"backdoor_target": 0, "backdoor_frac": 0.0}

    def from_spec(self, spec: AttackSpec) -> Behaviour:
        return Behaviour(kind="backdoor", backdoor_target=spec.backdoor_target, backdoor_frac=spec.backdoor_frac)

    def _backdoor(self, behaviour: Behaviour) -> PixelBackdoor:
        return PixelBackdoor(target=self.param(behaviour, "backdoor_target"),
                             poison_frac=self.param(behaviour, "backdoor_frac"))

    def check(self, behaviour: Behaviour) -> None:
        self._backdoor(behaviour)

    def train_data(self, behaviour: Behaviour, x: torch.Tensor, y: torch.Tensor, dataset: str, seed: int,
                   client_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        backdoor = self._backdoor(behaviour)
        # round 0: one stream per client for the whole run, so the poisoned subset never changes
        poisoned = poison_images(x, y, backdoor, pixel_space(dataset),
                                 generator=round_generator(seed, 0, client_id, stream="backdoor"))
        return poisoned.x, poisoned.y
