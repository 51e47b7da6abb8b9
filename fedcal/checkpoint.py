"""What a run needs to continue where it stopped: the random streams of a process, and a
checkpoint file written so that a crash never leaves half of one.

A run resumes *bit for bit* only if every source of randomness continues where it was: fedcal's
own draws use generators seeded by (seed, round, client) and need nothing, but the process-wide
streams — torch's CPU (and CUDA) generator, NumPy's legacy global ``RandomState`` and Python's
``random`` — may be consumed by a library anywhere, so :func:`rng_state` captures all of them
and :func:`set_rng_state` puts them back. Generators a task owns itself (``torch.Generator``
objects kept across rounds) go into its own state with :func:`generator_state`.

:func:`save_atomic` writes through a temporary file, ``fsync`` and a rename (then ``fsync`` of
the directory, so the rename itself survives a power cut): a reader sees the previous file or
the new one, never a torn one. Checkpoints are loaded with ``weights_only=True`` (tensors,
numbers, strings, bytes, lists, tuples, dicts only), so a checkpoint file can never run code.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch


def rng_state() -> dict[str, Any]:
    """The process-wide random streams: torch (CPU and every visible CUDA device), NumPy's global
    ``RandomState`` and Python's ``random``, as values :func:`torch.load` reads with
    ``weights_only=True`` (NumPy's key array as an int64 tensor)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back the streams :func:`rng_state` captured (CUDA's only where it was captured and
    CUDA is in use here)."""
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def generator_state(gen: torch.Generator) -> torch.Tensor:
    """A ``torch.Generator``'s state (restore with ``gen.set_state(...)``)."""
    return gen.get_state()


def save_atomic(path: str | os.PathLike[str], obj: Any) -> int:
    """``torch.save(obj)`` to ``path`` atomically (temporary file, fsync, rename, fsync of the
    directory); returns the bytes written. A crash at any point leaves the previous file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
        size = f.tell()
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return size


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename or a new file in ``directory`` durable (a no-op where directories cannot be
    opened, e.g. on Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load(path: str | os.PathLike[str]) -> Any:
    """A file :func:`save_atomic` wrote, read with ``weights_only=True`` onto the CPU."""
    return torch.load(path, map_location="cpu", weights_only=True)
