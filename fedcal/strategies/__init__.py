"""Flower strategies (Message API) that drop into any Flower ServerApp, one module per rule.

Each is a subclass of :class:`flwr.serverapp.strategy.FedAvg` (through
:class:`UpdateAggregationStrategy`): construct it with explicit keyword arguments — Flower's
FedAvg arguments, ``sampling_seed``, ``node_sort_key``, ``buffer_key`` and the rule's own —
and call ``strategy.start(grid=..., initial_arrays=...)``; ``summary()`` logs its settings.
They aggregate client *updates* (reply arrays minus the arrays sent that round) with the
flwr-free rules of :mod:`fedcal.aggregate`, and drop malformed or non-finite replies with a
warning instead of failing the round.

=====================  ========================  ===========================
run-config name        class                     module
=====================  ========================  ===========================
``fedavg``             :class:`FedAvg`           ``fedavg.py``
``fltrust``            :class:`FLTrust`          ``fltrust.py``
``foolsgold``          :class:`FoolsGold`        ``foolsgold.py``
``multikrum``          :class:`MultiKrum`        ``multikrum.py``
``trimmed_mean``       :class:`TrimmedMean`      ``trimmed_mean.py``
``median``             :class:`Median`           ``median.py``
``geometric_median``   :class:`GeometricMedian`  ``geometric_median.py``
``median_of_means``    :class:`MedianOfMeans`    ``median_of_means.py``
``calguard``           :class:`CalGuard`         ``calguard.py``
=====================  ========================  ===========================

Flower's names for the rules Flower also ships, taking Flower's arguments with Flower's
defaults (``tests/test_flower_dropin.py`` checks both on the same replies): :class:`MultiKrum`
(``num_malicious_nodes``, ``num_nodes_to_select``), :class:`Krum` (``krum.py``), :data:`FedMedian`
(= :class:`Median`), :data:`FedTrimmedAvg` (= :class:`TrimmedMean`, ``beta``) and
:class:`Bulyan` (``bulyan.py``; not a run-config strategy). docs/strategies.md says what each adds
over Flower's.

The LoRA-adapter baselines of RFD-LoRA (``lora.py``: :class:`FedIT`, :class:`FFALoRA`, :class:`FLoRA`,
:class:`FlexLoRA`, :class:`LoRAFair`, each named by its ``dst-method``'s
:attr:`~fedcal.distill.methods.LoraMethod.strategy`) federate peft adapter states instead
of whole models; they are not update-aggregation rules and are not in :data:`STRATEGIES`.

:data:`STRATEGIES` maps these names to the classes, read from the rules of :mod:`fedcal.catalogue`
(where each rule is declared, with its own keys and parameters); :func:`strategy_from_config` builds
the configured one from a :class:`fedcal.config.RunConfig`.
"""

from fedcal.strategies.base import UpdateAggregationStrategy
from fedcal.strategies.replies import is_buffer_key
from fedcal.strategies.bulyan import Bulyan
from fedcal.strategies.calguard import CalGuard
from fedcal.strategies.fedavg import FedAvg
from fedcal.strategies.fltrust import FLTrust
from fedcal.strategies.foolsgold import FoolsGold
from fedcal.strategies.geometric_median import GeometricMedian
from fedcal.strategies.lora import LoraStrategy
from fedcal.strategies.lora_baselines import FedIT, FFALoRA, FlexLoRA, FLoRA, LoRAFair
from fedcal.strategies.krum import Krum
from fedcal.strategies.median import FedMedian, Median
from fedcal.strategies.median_of_means import MedianOfMeans
from fedcal.strategies.multikrum import MultiKrum
from fedcal.strategies.registry import strategy_from_config
from fedcal.strategies.trimmed_mean import FedTrimmedAvg, TrimmedMean

__all__ = [
    "STRATEGIES", "strategy_from_config", "UpdateAggregationStrategy", "is_buffer_key", "FedAvg", "FLTrust",
    "FoolsGold", "MultiKrum", "TrimmedMean", "Median", "GeometricMedian", "MedianOfMeans", "CalGuard",
    "Krum", "Bulyan", "FedMedian", "FedTrimmedAvg",
    "LoraStrategy", "FedIT", "FFALoRA", "FLoRA", "FlexLoRA", "LoRAFair",
]


def __getattr__(name: str):
    if name == "STRATEGIES":  # the catalogue's rules, read when asked (fedcal.strategies.registry)
        from fedcal.strategies import registry

        return registry.STRATEGIES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
