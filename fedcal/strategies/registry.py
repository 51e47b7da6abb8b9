"""The strategy registry: run-config name → strategy class, and the one builder from a run config."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from logging import WARNING
from typing import TYPE_CHECKING, Any

import torch
from flwr.app import ArrayRecord
from flwr.supercore import log
from torch import nn

from fedcal.aggregate import arc, centered_clip, nnm, static_clip
from fedcal.aggregate.compose import PreStep
from fedcal.sequential import ClientCusum
from fedcal.strategies.base import UpdateAggregationStrategy
from fedcal.strategies.calguard import CalGuard
from fedcal.strategies.fedavg import FedAvg
from fedcal.strategies.fltrust import FLTrust
from fedcal.strategies.foolsgold import FoolsGold
from fedcal.strategies.geometric_median import GeometricMedian
from fedcal.strategies.median import Median
from fedcal.strategies.median_of_means import MedianOfMeans
from fedcal.strategies.multikrum import MultiKrum
from fedcal.strategies.trimmed_mean import TrimmedMean

if TYPE_CHECKING:
    from fedcal.config import RunConfig

#: The strategy of each value of the run-config key ``strategy`` (``fedcal.config.STRATEGIES``).
STRATEGIES: dict[str, type[UpdateAggregationStrategy]] = {
    "fedavg": FedAvg,
    "fltrust": FLTrust,
    "foolsgold": FoolsGold,
    "multikrum": MultiKrum,
    "trimmed_mean": TrimmedMean,
    "median": Median,
    "geometric_median": GeometricMedian,
    "median_of_means": MedianOfMeans,
    "calguard": CalGuard,
}


#: The pre-aggregation step of each name of the run-config key ``pre-aggregation``
#: (``fedcal.config.PRE_AGGREGATIONS``), built from the run config's parameters.
PRE_AGGREGATION: dict[str, Callable[[RunConfig], PreStep]] = {
    "nnm": lambda cfg: partial(nnm, f=cfg.pre_f),
    "clip": lambda cfg: partial(static_clip, c=cfg.clip_c),
    "arc": lambda cfg: partial(arc, f=cfg.pre_f),
    "cclip": lambda cfg: partial(centered_clip, tau=cfg.cclip_tau, iterations=cfg.cclip_iterations),
}


def pre_aggregation_steps(cfg: RunConfig) -> list[PreStep]:
    """The steps of ``pre-aggregation``, in order, their parameters bound (``pre-f``, ``clip-c``,
    ``cclip-tau``, ``cclip-iterations``)."""
    return [PRE_AGGREGATION[name](cfg) for name in cfg.pre_aggregations]


def _rule_kwargs(cfg: RunConfig) -> dict[str, Any]:
    """The rule's own keyword arguments from the run config (flat keys → one name per concept)."""
    name = cfg.strategy
    if name == "foolsgold":
        return {"kappa": cfg.foolsgold_kappa}
    if name == "multikrum":  # krum-m = 0 means n − f
        return {"num_malicious_nodes": cfg.krum_f, "num_nodes_to_select": cfg.krum_m or None}
    if name == "trimmed_mean":  # a count, not Flower's fraction beta: trim_for shrinks it per round
        return {"f": cfg.trim_f}
    if name == "median_of_means":
        return {"num_groups": cfg.mom_groups, "seed": cfg.seed}
    if name == "calguard":
        sequential = (ClientCusum(k=cfg.calguard_cusum_k, h_low=cfg.calguard_cusum_h_low, h_high=cfg.calguard_cusum_h_high)
                      if cfg.calguard_cusum else None)
        if sequential is not None:
            _warn_uncalibrated_thresholds(cfg)
        return {"kappa": cfg.calguard_kappa, "window": cfg.calguard_window, "strikes": cfg.calguard_strikes,
                "mode": cfg.calguard_mode, "sequential": sequential, "sequential_signal": cfg.calguard_cusum_signal,
                "signal": cfg.calguard_signal}
    return {}


def _warn_uncalibrated_thresholds(cfg: RunConfig) -> None:
    """Warn when the sequential test runs on its default thresholds in a federation whose clients reply
    far more (or less) often than in the runs they were calibrated on: a benign client's CUSUM climbs
    with its replies, so at 10 of 50 a round the defaults left out one benign reply in six (measured,
    docs/defense.md). fedcal does not derive thresholds from the rate — the null's growth is not a
    simple law of it — so the remedy is the calibration the docs show, on benign audit runs."""
    from fedcal.config import CUSUM_CALIBRATED_REPLIES, setting_of

    if (cfg.calguard_cusum_h_low, cfg.calguard_cusum_h_high) != (setting_of("calguard_cusum_h_low").default,
                                                                 setting_of("calguard_cusum_h_high").default):
        return  # thresholds of the user's own
    replies = cfg.num_rounds * cfg.clients_per_round / cfg.num_clients
    if not 0.75 <= replies / CUSUM_CALIBRATED_REPLIES <= 1.25:
        log(WARNING, "calguard-cusum: the default thresholds (h-low %g, h-high %g) were calibrated on runs with "
            "about %g replies per client (5 of 50 a round, 100 rounds); here each client replies about %.3g "
            "times, so benign clients may be excluded far more often (about one reply in six at 20 per client): "
            "calibrate calguard-cusum-h-low / -h-high on benign audit runs of this federation (docs/defense.md, "
            "\"The sequential test's thresholds at 10 clients a round\")", cfg.calguard_cusum_h_low,
            cfg.calguard_cusum_h_high, CUSUM_CALIBRATED_REPLIES, replies)


def strategy_from_config(
    cfg: RunConfig,
    *,
    node_sort_key: Callable[[int], Any] | None = None,
    node_label: Callable[[int], Any] | None = None,
    root_train_fn: Callable[[ArrayRecord, int], ArrayRecord] | None = None,
    root_set: tuple[torch.Tensor, torch.Tensor] | None = None,
    model: nn.Module | None = None,
    message_type: str = "train",
    available: int | None = None,
) -> UpdateAggregationStrategy:
    """The strategy ``cfg.strategy`` configured from the run config.

    Each round trains ``clients-per-round`` (M) of the ``num-clients`` (K) nodes, sampled with
    ``sampling_seed = seed`` over the nodes ordered by ``node_sort_key``; federated evaluation
    is off (the global model is evaluated centrally). ``krum-f``/``krum-m`` (MultiKrum's
    ``num_malicious_nodes``/``num_nodes_to_select``, 0 → None: n − f), ``trim-f`` (the trimmed
    mean's count ``f``), ``mom-groups`` (grouping seeded by ``seed``) and ``foolsgold-kappa`` set the
    rule's parameters; FLTrust needs ``root_train_fn``; CalGuard needs a ``model`` of the federation's
    architecture and, unless ``calguard-signal = clients``, a ``root_set`` (x, y) (``calguard-*`` keys set the rest). ``node_label`` (node id → partition
    id) names each node's client in every warning and rejection; ``message_type`` is the type of
    the training messages (``train.lm`` for the lm task's clients). ``available`` is how many nodes
    identified themselves (default ``num-clients``): with fewer — nodes left out at the handshake —
    each round trains min(M, available) of them instead of waiting for nodes that never come.
    """
    try:
        cls = STRATEGIES[cfg.strategy]
    except KeyError:
        raise ValueError(f"unknown strategy {cfg.strategy!r}; choose from {sorted(STRATEGIES)}") from None
    kwargs = _rule_kwargs(cfg)
    if cls is FLTrust:
        if root_train_fn is None:
            raise ValueError("strategy 'fltrust' needs a root_train_fn")
        kwargs["root_train_fn"] = root_train_fn
    if cls is CalGuard:
        if model is None or (root_set is None and cfg.calguard_signal == "root"):
            raise ValueError("strategy 'calguard' needs a model and, with calguard-signal = root, a root_set (x, y)")
        kwargs.update(model=model, root_x=None if root_set is None else root_set[0],
                      root_y=None if root_set is None else root_set[1])
    return cls(
        fraction_train=cfg.clients_per_round / cfg.num_clients,
        fraction_evaluate=0.0,  # the global model is evaluated centrally, on the test set
        min_train_nodes=min(cfg.clients_per_round, cfg.num_clients if available is None else available),
        min_evaluate_nodes=0,
        min_available_nodes=cfg.num_clients if available is None else available,
        weighted_by_key="num-examples",
        sampling_seed=cfg.seed,
        node_sort_key=node_sort_key,
        node_label=node_label,
        message_type=message_type,
        pre_aggregation=pre_aggregation_steps(cfg),
        **kwargs,
    )
