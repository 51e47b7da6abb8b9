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
bulyan              :func:`bulyan` (a MultiKrum selection, then :func:`mean_around_median`)
fltrust             :func:`fltrust`
foolsgold           :class:`FoolsGoldHistory` (stateful: per-client histories),
                    :func:`foolsgold_weights`
flatten             :func:`flatten_state`, :func:`unflatten`, :func:`add_flat_update`
buffers             non-trained state (BatchNorm statistics): :func:`buffer_problem`
                    (validation), :func:`buffer_mean` (FedAvg), :func:`buffer_median` (robust)
numerics            overflow-free helpers: :func:`fit_weights`, :func:`overflow_free_mean`, …
claims              claimed data sizes under a robust rule: :func:`cap_at_median`
==================  ==========================================================================

Pre-aggregation steps map the ``(n, d)`` updates to ``(n', d)`` rows, so any rule runs after
them; :func:`compose` builds the composed rule (``compose([partial(nnm, f=f)],
partial(trimmed_mean, f=f))``) and :func:`pre_aggregate` runs a pipeline with the same input
checks as the rules and a check of every step's output:

==================  ==========================================================================
module              pre-aggregation steps
==================  ==========================================================================
nnm                 :func:`nnm` (nearest-neighbour mixing)
bucketing           :func:`bucketing` (+ :func:`bucket_labels`)
clipping            :func:`static_clip`, :func:`arc` (adaptive robust clipping, + :func:`arc_count`)
centered_clipping   :func:`centered_clip`
compose             :func:`compose`, :func:`pre_aggregate`
==================  ==========================================================================

The coordinate-wise order statistics (trimmed mean, median, median of means) ignore data-size
weights: a Byzantine client can report any data size, and the classical definitions are
unweighted. The rules that take ``weights`` (the geometric median, MultiKrum's mean, FedAvg) weigh
whatever they are given: a caller that feeds them claimed sizes from clients it does not trust
caps them first (:func:`cap_at_median`, what fedcal's robust strategies do). :func:`multikrum_params` and :func:`trim_for` give the hyper-parameters a rule
actually uses when fewer replies than planned arrived; the Flower strategies call them.

Overflow: a finite update of norm 1e30 squares to 1e60, above float32's range. Every rule
computes its norms, distances, Gram matrices and sums so that such an update stays what it is —
one far point — instead of turning them into inf/NaN: MultiKrum's distances are float64 (centred
on the coordinate median when one row dwarfs the rest), the geometric median, FLTrust and
FoolsGold switch to a float64 computation on rescaled rows where squares could overflow, and the
means, medians and group means take a rescaled sum where theirs would overflow. Those fallbacks
are taken only where the plain formula would overflow, so ordinary inputs give the same bits,
with two deliberate exceptions: MultiKrum centres on the coordinate median (instead of the
mean) when one row is over 2^20 times the typical one, and FoolsGold's ``norm_bound`` scales
down an update over 100 × the round's median norm (bounded influence, a fedcal addition; e.g.
the noise-injection baseline at σ = 0.1 is clipped by it).
"""

from __future__ import annotations

from .bucketing import bucket_labels, bucketing
from .bulyan import bulyan, mean_around_median
from .buffers import buffer_mean, buffer_median, buffer_problem
from .centered_clipping import centered_clip
from .claims import cap_at_median
from .clipping import arc, arc_count, static_clip
from .compose import compose, pre_aggregate
from .flatten import add_flat_update, flatten_state, unflatten
from .fltrust import fltrust
from .foolsgold import FoolsGoldHistory, foolsgold_weights
from .geometric_median import geometric_median
from .mean import fedavg
from .numerics import fit_weights, overflow_free_mean
from .median import coordinate_median, true_median
from .median_of_means import median_of_means
from .multikrum import krum_scores, multikrum, multikrum_params, multikrum_select, pairwise_sq_distances
from .nnm import nnm
from .trimmed_mean import trim_for, trimmed_mean, trimmed_mean_along

__all__ = [
    "FoolsGoldHistory",
    "arc",
    "arc_count",
    "bucket_labels",
    "bucketing",
    "cap_at_median",
    "centered_clip",
    "compose",
    "nnm",
    "pre_aggregate",
    "static_clip",
    "buffer_mean",
    "bulyan",
    "buffer_median",
    "buffer_problem",
    "fit_weights",
    "overflow_free_mean",
    "coordinate_median",
    "fedavg",
    "flatten_state",
    "add_flat_update",
    "fltrust",
    "foolsgold_weights",
    "geometric_median",
    "krum_scores",
    "mean_around_median",
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
