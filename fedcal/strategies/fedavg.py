"""FedAvg with reproducible client sampling.

Flower's ``FedAvg`` samples nodes with Python's global ``random`` over node ids that are
themselves random per run, so two runs with the same seed train different clients. Here
``sampling_seed`` makes the sample a function of (seed, round) over nodes ordered by
``node_sort_key`` (fedcal passes each node's partition id). Everything else is Flower's.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from logging import INFO
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg as _FlowerFedAvg
from flwr.serverapp.strategy.strategy_utils import sample_nodes
from flwr.supercore import log


class FedAvg(_FlowerFedAvg):
    """Flower's FedAvg (data-size weighted by ``weighted_by_key``) with seeded sampling.

    Parameters
    ----------
    sampling_seed : int, optional
        When set, the nodes trained in round r are ``random.Random(f"{seed}/{r}")``'s
        sample of the connected nodes sorted by ``node_sort_key``.
    node_sort_key : callable, optional
        Maps a node id to a sortable key (default: the node id itself).
    **kwargs
        Every argument of :class:`flwr.serverapp.strategy.FedAvg`.
    """

    def __init__(self, *args: Any, sampling_seed: int | None = None,
                 node_sort_key: Callable[[int], Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sampling_seed = sampling_seed
        self.node_sort_key = node_sort_key or (lambda node_id: node_id)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        if self.sampling_seed is None or self.fraction_train == 0.0:
            return super().configure_train(server_round, arrays, config, grid)
        num_nodes = int(len(list(grid.get_node_ids())) * self.fraction_train)
        sample_size = max(num_nodes, self.min_train_nodes)
        _, all_nodes = sample_nodes(grid, self.min_available_nodes, sample_size)  # waits for nodes
        ordered = sorted(all_nodes, key=self.node_sort_key)
        node_ids = random.Random(f"{self.sampling_seed}/{server_round}").sample(ordered, sample_size)
        log(INFO, "configure_train: sampled %s nodes (out of %s), seeded", len(node_ids), len(all_nodes))
        config["server-round"] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._construct_messages(record, node_ids, MessageType.TRAIN)
