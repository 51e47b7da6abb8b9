"""Flower strategies (Message API) that drop into any Flower ServerApp."""

from fedcal.strategies.fedavg import FedAvg

__all__ = ["FedAvg"]
