"""Run identity and the run store: which directory a config's results live in, and what is in it.

Run identity (:func:`config_hash`, :func:`collection_hash`, :func:`default_run_name`,
:func:`run_dir_for`): a run is named after the keys that change what it computes, so a finished
run is recognised (and skipped) whichever machine or folder produced it. Committed results are
identified by these names: the hashes below must never change for an existing task.

A run directory holds

* ``config.json`` — the resolved run config, its hash and the code and package versions that
  made the run (:mod:`fedcal.provenance`);
* ``metrics.csv`` — tidy rows ``run_id, round, metric, value, config_hash``, appended and
  flushed after every round, so an interrupted run keeps every finished round;
* ``reliability.csv`` — reliability-diagram bins of the final global model;
* ``model.pt`` — the final global model's state dict (for post-hoc calibration, triage, CKA);
* ``DONE`` — written last; a run with a ``DONE`` matching its config hash is finished.

Tables and plots are built from these files only (:func:`load_metrics`; the final metrics of runs:
:func:`fedcal.reports.final_metrics`).

Unfinished runs (no ``DONE`` matching the hash of the config in their ``config.json``:
interrupted, crashed, or still running) are never reported as final: :func:`run_status` tells
finished from unfinished and how far an unfinished run got, :func:`load_metrics` flags every
per-round row with ``finished``, and every final table (:mod:`fedcal.reports`) leaves unfinished
runs out and logs one line for each run it left out.

A run directory belongs to one config: :meth:`RunStore.start` refuses (:class:`RunNameConflict`)
to start a run in a directory that holds a run of a different config (the same ``run-name``
reused), instead of overwriting it.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import pandas as pd

from fedcal.config import TASK_GROUPS, ConfigError, RunConfig, fields_of, key_of, setting_of
from fedcal.provenance import provenance

METRICS_FILE = "metrics.csv"
MODEL_FILE = "model.pt"
CONFIG_FILE = "config.json"
DONE_FILE = "DONE"
AUDIT_FILE = "aggregation.csv"  # per round and accepted node: its weight and the rule's audit (train task)
REJECTIONS_FILE = "rejections.csv"  # every reply a strategy rejected (written by the train task)
COLUMNS = ("run_id", "round", "metric", "value", "config_hash")
FINISHED = "finished"  # the column of load_metrics that flags the rows of finished runs
CODE = "code"  # the column of load_metrics naming the code that made each run
UNRECORDED = "unrecorded"  # the code of a run made before fedcal recorded provenance

log = logging.getLogger("fedcal.results")


class RunNameConflict(ConfigError):
    """A run directory already holds a run of a different config (a ``run-name`` reused): starting
    there would overwrite it. The message names the directory and the keys that differ."""


class RunFailed(RuntimeError):
    """A run ended without a result worth marking finished (e.g. no round aggregated anything,
    or the engine stopped before the task finished). Its run store keeps what it logged; the
    command prints this as one line."""


class UnfinishedRunError(FileNotFoundError):
    """A run's final results were asked for, but the run is unfinished (no ``DONE`` matching its
    config hash): its final model and final metrics do not exist."""


class RunStore:
    """Append-only store of one run's per-round results."""

    def __init__(self, run_dir: str | os.PathLike[str], cfg: RunConfig):
        self.dir = Path(run_dir)
        self.cfg = cfg
        self.run_id = self.dir.name
        self.config_hash = config_hash(cfg)

    # ------------------------------------------------------------------ lifecycle
    def is_done(self) -> bool:
        done = self.dir / DONE_FILE
        return done.exists() and done.read_text().strip() == self.config_hash

    def check(self) -> None:
        """Raise :class:`RunNameConflict` if the directory holds a run of another config
        (see :func:`check_run_dir`)."""
        check_run_dir(self.dir, self.cfg)

    def start(self) -> None:
        """Begin a fresh run: clear partial results of an earlier attempt of the same config,
        write config. A directory holding a run of a different config is refused
        (:class:`RunNameConflict`), never overwritten."""
        self.check()
        if self.dir.exists():
            for name in (METRICS_FILE, "reliability.csv", REJECTIONS_FILE, AUDIT_FILE, DONE_FILE, CONFIG_FILE,
                         MODEL_FILE):
                (self.dir / name).unlink(missing_ok=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.dir / CONFIG_FILE, json.dumps(
            {"run_id": self.run_id, "config_hash": self.config_hash, "config": self.cfg.to_flower(),
             "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "provenance": provenance()}, indent=2))
        with open(self.dir / METRICS_FILE, "w", newline="") as f:
            csv.writer(f).writerow(COLUMNS)

    def log_round(self, server_round: int, metrics: Mapping[str, float]) -> None:
        """Append one round's metrics and flush them to disk."""
        with open(self.dir / METRICS_FILE, "a", newline="") as f:
            w = csv.writer(f)
            for name, value in metrics.items():
                w.writerow((self.run_id, server_round, name, repr(float(value)), self.config_hash))
            f.flush()
            os.fsync(f.fileno())

    def write_table(self, name: str, frame: pd.DataFrame) -> Path:
        path = self.dir / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        frame.to_csv(tmp, index=False)
        os.replace(tmp, path)
        return path

    def append_rows(self, name: str, rows: Sequence[Mapping[str, Any]]) -> Path:
        """Append ``rows`` to the CSV table ``name`` (created with a header from the first rows'
        keys). Every later row must have exactly those columns, in any order: a table never
        silently gains or loses a column."""
        path = self.dir / name
        if not rows:
            return path
        new = not path.exists()
        if new:
            columns = list(rows[0])
        else:
            with open(path, newline="") as f:
                columns = next(csv.reader(f))
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            if new:
                w.writeheader()
            for row in rows:
                if set(row) != set(columns):
                    raise ValueError(f"{name}: row columns {sorted(row)} differ from the table's {columns}")
                w.writerow(row)
        return path

    def save_model(self, state_dict: Mapping[str, Any]) -> Path:
        """The final global model (``model.pt``, a state dict) for post-hoc analyses."""
        import torch

        path = self.dir / MODEL_FILE
        tmp = path.with_suffix(".tmp")
        torch.save({k: v.detach().cpu() for k, v in state_dict.items()}, tmp)
        os.replace(tmp, path)
        return path

    def finish(self) -> None:
        atomic_write(self.dir / DONE_FILE, self.config_hash)


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: a reader sees the old
    file or the new one, never half of one."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------- run identity
# Keys that describe where and how a run executes, not what it computes (the "execution" group
# and the fields declared hashed=False): left out of every hash, so the same experiment on CPU or
# GPU, or in another output folder, is recognised as the same.
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)}
_NON_SEMANTIC = frozenset(f.name for f in dataclasses.fields(RunConfig) if not setting_of(f.name).hashed)
# What the clients' probits of an inference run depend on (their local training and the queries):
# runs that differ only in aggregator or attack settings reuse each other's probits. A subset of
# groups, so named one by one.
_COLLECTION_KEYS = ("dataset", "model", "num_clients", "dirichlet_alpha", "lr", "momentum", "weight_decay",
                    "batch_size", "seed", "inf_server_frac", "inf_local_epochs", "inf_test_queries")


def hashed_keys(task: str) -> frozenset[str]:
    """Field names whose values make up the hash of a run of ``task``.

    * ``train``: the common, train and defense groups, without ``task`` — exactly the keys hashed
      before the inference task (and the task key) existed, so old run directories keep their names.
    * ``inference``: the common, train, defense and inference groups with ``task``. Inference reads
      few train/defense keys, but its hashes have always covered them; dropping them now would
      rename every committed inference run directory and orphan its probit cache.
    * any later task: the common group (``task`` included) and the task's own groups
      (:data:`fedcal.config.TASK_GROUPS`), so adding a task or a group never changes another
      task's hashes.
    """
    if task == "train":
        groups: tuple[str, ...] = ("common", "train", "defense")
    elif task == "inference":
        groups = ("common", "train", "defense", "inference")
    else:
        groups = ("common", *TASK_GROUPS[task])
    keys = frozenset(fields_of(*groups)) - _NON_SEMANTIC
    return keys - {"task"} if task == "train" else keys


def config_hash(cfg: RunConfig) -> str:
    """Stable 12-hex hash of the keys that change what a run computes (not where it runs)."""
    keys = hashed_keys(cfg.task)
    # a key declared hash_when_set counts only at a non-default value (so adding it renamed nothing)
    semantic = {k: v for k, v in dataclasses.asdict(cfg).items()
                if k in keys and not (setting_of(k).hash_when_set and v == _DEFAULTS[k])}
    blob = json.dumps(semantic, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def collection_hash(cfg: RunConfig) -> str:
    """Hash of what an inference run's collected client probits depend on."""
    keys = {k: getattr(cfg, k) for k in _COLLECTION_KEYS}
    if cfg.inf_augment != "none":  # added later: collections made before keep their hash
        keys["inf_augment"] = cfg.inf_augment
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
    keys["collection"] = collection_hash(cfg)
    blob = json.dumps(keys, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _tsa_label(cfg: RunConfig) -> str:
    """``tsa<τ>`` of a run name, ``u`` appended for the uncoupled ablation."""
    return f"tsa{cfg.tau:g}" + ("" if cfg.coupled else "u")


def default_run_name(cfg: RunConfig) -> str:
    """Readable, unique-per-config directory name."""
    if cfg.task == "inference":
        return (f"{cfg.dataset}-{cfg.model}-inference-n{cfg.num_clients}-f{cfg.inf_f}-s{cfg.seed}-"
                f"{config_hash(cfg)[:8]}")
    if cfg.task == "train":
        what = cfg.attack if cfg.attack != "tsa" else _tsa_label(cfg)
        if cfg.attack == "tsa":  # the adaptive attacker's knobs, named only when used
            what += (f"-f{cfg.tsa_step_frac:g}" if cfg.tsa_step_frac != 1 else "") + \
                    (f"-b{cfg.tsa_blend:g}" if cfg.tsa_blend != 1 else "")
        return f"{cfg.dataset}-{cfg.model}-{cfg.strategy}-{what}-s{cfg.seed}-{config_hash(cfg)[:8]}"
    if cfg.task == "distill":  # dataset/model are the image tasks' keys: name the text task's own
        attack = f"-bd{cfg.dst_backdoor_ratio:g}" if cfg.num_backdoor_clients else ""
        attack += f"-{cfg.dst_logit_attack}{cfg.dst_attack_factor:g}" if cfg.dst_logit_attack != "none" else ""
        return (f"distill-{cfg.dst_corpus}-{cfg.dst_method}-{cfg.dst_partition}{attack}-s{cfg.seed}-"
                f"{config_hash(cfg)[:8]}")
    if cfg.task == "detect":
        what = "benign" if cfg.attack == "none" else _tsa_label(cfg)
        data = "-kitti" if cfg.det_data == "kitti" else ""
        return f"detect-{cfg.det_model.replace('/', '_')}{data}-{what}-s{cfg.seed}-{config_hash(cfg)[:8]}"
    if cfg.task == "lm":
        what = cfg.attack if cfg.attack != "tsa" else _tsa_label(cfg)
        return f"lm-{cfg.lm_corpus}-{cfg.strategy}-{what}-s{cfg.seed}-{config_hash(cfg)[:8]}"
    return f"{cfg.dataset}-{cfg.model}-{cfg.task}-s{cfg.seed}-{config_hash(cfg)[:8]}"  # a later task's default


def run_dir_for(cfg: RunConfig) -> Path:
    """``<output-dir>/<run-name or default run name>``."""
    return Path(cfg.output_dir) / (cfg.run_name or default_run_name(cfg))


def load_run_config(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    return json.loads((Path(run_dir) / CONFIG_FILE).read_text())


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
        other, have = _stored_identity(Path(run_dir))
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


class RunStatus(NamedTuple):
    """Whether a run directory holds a finished run, and how far an unfinished one got."""

    run_dir: Path
    finished: bool
    last_round: int | None  # the last round logged in metrics.csv (None: no round logged)
    num_rounds: int | None  # the rounds a train run was configured for (None: other tasks, or unreadable)
    why: str  # "" when finished; else why it is not, e.g. "no DONE marker"

    def describe(self) -> str:
        """One line: ``<dir>: unfinished (no DONE marker; rounds logged up to 16 of 60)``."""
        if self.finished:
            return f"{self.run_dir}: finished"
        if self.last_round is None:
            got = "no round logged"
        elif self.num_rounds is not None:
            got = f"rounds logged up to {self.last_round} of {self.num_rounds}"
        else:
            got = f"rounds logged up to {self.last_round}"
        return f"{self.run_dir}: unfinished ({self.why}; {got})"


def _stored_identity(run_dir: Path) -> tuple[RunConfig | None, str | None]:
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


def _done_state(run_dir: Path) -> tuple[RunConfig | None, str]:
    """(stored config or None, why the run is unfinished — "" when it is finished)."""
    try:
        cfg, want = _stored_identity(run_dir)
    except FileNotFoundError:
        return None, f"not started (no {CONFIG_FILE})"
    except (OSError, ValueError, KeyError, TypeError):
        return None, f"unreadable {CONFIG_FILE}"
    done = run_dir / DONE_FILE
    marker = done.read_text().strip() if done.exists() else None
    if marker is not None and want is not None and marker == want:
        return cfg, ""
    return cfg, "no DONE marker" if marker is None else "its DONE marker belongs to another config"


def run_status(run_dir: str | os.PathLike[str]) -> RunStatus:
    """Is ``run_dir`` a finished run (a ``DONE`` equal to the hash of the config in its
    ``config.json``; the stored hash when that config no longer parses)? And if not, how far did
    it get (its last logged round)."""
    d = Path(run_dir)
    cfg, why = _done_state(d)
    num_rounds = cfg.num_rounds if cfg is not None and cfg.task == "train" else None
    last = None if why.startswith("not started") else _last_round(d)
    return RunStatus(d, not why, last, num_rounds, why)


def is_finished(run_dir: str | os.PathLike[str]) -> bool:
    """Whether ``run_dir`` holds a finished run (:func:`run_status`), without reading its
    metrics (readers that hold them already need not read them twice)."""
    return not _done_state(Path(run_dir))[1]


def _last_round(run_dir: Path) -> int | None:
    path = run_dir / METRICS_FILE
    try:
        rounds = pd.read_csv(path, usecols=["round"])["round"]
    except (OSError, ValueError, pd.errors.EmptyDataError):
        return None
    return int(rounds.max()) if len(rounds) else None


def stored_provenance(run_dir: str | os.PathLike[str]) -> Mapping[str, Any] | None:
    """The provenance (:func:`fedcal.provenance.provenance`) a run directory's ``config.json``
    recorded, or None (made before fedcal recorded it, or no readable ``config.json``)."""
    try:
        stored = json.loads((Path(run_dir) / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return None
    prov = stored.get("provenance") if isinstance(stored, dict) else None
    return prov if isinstance(prov, dict) else None


def code_of(run_dir: str | os.PathLike[str]) -> str:
    """The ``code`` identity a run recorded, or :data:`UNRECORDED`."""
    prov = stored_provenance(run_dir)
    return str(prov.get("code", UNRECORDED)) if prov else UNRECORDED


def reuse_note(run_dir: str | os.PathLike[str]) -> str | None:
    """None when the finished run in ``run_dir`` was made by this process's code and packages;
    else what differs, e.g. ``code 1a2b3c4d5e6f there, 9f8e7d6c5b4a+0c1d2e3f here; torch 2.13.0
    there, 2.14.1 here``."""
    now = provenance()
    then = stored_provenance(run_dir)
    if then is None:
        return f"code {UNRECORDED} there, {now['code']} here"
    diff = [f"code {then.get('code')} there, {now['code']} here"] if then.get("code") != now["code"] else []
    old = then.get("packages") or {}
    for name in sorted(set(old) | set(now["packages"])):
        if old.get(name) != now["packages"].get(name):
            diff.append(f"{name} {old.get(name, 'absent')} there, {now['packages'].get(name, 'absent')} here")
    return "; ".join(diff) or None


def warn_reused(run_dirs: Sequence[str | os.PathLike[str]]) -> list[str]:
    """Log one warning for the finished runs in ``run_dirs`` that are about to be reused
    although other code or packages made them (:func:`reuse_note`); returns their lines. A
    reused run is never silent about its origin; ``--force`` re-runs it."""
    lines = [f"{d}: {note}" for d in run_dirs if (note := reuse_note(d))]
    if lines:
        shown = "\n  ".join(lines[:5]) + (f"\n  … and {len(lines) - 5} more" if len(lines) > 5 else "")
        log.warning("reusing %d finished run(s) made by other code than this process's (%s); their results "
                    "stay as they were computed, --force re-runs them:\n  %s", len(lines),
                    provenance()["code"], shown)
    return lines


def load_metrics(run_dirs: list[str | os.PathLike[str]] | str | os.PathLike[str]) -> pd.DataFrame:
    """Tidy per-round metrics of one or many runs, with their config columns joined, ``code``
    (the code that made the run, :func:`fedcal.provenance.code_of`) and, last, ``finished``
    (bool, :func:`run_status`): the rows of unfinished runs are kept, flagged
    ``finished = False``. Metric names are whatever the runs logged (accuracy, ece, …,
    round_seconds, and any per-round counts a task adds)."""
    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    frames = []
    for d in run_dirs:
        path = Path(d) / METRICS_FILE
        if not path.exists():
            continue
        df = pd.read_csv(path)
        cfg = load_run_config(d)["config"]
        # the config columns joined at once (one insert per key fragments the frame: 100+ keys)
        extra = pd.DataFrame({**{k: [v] * len(df) for k, v in cfg.items()}, CODE: code_of(d),
                              FINISHED: is_finished(d)}, index=df.index)
        frames.append(pd.concat([df.drop(columns=[c for c in extra if c in df.columns]), extra], axis=1))
    if not frames:
        return pd.DataFrame(columns=[*COLUMNS, FINISHED])
    return pd.concat(frames, ignore_index=True)


def load_model(run_dir: str | os.PathLike[str]):
    """(RunConfig, model with the run's final global weights, dataset) of a finished run."""
    import torch

    from fedcal.data import load_dataset
    from fedcal.models import build_model

    status = run_status(run_dir)
    if not status.finished:
        raise UnfinishedRunError(f"no final model: {status.describe()}")
    cfg = load_config(run_dir)
    path = Path(run_dir) / MODEL_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: the run predates model saving")
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    model = build_model(cfg.model, ds.input_shape, ds.num_classes)
    model.load_state_dict(torch.load(path, weights_only=True))
    return cfg, model, ds
