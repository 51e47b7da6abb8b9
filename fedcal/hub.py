"""Fail fast on a Hugging Face Hub name that cannot be loaded (flwr-free).

``transformers``' ``from_pretrained`` and ``datasets``' ``load_dataset`` retry an unreachable Hub
with back-off: a mistyped or offline name (``det-model=foo/bar``, ``lm-model=...``) took a minute
or more of retries before its error. The keys that accept a Hub name are checked here first, in
one request at most, and a name that cannot be loaded is one :class:`~fedcal.config.ConfigError`
naming the key:

1. a local folder passes (``from_pretrained`` reads it);
2. a name whose ``config.json`` is in the Hugging Face cache passes without any request;
3. offline (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` / ``HF_DATASETS_OFFLINE`` set), any other
   model name is refused at once; a dataset is left to ``datasets``, which reads its own cache
   offline and fails at once without one;
4. otherwise one metadata request (``HfApi.model_info`` / ``dataset_info``, no retries, a short
   timeout) decides: no such repository, or no Hub reachable, is refused with its reason.

The check is huggingface_hub's own API (the library the loaders use), so the cache and the offline
switch mean the same here as there.
"""

from __future__ import annotations

import os
from pathlib import Path

from fedcal.config import ConfigError

__all__ = ["check_hub_name", "hub_offline"]

#: seconds the one metadata request may take (a reachable Hub answers in well under a second)
PROBE_TIMEOUT_S = 10.0
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


def hub_offline() -> bool:
    """Whether the Hugging Face libraries are told to stay offline (read now, not at import)."""
    return any(os.environ.get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE") for v in _OFFLINE_VARS)


def check_hub_name(key: str, name: str, *, repo_type: str = "model") -> None:
    """Return when ``name`` (the value of run-config ``key``) is a local folder, a cached Hub
    repository or one the Hub confirms now; else :class:`ConfigError` naming ``key``, at once."""
    if Path(name).expanduser().is_dir():
        return
    try:
        from huggingface_hub import HfApi, try_to_load_from_cache
        from huggingface_hub.errors import HFValidationError
    except ImportError as exc:  # transformers depends on huggingface_hub: only a broken install lands here
        raise ConfigError(f"run-config key {key!r}: {name!r} is a Hub name, but huggingface_hub is not "
                          "installed") from exc
    try:
        cached = try_to_load_from_cache(name, "config.json", repo_type=repo_type) if repo_type == "model" else None
    except HFValidationError as exc:
        raise ConfigError(f"run-config key {key!r}: {name!r} is neither a folder nor a valid Hub name "
                          f"({exc})") from None
    if isinstance(cached, str):
        return
    if hub_offline():
        if repo_type == "dataset":  # datasets' own cache (not the Hub's) decides, without retries
            return
        raise ConfigError(f"run-config key {key!r}: {name!r} is not a local folder nor in the Hugging Face cache, and "
                          "the Hub is offline (HF_HUB_OFFLINE); give a folder or a cached name")
    api = HfApi()
    info = api.model_info if repo_type == "model" else api.dataset_info
    try:
        info(name, timeout=PROBE_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 — no such repository, no network, a proxy's refusal: not loadable
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"run-config key {key!r}: {name!r} is not a local folder, not in the Hugging Face cache, and "
                          f"the Hub does not serve it now ({type(exc).__name__}: {reason})") from None
