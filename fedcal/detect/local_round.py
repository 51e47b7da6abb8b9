"""One client's local round of the detection case study, with the TSA on the class logits (flwr-free).

The loss is transformers' own DETR loss (``ForObjectDetectionLoss``: the Hungarian matcher with
class / L1 / GIoU costs, then cross-entropy over the C + 1 classes with the no-object class
weighted by ``eos_coefficient``, L1 and GIoU box losses on the matched queries) applied to the
**temperature-scaled class logits** z / τ and the unchanged boxes::

    L_τ(θ) = λ_ce · CE_w(softmax(z_θ / τ), ŷ) + λ_L1 · L1(b_θ, b̂) + λ_giou · (1 − GIoU(b_θ, b̂))

where ŷ is the Hungarian assignment's class (no object for unmatched queries), λ = (1, 5, 2)
DETR's weights. The matcher sees the same z / τ (its class cost is −softmax(z/τ)[ŷ]), so the
attacker trains exactly as if its model's logits were z / τ; box predictions and box losses are
untouched. η = β·τ (:func:`fedcal.local_training.effective_lr`, ``coupled``; β = ``det-lr``); τ = 1 is the
benign client. Evaluation always reads the model at τ = 1.

**AdamW and the coupling.** With SGD the 1/τ of ∂L_τ/∂z cancels against η = β·τ (SPEC §2). AdamW
normalises each coordinate by its gradient's running RMS, so the 1/τ largely cancels inside the
optimiser and η = β·τ scales the attacker's steps by about τ; the case study follows SPEC §10
(AdamW, η = β·τ), and ``coupled=false`` gives the η = β ablation. A fresh AdamW per round
(clients keep no optimiser state between rounds, as in the train task's SGD).

Batches: :func:`fedcal.local_training.batch_schedule` over the client's scenes, from
:func:`fedcal.attacks.behaviour.round_generator` (seed, round, client), so a round gives the same
update wherever it runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedcal.detect.model import Detector
from fedcal.detect.scenes import Scenes
from fedcal.extras import require
from fedcal.local_training import batch_schedule, effective_lr


@dataclass
class DetectStats:
    loss: float  # mean L_τ over the local steps
    loss_ce: float  # mean classification part (at τ)
    steps: int
    num_examples: int


def detection_loss(logits: torch.Tensor, boxes: torch.Tensor, targets: list[dict], config,
                   tau: float = 1.0) -> tuple[torch.Tensor, dict[str, float]]:
    """L_τ (module docstring) through transformers' ``ForObjectDetectionLoss`` on ``logits / tau``.

    ``targets``: per image ``class_labels`` (n,) and ``boxes`` (n, 4) normalised cxcywh. Returns the
    total loss and its parts (``loss_ce``, ``loss_bbox``, ``loss_giou``, ``cardinality_error``)."""
    require("transformers", "detect", "the detection case study (task=detect)")
    from transformers.loss.loss_for_object_detection import ForObjectDetectionLoss

    if not (tau > 0 and math.isfinite(tau)):
        raise ValueError(f"tau must be a finite number > 0, got {tau}")
    loss, parts, _ = ForObjectDetectionLoss(logits / tau, targets, logits.device, boxes, config)
    return loss, {k: float(v.detach()) if torch.is_tensor(v) else float(v) for k, v in parts.items()}


def local_round(model: Detector, scenes: Scenes, *, steps: int, batch_size: int, lr: float, weight_decay: float,
                tau: float = 1.0, coupled: bool = True, generator: torch.Generator, tau_steps: int | None = None,
                device: torch.device | str = "cpu") -> DetectStats:
    """``steps`` AdamW steps on L_τ in place on ``model`` (which holds the global weights).

    ``tau_steps``: only the first ``tau_steps`` steps at τ (the adaptive attacker's
    ``tsa-step-frac``), the rest benign (τ = 1, η = β)."""
    if len(scenes) < 1:
        raise ValueError("a client needs at least one scene")
    model.to(device).train()
    params = [p for p in model.parameters() if p.requires_grad]
    eta = effective_lr(lr, tau, coupled)
    opt = torch.optim.AdamW(params, lr=eta, weight_decay=weight_decay)
    targets = scenes.targets()
    total, total_ce = 0.0, 0.0
    for step, idx in enumerate(batch_schedule(len(scenes), steps, batch_size, generator)):
        t = tau if tau_steps is None or step < tau_steps else 1.0
        if tau_steps is not None and step == tau_steps:
            for g in opt.param_groups:
                g["lr"] = lr
        x = scenes.images[idx].to(device)
        tg = [{k: v.to(device) for k, v in targets[int(i)].items()} for i in idx]
        logits, boxes = model(x)
        loss, parts = detection_loss(logits, boxes, tg, model.loss_config, t)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += float(loss.detach())
        total_ce += parts["loss_ce"]
    return DetectStats(total / steps, total_ce / steps, steps, len(scenes))


@torch.no_grad()
def predict(model: Detector, images: torch.Tensor, batch_size: int = 64,
            device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (N, Q, C+1), boxes (N, Q, 4) cxcywh) of ``images`` at τ = 1, in eval mode, on the CPU."""
    model.to(device).eval()
    out_l, out_b = [], []
    for i in range(0, len(images), batch_size):
        logits, boxes = model(images[i:i + batch_size].to(device))
        out_l.append(logits.float().cpu())
        out_b.append(boxes.float().cpu())
    return torch.cat(out_l), torch.cat(out_b)
