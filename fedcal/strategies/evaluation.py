"""A task's own evaluate round in a strategy: Flower's ``configure_evaluate`` /
``aggregate_evaluate`` answered by the task (the train task's federated calibration,
fedcal.tasks.federated_eval) instead of FedAvg's metric averaging."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid


class TaskEvaluation:
    """Mixin before Flower's FedAvg: with :attr:`evaluation` set, the evaluate round is its."""

    #: None (FedAvg's evaluate round) or an object with ``configure(round, arrays, grid)`` → messages
    #: and ``aggregate(round, replies)`` → MetricRecord | None, which validates its replies itself
    evaluation: Any = None

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        if self.evaluation is None:
            return super().configure_evaluate(server_round, arrays, config, grid)
        return self.evaluation.configure(server_round, arrays, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        if self.evaluation is None:
            return super().aggregate_evaluate(server_round, replies)
        return self.evaluation.aggregate(server_round, replies)
