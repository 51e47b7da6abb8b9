"""The ``execution`` group: where and how a run executes; never part of a run's identity."""

from __future__ import annotations

import math
import os

from fedcal.config.schema import ComponentNames, ConfigError, RunConfig, check, group, setting

__all__ = ["DEVICES", "ENGINES", "ray_address_parts"]

DEVICES = ("auto", "cpu", "cuda")  # the common values; `device` takes any torch device string (_device)
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


def ray_address_parts(text: str) -> tuple[str, int] | None:
    """The host and port of a Ray cluster address (``host:port``, ``[v6]:port``, or Ray Client's
    ``ray://host:port``), or None when ``text`` is not one. ``auto`` is not an address: it names
    whichever cluster is running (:func:`fedcal.app.ray_attach.attach_target`)."""
    rest = text.strip()
    if rest.startswith("ray://"):
        rest = rest[len("ray://"):]
    host, sep, port = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or any(ch.isspace() or ch in "/@?#" for ch in host) or not port.isdigit():
        return None
    return (host, int(port)) if 0 < int(port) < 65536 else None


def _ray_address(c: RunConfig) -> None:
    check("ray-address", c.ray_address in ("", "auto") or ray_address_parts(c.ray_address) is not None,
          c.ray_address, 'must be host:port (or ray://host:port) of a Ray cluster\'s head, "auto" or ""')


def _device(c: RunConfig) -> None:
    """``device`` is ``auto`` or a string ``torch.device`` parses (``cuda:1``, ``mps``). Whether
    that device exists is checked where the run starts (:func:`fedcal.local_training.resolve_device`):
    the machine that parses a config is not always the one that trains."""
    if c.device == "auto":
        return
    import torch  # lazily: only a config naming a device pays for torch here

    try:
        device = torch.device(c.device)
    except (RuntimeError, ValueError) as exc:
        raise ConfigError(f"run-config key 'device': {c.device!r} is not a torch device string "
                          f"(auto, cpu, cuda, cuda:1, mps, ...): {str(exc).splitlines()[0]}") from None
    # Ray gives a client with client-gpus > 0 its own CUDA_VISIBLE_DEVICES: inside it, its GPU is
    # cuda:0 (ceil(client-gpus) of them), whatever its number on the machine
    seen = max(1, math.ceil(c.client_gpus))
    if c.engine == "ray" and c.client_gpus > 0 and device.type == "cuda" and (device.index or 0) >= seen:
        raise ConfigError(f"run-config key 'device': {c.device!r} with engine=ray and client-gpus={c.client_gpus:g}: "
                          f"Ray shows each client only its own GPU(s), as cuda:0..cuda:{seen - 1}; use device=cuda "
                          "and choose the machine's GPUs with CUDA_VISIBLE_DEVICES (docs/configuration.md)")


@group("execution", "where and how a run executes; never part of a run's identity (config hash)",
       rules=(_run_name, _device, _ray_address))
class Execution:
    data_dir: str = setting("", 'folder with <dataset>_{train,test}.npz (fedcal data writes them); "" = '
                                "$FEDCAL_DATA_DIR, else ~/.cache/fedcal/data")
    eval_batch_size: int = setting(1000, "batch size of the central evaluation", ge=1)
    device: str = setting("auto", "auto = CUDA if present, else CPU; or any torch device string: cpu, "
                                  "cuda, cuda:1, mps (docs/configuration.md: GPUs and Ray)")
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
    tracker: str = setting("none", "stream every round's metrics and the run config to a tracker as the run goes: "
                                   "tensorboard (event files in the run directory), mlflow (one SQLite store for the "
                                   "runs of an output folder: <output-dir>/mlruns.db), wandb (offline unless WANDB_MODE says otherwise); pip install "
                                   "'fedcal[track]'", choices=ComponentNames("tracker"))
    ray_address: str = setting("", 'engine=ray: the Ray cluster to attach to (host:port, "auto"); "" = $RAY_ADDRESS, '
                                   "else the cluster `ray start` left on this machine, else a Ray instance started "
                                   "for the run")
