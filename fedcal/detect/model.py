"""The detectors of the detection case study (flwr-free): DETR from ``transformers`` and a small
grid detector with DETR's output structure.

Both map grey scenes ``(B, 1, S, S)`` in [0, 1] to DETR's outputs: class logits ``(B, Q, C + 1)``
over the C digit classes **plus "no object"** (the last column) and boxes ``(B, Q, 4)`` as
normalised (center x, center y, width, height). Both are trained with the same Hungarian-matched
DETR loss (:mod:`fedcal.detect.local_round`) and read with the same metrics (:mod:`fedcal.detect.metrics`).

Models, by the run config's ``det-model``:

* ``detr`` — ``DetrForObjectDetection(DetrConfig(...))`` trained from scratch: a small ResNet
  backbone built from a ``ResNetConfig`` (basic blocks, ``det-backbone-width`` · (1, 2, 4) channels,
  one block per stage, stride 16, grey input; ``use_pretrained_backbone=False``, no timm), a
  ``det-d-model``-wide transformer with ``det-enc-layers`` / ``det-dec-layers`` layers and
  ``det-queries`` object queries. transformers freezes a ResNet backbone's stem and first stage (as
  for an ImageNet-pretrained one); from scratch that would leave random frozen filters, so every
  backbone parameter is trained here. Its BatchNorms are DETR's frozen ones (identity at init).
* ``grid`` — the CPU fallback (docs/detection.md says why): a 6-layer CNN whose G × G output cells
  (G = S / 8) are the queries: each cell predicts C + 1 logits and a box whose centre lies in the cell
  (cx = (j + σ(t_x)) / G) and whose size is σ(t_w), σ(t_h). Same "no-object" class, same loss.
* anything containing ``/`` (a Hub id such as ``facebook/detr-resnet-50``, or a local folder) —
  ``DetrForObjectDetection.from_pretrained`` with a new C + 1-way class head
  (``ignore_mismatched_sizes``); networked users only. The grey scene is repeated to 3 channels
  and normalised with ImageNet's mean and std, as the checkpoint expects.

Any other name is one :class:`fedcal.config.ConfigError` naming ``det-model``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from fedcal.config import ConfigError, ConfigSpec, setting_of
from fedcal.extras import require

MODELS = ("detr", "grid")
#: the checkpoint the SPEC's case study fine-tunes (networked users; AdamW β = 1e-4)
PRETRAINED = "facebook/detr-resnet-50"
_IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


@dataclass(frozen=True)
class DetectorSpec(ConfigSpec):
    """What builds a detector (the ``det-*`` model keys; their declared defaults are its defaults).
    A task builds it with ``DetectorSpec.from_config(cfg, num_classes=...)``."""

    CONFIG_KEYS = {"name": "det_model", "image_size": "det_size", "queries": "det_queries",
                   "d_model": "det_d_model", "enc_layers": "det_enc_layers", "dec_layers": "det_dec_layers",
                   "backbone_width": "det_backbone_width", "eos_coef": "det_eos_coef"}
    GIVEN = ("num_classes",)  # the object classes of the scenes, known once they are loaded

    name: str = setting_of("det_model").default
    num_classes: int = 10
    image_size: int = setting_of("det_size").default
    queries: int = setting_of("det_queries").default
    d_model: int = setting_of("det_d_model").default
    enc_layers: int = setting_of("det_enc_layers").default
    dec_layers: int = setting_of("det_dec_layers").default
    backbone_width: int = setting_of("det_backbone_width").default
    eos_coef: float = setting_of("det_eos_coef").default


def is_pretrained_name(name: str) -> bool:
    """A Hub id or a folder: loaded with ``from_pretrained``."""
    return "/" in name


def check_model_name(name: str) -> None:
    """One clear error for a name that is neither a built-in detector nor a Hub id / folder."""
    if name not in MODELS and not is_pretrained_name(name):
        raise ConfigError(f"run-config key 'det-model': unknown detector {name!r}; choose one of "
                          f"{', '.join(MODELS)}, or a Hub id / folder for DetrForObjectDetection.from_pretrained "
                          f"(e.g. {PRETRAINED}, networked)")


def detr_config(spec: DetectorSpec):
    """The ``DetrConfig`` of the small from-scratch DETR (also the loss weights of every detector:
    class / box / GIoU matching costs 1 / 5 / 2, loss weights 1 / 5 / 2, no-object weight ``eos_coef``)."""
    require("transformers", "detect", "the detection case study (task=detect)")
    from transformers import DetrConfig, ResNetConfig

    w = spec.backbone_width
    backbone = ResNetConfig(num_channels=1, embedding_size=w, hidden_sizes=[w, 2 * w, 4 * w], depths=[1, 1, 1],
                            layer_type="basic", out_features=["stage3"], downsample_in_first_stage=False)
    heads = 4 if spec.d_model % 4 == 0 else 1
    return DetrConfig(backbone_config=backbone, use_timm_backbone=False, use_pretrained_backbone=False,
                      num_queries=spec.queries, d_model=spec.d_model, encoder_layers=spec.enc_layers,
                      decoder_layers=spec.dec_layers, encoder_ffn_dim=2 * spec.d_model,
                      decoder_ffn_dim=2 * spec.d_model, encoder_attention_heads=heads, decoder_attention_heads=heads,
                      num_labels=spec.num_classes, dropout=0.0, eos_coefficient=spec.eos_coef, auxiliary_loss=False)


class Detector(nn.Module):
    """Common interface: ``forward(images) -> (logits (B, Q, C+1), boxes (B, Q, 4) cxcywh in [0, 1])``;
    ``loss_config``: the DETR config whose costs and weights the loss uses."""

    loss_config = None

    @property
    def num_queries(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError


class DetrDetector(Detector):
    """A ``DetrForObjectDetection`` behind the common interface."""

    def __init__(self, detr: nn.Module, channels: int, mean: tuple[float, ...], std: tuple[float, ...]):
        super().__init__()
        self.detr = detr
        self.loss_config = detr.config
        self.channels = channels
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)

    @property
    def num_queries(self) -> int:
        return int(self.detr.config.num_queries)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = images.expand(-1, self.channels, -1, -1) if self.channels != images.shape[1] else images
        x = (x - self.mean) / self.std
        mask = torch.ones(x.shape[0], x.shape[2], x.shape[3], dtype=torch.long, device=x.device)
        out = self.detr(pixel_values=x, pixel_mask=mask)
        return out.logits, out.pred_boxes


class GridDetector(Detector):
    """The small CNN detector: one query per cell of a G × G grid (stride 8)."""

    def __init__(self, spec: DetectorSpec):
        super().__init__()
        w = spec.backbone_width
        if spec.image_size % 8:
            raise ConfigError(f"run-config key 'det-size' must be a multiple of 8 for det-model=grid, got "
                              f"{spec.image_size}")
        self.grid = spec.image_size // 8
        conv = lambda i, o, s: nn.Sequential(nn.Conv2d(i, o, 3, stride=s, padding=1), nn.GroupNorm(1, o), nn.ReLU())  # noqa: E731
        self.body = nn.Sequential(conv(1, w, 1), conv(w, 2 * w, 2), conv(2 * w, 4 * w, 2), conv(4 * w, 4 * w, 2),
                                  conv(4 * w, 4 * w, 1), conv(4 * w, 4 * w, 1))
        self.cls = nn.Conv2d(4 * w, spec.num_classes + 1, 1)
        self.box = nn.Conv2d(4 * w, 4, 1)
        self.loss_config = detr_config(spec)

    @property
    def num_queries(self) -> int:
        return self.grid * self.grid

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body((images - 0.5) / 0.5)
        G = h.shape[-1]
        logits = self.cls(h).flatten(2).transpose(1, 2)  # (B, G*G, C+1), row-major cells
        t = self.box(h).sigmoid().flatten(2).transpose(1, 2)  # (B, G*G, 4)
        idx = torch.arange(G * G, device=images.device)
        col, row = (idx % G).to(t.dtype), (idx // G).to(t.dtype)
        boxes = torch.stack([(col + t[..., 0]) / G, (row + t[..., 1]) / G, t[..., 2], t[..., 3]], dim=-1)
        return logits, boxes


def build_detector(spec: DetectorSpec, seed: int = 0) -> Detector:
    """The detector ``spec.name`` (module docstring), its weights initialised from ``seed``."""
    check_model_name(spec.name)
    torch.manual_seed(seed)
    if spec.name == "grid":
        return GridDetector(spec)
    require("transformers", "detect", "the detection case study (task=detect)")
    from transformers import DetrForObjectDetection

    if spec.name == "detr":
        detr = DetrForObjectDetection(detr_config(spec))
        for p in detr.model.backbone.parameters():  # from scratch: train the stem and first stage too
            p.requires_grad_(True)
        return DetrDetector(detr, 1, (0.5,), (0.5,))
    try:
        detr = DetrForObjectDetection.from_pretrained(spec.name, num_labels=spec.num_classes,
                                                      num_queries=spec.queries, ignore_mismatched_sizes=True)
    except Exception as exc:  # offline, a wrong id, a folder without a checkpoint
        raise ConfigError(f"run-config key 'det-model': cannot load {spec.name!r} with "
                          f"DetrForObjectDetection.from_pretrained ({type(exc).__name__}: {exc}); offline, use "
                          f"det-model=detr or grid") from exc
    detr.config.eos_coefficient = spec.eos_coef
    return DetrDetector(detr, 3, *_IMAGENET)
