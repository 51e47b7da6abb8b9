"""Run identity: which keys make up a run's hash, its directory name, and the config a run
directory holds. Committed results are identified by these names: the hashes must never change
for an existing task."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from fedcal.config import ConfigError, RunConfig, config_fields, fields_of, key_of, setting_of, get_task
from fedcal.results.files import CONFIG_FILE, RunNameConflict


# Keys that describe where and how a run executes, not what it computes (the "execution" group
# and the fields declared hashed=False): left out of every hash, so the same experiment on CPU or
# GPU, or in another output folder, is recognised as the same.
def _non_semantic() -> frozenset[str]:
    return frozenset(s.name for s in config_fields() if not s.hashed)


# What the clients' probits of an inference run depend on (their local training and the queries):
# runs that differ only in aggregator or attack settings reuse each other's probits. A subset of
# groups, so named one by one.
_COLLECTION_KEYS = ("dataset", "model", "num_clients", "dirichlet_alpha", "lr", "momentum", "weight_decay",
                    "batch_size", "seed", "inf_server_frac", "inf_local_epochs", "inf_test_queries")


def hashed_keys(task: str) -> frozenset[str]:
    """Field names whose values make up the hash of a run of ``task``: the hashed keys of the groups
    its :class:`fedcal.config.Task` names (``identity_groups``), with or without the ``task``
    key itself as the task declares (see the task's config module for why it chose them)."""
    tc = get_task(task)
    keys = frozenset(fields_of(*tc.identity_groups)) - _non_semantic()
    return keys if tc.hash_task_key else keys - {"task"}


def choosing_keys() -> dict[str, str]:
    """{run-config field: component kind} of every key that chooses components, read from the settings: a
    key whose ``choices`` are ``ComponentNames(kind)`` (``strategy``), or that other keys are read only with
    (``only_with=(key, ComponentNames(kind))``: ``pre-aggregation``, a comma-separated list); a key that is
    no part of a run's identity (``tracker``) chooses nothing the run computes, and is left out."""
    from fedcal.config.components import ComponentNames

    out: dict[str, str] = {}
    for s in config_fields():
        if isinstance(s.choices, ComponentNames):
            out[s.name] = s.choices.kind
        if s.only_with is not None and isinstance(s.only_with[1], ComponentNames):
            out.setdefault(s.only_with[0], s.only_with[1].kind)
    return {key: kind for key, kind in out.items() if setting_of(key).hashed}


def chosen_component_keys(cfg: RunConfig) -> frozenset[str]:
    """The own keys (:attr:`fedcal.catalogue.Component.keys`) of every component ``cfg`` chooses: a
    plug-in rule's or attack's keys live in the plug-in's own config group, which no task's groups name,
    yet they change what the run computes."""
    from fedcal import catalogue

    from fedcal.config import all_tasks

    keys: set[str] = set()
    for key, kind in choosing_keys().items():
        known = catalogue.components(kind)
        for name in (v.strip() for v in str(getattr(cfg, key)).split(",")):  # one name, or a list of them
            if name in known:
                keys.update(known[name].keys)
    # only keys no task hashes: fedcal's own components' keys belong to a task's groups, which decide
    # whether they count (a distill key never enters a train run's hash, whatever dst-method says)
    tasks_keys = frozenset().union(*(hashed_keys(t.name) for t in all_tasks()))
    return frozenset(keys) - tasks_keys - _non_semantic()


def config_hash(cfg: RunConfig) -> str:
    """Stable 12-hex hash of the keys that change what a run computes (not where it runs): the task's
    hashed groups, and the own keys of the components the config chooses (for fedcal's components these
    lie in those groups already, so no existing run is renamed; a plug-in's are hashed this way)."""
    keys = hashed_keys(cfg.task) | chosen_component_keys(cfg)
    # a key declared hash_when_set counts only at a non-default value (so adding it renamed nothing)
    semantic = {k: v for k, v in cfg.to_dict().items()
                if k in keys and not (setting_of(k).hash_when_set and v == setting_of(k).default)}
    blob = json.dumps(semantic, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def collection_hash(cfg: RunConfig) -> str:
    """Hash of what an inference run's collected client probits depend on."""
    keys = {k: getattr(cfg, k) for k in _COLLECTION_KEYS}
    if cfg.inf_augment != "none":  # only when set: a collection without it keeps its hash
        keys["inf_augment"] = cfg.inf_augment
    if cfg.inf_lr_schedule != "constant":  # likewise
        keys["inf_lr_schedule"] = cfg.inf_lr_schedule
    if cfg.inf_probits != "live":  # likewise: float16-rounded probits are not a live collection's
        keys["inf_probits"] = cfg.inf_probits
    if cfg.inf_client_output != "probits":  # likewise: a logits collection also holds the clients' logits
        keys["inf_client_output"] = cfg.inf_client_output
    blob = json.dumps(keys, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


# What an inference run's learned aggregators depend on beyond its collection, per component: runs that
# differ only in attack or evaluation settings (or in the other component's keys) reuse each other's.
_AGGREGATOR_KEYS = {"deepset": ("inf_f", "agg_hidden", "agg_epochs", "agg_adv_epochs", "agg_lr", "agg_attack_steps",
                                "agg_restarts", "agg_adv_attack"),
                    "fusion": ("agg_hidden", "agg_epochs", "agg_lr", "agg_latent")}


def aggregator_hash(cfg: RunConfig, component: str) -> str:
    """Hash of what one learned component of an inference run depends on — ``"deepset"`` (the DeepSet,
    before and after adversarial training) or ``"fusion"`` (the purifiers' autoencoders and fusion
    classifiers) —: the collection and that component's training keys, not the attacks, nor how many
    queries or which aggregators the run evaluates."""
    keys = {k: getattr(cfg, k) for k in _AGGREGATOR_KEYS[component]}
    if component == "deepset" and cfg.agg_adv_subsets != 1:  # only when set: earlier DeepSets keep their hash
        keys["agg_adv_subsets"] = cfg.agg_adv_subsets
    keys["collection"] = collection_hash(cfg)
    blob = json.dumps(keys, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def default_run_name(cfg: RunConfig) -> str:
    """Readable, unique-per-config directory name: the task's own name parts (its config module's
    ``run_name``) and the config hash's first 8 hex digits."""
    return get_task(cfg.task).default_run_name(cfg, config_hash(cfg)[:8])


def run_dir_for(cfg: RunConfig) -> Path:
    """``<output-dir>/<run-name or default run name>``."""
    return Path(cfg.output_dir) / (cfg.run_name or default_run_name(cfg))


def load_run_config(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    return json.loads((Path(run_dir) / CONFIG_FILE).read_text())


def run_id_of(run_dir: str | os.PathLike[str]) -> str:
    """A run's id, as its ``metrics.csv`` rows carry it: the ``run_id`` its ``config.json`` recorded
    when it started — a copied or renamed folder keeps it —, else (no readable one) the folder's name."""
    try:
        run_id = load_run_config(run_dir).get("run_id")
    except (OSError, ValueError, AttributeError):
        run_id = None
    return run_id if isinstance(run_id, str) and run_id else Path(run_dir).name


def load_config(run_dir: str | os.PathLike[str]) -> RunConfig:
    """The validated run config a run directory was produced with."""
    return RunConfig.from_flower(load_run_config(run_dir)["config"])


def check_run_dir(run_dir: str | os.PathLike[str], cfg: RunConfig) -> None:
    """Refuse to (re)start ``cfg`` in ``run_dir`` if the directory holds a run of another config.

    A directory without ``config.json`` is free; one whose ``config.json`` has ``cfg``'s hash
    holds an earlier attempt (or a finished run) of the same config, which is resumed, skipped or
    re-run (``--force``) as before. Any other ``config.json`` means the ``run-name`` is reused for
    a different config: :class:`RunNameConflict`, one line naming the directory and the keys that
    differ. The hash of the stored config is recomputed from its keys (so a directory written
    before a config key was renamed still matches); the stored hash is used when the stored
    config no longer parses.
    """
    if not (Path(run_dir) / CONFIG_FILE).exists():
        return
    want = config_hash(cfg)
    try:
        other, have = stored_identity(Path(run_dir))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunNameConflict(f"run directory {str(run_dir)!r} has an unreadable {CONFIG_FILE} ({exc}): it is not "
                              f"overwritten; remove it or choose another 'run-name'") from None
    if have == want:
        return
    diff: list[str] = []
    if other is not None:
        keys = sorted((hashed_keys(cfg.task) | hashed_keys(other.task)) - {"task"})
        diff = [f"{key_of(k)}={getattr(other, k)!r} there, {getattr(cfg, k)!r} here" for k in keys
                if getattr(other, k) != getattr(cfg, k)]
        if other.task != cfg.task:
            diff.insert(0, f"task={other.task!r} there, {cfg.task!r} here")
    what = ("; ".join(diff[:3]) + (f"; and {len(diff) - 3} more" if len(diff) > 3 else "") if diff
            else f"config hash {have or '?'} there, {want} here")
    raise RunNameConflict(f"run directory {str(run_dir)!r} already holds a run of a different config ({what}): "
                          f"it is not overwritten; choose another 'run-name' or remove the directory")


def stored_identity(run_dir: Path) -> tuple[RunConfig | None, str | None]:
    """(config, hash) of the run stored in ``run_dir``: the hash recomputed from the keys of its
    ``config.json`` (so a directory written before a key was renamed still matches), or the
    stored hash, with no config, when that config no longer parses. Raises OSError/ValueError/
    KeyError/TypeError when ``config.json`` is missing or unreadable."""
    stored = load_run_config(run_dir)
    raw = stored["config"]
    try:
        cfg = RunConfig.from_flower(raw)
        return cfg, config_hash(cfg)
    except (ConfigError, TypeError):
        return None, str(stored.get("config_hash", "")) or None
