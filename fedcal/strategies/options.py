"""The keyword arguments every fedcal strategy accepts besides its rule's own (:class:`StrategyOptions`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypedDict

from flwr.app import MetricRecord, RecordDict

from fedcal.aggregate.compose import PreStep

MetricsAggrFn = Callable[[list[RecordDict], str], MetricRecord]


class StrategyOptions(TypedDict, total=False):
    """The keyword arguments every fedcal strategy accepts besides its rule's own: Flower's
    FedAvg arguments and fedcal's sampling options, documented once on
    :class:`UpdateAggregationStrategy` (a rule's ``**options: Unpack[StrategyOptions]`` lists
    exactly these names to type checkers and IDEs; an unknown name raises ``TypeError``)."""

    fraction_train: float
    fraction_evaluate: float
    min_train_nodes: int
    min_evaluate_nodes: int
    min_available_nodes: int
    weighted_by_key: str
    arrayrecord_key: str
    configrecord_key: str
    train_metrics_aggr_fn: MetricsAggrFn | None
    evaluate_metrics_aggr_fn: MetricsAggrFn | None
    sampling_seed: int | None
    node_sort_key: Callable[[int], Any] | None
    node_label: Callable[[int], Any] | None
    buffer_key: Callable[[str], bool] | None
    message_type: str
    pre_aggregation: Sequence[PreStep] | None
