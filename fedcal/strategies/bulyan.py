"""Bulyan over updates: a MultiKrum selection, then a coordinate-wise trimmed mean around the median."""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO, WARNING
from typing import Unpack

import torch
from flwr.app import RecordDict
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.base import UpdateAggregationStrategy
from fedcal.strategies.options import StrategyOptions


class Bulyan(UpdateAggregationStrategy):
    """Bulyan (El Mhamdi et al., ICML 2018), over updates (:func:`fedcal.aggregate.bulyan`):
    MultiKrum selects θ = n − 2f updates, then each coordinate is the mean of the β = θ − 2f
    selected values closest to their median (unweighted: data sizes do not enter).

    Takes the arguments of ``flwr.serverapp.strategy.Bulyan`` with its names, meanings and
    defaults (``num_malicious_nodes=0``, ``selection_rule=None``: MultiKrum), and aggregates what
    it does on clean replies (``tests/test_flower_dropin.py``). Two differences, both deliberate:

    - with fewer than 4f + 3 valid replies Flower skips the round (keeps the model); fedcal
      applies the coordinate-wise median of the valid updates instead, with a warning (no rule
      ends or stalls the run because replies were few, as for :class:`MultiKrum`);
    - buffers (BatchNorm statistics) are the coordinate-wise median over the selected replies,
      not part of the selection's distances.

    Parameters
    ----------
    num_malicious_nodes : int (default 0)
        f, the number of Byzantine replies assumed per round (needs n ≥ 4f + 3 replies).
    selection_rule : callable, optional
        Flower's hook for the first step, ``(list[RecordDict], f, θ) -> list[RecordDict]``,
        called on the accepted replies' contents (full models, in the base's node order); the
        replies it returns are the selection. ``None`` (the default, as in Flower): MultiKrum on
        the updates.
    **options : StrategyOptions
        The shared arguments (Flower's FedAvg ones, seeded sampling, buffers), see the base.
    """

    size_weighting = "ignored"  # El Mhamdi et al.'s rule, and Flower's Bulyan, are unweighted

    def __init__(self, *,
                 num_malicious_nodes: int = 0,
                 selection_rule: Callable[[list[RecordDict], int, int], list[RecordDict]] | None = None,
                 **options: Unpack[StrategyOptions]) -> None:
        super().__init__(**options)
        if num_malicious_nodes < 0:
            raise ValueError(f"Bulyan needs num_malicious_nodes >= 0, got {num_malicious_nodes}")
        if selection_rule is not None and not callable(selection_rule):
            raise TypeError(f"selection_rule must be callable or None, got {type(selection_rule).__name__}")
        self.num_malicious_nodes = num_malicious_nodes
        self.selection_rule = selection_rule
        self._selected: torch.Tensor | None = None  # this round's selection (for the buffers)

    def summary(self) -> None:
        """Log Bulyan's settings, then the shared ones."""
        log(INFO, "\t├──> Bulyan settings:")
        log(INFO, "\t│\t├── Number of malicious nodes: %d", self.num_malicious_nodes)
        log(INFO, "\t│\t└── Selection rule: %s",
            "MultiKrum (on updates)" if self.selection_rule is None else self.selection_rule.__name__)
        super().summary()

    def _select(self, updates: torch.Tensor, f: int, theta: int) -> torch.Tensor:
        """Indices (into the accepted replies) of the θ selected updates."""
        if self.selection_rule is None:
            return agg.multikrum_select(updates, f, theta)
        contents = self.round_contents
        if contents is None:
            raise ValueError("a custom selection_rule needs the replies' contents (aggregate_train's)")
        chosen = self.selection_rule(list(contents), f, theta)
        index = {id(c): i for i, c in enumerate(contents)}
        picked = [index.get(id(c)) for c in chosen]
        if not picked or None in picked or len(set(picked)) != len(picked):
            raise ValueError("selection_rule must return distinct replies from the list it was given")
        return torch.tensor(picked)

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        n, f = updates.shape[0], self.num_malicious_nodes
        self._selected = None
        if n < 4 * f + 3:
            log(WARNING, "round %d: Bulyan with f = %d needs %d valid replies, got %d: applying their "
                "coordinate-wise median instead", server_round, f, 4 * f + 3, n)
            return agg.coordinate_median(updates), torch.ones(n)
        theta = n - 2 * f
        selected = self._select(updates, f, theta)
        self._selected = selected
        delta = agg.mean_around_median(updates[selected], theta - 2 * f)
        mask = torch.zeros(n)
        mask[selected] = 1.0
        log(INFO, "Bulyan round %d selected %s", server_round,
            ", ".join(self.who(node_ids[i]) for i in selected.tolist()))
        return delta, mask

    def aggregate_buffers(self, server_round, node_ids, values, weights):
        """The coordinate-wise median of the buffers of the selected replies (of all replies in a
        round without selection)."""
        return agg.buffer_median(values if self._selected is None else values[self._selected])
