"""A toy model-poisoning attack defined outside ``fedcal/`` (tests/test_plugin_attack.py registers and
runs it; tests/test_plugins.py installs it as a package). The marked region is docs/design.md's worked
example ("Adding an attack"), pasted there by ``python -m fedcal.pages include_tables docs/design.md``."""

from __future__ import annotations

# --- example: a plug-in attack ---
import torch

from fedcal.catalogue import Component
from fedcal.config import setting


# 1. The crafting function of an omniscient attack: from the round's (n, d) honest updates and the
#    number f of colluders, the f crafted updates (f, d). In simulation the colluders' replies are
#    replaced by these before aggregation (fedcal.tasks.poisoning), their own training kept benign.
def mirror_median(honest: torch.Tensor, f: int, scale: float = 1.0) -> torch.Tensor:
    """f copies of the honest updates' coordinate-wise median, reflected through the origin and scaled."""
    return (-scale * honest.median(dim=0).values).expand(f, -1).clone()


# 2. Its declaration: the run-config value (attack=mirror_median), where it lives (imported only when
#    a run uses it), "omniscient": crafted from the round's honest updates, and its own run-config key
#    with its rules (mirror-scale: read only when attack = mirror_median, hashed only when set), handed
#    to the crafting function by `params`.
MIRROR = Component("attack", "mirror_median", f"{__name__}:mirror_median", needs={"omniscient"},
                   settings={"mirror_scale": setting(1.0, "mirror_median: the factor of the reflected median",
                                                     gt=0, finite=True, hash_when_set=True)},
                   params=lambda spec: {"scale": spec.mirror_scale},
                   summary="the honest median reflected through the origin")
# --- end of example ---
