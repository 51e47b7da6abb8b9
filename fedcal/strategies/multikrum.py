"""MultiKrum over updates: average the m updates with the lowest Krum scores."""

from __future__ import annotations

from logging import INFO, WARNING
from typing import Unpack

import torch
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import StrategyOptions, UpdateAggregationStrategy


class MultiKrum(UpdateAggregationStrategy):
    """MultiKrum (Blanchard et al., NeurIPS 2017), over updates.

    When fewer replies arrive than planned, :func:`fedcal.aggregate.multikrum_params` shrinks
    f (to n − 3 at most) and clamps m to [1, n] for that round. With fewer than 3 valid
    replies Krum scores do not exist: the round applies the coordinate-wise median of the
    n ∈ {1, 2} updates instead (one update: itself; two: their unweighted midpoint) and logs
    a warning. Buffers (BatchNorm statistics) are the coordinate-wise median over the
    selected replies (Krum never looked at them, so a selected reply may still carry poisoned
    statistics; the median outvotes it), over all replies in a fallback round.

    Parameters
    ----------
    f : int (default 0)
        The number of Byzantine replies assumed per round; needs n ≥ f + 3 replies.
    m : int, optional
        How many lowest-scored updates are averaged (data-size weighted).
        ``None`` → n − f (the usual MultiKrum); 1 is Krum.
    **options : StrategyOptions
        The shared arguments (Flower's FedAvg ones, seeded sampling, buffers), see the base.
    """

    def __init__(self, *,
                 f: int = 0,
                 m: int | None = None,
                 **options: Unpack[StrategyOptions]) -> None:
        super().__init__(**options)
        if f < 0:
            raise ValueError(f"MultiKrum needs f >= 0, got {f}")
        if m is not None and m < 1:
            raise ValueError(f"MultiKrum needs m >= 1 (or None for n - f), got {m}")
        self.f, self.m = f, m
        self._selected: torch.Tensor | None = None  # this round's Krum selection (for the buffers)

    def summary(self) -> None:
        """Log MultiKrum's settings, then the shared ones."""
        log(INFO, "\t├──> MultiKrum settings:")
        log(INFO, "\t│\t├── f (Byzantine replies assumed): %d", self.f)
        log(INFO, "\t│\t└── m (updates averaged): %s", "n - f" if self.m is None else self.m)
        super().summary()

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        n = updates.shape[0]
        self._selected = None
        if n < 3:
            log(WARNING, "round %d: MultiKrum needs 3 valid replies, got %d (%s): applying their "
                "coordinate-wise median instead (with 2 replies: their mean, no protection)", server_round, n, ", ".join(self.who(x) for x in node_ids))
            return agg.coordinate_median(updates), torch.ones(n)
        f, m = agg.multikrum_params(n, self.f, self.m)
        selected = agg.multikrum_select(updates, f, m)
        self._selected = selected
        mask = torch.zeros(n)
        mask[selected] = 1.0
        w = weights * mask
        log(INFO, "MultiKrum round %d selected %s", server_round,
            ", ".join(self.who(node_ids[i]) for i in selected.tolist()))
        # The selected replies' data sizes, renormalised (in float64) on their own: an excluded
        # reply claiming 1e39 examples must not push the others' float32 weights to zero.
        chosen = agg.fit_weights(self._round_weights[selected], updates.dtype) if self._round_weights is not None \
            else weights[selected]
        return agg.fedavg(updates[selected], chosen), w

    def aggregate_buffers(self, server_round, node_ids, values, weights):
        """The coordinate-wise median of the buffers of the replies Krum selected (of all
        replies in a round without selection)."""
        return agg.buffer_median(values if self._selected is None else values[self._selected])
