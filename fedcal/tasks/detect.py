"""Task ``detect``: the Temperature Scaling Attack on federated object detection (SPEC §10).

Every client holds non-IID MNIST scenes (:mod:`fedcal.detect.scenes`) and trains the global
detector (:mod:`fedcal.detect.model`: DETR, or the grid detector with DETR's no-object structure)
for ``det-local-steps`` AdamW steps per round on transformers' Hungarian-matched DETR loss; an
attacker (``attack=tsa``, ``attacker-ratio`` of the clients, :func:`fedcal.attacks.behaviour_for`)
divides the class logits — "no object" included — by ``tau`` in that loss and trains with
η = β·τ (:mod:`fedcal.detect.local_round`).

Server side: Flower's strategy API through fedcal's :class:`~fedcal.strategies.FedAvg` (seeded
sampling of ``det-clients-per-round`` nodes, 0 = all; data-size weighted mean of the updates),
with train messages of type ``train.detect``. Every reply is validated before aggregation — an
error reply, a missing / extra / wrongly shaped or typed array, NaN or Inf, a missing or invalid
``num-examples``, a second reply of one node — and a bad one is dropped with a warning naming the
node and its partition, recorded in ``rejections.csv`` (round, node_id, partition_id, reason); the
round goes on with the rest and keeps the global model when none is valid. The global model is
evaluated centrally on the test scenes at τ = 1 every ``det-eval-every`` rounds (always 0 and the
last): ``map50``, ``obj_ece``, ``obj_sece``, ``mean_obj_prob``, ``positive_rate``, ``boxes_kept``
(per image at ``det-threshold`` under the ``det-keep`` rule), ``boxes_kept_object`` and
``boxes_kept_class`` (under each keep rule, :mod:`fedcal.detect.metrics`) plus the reply accounting
in ``metrics.csv`` (``round_seconds`` in ``timings.csv``); the boxes-kept curves of each evaluated round in
``kept.csv`` (round, rule, threshold, kept; both rules). At the end: ``reliability.csv`` (the
no-object calibration bins of the final model), ``example.csv`` (the kept boxes of test scene 0 at
``det-threshold`` under the ``det-keep`` rule) with ``example.npy`` (its pixels), ``model.pt`` and
``DONE``. A run in which no round aggregated anything raises instead of
writing ``DONE``. Report: :func:`fedcal.reports.detect.detect_report`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import functools
from logging import INFO, WARNING

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from fedcal.attacks import AttackSpec, attackers_of, behaviour_for
from fedcal.attacks.behaviour import round_generator
from fedcal.attacks.registry import behaviour_kind
from fedcal.config import RunConfig
from fedcal.data import default_data_dir
from fedcal.detect import EXAMPLE_FILE, EXAMPLE_IMAGE, KEPT_FILE, kitti
from fedcal.detect.metrics import THRESHOLDS, detection_metrics, kept_detections
from fedcal.detect.model import DetectorSpec, build_detector, check_model_name, is_pretrained_name
from fedcal.hub import check_hub_name
from fedcal.detect.scenes import SceneSpec, Scenes, make_scenes
from fedcal.detect.local_round import local_round, predict
from fedcal.results import RunStore, run_dir_for
from fedcal.strategies import FedAvg
from fedcal.tasks.nodes import (CLIENT_RECORD, check_partitions, client_id, client_record, discover_clients,
                                message_config)
from fedcal.config.detect import MESSAGE_TYPE  # the task's declaration names its message type
from fedcal.tasks.registry import ProgressFn
from fedcal.tasks.train import federate
from fedcal.local_training import resolve_device

if TYPE_CHECKING:
    import pandas as pd

#: the test scene drawn with its kept boxes
EXAMPLE_SCENE = 0


# ---------------------------------------------------------------------------------- shared
def check_detect_config(cfg: RunConfig) -> None:
    """The detect task's preflight: what its config's rules (:mod:`fedcal.config.detect`) cannot see
    — a ``det-data=kitti`` run's data-dir holds KITTI, the scenes can be drawn, the model name
    resolves — as one :class:`ConfigError` naming the key, before any round."""
    if cfg.det_data == "kitti":
        kitti.split(len(kitti.read_index(_kitti_root(cfg))))
    else:
        scene_spec(cfg).check()
    check_model_name(cfg.det_model)
    if is_pretrained_name(cfg.det_model):  # one request at most, not from_pretrained's minute of retries
        check_hub_name("det-model", cfg.det_model)


def _kitti_root(cfg: RunConfig) -> str:
    return str(cfg.data_dir or default_data_dir())


def scene_spec(cfg: RunConfig) -> SceneSpec:
    return SceneSpec.from_config(cfg)


def num_classes(cfg: RunConfig) -> int:
    """The object classes the detector tells apart: KITTI's 8 types or the 10 digits."""
    return len(kitti.KITTI_CLASSES) if cfg.det_data == "kitti" else 10


def detector_spec(cfg: RunConfig) -> DetectorSpec:
    return DetectorSpec.from_config(cfg, num_classes=num_classes(cfg))


@functools.lru_cache(maxsize=8)
def _scenes(spec: SceneSpec, count: int, seed: int, split: str, client: int, alpha: float, data_dir: str) -> Scenes:
    return make_scenes(spec, count, seed, split=split, client=client, alpha=alpha, data_dir=data_dir)


def client_scenes(cfg: RunConfig, cid: int) -> Scenes:
    """Client ``cid``'s training scenes (cached in the process and on disk)."""
    if cfg.det_data == "kitti":
        return _kitti_client(_kitti_root(cfg), cfg.det_size, cfg.det_train_scenes, cfg.num_clients, cid, cfg.det_alpha,
                             cfg.seed)
    return _scenes(scene_spec(cfg), cfg.det_train_scenes, cfg.seed, "train", cid, cfg.det_alpha, cfg.data_dir)


def eval_scenes(cfg: RunConfig) -> Scenes:
    """The test scenes (the digits' test split, uniform classes, seeded by ``seed``; or KITTI's
    held-out images)."""
    if cfg.det_data == "kitti":
        return kitti.kitti_test(_kitti_root(cfg), cfg.det_size, cfg.det_test_scenes)
    return _scenes(scene_spec(cfg), cfg.det_test_scenes, cfg.seed, "test", -1, cfg.det_alpha, cfg.data_dir)


_kitti_client = functools.lru_cache(maxsize=8)(kitti.kitti_client)


@functools.lru_cache(maxsize=2)
def _shared_detector(spec: DetectorSpec):
    """One detector per node process; every message overwrites all its weights."""
    return build_detector(spec, seed=0)


# ---------------------------------------------------------------------------------- client side
def detect_round(msg: Message, context: Context) -> Message:
    """One client round: load the global detector, train locally (TSA if this client attacks), reply."""
    cfg, server_round = message_config(msg, context)
    check_partitions(cfg, context)
    cid = client_id(context)
    scenes = client_scenes(cfg, cid)
    device = resolve_device(cfg.device)
    model = _shared_detector(detector_spec(cfg))
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    behaviour = behaviour_for(AttackSpec.from_config(cfg), cid)
    kind = behaviour_kind(behaviour.kind)
    tau, coupled = kind.loss_temperature(behaviour)
    tau_steps = kind.temperature_steps(behaviour, cfg.det_local_steps)
    stats = local_round(model, scenes, steps=cfg.det_local_steps, batch_size=cfg.det_batch_size, lr=cfg.det_lr,
                        weight_decay=cfg.det_weight_decay, tau=tau, coupled=coupled,
                        generator=round_generator(cfg.seed, server_round, cid),
                        tau_steps=None if tau_steps >= cfg.det_local_steps else tau_steps, device=device)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return Message(RecordDict({
        "arrays": ArrayRecord(state),
        "metrics": MetricRecord({"train-loss": stats.loss, "train-loss-ce": stats.loss_ce,
                                 "num-examples": stats.num_examples}),
        CLIENT_RECORD: client_record(cid, behaviour.malicious, tau=float(tau)),
    }), reply_to=msg)


# ---------------------------------------------------------------------------------- server side
def run_detect(grid: Grid, cfg: RunConfig, progress: ProgressFn | None = None) -> pd.DataFrame:
    """The whole detection run on ``grid`` (module docstring); returns the per-round metrics."""
    if cfg.task != "detect":
        raise ValueError(f"run_detect needs task = 'detect', got {cfg.task!r}")
    check_detect_config(cfg)
    store = RunStore(run_dir_for(cfg), cfg)
    with store.session(rounds=cfg.det_rounds) as checkpoint:  # resumes an unfinished attempt (federate)
        if checkpoint is None:
            for name in (KEPT_FILE, EXAMPLE_FILE, EXAMPLE_IMAGE):  # an earlier attempt's tables
                (store.dir / name).unlink(missing_ok=True)
        return _run_detect(grid, cfg, store, checkpoint, progress)


def _run_detect(grid: Grid, cfg: RunConfig, store: RunStore, checkpoint, progress: ProgressFn | None) -> pd.DataFrame:
    """:func:`run_detect`'s rounds, within the run's session (``checkpoint``: the one to resume from)."""
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    test = eval_scenes(cfg)
    device = resolve_device(cfg.device)
    model = build_detector(detector_spec(cfg), seed=cfg.seed)
    node_to_client = discover_clients(grid, cfg.num_clients)
    log(INFO, "detect: %s on %d %s scenes per client, attackers (%s, tau %g, %d of %d): %s", cfg.det_model,
        cfg.det_train_scenes, "KITTI" if cfg.det_data == "kitti" else cfg.det_digits, cfg.attack, cfg.tau,
        cfg.num_attackers, cfg.num_clients, sorted(attackers_of(AttackSpec.from_config(cfg))))
    m = cfg.det_clients_per_round or cfg.num_clients
    # fedcal's FedAvg (reply validation, seeded sampling) sending train.detect messages, over the
    # nodes that identified themselves (federate hands it only those)
    strategy = FedAvg(fraction_train=m / cfg.num_clients, fraction_evaluate=0.0,
                      min_train_nodes=min(m, len(node_to_client)), min_evaluate_nodes=0,
                      min_available_nodes=len(node_to_client), sampling_seed=cfg.seed,
                      node_sort_key=lambda n: node_to_client.get(n, 1 << 62), node_label=node_to_client.get,
                      message_type=MESSAGE_TYPE)

    def evaluate(server_round: int, arrays: ArrayRecord) -> dict[str, float]:
        import pandas as pd  # lazily: the ClientApp process never loads pandas
        if not (server_round in (0, cfg.det_rounds) or server_round % cfg.det_eval_every == 0):
            return {}
        model.load_state_dict(arrays.to_torch_state_dict())
        logits, boxes = predict(model, test.images, device=device)
        found, curves = detection_metrics(logits, boxes, test, model.loss_config, cfg.n_bins, cfg.det_threshold,
                                          keep=cfg.det_keep)
        if not curves:
            log(WARNING, "round %d: the global detector produced non-finite outputs", server_round)
            return found
        store.append_rows(KEPT_FILE, [{"round": server_round, "rule": rule, "threshold": t, "kept": k}
                                      for rule, curve in curves["kept"].items() for t, k in zip(THRESHOLDS, curve)])
        if server_round == cfg.det_rounds:
            store.write_table("reliability.csv", pd.DataFrame({k: v.numpy() for k, v in curves["bins"].items()}))
            kept = kept_detections(logits[EXAMPLE_SCENE], boxes[EXAMPLE_SCENE], cfg.det_threshold, test.size,
                                   rule=cfg.det_keep)
            store.write_table(EXAMPLE_FILE, pd.DataFrame(kept, columns=["x1", "y1", "x2", "y2", "label", "score"]))
            np.save(store.dir / EXAMPLE_IMAGE, test.images[EXAMPLE_SCENE, 0].numpy())
        return found

    initial = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    final, rows = federate(grid, cfg, store, initial, evaluate, progress, node_to_client, strategy=strategy,
                           num_rounds=cfg.det_rounds, resume=checkpoint)
    store.save_model(final)
    store.finish()
    return pd.DataFrame(rows)

__all__ = ["MESSAGE_TYPE", "check_detect_config", "client_scenes", "detect_round", "run_detect",
           "eval_scenes"]
