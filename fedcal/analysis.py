"""Stealth analyses (SPEC §4) and decision-threshold triage (SPEC §6). flwr-free.

* Update geometry: how aligned an attacker's local update stays with the benign update
  computed from the same global model on the same batches, or with the mean benign update of
  other clients (:func:`update_cosine_curves`).
* Representation similarity of two models on a shared evaluation set: row-wise logit
  cosine (:func:`logit_cosine`) and linear CKA of penultimate features (:func:`linear_cka`).
* Triage: a prediction is sent for (human) verification when its top-class confidence is
  below a threshold γ; :func:`triage_curves` counts unnecessary verifications and missed
  errors per γ, :func:`triage_change` compares an attacked model against a benign one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import copy
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from fedcal.attacks import Behaviour, behaviour_kind, stealth_variants
from fedcal.attacks.behaviour import round_generator
from fedcal.checks import _check_finite, _check_gammas, _check_labels, _check_logits, _check_matrix, _check_probs
from fedcal.local_training import batch_schedule, local_train, predict_logits

if TYPE_CHECKING:
    import pandas as pd

#: what :func:`update_cosine_curves` compares: the updates Δθ, or the local models' weights θ_start + Δθ
COMPARED = ("update", "weights")

__all__ = [
    "COMPARED",
    "default_variants",
    "flat_params",
    "linear_cka",
    "logit_cosine",
    "penultimate_features",
    "representation_similarity",
    "triage_change",
    "triage_curves",
    "update_cosine_curves",
    "update_vector",
]

# ---------------------------------------------------------------------------- update geometry
def flat_params(model: nn.Module) -> torch.Tensor:
    """θ as one flat vector: a detached copy of the trainable parameters (``requires_grad``),
    concatenated in ``model.parameters()`` order. Buffers (e.g. BatchNorm statistics) are
    excluded, as they are not part of the SGD update."""
    params = [p.detach().flatten() for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters")
    return torch.cat(params).clone()


def update_vector(model: nn.Module, start_params: torch.Tensor | nn.Module) -> torch.Tensor:
    """Δθ = θ_model − θ_start over the trainable parameters (see :func:`flat_params`).

    ``start_params`` is a flat vector from :func:`flat_params` or a model of the same
    architecture (e.g. the global model before local training)."""
    now = flat_params(model)
    start = flat_params(start_params) if isinstance(start_params, nn.Module) else torch.as_tensor(start_params)
    if start.ndim != 1 or start.shape != now.shape:
        raise ValueError(f"start_params must be a flat vector of {now.numel()} values, got shape {tuple(start.shape)}")
    return now - start.to(device=now.device, dtype=now.dtype)


def _cosine64(a: torch.Tensor, b: torch.Tensor) -> float:
    """cos(a, b) = a·b / (‖a‖‖b‖) in float64, clipped to [−1, 1]; NaN if either is 0."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 or nb == 0.0:
        return float("nan")
    return float(np.clip(float(a @ b) / (na * nb), -1.0, 1.0))


def default_variants() -> dict[str, Behaviour]:
    """The stealth-analysis variant set, from the behaviour registry
    (:func:`fedcal.attacks.stealth_variants`): TSA coupled/uncoupled at τ ∈ {0.2, 5};
    noise injection σ ∈ {0.1, 0.05, 0.01}; label flipping k ∈ {1, …, 5}."""
    return stealth_variants()


def update_cosine_curves(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    num_classes: int,
    variants: Mapping[str, Behaviour] | None = None,
    steps: int = 10,
    batch_size: int = 64,
    lr: float = 0.01,
    seed: int = 0,
    momentum: float = 0.0,
    device: torch.device | str = "cpu",
    reference_data: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
    compare: str = "update",
) -> pd.DataFrame:
    """cos(R(k), Δ_attack(k)) after each local step k = 1..``steps``, R the benign reference.

    Δ(k) = θ after k local SGD steps − θ_global, over trainable parameters, and
    cos(a, b) = a·b / (‖a‖‖b‖) (float64). Every run starts from a copy of ``model`` (left
    unchanged); the client's own runs use one batch schedule (``batch_schedule`` seeded with
    ``seed``). Each variant's kind (``fedcal.attacks.behaviour_kind(b.kind)``) says how its run differs
    from the benign one (labels, loss temperature, then its ``stealth_update``); a variant
    that trains like the benign client reuses the benign run:

    * benign: τ = 1, learning rate β = ``lr``;
    * ``tsa``: loss CE(softmax(z/τ), y) with η = β·τ (coupled) or η = β (uncoupled);
    * ``noise``: Δ_attack(k) = Δ_benign(k) + ε, ε = σ·z with z ~ N(0, I) drawn once from a
      generator seeded by ``seed`` (stream ``round_generator(seed, 0, 0, "noise")``), shared by
      all noise variants, so curves for different σ differ only in σ;
    * ``labelflip``: benign training on labels (y + k) mod C;
    * ``benign``: the benign run itself (cosine 1).

    The benign reference R(k) (two protocols):

    * ``reference_data=None`` (fedcal's default): R(k) = Δ_benign(k), the benign update of the
      same client on the same batches — the variant is the only difference, so the cosine
      measures what the attack alone changes;
    * ``reference_data=[(x_j, y_j), ...]``: R(k) = (1/J) Σ_j Δ_j(k), the mean benign update of J
      other clients after k steps on their own data, each with its own batch schedule
      (``batch_schedule`` seeded by ``round_generator(seed, 0, j + 1, "stealth")``) — what a server
      comparing an update with the round's other updates sees. Here the ``benign`` variant is the
      client's own benign update against the others' mean, the level a benign client reaches.

    ``compare="weights"`` compares the local models' weights θ_global + Δ instead of the updates
    Δ (a model-similarity reading: both share θ_global, so the cosine is near 1 whenever ‖Δ‖ is small
    beside ‖θ_global‖, whatever the update's direction).

    Source: the stealth argument of SPEC §4 (coupling η = β·τ keeps TSA updates collinear).

    Returns a DataFrame with columns ``variant, step, cosine`` (``variants`` defaults to
    :func:`default_variants`). A step where either vector is exactly 0 gives NaN.
    """
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    variants = _checked_variants(default_variants() if variants is None else dict(variants))
    _check_curve_args(steps=steps, batch_size=batch_size, lr=lr, compare=compare)
    x, y = _checked_samples(x, y, num_classes, "")
    others = None if reference_data is None else _checked_reference(reference_data, num_classes)

    start = flat_params(model)
    batches = batch_schedule(len(y), steps, batch_size, torch.Generator().manual_seed(seed))

    def trajectory(labels: torch.Tensor, tau: float, coupled: bool, inputs: torch.Tensor = x,
                   schedule: list[torch.Tensor] = batches) -> list[torch.Tensor]:
        return _update_trajectory(model, start, inputs, labels, schedule, steps=steps, batch_size=batch_size, lr=lr,
                                  tau=tau, coupled=coupled, momentum=momentum, device=device)

    benign = trajectory(y, 1.0, True)
    reference = benign if others is None else _mean_benign_updates(others, trajectory, steps=steps,
                                                                   batch_size=batch_size, seed=seed)
    shift = start.detach().double().cpu() if compare == "weights" else 0.0
    rows = []
    for name, b in variants.items():
        attack = _variant_updates(b, y, num_classes, benign, trajectory, seed)
        rows += [(name, k, _cosine64(dr + shift, da + shift)) for k, (dr, da) in enumerate(zip(reference, attack),
                                                                                          start=1)]
    return pd.DataFrame(rows, columns=["variant", "step", "cosine"])


def _variant_updates(b: Behaviour, y: torch.Tensor, num_classes: int, benign: list[torch.Tensor], trajectory,
                     seed: int) -> list[torch.Tensor]:
    """Δ_attack(k) of one variant: its kind's labels and loss temperature, then its
    ``stealth_update``; a variant that trains like the benign client reuses the benign run
    (``trajectory(labels, tau, coupled)`` trains the others)."""
    kind = behaviour_kind(b.kind)
    labels = kind.train_labels(b, y, num_classes)
    tau, coupled = kind.loss_temperature(b)
    trained = benign if labels is y and (tau, coupled) == (1.0, True) else trajectory(labels, tau, coupled)
    return kind.stealth_update(b, trained, seed)


def _checked_variants(variants: dict[str, Behaviour]) -> dict[str, Behaviour]:
    """The variants, each a valid :class:`Behaviour` of a registered kind; a bad one is named."""
    if not variants:
        raise ValueError("variants must not be empty")
    for name, b in variants.items():
        if not isinstance(b, Behaviour):
            raise TypeError(f"variant {name!r} must be a Behaviour, got {type(b).__name__}")
        try:
            behaviour_kind(b.kind).check(b)
        except ValueError as e:
            raise ValueError(f"variant {name!r}: {e}") from None
    return variants


def _check_curve_args(*, steps: int, batch_size: int, lr: float, compare: str) -> None:
    """Fail fast on the scalar arguments of :func:`update_cosine_curves`, naming the argument."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not (lr > 0 and np.isfinite(lr)):
        raise ValueError(f"lr must be a finite number > 0, got {lr}")
    if compare not in COMPARED:
        raise ValueError(f"compare must be one of {', '.join(COMPARED)}, got {compare!r}")


def _checked_samples(x, y, num_classes: int, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) as tensors with as many labels as samples, finite inputs and labels in [0, C);
    ``what`` prefixes the message (which client's data)."""
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    if y.ndim != 1 or x.shape[0] != y.shape[0]:
        raise ValueError(f"{what}x and y must hold the same number of samples, got {tuple(x.shape)} and "
                         f"{tuple(y.shape)}")
    if x.is_floating_point():
        _check_finite(x, f"{what}x")
    return x, _check_labels(y, len(y), num_classes)


def _mean_benign_updates(others, trajectory, *, steps: int, batch_size: int, seed: int) -> list[torch.Tensor]:
    """R(k) = (1/J) Σ_j Δ_j(k): the mean benign update of the other clients after each step,
    client j on its own batches (``batch_schedule`` seeded by ``round_generator(seed, 0, j + 1,
    "stealth")``)."""
    runs = [trajectory(yj, 1.0, True, xj, batch_schedule(len(yj), steps, batch_size,
                                                         round_generator(seed, 0, j + 1, "stealth")))
            for j, (xj, yj) in enumerate(others)]
    return [torch.stack(per_step).mean(0) for per_step in zip(*runs)]


def _checked_reference(reference_data, num_classes: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The other clients' (x, y), each checked like the client's own; at least one."""
    others = [_checked_samples(xj, yj, num_classes, f"reference_data[{j}]: ") for j, (xj, yj) in enumerate(reference_data)]
    if not others:
        raise ValueError("reference_data must hold at least one client's (x, y), or be None")
    return others


def _update_trajectory(model: nn.Module, start: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor,
                       schedule: list[torch.Tensor], *, steps: int, batch_size: int, lr: float, tau: float,
                       coupled: bool, momentum: float, device: torch.device | str) -> list[torch.Tensor]:
    """Δ(k) for k = 1..``steps`` (float64, on the CPU) of a copy of ``model`` trained on
    ``schedule``'s batches; ``model`` itself is left unchanged."""
    m = copy.deepcopy(model)
    deltas: list[torch.Tensor] = []
    local_train(m, inputs, labels, steps=steps, batch_size=batch_size, lr=lr, tau=tau, coupled=coupled,
                momentum=momentum, device=device, batches=schedule,
                on_step=lambda k, mm: deltas.append(update_vector(mm, start).double().cpu()))
    return deltas


# ---------------------------------------------------------------------------- representations
def logit_cosine(logits_a, logits_b) -> float:
    """Mean row-wise cosine similarity of two models' logits on the same n samples:
    (1/n) Σ_i z_a,i·z_b,i / (‖z_a,i‖‖z_b,i‖), in float64.

    A row that is exactly zero in either argument contributes 0 (torch's
    ``cosine_similarity`` convention). Source: standard cosine similarity of output vectors.
    """
    a = _check_matrix(logits_a, "logits_a").numpy()
    b = _check_matrix(logits_b, "logits_b").numpy()
    if a.shape != b.shape:
        raise ValueError(f"logits_a and logits_b must have the same shape, got {a.shape} and {b.shape}")
    if a.shape[0] == 0:
        raise ValueError("logits are empty")
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    num = np.einsum("ij,ij->i", a, b)
    cos = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
    return float(np.clip(cos, -1.0, 1.0).mean())


def linear_cka(X, Y) -> float:
    """Linear centred kernel alignment of two representations of the same n samples.

    CKA(X, Y) = ‖X̃ᵀỸ‖_F² / (‖X̃ᵀX̃‖_F ‖ỸᵀỸ‖_F), X̃, Ỹ column-centred; rows are samples,
    widths may differ. Computed in float64. By cyclicity of the trace the same quantity is
    ⟨K, L⟩_F / (‖K‖_F ‖L‖_F) with Gram matrices K = X̃X̃ᵀ, L = ỸỸᵀ (n × n); this algebraically
    identical form is used when it is cheaper (n²(d_x + d_y) < n(d_x d_y + d_x² + d_y²)),
    the two agreeing to float64 rounding. Invariant to orthogonal transforms and isotropic
    scaling of either argument; lies in [0, 1].

    Source: Kornblith et al., "Similarity of Neural Network Representations Revisited", ICML 2019.

    Raises ValueError for non-2-D or non-finite inputs, differing n, n < 2, or a
    representation that is constant across samples (CKA undefined).
    """
    x = _check_matrix(X, "X").numpy()
    y = _check_matrix(Y, "Y").numpy()
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"X and Y must have the same number of rows (samples), got {x.shape[0]} and {y.shape[0]}")
    n, dx, dy = x.shape[0], x.shape[1], y.shape[1]
    if n < 2:
        raise ValueError("linear CKA needs at least 2 samples")
    if dx == 0 or dy == 0:
        raise ValueError("X and Y need at least one column")
    x = x - x.mean(axis=0, keepdims=True)
    y = y - y.mean(axis=0, keepdims=True)
    if n * (dx + dy) < dx * dy + dx * dx + dy * dy:  # Gram (n×n) form
        k, l = x @ x.T, y @ y.T
        cross, nx, ny = float(np.vdot(k, l)), float(np.linalg.norm(k)), float(np.linalg.norm(l))
    else:  # feature (d×d) form
        cross = float(np.linalg.norm(x.T @ y) ** 2)
        nx, ny = float(np.linalg.norm(x.T @ x)), float(np.linalg.norm(y.T @ y))
    if nx == 0.0 or ny == 0.0:
        raise ValueError("linear CKA is undefined for a representation that is constant across samples")
    return float(np.clip(cross / (nx * ny), 0.0, 1.0))


@torch.no_grad()
def penultimate_features(model: nn.Module, x: torch.Tensor, batch_size: int = 1000,
                         device: torch.device | str = "cpu") -> torch.Tensor:
    """Penultimate representation ``model.features(x)`` (eval mode, batched), as a CPU
    float32 tensor of shape (n, width). The model's train/eval mode is restored."""
    if not hasattr(model, "features"):
        raise ValueError(f"{type(model).__name__} has no features(x) method")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    x = torch.as_tensor(x)
    if len(x) == 0:
        raise ValueError("x is empty")
    device = torch.device(device)
    was_training = model.training
    model.to(device).eval()
    try:
        out = [model.features(x[i:i + batch_size].to(device)).float().flatten(1).cpu()
               for i in range(0, len(x), batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(out)


def representation_similarity(model_a: nn.Module, model_b: nn.Module, x: torch.Tensor, batch_size: int = 1000,
                              device: torch.device | str = "cpu") -> dict[str, float]:
    """Similarity of two models on a shared evaluation set ``x``:
    ``logit_cosine`` (:func:`logit_cosine` of their temperature-1 logits) and ``cka``
    (:func:`linear_cka` of their penultimate features; Kornblith et al. 2019)."""
    la = predict_logits(model_a, x, batch_size, device)
    lb = predict_logits(model_b, x, batch_size, device)
    fa = penultimate_features(model_a, x, batch_size, device)
    fb = penultimate_features(model_b, x, batch_size, device)
    return {"logit_cosine": logit_cosine(la, lb), "cka": linear_cka(fa, fb)}


# ---------------------------------------------------------------------------- triage (SPEC §6)
def triage_curves(logits, labels, gammas: Sequence[float] | np.ndarray | None = None,
                  from_logits: bool = True) -> pd.DataFrame:
    """Verification triage at thresholds γ (SPEC §6).

    With confidence c_i = max_j p_ij (p = softmax(logits) in float64 when ``from_logits``,
    else the given probabilities) and prediction ŷ_i = argmax_j p_ij (first index on ties),
    sample i is *sent* for verification iff c_i < γ. Per γ:

    * ``sent`` = #{c_i < γ};
    * ``unnecessary`` = #{c_i < γ and ŷ_i = y_i} (a correct prediction verified anyway);
    * ``missed`` = #{c_i ≥ γ and ŷ_i ≠ y_i} (an error that slips through);
    * ``unnecessary_rate``, ``missed_rate`` = the counts divided by n.

    γ = 0 sends nothing; γ = 1 sends every sample with confidence < 1. ``sent`` and
    ``unnecessary`` are non-decreasing in γ, ``missed`` non-increasing.
    Source: selective prediction / reject option (Chow 1970), as used in SPEC §6.

    ``gammas`` defaults to ``np.linspace(0, 1, 101)`` and keeps the given order.
    """
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    if from_logits:
        p = _check_logits(logits).numpy()
    else:
        p = _check_probs(logits, "probabilities", range_tol=0.0, sum_atol=1e-4,
                         hint=" (pass from_logits=True for logits)").numpy()
    n, c = p.shape
    lab = _check_labels(labels, n, c).numpy()
    g = _check_gammas(gammas).numpy()
    if from_logits:
        p = p - p.max(axis=1, keepdims=True)
        p = np.exp(p)
        p /= p.sum(axis=1, keepdims=True)
    conf = p.max(axis=1)
    correct = p.argmax(axis=1) == lab
    sent = conf[None, :] < g[:, None]  # (γ, n)
    n_sent = sent.sum(axis=1)
    unnecessary = (sent & correct[None, :]).sum(axis=1)
    missed = (~sent & ~correct[None, :]).sum(axis=1)
    return pd.DataFrame({
        "gamma": g,
        "sent": n_sent.astype(np.int64),
        "unnecessary": unnecessary.astype(np.int64),
        "missed": missed.astype(np.int64),
        "unnecessary_rate": unnecessary / n,
        "missed_rate": missed / n,
    })


def triage_change(attacked_df: pd.DataFrame, benign_df: pd.DataFrame) -> pd.DataFrame:
    """Per-γ change caused by an attack: attacked − benign (both from :func:`triage_curves`).

    Columns ``gamma, unnecessary_change, missed_change, unnecessary_rate_change,
    missed_rate_change``, sorted by γ. The two γ grids must be identical (as sets, up to
    1e-12) and free of duplicates, else ValueError. Count changes are only meaningful when
    both were evaluated on the same set; the rate changes are always comparable.
    """
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    need = ["gamma", "unnecessary", "missed", "unnecessary_rate", "missed_rate"]
    frames = []
    for name, df in (("attacked_df", attacked_df), ("benign_df", benign_df)):
        if not isinstance(df, pd.DataFrame):
            raise TypeError(f"{name} must be a DataFrame from triage_curves")
        missing = [k for k in need if k not in df.columns]
        if missing:
            raise ValueError(f"{name} lacks columns {missing}")
        df = df[need].sort_values("gamma", kind="stable").reset_index(drop=True)
        if df["gamma"].duplicated().any():
            raise ValueError(f"{name} has duplicate gamma values")
        frames.append(df)
    a, b = frames
    if len(a) != len(b) or not np.allclose(a["gamma"].to_numpy(float), b["gamma"].to_numpy(float),
                                           rtol=0.0, atol=1e-12):
        raise ValueError("attacked_df and benign_df have different gamma grids")
    return pd.DataFrame({
        "gamma": a["gamma"].to_numpy(float),
        "unnecessary_change": a["unnecessary"].to_numpy() - b["unnecessary"].to_numpy(),
        "missed_change": a["missed"].to_numpy() - b["missed"].to_numpy(),
        "unnecessary_rate_change": a["unnecessary_rate"].to_numpy(float) - b["unnecessary_rate"].to_numpy(float),
        "missed_rate_change": a["missed_rate"].to_numpy(float) - b["missed_rate"].to_numpy(float),
    })
