"""Post-hoc calibration of a finished run's final model (flwr-free): the calibrators of
:mod:`fedcal.calibrate` fitted on part of the model's logits and scored on the rest (SPEC §5), and the
server-side baseline of docs/defense.md — temperature scaling on the server's root set. The reports
(:mod:`fedcal.reports.studies`, :mod:`fedcal.reports.defense`) read what these return.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from fedcal.calibrate import CALIBRATORS, TemperatureScaling, probs_metrics, split_calibration
from fedcal.data import Dataset, root_set
from fedcal.local_training import predict_logits
from fedcal.metrics import calibration_metrics


def posthoc_scores(logits: torch.Tensor, y: torch.Tensor, n_cal: int, methods: Sequence[str], seed: int = 0,
                   n_bins: int = 15) -> dict[str, dict[str, float]]:
    """Per method (``none`` first: the uncalibrated model): the metrics of :func:`fedcal.calibrate.probs_metrics`
    on the samples left after ``n_cal`` of ``logits`` are drawn (with ``seed``) to fit the calibrator."""
    cal, rest = (torch.from_numpy(i) for i in split_calibration(len(y), n_cal, seed))
    scores = {"none": probs_metrics(logits[rest].double().softmax(1), y[rest], n_bins)}
    for name in methods:
        fitted = CALIBRATORS[name]().fit(logits[cal], y[cal])
        scores[name] = probs_metrics(fitted.predict_proba(logits[rest]), y[rest], n_bins)
    return scores


def root_temperature_metrics(model: nn.Module, ds: Dataset, *, root_size: int, seed: int, batch_size: int,
                             n_bins: int) -> dict[str, float]:
    """``model`` temperature-scaled on the server's root set (the same seeded draw FLTrust and CalGuard
    use, :func:`fedcal.data.root_set`), evaluated on the test set: its calibration metrics and the
    temperature."""
    x_root, y_root = root_set(ds, root_size, seed)
    t = TemperatureScaling().fit(predict_logits(model, x_root, batch_size), y_root).temperature_
    logits = predict_logits(model, ds.x_test, batch_size)
    return {**calibration_metrics(logits / t, ds.y_test, n_bins), "temperature": t}
