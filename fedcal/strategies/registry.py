"""The strategy registry: run-config name → strategy class, and the one builder from a run config.

The rules and the pre-aggregation steps are components of :mod:`fedcal.catalogue` (kinds ``rule`` and
``pre-aggregation``): each declares its class or step function, its own run-config keys and its keyword
arguments from a run config (``params``). The builder below is generic: it knows no rule by name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from flwr.app import ArrayRecord
from torch import nn

from fedcal import catalogue
from fedcal.aggregate.compose import PreStep
from fedcal.strategies.base import UpdateAggregationStrategy

if TYPE_CHECKING:
    from fedcal.config import RunConfig


def __getattr__(name: str) -> Any:
    # STRATEGIES: the strategy class of each value of ``strategy``, read from the catalogue when asked
    # (a rule a plug-in declares is among them)
    if name == "STRATEGIES":
        return {n: c.load() for n, c in catalogue.components("rule").items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pre_aggregation_steps(cfg: RunConfig) -> list[PreStep]:
    """The steps of ``pre-aggregation``, in order, each with its own keys' values bound (``pre-f``,
    ``clip-c``, ``cclip-tau``, ``cclip-iterations``)."""
    steps = [catalogue.get("pre-aggregation", name) for name in cfg.pre_aggregations]
    return [partial(step.load(), **step.kwargs(cfg)) for step in steps]


#: what the server can hand a rule that works on its side: FLTrust's root training, CalGuard's model and root set
SERVER_ARGUMENTS = ("root_train_fn", "model", "root_x", "root_y")


def server_arguments(cfg: RunConfig) -> frozenset[str]:
    """The server-side arguments (:data:`SERVER_ARGUMENTS`) the constructor of ``cfg``'s rule takes: what a
    task builds for it (each rule checks that it got what it needs)."""
    taken = inspect.signature(catalogue.load("rule", cfg.strategy)).parameters
    return frozenset(k for k in SERVER_ARGUMENTS if k in taken)


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
    rule's parameters (its catalogue component's ``params``); FLTrust needs ``root_train_fn``; CalGuard needs a ``model`` of the federation's
    architecture and, unless ``calguard-signal = clients``, a ``root_set`` (x, y) (``calguard-*`` keys set the rest). ``node_label`` (node id → partition
    id) names each node's client in every warning and rejection; ``message_type`` is the type of
    the training messages (``train.lm`` for the lm task's clients). ``available`` is how many nodes
    identified themselves (default ``num-clients``): with fewer — nodes left out at the handshake —
    each round trains min(M, available) of them instead of waiting for nodes that never come.
    """
    rule = catalogue.get("rule", cfg.strategy)
    cls, kwargs = rule.load(), rule.kwargs(cfg)
    given = dict(root_train_fn=root_train_fn, model=model, root_x=None if root_set is None else root_set[0],
                 root_y=None if root_set is None else root_set[1])
    kwargs.update({k: given[k] for k in server_arguments(cfg)})
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
