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

What it holds is still untrusted input (a checkpoint may be edited or crafted): the run store
checks its fields against the run (:meth:`fedcal.results.RunStore.session`) and a task checks its
state — :func:`check_tensors_like`, :func:`check_history`, :func:`check_rng_state` — before using
it (:meth:`fedcal.results.RunStore.resumable`); a checkpoint that fails is not resumed from.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
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


def check_rng_state(state: Any) -> None:
    """Raise (ValueError) unless :func:`set_rng_state` can put ``state`` back; the streams of
    this process are left as they were either way (a checkpoint's state is untrusted input)."""
    if not isinstance(state, dict) or not {"torch", "numpy", "python"} <= set(state):
        raise ValueError("its random state lacks the torch, numpy or python stream")
    current = rng_state()
    try:
        set_rng_state(state)
    except Exception as exc:  # noqa: BLE001 — whatever the libraries raise for a state they cannot take
        raise ValueError(f"its random state does not restore ({type(exc).__name__}: {exc})") from None
    finally:
        set_rng_state(current)


def check_tensors_like(state: Any, template: Mapping[str, torch.Tensor], what: str) -> None:
    """Raise (ValueError naming the first misfit) unless ``state`` holds exactly ``template``'s
    keys, each a tensor of its shape and dtype, and every floating one finite."""
    if not isinstance(state, Mapping):
        raise ValueError(f"its {what} is a {type(state).__name__}, not a state dict")
    if set(state) != set(template):
        missing, extra = sorted(set(template) - set(state)), sorted(map(str, set(state) - set(template)))
        raise ValueError(f"its {what} does not fit the model (missing {missing[:3]}, unexpected {extra[:3]})")
    for key, want in template.items():
        got = state[key]
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise ValueError(f"its {what}'s {key} is {shape}, not {tuple(want.shape)} {want.dtype}")
        if got.is_floating_point() and not torch.isfinite(got).all():
            raise ValueError(f"its {what}'s {key} is not finite")


def check_finite(state: Mapping[str, Any], keys: Sequence[str]) -> None:
    """Raise (ValueError naming it) unless each of ``keys`` that ``state`` has is a dict of tensors,
    every floating one finite."""
    for key in (k for k in keys if k in state):
        tensors = state[key]
        if not isinstance(tensors, Mapping) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
            raise ValueError(f"its {key} is not a dict of tensors")
        if not all(torch.isfinite(v).all() for v in tensors.values() if v.is_floating_point()):
            raise ValueError(f"its {key} is not finite")


def check_history(state: Mapping[str, Any], last_round: int) -> None:
    """Raise (ValueError) unless a federated task's checkpointed history fits its round
    ``last_round``: ``rows`` one per round ``0 .. last_round`` in order (dicts of numbers),
    ``rejections`` dicts of rounds ``1 .. last_round``, ``aggregated`` a count in ``0 .. last_round``."""
    rows, rejections, aggregated = state["rows"], state["rejections"], state["aggregated"]
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "round" in r for r in rows):
        raise ValueError("its rows are not a list of per-round dicts")
    if [r["round"] for r in rows] != list(range(last_round + 1)):
        raise ValueError(f"its rows do not cover rounds 0-{last_round} once each")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for r in rows for v in r.values()):
        raise ValueError("its rows hold values that are not numbers")
    if not isinstance(rejections, list) or not all(
            isinstance(r, dict) and type(r.get("round")) is int and 1 <= r["round"] <= last_round for r in rejections):
        raise ValueError(f"its rejections are not a list of rejections of rounds 1-{last_round}")
    if type(aggregated) is not int or not 0 <= aggregated <= last_round:
        raise ValueError(f"its count of rounds aggregated ({aggregated!r}) is not in 0-{last_round}")


def require(state: Mapping[str, Any], keys: Sequence[str]) -> None:
    """Raise (ValueError naming them) when ``state`` lacks any of ``keys``."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise ValueError(f"its state lacks {', '.join(missing)}")


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
