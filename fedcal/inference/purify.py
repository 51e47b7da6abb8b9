"""Feature-purification baselines of robust federated inference: manifold projection and CoPur.

Source: Liu, Xie, Koyejo & Li, "CoPur: Certifiably Robust Collaborative Inference via Feature
Purification" (NeurIPS 2022), which also evaluates the manifold-projection defence. Unlike the
set aggregators (mean, DeepSet, …) these are *positional*: the server sees the concatenation
h = (z_1, …, z_n) of the clients' probits, block i always from client i, and learns on its clean
held-out split (:class:`ProbitFusion`, :func:`train_fusion`)

* an autoencoder (E, D) of the concatenated probits: the decoder's range is the low-dimensional
  manifold the clean answers lie on (the clients' answers to one query are redundant, they all
  try to predict the same label);
* a fusion classifier g on the concatenation (the collaborative-inference model).

At inference, with the observed blocks O (absent clients' blocks are not observed):

* **manifold projection** (:class:`ManifoldProjection`) predicts g(D(E(h̃))), the squared-ℓ2
  projection onto the learned manifold that autoencoder defences use (MagNet's reformer,
  Defense-GAN's reconstruction); absent blocks are filled with the uniform vector. It treats a
  corruption as dense noise, so a few far-off blocks drag the projection with them;
* **CoPur** (:class:`CoPur`) predicts g(D(l*)), l* = argmin_l Σ_{i∈O} ‖h̃_i − D(l)_i‖₂. The
  ℓ2,1 (group) loss grows linearly, not quadratically, in each block's error, so a few
  arbitrarily wrong clients are block-sparse outliers the fit can ignore; absent blocks are left
  out of the sum. l starts at E(h̃) and takes ``steps`` normalised gradient steps.

**On logits** (``space="logits"``, :data:`SPACES`): the same autoencoder, fusion classifier and
purifiers on the clients' concatenated *logits* (the decoder without its per-block softmax), as
the robust-federated-inference literature runs CoPur (Dhasade et al., ICLR 2026, github.com/
sacs-epfl/robust-federated-inference, Baselines/CoPur: the autoencoder is trained with MSE on the raw
logits). A logit vector has no bound, so an adversary can send one of any scale (logit flipping
−a·z with large a): the probit form bounds every block to the simplex, the logit form does not.

Why our own code: no maintained library implements either for probit vectors (CoPur's release is
research code for its two vertical-FL datasets). Both are differentiable end to end — CoPur's
inner loop is unrolled (``create_graph``) when the input requires gradients — so the white-box
attacks (PGD-CW) attack them through the purification, as a defence must be evaluated.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ._fit import adam_epochs
from .aggregators import check_probits

__all__ = ["ProbitFusion", "train_fusion", "ManifoldProjection", "CoPur", "PURIFIERS", "SPACES"]

#: what a fusion's blocks are: the clients' probits (decoded through a softmax per block) or their logits
SPACES = ("probits", "logits")


class ProbitFusion(nn.Module):
    """Autoencoder (E, D) and fusion classifier g of the concatenated probits of ``n`` clients.

    E: Linear(nC, h)-ReLU-Linear(h, k); D: Linear(k, h)-ReLU-Linear(h, nC) and a softmax per
    client block (so every decoded block is a probit vector); g: Linear(nC, h)-ReLU-Linear(h, C)
    logits. ``columns`` names which client column each block is (the ids of
    :class:`~fedcal.inference.evaluate.ProbitData`'s test columns; default 0..n-1). ``space="logits"``:
    the blocks are the clients' logits and the decoder has no softmax (see the module docstring).
    """

    def __init__(self, n: int, num_classes: int, hidden: int = 224, latent: int = 32, seed: int | None = None,
                 columns: Sequence[int] | None = None, space: str = "probits"):
        super().__init__()
        if n < 1 or num_classes < 2 or hidden < 1 or latent < 1:
            raise ValueError(f"ProbitFusion needs n >= 1, num_classes >= 2, hidden >= 1, latent >= 1; "
                             f"got n={n}, num_classes={num_classes}, hidden={hidden}, latent={latent}")
        if space not in SPACES:
            raise ValueError(f"space must be one of {SPACES}; got {space!r}")
        self.space = space
        self.columns = list(range(n)) if columns is None else [int(c) for c in columns]
        if len(self.columns) != n or len(set(self.columns)) != n:
            raise ValueError(f"columns must name {n} distinct client columns; got {self.columns}")
        self.n, self.num_classes = n, num_classes
        d = n * num_classes
        with torch.random.fork_rng(devices=[], enabled=seed is not None):  # a seeded init leaves the caller's RNG
            if seed is not None:
                torch.manual_seed(seed)
            self.encoder = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, latent))
            self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, d))
            self.classifier = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def check(self, h: torch.Tensor) -> torch.Tensor:
        h = check_probits(h)
        if tuple(h.shape[1:]) != (self.n, self.num_classes):
            raise ValueError(f"expected (B, {self.n}, {self.num_classes}) probits; got {tuple(h.shape)}")
        return h

    def encode(self, h: torch.Tensor) -> torch.Tensor:
        return self.encoder(h.flatten(1))

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        out = self.decoder(latent).view(-1, self.n, self.num_classes)
        return torch.softmax(out, dim=-1) if self.space == "probits" else out

    def absent(self, h: torch.Tensor) -> torch.Tensor:
        """What an absent client's block is filled with: the uniform probit vector, or zero logits
        (whose softmax is that vector)."""
        return torch.full_like(h, 1.0 / h.shape[-1]) if self.space == "probits" else torch.zeros_like(h)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.classifier(h.flatten(1))


def train_fusion(model: ProbitFusion, probits: torch.Tensor, labels: torch.Tensor, epochs: int, lr: float = 1e-3,
                 batch_size: int = 256, generator: torch.Generator | None = None) -> list[float]:
    """Train the autoencoder and the fusion classifier on clean probits with Adam; returns the
    per-epoch mean loss.

    Loss per batch: Σ_i ‖D(E(h))_i − h_i‖² (reconstruction, mean over the batch) + CE(g(h), y)
    + CE(g(D(E(h))), y) with the reconstruction detached for the last term: the classifier is
    what both purifiers finally ask, on decoded inputs, so it learns those too (otherwise the
    decoder's small systematic errors alone would cost accuracy on clean queries).
    """
    probits = model.check(probits)

    def batch_loss(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        recon = model.decode(model.encode(h))
        return ((recon - h) ** 2).sum(dim=(1, 2)).mean() + F.cross_entropy(model.logits(h), y) \
            + F.cross_entropy(model.logits(recon.detach()), y)

    return adam_epochs(model, probits, labels, epochs, lr, batch_size, generator, batch_loss,
                       "autoencoder training (manifold projection, CoPur)")


class _Purifier(nn.Module):
    """A positional aggregator: (B, n, C) probits (logits when ``reads == "logits"``) in
    ``fusion.columns`` order → (B, C) probabilities."""

    def __init__(self, fusion: ProbitFusion):
        super().__init__()
        self.fusion = fusion

    @property
    def reads(self) -> str:
        """"probits" or "logits": what the evaluation must hand this aggregator (its fusion's space)."""
        return self.fusion.space

    def purify(self, h: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def aggregate(self, h: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
        """Probabilities g(purified) for ``h`` (B, n, C) with the (B, n) bool ``observed`` blocks."""
        h = torch.where(observed[..., None], h, self.fusion.absent(h))
        return torch.softmax(self.fusion.logits(self.purify(h, observed)), dim=-1)

    def forward(self, probits: torch.Tensor) -> torch.Tensor:
        h = self.fusion.check(probits)
        return self.aggregate(h, torch.ones(h.shape[:2], dtype=torch.bool, device=h.device))

    def for_columns(self, cols: Sequence[int]) -> "_OnColumns":
        """This aggregator for queries answered by the client columns ``cols`` only (in that
        order): blocks of clients the fusion was not trained on are ignored, the fusion's clients
        missing from ``cols`` are absent."""
        return _OnColumns(self, cols)


class _OnColumns(nn.Module):
    def __init__(self, purifier: _Purifier, cols: Sequence[int]):
        super().__init__()
        self.purifier = purifier
        self.reads = purifier.reads
        position = {c: j for j, c in enumerate(purifier.fusion.columns)}
        cols = [int(c) for c in cols]
        self.pick = torch.tensor([k for k, c in enumerate(cols) if c in position], dtype=torch.long)
        self.place = torch.tensor([position[c] for c in cols if c in position], dtype=torch.long)
        self.width = len(cols)

    def forward(self, probits: torch.Tensor) -> torch.Tensor:
        probits = check_probits(probits)
        if probits.shape[1] != self.width:
            raise ValueError(f"expected {self.width} client columns; got {probits.shape[1]}")
        fusion = self.purifier.fusion
        B = probits.shape[0]
        h = probits.new_zeros(B, fusion.n, fusion.num_classes).index_copy(1, self.place, probits[:, self.pick])
        observed = torch.zeros(B, fusion.n, dtype=torch.bool, device=probits.device)
        observed[:, self.place] = True
        return self.purifier.aggregate(h, observed)


class ManifoldProjection(_Purifier):
    """g(D(E(h))): squared-ℓ2 projection of the concatenated probits onto the autoencoder's
    manifold, then the fusion classifier (see the module docstring)."""

    def purify(self, h: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
        return self.fusion.decode(self.fusion.encode(h))


class CoPur(_Purifier):
    """g(D(l*)) with l* ≈ argmin_l Σ_{observed i} ‖h_i − D(l)_i‖₂ (ℓ2,1 purification; see the
    module docstring).

    l starts at E(h) (absent blocks uniform) and takes ``steps`` normalised gradient steps of
    length ``lr``·(1 − t/steps) per query: the latent's gradient scale depends on the decoder,
    a normalised, decaying step converges without tuning a step size to it. The objective uses
    √(‖r_i‖² + eps) so its gradient is defined when a block is fitted exactly.
    """

    def __init__(self, fusion: ProbitFusion, steps: int = 30, lr: float = 0.5, eps: float = 1e-8):
        super().__init__(fusion)
        if steps < 0 or lr <= 0 or eps <= 0:
            raise ValueError(f"CoPur needs steps >= 0, lr > 0, eps > 0; got {steps}, {lr}, {eps}")
        self.steps, self.lr, self.eps = int(steps), float(lr), float(eps)

    def objective(self, h: torch.Tensor, observed: torch.Tensor, latent: torch.Tensor) -> torch.Tensor:
        """(B,) ℓ2,1 residual Σ_{observed i} √(‖h_i − D(l)_i‖² + eps)."""
        r = self.fusion.decode(latent) - h
        return (torch.sqrt((r ** 2).sum(dim=-1) + self.eps) * observed).sum(dim=1)

    def fit_latent(self, h: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
        """l* for every query; differentiable in ``h`` when ``h`` requires gradients (unrolled)."""
        unrolled = torch.is_grad_enabled() and h.requires_grad
        latent = self.fusion.encode(h)
        with torch.enable_grad():
            if not unrolled:
                latent = latent.detach().requires_grad_(True)
            for t in range(self.steps):
                (g,) = torch.autograd.grad(self.objective(h, observed, latent).sum(), latent, create_graph=unrolled)
                step = self.lr * (1 - t / self.steps) * g / (g.norm(dim=1, keepdim=True) + 1e-12)
                latent = latent - step
                if not unrolled:
                    latent = latent.detach().requires_grad_(True)
        return latent if unrolled else latent.detach()

    def purify(self, h: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
        return self.fusion.decode(self.fit_latent(h, observed))


PURIFIERS = {"manifold_projection": ManifoldProjection, "copur": CoPur}
