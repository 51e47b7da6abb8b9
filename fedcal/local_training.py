"""Local training with the temperature-scaled loss, and prediction (flwr-free).

TSA (SPEC §2): a client minimises CE(softmax(z/τ), y) with learning rate η = β·τ
(``coupled=True``) or η = β (the uncoupled ablation). τ = 1 is plain benign training.
The attack itself, as a client behaviour, is :mod:`fedcal.attacks.tsa`.
"""

from __future__ import annotations

import math

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedcal.data import pixel_space


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks CUDA when present, else CPU; any other torch device string (``cuda:1``,
    ``mps``) is checked against this machine, so a run asking for a device it does not have stops
    at its start with one line naming the key, not at the first tensor moved there. CUDA indices
    count the devices this process sees (``CUDA_VISIBLE_DEVICES`` renumbers them, and Ray sets it
    for each worker it gives a GPU)."""
    from fedcal.config import ConfigError

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"run-config key 'device': {name!r} is not a torch device string") from None
    if device.type == "cuda":
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if visible == 0:
            raise ConfigError(f"run-config key 'device': {name!r} requested but no CUDA device is available "
                              "(device=cpu or device=auto)")
        if device.index is not None and device.index >= visible:
            raise ConfigError(f"run-config key 'device': {name!r} requested but this process sees {visible} CUDA "
                              f"device(s), cuda:0..cuda:{visible - 1} (CUDA_VISIBLE_DEVICES renumbers them)")
    elif device.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError(f"run-config key 'device': {name!r} requested but MPS is not available here")
    return device


def effective_lr(lr: float, tau: float, coupled: bool) -> float:
    """η = β·τ when coupled (keeps attacked updates collinear with benign ones), else β."""
    return lr * tau if coupled else lr


@dataclass
class TrainStats:
    loss: float  # mean temperature-scaled training loss over the local steps
    steps: int
    num_examples: int


def batch_schedule(n: int, steps: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Index batches for ``steps`` SGD steps: walk seeded permutations of the local data,
    reshuffling at each epoch boundary (batches never straddle two epochs)."""
    if n < 1:
        raise ValueError("a client needs at least one training sample")
    bs = min(batch_size, n)
    out: list[torch.Tensor] = []
    perm, pos = torch.randperm(n, generator=generator), 0
    for _ in range(steps):
        if pos + bs > n:
            perm, pos = torch.randperm(n, generator=generator), 0
        out.append(perm[pos:pos + bs])
        pos += bs
    return out


def cosine_epochs(lr: float, epochs: int, steps_per_epoch: int, eta_min: float = 1e-3) -> Callable[[int], float]:
    """The learning rate of step k (1-based) under ``CosineAnnealingLR(T_max=epochs, eta_min)`` stepped
    once per epoch of ``steps_per_epoch`` steps: epoch e (0-based) runs at
    eta_min + (lr − eta_min)(1 + cos(π e / epochs)) / 2 — the robust-inference authors' clients'
    schedule (``--use_scheduler``, ``FL/train_LocalSGD.py``, eta_min 0.001)."""
    if epochs < 1 or steps_per_epoch < 1:
        raise ValueError(f"epochs and steps_per_epoch must be >= 1, got {epochs}, {steps_per_epoch}")

    def lr_at(k: int) -> float:
        e = (k - 1) // steps_per_epoch
        return eta_min + (lr - eta_min) * (1 + math.cos(math.pi * e / epochs)) / 2

    return lr_at


def epoch_schedule(n: int, epochs: int, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Index batches for ``epochs`` passes over ``n`` local samples: each pass a seeded
    permutation cut into ⌈n / B⌉ batches, the last one smaller when B does not divide n, so every
    sample is seen exactly once per pass (a DataLoader with ``shuffle=True, drop_last=False``)."""
    if n < 1:
        raise ValueError("a client needs at least one training sample")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    out: list[torch.Tensor] = []
    for _ in range(epochs):
        out += list(torch.split(torch.randperm(n, generator=generator), batch_size))
    return out


def crop_flip_augmenter(dataset: str, generator: torch.Generator) -> CropFlip:
    """:func:`crop_flip` of ``dataset``'s model inputs, drawing from ``generator`` and padding with the
    model input of a black pixel (what zero padding in pixel space is)."""
    space = pixel_space(dataset)
    fill = space.to_inputs(torch.zeros(1, *space.image_shape))[0, :, 0, 0]
    return CropFlip(generator, fill)


def crop_flip_draws(n: int, generator: torch.Generator, pad: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """The random draws of one :func:`crop_flip` of ``n`` images, in its order: the crop offsets
    (2, n) — rows, then columns — and the mirror flags (n,)."""
    off = torch.randint(0, 2 * pad + 1, (2, n), generator=generator)
    flip = torch.rand(n, generator=generator) < 0.5
    return off, flip


def crop_flip(x: torch.Tensor, generator: torch.Generator | None, fill: torch.Tensor | None = None,
              pad: int = 4, draws: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """The standard CIFAR augmentation (He et al., CVPR 2016; the FedAvg-era CIFAR setups): each
    image of the batch ``x`` (N, C, H, W) padded by ``pad`` pixels of ``fill`` (per channel: the
    model input of a black pixel; default 0), a random H×W crop taken from it, and mirrored
    left–right with probability 1/2. ``draws`` (from :func:`crop_flip_draws`, on any device) are
    used instead of drawing from ``generator``.

    Written here rather than taken from torchvision.transforms.v2: its RandomCrop and
    RandomHorizontalFlip draw one crop and one flip for a whole batch tensor, from torch's global
    random state; a client's round must draw per image, from its own seeded ``generator``, so it
    computes the same wherever it runs.
    """
    n, c, h, w = x.shape
    off, flip = draws if draws is not None else crop_flip_draws(n, generator, pad)
    off, flip = off.to(x.device), flip.to(x.device)  # no copy when the draws were moved ahead
    padded = x.new_empty(n, c, h + 2 * pad, w + 2 * pad)
    padded[:] = (0.0 if fill is None else fill.to(x).view(1, c, 1, 1))
    padded[:, :, pad:pad + h, pad:pad + w] = x
    rows = off[0][:, None] + torch.arange(h, device=x.device)  # (n, h)
    cols = off[1][:, None] + torch.arange(w, device=x.device)
    cols = torch.where(flip[:, None], cols.flip(1), cols)  # a mirrored crop reads its columns backwards
    batch = torch.arange(n, device=x.device)[:, None, None]
    return padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2).contiguous()


class CropFlip:
    """:func:`crop_flip` with a seeded ``generator`` and a padding ``fill``: a callable on one batch,
    and :meth:`prepare` for a whole schedule of batches at once.

    Why :meth:`prepare`: drawn per batch on the CPU and copied to a GPU, every step's offsets cost a
    blocking host-to-device copy (pageable memory), so a client's round waited on the GPU several
    times per step — with many runs sharing one GPU, most of a run's time. Drawing the whole round's
    offsets first, in the same order, and moving them in one copy gives the same augmented batches
    (the generator's stream is the same) without the per-step waits.
    """

    def __init__(self, generator: torch.Generator, fill: torch.Tensor | None = None, pad: int = 4):
        self.generator, self.fill, self.pad = generator, fill, pad

    def __call__(self, xb: torch.Tensor) -> torch.Tensor:
        return crop_flip(xb, self.generator, self.fill, self.pad)

    def prepare(self, sizes: list[int], device: torch.device) -> list[Callable[[torch.Tensor], torch.Tensor]]:
        """One augmentation per batch size in ``sizes`` (in schedule order), its draws made now and
        held on ``device``."""
        draws = [crop_flip_draws(n, self.generator, self.pad) for n in sizes]
        if not draws:
            return []
        off = torch.cat([o for o, _ in draws], dim=1).to(device)
        flip = torch.cat([f for _, f in draws]).to(device)
        fill = None if self.fill is None else self.fill.to(device)
        out, start = [], 0
        for n in sizes:
            d = (off[:, start:start + n], flip[start:start + n])
            out.append(lambda xb, d=d: crop_flip(xb, None, fill, self.pad, draws=d))
            start += n
        return out


def local_train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    tau: float = 1.0,
    coupled: bool = True,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
    batches: list[torch.Tensor] | None = None,
    on_step: Callable[[int, nn.Module], None] | None = None,
    tau_steps: int | None = None,
    augment: Callable[[torch.Tensor], torch.Tensor] | None = None,
    optimizer: str = "sgd",
    lr_at: Callable[[int], float] | None = None,
) -> TrainStats:
    """Run ``steps`` SGD steps on CE(softmax(model(x)/τ), y) in place.

    ``optimizer="adamw"`` takes AdamW steps instead (``momentum`` unused, ``weight_decay``
    decoupled): the language-model case study's optimiser. There η = β·τ does not cancel the loss's
    1/τ as it does for SGD — Adam normalises the gradient's scale away — so a coupled attacker's
    steps are τ times the benign ones. A model whose logits carry a sequence axis (B, L, V), with
    targets (B, L), is trained on every position (a causal LM's next-token loss).

    ``batches`` (index tensors) overrides the seeded schedule, so two variants can be
    trained on exactly the same batches; ``on_step(k, model)`` is called after step k.
    ``tau_steps`` (default: all) trains only the first that many steps at τ (with η = β·τ when
    coupled) and the rest benignly (τ = 1, η = β) — the adaptive attacker that hides its
    temperature in part of the round. SGD's momentum buffer carries over the switch.
    ``augment`` maps each training batch (on ``device``) before the forward pass (e.g.
    :func:`crop_flip` with a seeded generator). ``lr_at(k)``: the learning rate of step k (1-based),
    a schedule such as :func:`cosine_epochs` (benign training only: τ = 1).
    """
    if tau <= 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    if lr_at is not None and tau != 1.0:
        raise ValueError("a learning-rate schedule (lr_at) is for benign training (tau = 1)")
    device = torch.device(device)
    model.to(device).train()
    if batches is None:
        batches = batch_schedule(len(y), steps, batch_size, generator or torch.Generator().manual_seed(0))
    hot = steps if tau_steps is None else tau_steps  # steps trained at τ
    if hot < 0:
        raise ValueError(f"tau_steps must be >= 0, got {tau_steps}")
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=effective_lr(lr, tau, coupled), momentum=momentum,
                              weight_decay=weight_decay)
    elif optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=effective_lr(lr, tau, coupled), weight_decay=weight_decay)
    else:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose sgd or adamw")
    x, y, batches, augments = _round_on_device(x, y, batches[:steps], augment, device)
    # summed there, no per-step loss read; MPS has no float64, so the reported mean loss is float32 there
    acc = torch.float32 if device.type == "mps" else torch.float64
    total = torch.zeros((), dtype=acc, device=device)
    for k, idx in enumerate(batches, start=1):
        xb, yb = x[idx], y[idx]
        if augment is not None:
            xb = augments[k - 1](xb)
        t = tau if k <= hot else 1.0
        if (k == hot + 1 and tau != 1.0) or lr_at is not None:  # back to β after τ's steps, or the schedule's
            for group in opt.param_groups:
                group["lr"] = lr if lr_at is None else lr_at(k)
        opt.zero_grad(set_to_none=True)
        z = model(xb)
        if z.ndim > 2:  # (B, L, V) next-token logits: every position is a prediction
            z, yb = z.flatten(0, -2), yb.flatten()
        loss = F.cross_entropy(z / t, yb)
        loss.backward()
        opt.step()
        total += loss.detach().to(acc)
        if on_step is not None:
            on_step(k, model)
    return TrainStats(loss=float(total) / max(1, len(batches)), steps=len(batches), num_examples=len(y))


def _round_on_device(x: torch.Tensor, y: torch.Tensor, batches: list[torch.Tensor],
                     augment: Callable[[torch.Tensor], torch.Tensor] | None, device: torch.device):
    """A round's data, batch indices and augmentation draws moved to ``device`` once: (x, y,
    batches, one augmentation per batch). On a GPU, per-step host-device copies (and loss reads)
    each block until the GPU catches up, which serialises runs sharing one GPU; the loss is
    therefore also summed on the device (float64: the same sum as Python floats)."""
    batches = list(batches)
    if batches:
        batches = list(torch.split(torch.cat(batches).to(device), [len(b) for b in batches]))
    augments = (augment.prepare([len(b) for b in batches], device) if isinstance(augment, CropFlip)
                else [augment] * len(batches))
    return x.to(device), y.to(device), batches, augments


@torch.no_grad()
def momentum_reply(global_params: dict[str, torch.Tensor], local_params: dict[str, torch.Tensor],
                   buffer: dict[str, torch.Tensor] | None, beta: float
                   ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Client momentum as ByzFL's honest clients keep it (``byzfl/fed_framework/client.py``,
    ``Client.get_flat_gradients_with_momentum``: ``m ← β·m + (1 − β)·g``, the buffer starting at
    zero and kept across rounds), on this round's update ``u = local − global`` instead of the
    gradient: ``m ← β·m + (1 − β)·u`` and the reply is ``global + m``.

    With one local SGD step at learning rate η and no weight decay, ``u = −η·g``, so ``m`` is
    −η times ByzFL's buffer and a server that adds the aggregate of the replies' updates takes
    ByzFL's D-SGD step ``w ← w − η·F(m_1, …, m_n)`` for every rule F that commutes with scaling
    (mean, trimmed mean, median, Krum, NNM, …). Only ``global_params``' entries (the model's
    parameters) are smoothed; returns (reply parameters, new buffer), both float32 like the
    parameters. ``buffer`` None (or not shaped like the parameters) starts from zero."""
    if not 0 <= beta < 1:
        raise ValueError(f"momentum beta must be in [0, 1), got {beta}")
    fresh = buffer is None or set(buffer) != set(global_params) or any(
        buffer[k].shape != v.shape for k, v in global_params.items())
    reply, new = {}, {}
    for k, g in global_params.items():
        u = local_params[k].detach() - g
        m = u.mul(1 - beta) if fresh else buffer[k].to(u).mul(beta).add_(u, alpha=1 - beta)
        new[k], reply[k] = m, g + m
    return reply, new


@torch.no_grad()
def predict_logits(model: nn.Module, x: torch.Tensor, batch_size: int = 1000,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """Logits at temperature 1 for all of ``x`` (returned on the CPU, float32)."""
    device = torch.device(device)
    model.to(device).eval()
    out = [model(x[i:i + batch_size].to(device)).float().cpu() for i in range(0, len(x), batch_size)]
    return torch.cat(out) if out else torch.empty(0)

