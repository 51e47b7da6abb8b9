"""MultiKrum over updates: average the m updates with the lowest Krum scores."""

from __future__ import annotations

from logging import INFO, WARNING
from typing import Unpack

import torch
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import UpdateAggregationStrategy
from fedcal.strategies.options import StrategyOptions


class MultiKrum(UpdateAggregationStrategy):
    """MultiKrum (Blanchard et al., NeurIPS 2017), over updates.

    Takes the arguments of ``flwr.serverapp.strategy.MultiKrum`` with its names, meanings and
    defaults (``num_malicious_nodes=0``, ``num_nodes_to_select=1``), so replacing Flower's import
    with fedcal's changes nothing else in a ServerApp; on clean replies both aggregate the same
    model (``tests/test_flower_dropin.py``). Flower scores full models, fedcal the updates
    (reply − sent): their pairwise distances are the same, only the float rounding differs.
    ``num_nodes_to_select=None`` (fedcal's addition) averages n − f, the usual MultiKrum.

    When fewer replies arrive than planned, :func:`fedcal.aggregate.multikrum_params` shrinks
    f (to n − 3 at most, so Krum's n − f − 2 neighbours are Flower's ``max(1, n - f - 2)``) and
    clamps the selection to [1, n] for that round. With fewer than 3 valid replies Krum scores
    do not exist: the round applies the coordinate-wise median of the n ∈ {1, 2} updates instead
    (one update: itself; two: their unweighted midpoint; Flower's scores tie there and with one
    node to select it keeps the first reply) and logs a warning. Buffers (BatchNorm statistics) are the coordinate-wise median over the selected
    replies (Krum never looked at them, so a selected reply may still carry poisoned statistics;
    the median outvotes it), over all replies in a fallback round.

    Parameters
    ----------
    num_malicious_nodes : int (default 0)
        f, the number of Byzantine replies assumed per round; Krum scores sum the squared
        distances to the n − f − 2 nearest other updates.
    num_nodes_to_select : int or None (default 1)
        m, how many lowest-scored updates are averaged, weighted by their claimed data sizes
        capped at the round's median claim (Flower weighs by the claims themselves): 1 is Krum;
        ``None`` → n − f.
    **options : StrategyOptions
        The shared arguments (Flower's FedAvg ones, seeded sampling, buffers), see the base.
    """

    #: Krum's selection never reads the sizes, but the mean of the selected replies does: uncapped,
    #: one selected client claiming 1e30 examples would be the whole aggregate (m updates' worth of
    #: influence); capped at the round's median claim it weighs what a median client weighs.
    size_weighting = "capped"

    def __init__(self, *,
                 num_malicious_nodes: int = 0,
                 num_nodes_to_select: int | None = 1,
                 **options: Unpack[StrategyOptions]) -> None:
        super().__init__(**options)
        if num_malicious_nodes < 0:
            raise ValueError(f"MultiKrum needs num_malicious_nodes >= 0, got {num_malicious_nodes}")
        if num_nodes_to_select is not None and num_nodes_to_select < 1:
            raise ValueError(f"MultiKrum needs num_nodes_to_select >= 1 (or None for n - f), got {num_nodes_to_select}")
        self.num_malicious_nodes, self.num_nodes_to_select = num_malicious_nodes, num_nodes_to_select
        self._selected: torch.Tensor | None = None  # this round's Krum selection (for the buffers)

    def summary(self) -> None:
        """Log MultiKrum's settings, then the shared ones."""
        log(INFO, "\t├──> MultiKrum settings:")
        log(INFO, "\t│\t├── Number of malicious nodes: %d", self.num_malicious_nodes)
        log(INFO, "\t│\t└── Number of nodes to select: %s",
            "n - f" if self.num_nodes_to_select is None else self.num_nodes_to_select)
        super().summary()

    @classmethod
    def unweighted(cls, server_round, *, num_malicious_nodes: int = 0, num_nodes_to_select: int | None = None,
                   **params):
        def rule(x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] < 3:  # MultiKrum's own fallback
                return agg.coordinate_median(x)
            return agg.multikrum(x, *agg.multikrum_params(x.shape[0], num_malicious_nodes, num_nodes_to_select))
        return rule

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        n = updates.shape[0]
        self._selected = None
        if n < 3:
            log(WARNING, "round %d: MultiKrum needs 3 valid replies, got %d (%s): applying their "
                "coordinate-wise median instead (with 2 replies: their mean, no protection)", server_round, n, ", ".join(self.who(x) for x in node_ids))
            return agg.coordinate_median(updates), torch.ones(n)
        f, m = agg.multikrum_params(n, self.num_malicious_nodes, self.num_nodes_to_select)
        selected = agg.multikrum_select(updates, f, m)
        self._selected = selected
        mask = torch.zeros(n)
        mask[selected] = 1.0
        w = weights * mask
        log(INFO, "MultiKrum round %d selected %s", server_round,
            ", ".join(self.who(node_ids[i]) for i in selected.tolist()))
        # The selected replies' (median-capped) data sizes, renormalised (in float64) on their own:
        # an excluded reply's claim must not push the others' float32 weights to zero.
        chosen = agg.fit_weights(self._round_weights[selected], updates.dtype) if self._round_weights is not None \
            else weights[selected]
        return agg.fedavg(updates[selected], chosen), w

    def aggregate_buffers(self, server_round, node_ids, values, weights):
        """The coordinate-wise median of the buffers of the replies Krum selected (of all
        replies in a round without selection)."""
        return agg.buffer_median(values if self._selected is None else values[self._selected])
