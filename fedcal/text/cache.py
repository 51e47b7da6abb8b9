"""Where fedcal keeps what it builds or copies once (backbones, language models): ``$FEDCAL_CACHE_DIR``,
else ``~/.cache/fedcal`` — outside the repository, so weights are never committed."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path


def cache_root() -> Path:
    """``$FEDCAL_CACHE_DIR`` if set, else ``~/.cache/fedcal``."""
    env = os.environ.get("FEDCAL_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "fedcal"


__all__ = ["cache_root"]


def files_digest(files: Iterable[Path]) -> str:
    """SHA-256 over the names and bytes of ``files``, in the order given (a backbone's or an encoder's
    weight, config and tokenizer files: another checkpoint under the same folder name is another digest)."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()
