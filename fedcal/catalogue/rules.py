"""fedcal's aggregation rules (``strategy``) and pre-aggregation steps (``pre-aggregation``), declared once.

A rule's ``params`` are its own keyword arguments (beyond what every strategy takes: the sampling,
the pre-aggregation steps); what the server hands it besides (FLTrust's root training, CalGuard's
model and root set) follows its ``needs``.

Each declares the run-config keys only it reads with their rules (``settings``). They join the ``defense``
group, whose hash covered them before they moved here (every committed run keeps its name). A key two
components read (FLTrust's and CalGuard's root-size, NNM's and ARC's pre-f) is one declaration in both.
"""

from __future__ import annotations

import importlib
from typing import Any

from fedcal.catalogue import Component, register
from fedcal.config.defense import (CALGUARD_MODES, CALGUARD_SIGNALS, CALGUARD_SOURCES, MAX_CCLIP_ITERATIONS,
                                   MIN_CLIP_NORM, TINY_NORM)
from fedcal.config.schema import setting

_S = "fedcal.strategies"
#: the group of fedcal's rules' and steps' own keys: the defense group, whose hash has always covered them
_G = "defense"
_ROOT_SIZE = {"root_size": setting(100, "FLTrust and CalGuard: the server's clean root set, drawn from the training "
                                        "data", ge=1, group=_G)}
_PRE_F = {"pre_f": setting(1, "nnm and arc: assumed Byzantine replies per round (< clients-per-round)", ge=0,
                           hash_when_set=True, group=_G)}
_CALGUARD = {
    **_ROOT_SIZE,
    "calguard_kappa": setting(5.0, "CalGuard: drop a reply whose robust score |z| of its logit-scale shift exceeds "
                                   "this", gt=0, finite=True, hash_when_set=True, group=_G),
    "calguard_window": setting(10, "CalGuard: rounds of signature deviations pooled for the robust scale", ge=1,
                               hash_when_set=True, group=_G),
    "calguard_strikes": setting(3, "CalGuard: a client flagged this many times is dropped from then on", ge=0,
                                note="0 = never", hash_when_set=True, group=_G),
    "calguard_mode": setting("filter", "CalGuard: filter drops flagged replies; audit only records them (FedAvg "
                                       "aggregation)", choices=CALGUARD_MODES, hash_when_set=True, group=_G),
    "calguard_cusum": setting(False, "CalGuard: also drop clients whose scores stay low (tau < 1) or high over their "
                                     "rounds (two one-sided CUSUMs per client)", hash_when_set=True, group=_G),
    "calguard_cusum_signal": setting("ratio", "CalGuard's sequential test is fed the robust score of the logit-scale "
                                              "shift per unit of update norm (ratio) or of the shift itself (scale)",
                                     choices=CALGUARD_SIGNALS, hash_when_set=True, group=_G),
    "calguard_cusum_k": setting(0.5, "CalGuard's sequential test: reference value k (half the persistent shift to "
                                     "detect, robust units)", ge=0, finite=True, hash_when_set=True, group=_G),
    # the thresholds' defaults are the ones docs/results/detector/thresholds.csv calibrates (ratio,
    # k = 0.5, every seed's benign runs, 2 % of benign replies): runs of 5 of 50 clients a round for 100
    # rounds, fedcal.config.defense.CUSUM_CALIBRATED_REPLIES replies per client
    "calguard_cusum_h_low": setting(11.07, "CalGuard's sequential test: threshold of the low side (under-confidence)",
                                    gt=0, finite=True, hash_when_set=True, group=_G),
    "calguard_cusum_h_high": setting(10.89, "CalGuard's sequential test: threshold of the high side "
                                            "(over-confidence)", gt=0, finite=True, hash_when_set=True, group=_G),
    "calguard_signal": setting("root", "CalGuard's signal: root (each reply's logit-scale shift on the server's root "
                                       "set) or clients (no root set: each reply's mean-confidence shift against the "
                                       "global model on its client's held-out data, from the two calibration states "
                                       "the client reports, self-reported; docs/defense.md)",
                               choices=CALGUARD_SOURCES, hash_when_set=True, group=_G),
}


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
    Component("rule", "fltrust", f"{_S}.fltrust:FLTrust", settings=_ROOT_SIZE,
              needs=frozenset({"root-set", "server-model"}),
              summary="FLTrust: trust scores against the server's update on its root set"),
    Component("rule", "foolsgold", f"{_S}.foolsgold:FoolsGold", settings={
        "foolsgold_kappa": setting(1.0, "FoolsGold: logit confidence kappa", gt=0, finite=True, group=_G)},
              params=lambda cfg: {"kappa": cfg.foolsgold_kappa}, needs=frozenset({"batchable", "history"}),
              summary="FoolsGold: down-weights clients whose update histories are alike"),
    Component("rule", "multikrum", f"{_S}.multikrum:MultiKrum", settings={
        "krum_f": setting(1, "MultiKrum: assumed Byzantine replies per round (needs M >= f + 3)", ge=0, group=_G),
        "krum_m": setting(0, "MultiKrum: updates averaged (<= M)", ge=0, note="0 = n - f", group=_G)},
              # krum-m = 0 means n − f
              params=lambda cfg: {"num_malicious_nodes": cfg.krum_f, "num_nodes_to_select": cfg.krum_m or None},
              f_key="krum_f", needs=_BATCHABLE, summary="MultiKrum: the mean of the m updates closest to their n − f − 2 neighbours"),
    # a count, not Flower's fraction beta: trim_for shrinks it per round
    Component("rule", "trimmed_mean", f"{_S}.trimmed_mean:TrimmedMean", settings={
        "trim_f": setting(1, "trimmed mean: values dropped per side and coordinate (needs M > 2f)", ge=0, group=_G)},
              params=lambda cfg: {"f": cfg.trim_f}, f_key="trim_f", needs=_BATCHABLE,
              summary="trimmed mean: drops f values per side and coordinate"),
    Component("rule", "median", f"{_S}.median:Median", needs=_BATCHABLE, summary="coordinate-wise median"),
    Component("rule", "geometric_median", f"{_S}.geometric_median:GeometricMedian", needs=_BATCHABLE,
              summary="geometric median (Weiszfeld)"),
    Component("rule", "median_of_means", f"{_S}.median_of_means:MedianOfMeans", settings={
        "mom_groups": setting(3, "median-of-means: number of groups", ge=1, group=_G)},
              params=lambda cfg: {"num_groups": cfg.mom_groups, "seed": cfg.seed}, needs=_BATCHABLE,
              summary="median of the means of seeded groups"),
    Component("rule", "calguard", f"{_S}.calguard:CalGuard", settings=_CALGUARD,
              # the defense study against TSA (its grid and report) and the pages of its sequential test
              modules=("fedcal.studies.defense", "fedcal.reports.defense", "fedcal.pages.closed_loop",
                       "fedcal.pages.detector_replay"),
              params=_lazy(f"{_S}.calguard:config_kwargs"), needs=frozenset({"root-set", "server-model", "history"}),
              summary="CalGuard: drops replies whose logit-scale shift is an outlier"),
    # a pre-aggregation step is a function of the round's updates, run by the strategy wherever it
    # aggregates (the batched train task included)
    Component("pre-aggregation", "nnm", "fedcal.aggregate:nnm", settings=_PRE_F, params=_bound(f="pre_f"),
              f_key="pre_f", needs=_BATCHABLE, summary="nearest-neighbour mixing"),
    Component("pre-aggregation", "clip", "fedcal.aggregate:static_clip", settings={
        "clip_c": setting(1.0, "clip: the update norm bound c", ge=MIN_CLIP_NORM, finite=True, note=TINY_NORM,
                          hash_when_set=True, group=_G)},
              params=_bound(c="clip_c"), needs=_BATCHABLE, summary="static clipping of each update's norm to c"),
    Component("pre-aggregation", "arc", "fedcal.aggregate:arc", settings=_PRE_F, params=_bound(f="pre_f"),
              f_key="pre_f", needs=_BATCHABLE, summary="adaptive robust clipping"),
    Component("pre-aggregation", "cclip", "fedcal.aggregate:centered_clip", settings={
        "cclip_tau": setting(1.0, "cclip: centred clipping's radius tau", ge=MIN_CLIP_NORM, finite=True,
                             note=TINY_NORM, hash_when_set=True, group=_G),
        "cclip_iterations": setting(1, "cclip: centred clipping's iterations L", ge=1, le=MAX_CCLIP_ITERATIONS,
                                    note="each is one pass over the round's updates; the authors' default is 1",
                                    hash_when_set=True, group=_G)},
              params=_bound(tau="cclip_tau", iterations="cclip_iterations"), needs=_BATCHABLE,
              summary="centred clipping"),
):
    register(_c)

#: a rule chosen with some of its keys set, under a name of its own in a study's strategy specs and its
#: tables (``krum``: Multi-Krum keeping one update, Krum itself): name -> (rule, its keys' values)
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {"krum": ("multikrum", {"krum_m": 1})}
