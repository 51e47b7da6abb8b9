"""A toy aggregation rule defined outside ``fedcal/`` (tests/test_plugin_rule.py registers and runs
it; tests/test_plugins.py installs it as a package). The marked region is docs/design.md's worked
example ("Adding a rule"), pasted there by ``python docs/tools/include_tables.py docs/design.md``."""

from __future__ import annotations

# --- example: a plug-in rule ---
import torch

from fedcal.catalogue import Component
from fedcal.strategies.base import UpdateAggregationStrategy


# 1. The rule: a strategy whose aggregate_updates maps the round's (n, d) update matrix to the
#    aggregate and each reply's weight (0 = left out). fedcal's base does everything else: Flower's
#    rounds, seeded sampling, reply validation, buffers, the audit table, checkpoints.
class ClosestPairMean(UpdateAggregationStrategy):
    """The coordinate-wise mean of the two replies closest to each other (Euclidean distance)."""

    size_weighting = "ignored"  # claimed data sizes do not enter

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        distances = torch.cdist(updates.double(), updates.double())
        distances.fill_diagonal_(float("inf"))
        i, j = divmod(int(distances.argmin()), len(updates))
        chosen = torch.zeros(len(updates))
        chosen[[i, j]] = 1.0
        return updates[[i, j]].mean(dim=0), chosen


# 2. Its declaration: the run-config value (strategy=closest_pair) and where it lives (imported only
#    when a run uses it). A rule with keys of its own declares them with their rules in settings=
#    ({"closest_k": fedcal.config.setting(2, "...", ge=2)}: read only when strategy=closest_pair) and
#    maps them to its keyword arguments in params=; needs= says what it needs of the server
#    ("root-set", "server-model", ...).
CLOSEST_PAIR = Component("rule", "closest_pair", f"{__name__}:ClosestPairMean",
                         summary="the mean of the two replies closest to each other")
# --- end of example ---
