"""Flower strategies (Message API) that drop into any Flower ServerApp.

Each is a subclass of :class:`flwr.serverapp.strategy.FedAvg`: construct it with Flower's
usual arguments and call ``strategy.start(grid=..., initial_arrays=...)``. They aggregate
client *updates* (reply arrays minus the arrays sent that round) and drop malformed or
non-finite replies with a warning instead of failing the round.
"""

from fedcal.strategies.base import UpdateAggregationStrategy, is_buffer_key
from fedcal.strategies.fedavg import FedAvg
from fedcal.strategies.robust import FLTrust, FoolsGold, GeometricMedian, Median, MedianOfMeans, MultiKrum, TrimmedMean

__all__ = [
    "UpdateAggregationStrategy", "is_buffer_key", "FedAvg", "FLTrust", "FoolsGold", "MultiKrum",
    "TrimmedMean", "Median", "GeometricMedian", "MedianOfMeans",
]
