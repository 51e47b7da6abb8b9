"""A toy LoRA method defined outside ``fedcal/`` (tests/test_plugin_lora_method.py registers it, checks
its server by hand and runs a distill run with it). The marked region is docs/design.md's worked example
("Adding a LoRA method"), pasted there by ``python -m fedcal.pages include_tables docs/design.md``."""

from __future__ import annotations

# --- example: a plug-in LoRA method ---
from collections import OrderedDict

from fedcal.catalogue import Component
from fedcal.config import setting
from fedcal.distill.adapters import fedit_aggregate, lora_layers
from fedcal.distill.methods import FedITMethod
from fedcal.strategies.lora import to_record
from fedcal.strategies.lora_baselines import FedIT


# 1. The server's rule, on plain {key: tensor} adapter states: every client's B scaled down to a
#    Frobenius norm of at most `bound` per layer; A, B and the head then averaged as FedIT's.
def clip_b(state, bound: float) -> OrderedDict:
    """``state`` with each layer's B scaled to norm ``bound`` where it is longer (A and the head kept)."""
    out = OrderedDict(state)
    for _, b_key in lora_layers(state).values():
        norm = float(state[b_key].norm())
        if norm > bound:
            out[b_key] = state[b_key] * (bound / norm)
    return out


# 2. Its Flower strategy: FedIT's (replies validated, weighted by num-examples, rejections logged,
#    one rank for all), with the clipping before the average. Its keyword arguments besides the ones
#    every LoRA strategy takes come from the component's `params`.
class ClippedBFedIT(FedIT):
    name = "FedIT-clipB"

    def __init__(self, *, b_bound: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.b_bound = float(b_bound)

    def aggregate_states(self, server_round, nodes, states, weights):
        return to_record(fedit_aggregate([clip_b(s, self.b_bound) for s in states], weights))


# 3. The method: its facts and client/server hooks (fedcal.distill.methods.LoraMethod), here FedIT's
#    (one shared rank, the global adapter loaded by every client), with its strategy named lazily.
class ClippedBMethod(FedITMethod):
    name, label = "fedit_clipb", "FedIT-clipB"
    strategy = f"{__name__}:ClippedBFedIT"


# 4. Its declaration: the run-config value (dst-method=fedit_clipb), where it lives (imported only when
#    a run uses it) and its own run-config key with its rules (clipb-bound: read only when dst-method =
#    fedit_clipb, hashed only when set), handed to its strategy by `params`.
CLIPPED_B = Component("lora-method", "fedit_clipb", f"{__name__}:ClippedBMethod",
                      settings={"clipb_bound": setting(1.0, "fedit_clipb: the largest norm of a client's B per layer",
                                                       gt=0, finite=True, hash_when_set=True)},
                      params=lambda cfg: {"b_bound": cfg.clipb_bound},
                      summary="FedIT with every client's B clipped to a norm bound before the average")
# --- end of example ---
