"""The ``detect`` group (TSA on federated DETR object detection, SPEC §10) and the ``detect``
task's configuration facts. The task also reads the common num-clients, seed, n-bins, and the
train group's attack, attacker-ratio, tau, coupled, tsa-step-frac, tsa-blend, which choose and
drive the attackers."""

from __future__ import annotations

from fedcal.config.schema import ConfigError, RunConfig, Task, check, group, register_task, setting, setting_of
from fedcal import catalogue

__all__ = []


@group("detect", "TSA on federated DETR object detection (task = detect, SPEC §10)")
class Detect:
    det_model: str = setting("grid", "detector: detr (a small DetrForObjectDetection from scratch), grid (the "
                                     "CPU fallback with DETR's no-object structure, docs/detection.md), or a "
                                     "Hub id / folder for from_pretrained (facebook/detr-resnet-50, networked)")
    det_data: str = setting("scenes", "what the clients detect in: scenes (MNIST / digits canvases, "
                                      "offline) or kitti (KITTI 2D object from data-dir, networked users; "
                                      "docs/detection.md)", choices=("scenes", "kitti"), hash_when_set=True)
    det_digits: str = setting("mnist", "digits pasted into the scenes: mnist (data-dir) or digits "
                                       "(scikit-learn's 8x8, offline anywhere)", choices=("mnist", "digits"))
    det_size: int = setting(64, "scene canvas side in pixels", ge=16)
    det_min_digits: int = setting(1, "fewest digits per scene", ge=1)
    det_max_digits: int = setting(4, "most digits per scene (>= det-min-digits)", ge=1)
    det_min_scale: int = setting(14, "smallest pasted digit side in pixels", ge=4)
    det_max_scale: int = setting(28, "largest pasted digit side in pixels (<= det-size)", ge=4)
    det_alpha: float = setting(0.5, "alpha of each client's Dirichlet class mix of its digits (non-IID)",
                               gt=0, finite=True)
    det_train_scenes: int = setting(200, "training scenes per client", ge=1)
    det_test_scenes: int = setting(200, "test scenes (uniform classes, the digits' test split)", ge=1)
    det_rounds: int = setting(40, "federated rounds", ge=1)
    det_clients_per_round: int = setting(0, "clients sampled per round (seeded)", ge=0, note="0 = all")
    det_local_steps: int = setting(20, "local AdamW steps per round", ge=1)
    det_batch_size: int = setting(16, "scenes per local step", ge=1)
    det_lr: float = setting(1e-3, "beta, the benign AdamW learning rate (1e-3 from scratch; SPEC's 1e-4 for "
                                  "a pretrained DETR)", gt=0, finite=True)
    det_weight_decay: float = setting(1e-4, "AdamW weight decay", ge=0, finite=True)
    det_queries: int = setting(16, "DETR object queries (grid: one per 8x8 cell instead)", ge=1)
    det_d_model: int = setting(64, "DETR transformer width", ge=4)
    det_enc_layers: int = setting(1, "DETR encoder layers", ge=1)
    det_dec_layers: int = setting(2, "DETR decoder layers", ge=1)
    det_backbone_width: int = setting(16, "channels of the first backbone stage (DETR's ResNet, the grid CNN)",
                                      ge=1)
    det_eos_coef: float = setting(0.1, "weight of the no-object class in the classification loss", gt=0,
                                  le=1)
    det_threshold: float = setting(0.3, "score threshold of the kept boxes (the per-round boxes-kept metric, "
                                        "the example image)", ge=0, lt=1)
    det_eval_every: int = setting(1, "evaluate every k rounds (always round 0 and the last)", ge=1)
    det_keep: str = setting("object", "which score keeps a box (the boxes-kept metric, the example image): "
                                      "object (1 - p(no object) > det-threshold, SPEC §10's object score) or "
                                      "class (max class probability, transformers' DETR post-processing); "
                                      "every run also records both", choices=("object", "class"),
                            hash_when_set=True)

# ---------------------------------------------------------------------- the detect task
def _detr_width(c: RunConfig) -> None:
    if c.det_model == "detr":  # DETR's 2-D sine position embedding: sin/cos pairs per axis
        check("det-d-model", c.det_d_model % 4 == 0, c.det_d_model,
              "must be a multiple of 4 for det-model=detr (its position embedding gives each image axis "
              "d_model / 2 channels of sine-cosine pairs)")


def _attackers(c: RunConfig) -> None:
    temperature = catalogue.needing("attack", "loss-temperature")  # what the detect clients' step implements
    if c.attack != "none" and c.attack not in temperature:
        raise ConfigError(f"run-config key 'attack': the detect task runs the {' or '.join(temperature)} or no "
                          f"attack, got {c.attack!r}")
    if setting_of("tsa_blend").read_by(c) and c.tsa_blend != 1.0:
        raise ConfigError("run-config key 'tsa-blend': the detect task has no blended attacker (keep 1)")
    if setting_of("tsa_duty").read_by(c) and c.tsa_duty != 1.0:
        raise ConfigError("run-config key 'tsa-duty': the detect task has no duty-cycled attacker (keep 1)")
    check("det-clients-per-round", c.det_clients_per_round <= c.num_clients, c.det_clients_per_round,
          f"must not exceed num-clients ({c.num_clients})")


def _run_name(cfg: RunConfig, short_hash: str) -> str:
    what = "benign" if cfg.attack == "none" else catalogue.get("attack", cfg.attack).run_label(cfg, detail=False)
    data = "-kitti" if cfg.det_data == "kitti" else ""
    return f"detect-{cfg.det_model.replace('/', '_')}{data}-{what}-s{cfg.seed}-{short_hash}"


MESSAGE_TYPE = "train.detect"  # a client's round on its detection scenes (fedcal.tasks.detect sends it)

TASK = register_task(Task(
    "detect", "fedcal.tasks.detect:run_detect",
    summary="TSA on federated object detection (DETR / grid detector on MNIST scenes): calibration decides "
            "which boxes survive",
    groups=("train", "detect"), run_name=_run_name, rules=(_attackers, _detr_width),
    schedule=("map50", "det_rounds", "det_eval_every"), handlers={MESSAGE_TYPE: "fedcal.tasks.detect:detect_round"},
    rounds=lambda cfg: cfg.det_rounds, report="fedcal.reports.detect:detect_report",
    preflight="fedcal.tasks.detect:check_detect_config", extras=("detect",)))
