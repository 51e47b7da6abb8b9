"""The rounds ``first_round`` … ``num_rounds`` of a strategy's run: Flower's ``Strategy.start`` loop
(configure, send and receive, aggregate train; the same for evaluation; ``evaluate_fn`` after each
round; ``should_stop`` after each round), begun at a later round for a resumed run. Flower's own
``start`` always begins at round 1 (and Flower 1.42's lacks ``should_stop``), hence this one loop
of fedcal's own (:meth:`fedcal.strategies.base.UpdateAggregationStrategy.start`)."""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result
from flwr.supercore import log


def run_rounds(strategy: Any, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int, timeout: float,
               train_config: ConfigRecord | None, evaluate_config: ConfigRecord | None,
               evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None,
               should_stop: Callable[[int, Result], bool] | None, first_round: int) -> Result:
    """``strategy``'s rounds from ``first_round`` on, from ``initial_arrays`` (the global model after
    round ``first_round`` − 1); round 0's evaluation only when ``first_round`` ≤ 1."""
    if first_round <= 1:
        log(INFO, "Starting %s strategy:", strategy.__class__.__name__)
    else:
        log(INFO, "Resuming %s strategy at round %d of %d", strategy.__class__.__name__, first_round, num_rounds)
    strategy.summary()
    train_config = ConfigRecord() if train_config is None else train_config
    evaluate_config = ConfigRecord() if evaluate_config is None else evaluate_config
    result = Result(arrays=initial_arrays)
    arrays = initial_arrays
    if first_round <= 1 and evaluate_fn:
        res = evaluate_fn(0, initial_arrays)
        if res is not None:
            result.evaluate_metrics_serverapp[0] = res
    for current_round in range(max(first_round, 1), num_rounds + 1):
        log(INFO, "[ROUND %s/%s]", current_round, num_rounds)
        replies = grid.send_and_receive(messages=strategy.configure_train(current_round, arrays, train_config, grid),
                                        timeout=timeout)
        agg_arrays, agg_train_metrics = strategy.aggregate_train(current_round, replies)
        if agg_arrays is not None:
            result.arrays = arrays = agg_arrays
        if agg_train_metrics is not None:
            result.train_metrics_clientapp[current_round] = agg_train_metrics
        replies = grid.send_and_receive(
            messages=strategy.configure_evaluate(current_round, arrays, evaluate_config, grid), timeout=timeout)
        agg_evaluate_metrics = strategy.aggregate_evaluate(current_round, replies)
        if agg_evaluate_metrics is not None:
            result.evaluate_metrics_clientapp[current_round] = agg_evaluate_metrics
        if evaluate_fn:
            res = evaluate_fn(current_round, arrays)
            if res is not None:
                result.evaluate_metrics_serverapp[current_round] = res
        if should_stop is not None and should_stop(current_round, result):
            log(INFO, "Stopping early after round %s", current_round)
            break
    return result
