"""fedcal's aggregation rules (``strategy``) and pre-aggregation steps (``pre-aggregation``), declared once.

A rule's ``params`` are its own keyword arguments (beyond what every strategy takes: the sampling,
the pre-aggregation steps); what the server hands it besides (FLTrust's root training, CalGuard's
model and root set) follows its ``needs``.
"""

from __future__ import annotations

import importlib
from typing import Any

from fedcal.catalogue import Component, register

_S = "fedcal.strategies"


def _lazy(target: str):
    """params that are a function of the component's own module (imported when called)."""
    def params(cfg: Any) -> dict[str, Any]:
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)(cfg)
    return params


def _bound(**keys: str):
    """params reading each keyword from the config field named beside it."""
    def params(cfg: Any) -> dict[str, Any]:
        return {kw: getattr(cfg, field) for kw, field in keys.items()}
    return params


_BATCHABLE = frozenset({"batchable"})
for _c in (
    Component("rule", "fedavg", f"{_S}.fedavg:FedAvg", needs=_BATCHABLE, summary="FedAvg: the weighted mean"),
    Component("rule", "fltrust", f"{_S}.fltrust:FLTrust", keys=("root_size",),
              needs=frozenset({"root-set", "server-model"}),
              summary="FLTrust: trust scores against the server's update on its root set"),
    Component("rule", "foolsgold", f"{_S}.foolsgold:FoolsGold", keys=("foolsgold_kappa",),
              params=lambda cfg: {"kappa": cfg.foolsgold_kappa}, needs=frozenset({"batchable", "history"}),
              summary="FoolsGold: down-weights clients whose update histories are alike"),
    Component("rule", "multikrum", f"{_S}.multikrum:MultiKrum", keys=("krum_f", "krum_m"),
              # krum-m = 0 means n − f
              params=lambda cfg: {"num_malicious_nodes": cfg.krum_f, "num_nodes_to_select": cfg.krum_m or None},
              f_key="krum_f", needs=_BATCHABLE, summary="MultiKrum: the mean of the m updates closest to their n − f − 2 neighbours"),
    # a count, not Flower's fraction beta: trim_for shrinks it per round
    Component("rule", "trimmed_mean", f"{_S}.trimmed_mean:TrimmedMean", keys=("trim_f",),
              params=lambda cfg: {"f": cfg.trim_f}, f_key="trim_f", needs=_BATCHABLE,
              summary="trimmed mean: drops f values per side and coordinate"),
    Component("rule", "median", f"{_S}.median:Median", needs=_BATCHABLE, summary="coordinate-wise median"),
    Component("rule", "geometric_median", f"{_S}.geometric_median:GeometricMedian", needs=_BATCHABLE,
              summary="geometric median (Weiszfeld)"),
    Component("rule", "median_of_means", f"{_S}.median_of_means:MedianOfMeans", keys=("mom_groups",),
              params=lambda cfg: {"num_groups": cfg.mom_groups, "seed": cfg.seed}, needs=_BATCHABLE,
              summary="median of the means of seeded groups"),
    Component("rule", "calguard", f"{_S}.calguard:CalGuard",
              keys=("root_size", "calguard_kappa", "calguard_window", "calguard_strikes", "calguard_mode",
                    "calguard_cusum", "calguard_cusum_signal", "calguard_cusum_k", "calguard_cusum_h_low",
                    "calguard_cusum_h_high", "calguard_signal"),
              # the defense study against TSA (its grid and report) and the pages of its sequential test
              modules=("fedcal.studies.defense", "fedcal.reports.defense", "fedcal.pages.closed_loop",
                       "fedcal.pages.detector_replay"),
              params=_lazy(f"{_S}.calguard:config_kwargs"), needs=frozenset({"root-set", "server-model", "history"}),
              summary="CalGuard: drops replies whose logit-scale shift is an outlier"),
    # a pre-aggregation step is a function of the round's updates, run by the strategy wherever it
    # aggregates (the batched train task included)
    Component("pre-aggregation", "nnm", "fedcal.aggregate:nnm", keys=("pre_f",), params=_bound(f="pre_f"),
              f_key="pre_f", needs=_BATCHABLE, summary="nearest-neighbour mixing"),
    Component("pre-aggregation", "clip", "fedcal.aggregate:static_clip", keys=("clip_c",),
              params=_bound(c="clip_c"), needs=_BATCHABLE, summary="static clipping of each update's norm to c"),
    Component("pre-aggregation", "arc", "fedcal.aggregate:arc", keys=("pre_f",), params=_bound(f="pre_f"),
              f_key="pre_f", needs=_BATCHABLE, summary="adaptive robust clipping"),
    Component("pre-aggregation", "cclip", "fedcal.aggregate:centered_clip", keys=("cclip_tau", "cclip_iterations"),
              params=_bound(tau="cclip_tau", iterations="cclip_iterations"), needs=_BATCHABLE,
              summary="centred clipping"),
):
    register(_c)

#: a rule chosen with some of its keys set, under a name of its own in a study's strategy specs and its
#: tables (``krum``: Multi-Krum keeping one update, Krum itself): name -> (rule, its keys' values)
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {"krum": ("multikrum", {"krum_m": 1})}
