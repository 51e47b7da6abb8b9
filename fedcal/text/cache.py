"""Where fedcal keeps what it builds or copies once (backbones, language models): ``$FEDCAL_CACHE_DIR``,
else ``~/.cache/fedcal`` — outside the repository, so weights are never committed."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$FEDCAL_CACHE_DIR`` if set, else ``~/.cache/fedcal``."""
    env = os.environ.get("FEDCAL_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "fedcal"


__all__ = ["cache_root"]
