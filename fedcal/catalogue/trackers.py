"""fedcal's experiment trackers (``tracker``), declared once; each target is called
``(run_dir, run_id, resumed_from=...)`` and returns a tracker (None for ``none``)."""

from __future__ import annotations

from fedcal.catalogue import Component, register

for _c in (
    Component("tracker", "none", "fedcal.tracking:no_tracker", summary="no tracker"),
    Component("tracker", "tensorboard", "fedcal.tracking:TensorBoardTracker", summary="TensorBoard event files"),
    Component("tracker", "mlflow", "fedcal.tracking:MlflowTracker", summary="an MLflow run"),
    Component("tracker", "wandb", "fedcal.tracking:WandbTracker", summary="a Weights & Biases run"),
):
    register(_c)
