"""The ``execution`` group: where and how a run executes; never part of a run's identity."""

from __future__ import annotations

import os

from fedcal.config.schema import RunConfig, check, group, setting

__all__ = ["DEVICES", "ENGINES"]

DEVICES = ("auto", "cpu", "cuda")
ENGINES = ("ray", "inprocess", "batched")


def _run_name(c: RunConfig) -> None:
    name = c.run_name
    if not name:
        return
    # A run directory is <output-dir>/<run-name>; starting a run clears its metrics and model, so a
    # name that leads elsewhere would delete files outside output-dir.
    check("run-name", name not in (".", "..") and not any(sep in name for sep in ("/", "\\", os.sep, "\0"))
          and not os.path.isabs(name) and (os.altsep is None or os.altsep not in name), name,
          "must be one directory name inside output-dir (no path separator, not . or .., not an absolute path)")


@group("execution", "where and how a run executes; never part of a run's identity (config hash)",
       rules=(_run_name,))
class Execution:
    data_dir: str = setting("", 'folder with <dataset>_{train,test}.npz; "" = $FEDCAL_DATA_DIR, '
                                "else ~/.cache/fedcal/data")
    eval_batch_size: int = setting(1000, "batch size of the central evaluation", ge=1)
    device: str = setting("auto", "auto = CUDA if present", choices=DEVICES)
    engine: str = setting("ray", "ray: Flower's Simulation Engine; inprocess: the same apps, no Ray; "
                                  "batched: train runs of one architecture as one torch.func computation",
                          choices=ENGINES)
    client_cpus: float = setting(1.0, "Ray CPUs per virtual client (simulation only)", gt=0,
                                 finite=True)
    client_gpus: float = setting(0.0, "fractional GPUs per virtual client, e.g. 0.25", ge=0, finite=True)
    output_dir: str = setting("runs", "where run directories go")
    run_name: str = setting("", 'run directory name, one name inside output-dir (no path separator, '
                                'not . or ..); "" = <dataset>-<model>-...-s<seed>-<hash>')
    checkpoint_every: int = setting(5, "checkpoint the run's state every k rounds, so that a re-run "
                                       "resumes after the last checkpoint (docs/design.md)", ge=0,
                                    note="0 = never")
