"""Robust aggregation rules (SPEC §3), flwr-free and fully vectorised in torch: one function per
rule, one module per rule.

Every rule takes a stacked ``(n, d)`` floating tensor ``updates`` of client updates Δ_k
(n clients, d flattened parameters; CPU or CUDA) and returns a ``(d,)`` aggregate on the same
device and dtype. ``weights`` is an optional ``(n,)`` non-negative tensor of data sizes; ``None``
means equal weights.

==================  ==========================================================================
module              rules
==================  ==========================================================================
mean                :func:`fedavg`
trimmed_mean        :func:`trimmed_mean`, :func:`trim_for` (+ :func:`trimmed_mean_along`)
median              :func:`coordinate_median` (+ :func:`true_median`)
geometric_median    :func:`geometric_median` (batched: updates (n, d) and probits (B, n, C))
median_of_means     :func:`median_of_means`
multikrum           :func:`multikrum`, :func:`multikrum_select`, :func:`krum_scores`,
                    :func:`multikrum_params`, :func:`pairwise_sq_distances`
fltrust             :func:`fltrust`
foolsgold           :class:`FoolsGoldHistory` (stateful: per-client histories),
                    :func:`foolsgold_weights`
flatten             :func:`flatten_state`, :func:`unflatten`
==================  ==========================================================================

The coordinate-wise order statistics (trimmed mean, median, median of means) ignore data-size
weights: a Byzantine client can report any data size, and the classical definitions are
unweighted. :func:`multikrum_params` and :func:`trim_for` give the hyper-parameters a rule
actually uses when fewer replies than planned arrived; the Flower strategies call them.
"""

from __future__ import annotations

from .flatten import flatten_state, unflatten
from .fltrust import fltrust
from .foolsgold import FoolsGoldHistory, foolsgold_weights
from .geometric_median import geometric_median
from .mean import fedavg
from .median import coordinate_median, true_median
from .median_of_means import median_of_means
from .multikrum import krum_scores, multikrum, multikrum_params, multikrum_select, pairwise_sq_distances
from .trimmed_mean import trim_for, trimmed_mean, trimmed_mean_along

__all__ = [
    "FoolsGoldHistory",
    "coordinate_median",
    "fedavg",
    "flatten_state",
    "fltrust",
    "foolsgold_weights",
    "geometric_median",
    "krum_scores",
    "median_of_means",
    "multikrum",
    "multikrum_params",
    "multikrum_select",
    "pairwise_sq_distances",
    "trim_for",
    "trimmed_mean",
    "trimmed_mean_along",
    "true_median",
    "unflatten",
]
