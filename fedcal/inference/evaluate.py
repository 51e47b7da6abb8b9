"""Evaluation of robust federated inference (SPEC §7), flwr-free.

Input is what the server collected from its clients: their probits on the server's
aggregator-training split and on the test set, with a validity mask (a client that did not
answer a query, or answered with something that is not a probit vector, is absent for that
query). From it this module

* builds the aggregators (Mean, coordinate-wise median, geometric median, trimmed mean, the
  feature-purification baselines manifold projection and CoPur, and a DeepSet trained on the
  server split, adversarially by default, plus its DeepSet-TM view and, for the robust-elements
  ablation, the same DeepSet before adversarial training with mean and trimmed pooling);
* evaluates each aggregator under each attack on ``f_adv`` adversarial rows per query, the
  adversaries' identities redrawn per query and shared by every attack and aggregator (so the
  comparison is paired); white-box attacks query the aggregator under evaluation;
* (the worst case over attacks and the tables over seeds are reports: :mod:`fedcal.reports`).

Results are tidy :class:`pandas.DataFrame` rows (``aggregator, attack, f_adv, amplification,
accuracy, queries``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import copy
import inspect
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch

from fedcal import catalogue
from fedcal.config.inference import PGD_GRADS
from fedcal.progress import phase

from .aggregators import AGGREGATORS, averaging_aggregator
from .deepset import DeepSet, DeepSetTM, train_deepset
from .logit_attacks import attack_logits
from .probit_attacks import PGD_LOSSES, PGD_STARTS, adversary_mask, apply_attack, class_covariance
from .purify import CoPur, ManifoldProjection, ProbitFusion, train_fusion

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ProbitData", "build_aggregators", "attack_accuracy", "white_box", "PGD_GRADS",
           "PGD_KAPPA", "gradient_view", "learned_state"]

log = logging.getLogger(__name__)



def __getattr__(name: str):
    # AGGREGATOR_NAMES: the inference aggregators of fedcal.catalogue, in declaration order, read when asked
    if name == "AGGREGATOR_NAMES":
        return catalogue.names("inference-aggregator")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: PGD-CW's cap on the margin per loss: 0 on log-probabilities (fedcal), 0.1 on probabilities (the
#: robust-inference authors' ``cw_confidence`` default, Utils/fl_args.py)
PGD_KAPPA = {"logit": 0.0, "prob": 0.1}


def white_box(attack: str) -> bool:
    """Whether ``attack`` queries the aggregator (SPEC §7 "white-box"): evaluated once per aggregator."""
    return "aggregator" in inspect.signature(catalogue.load("inference-attack", attack)).parameters


@dataclass
class ProbitData:
    """Client probits collected by the server.

    ``server_probits`` (N_s, n, C) / ``server_labels`` (N_s,): the aggregator-training split,
    clients that answered every query of it validly. ``test_probits`` (N_t, n, C) /
    ``test_valid`` (N_t, n) bool / ``test_labels`` (N_t,): the test queries; invalid rows hold
    zeros and are never read. ``clients`` names the n client ids of the test columns;
    ``server_columns`` says which test columns the server split's columns are (None: all, in
    order), what the positional aggregators (CoPur, manifold projection) need to line them up.
    ``server_logits`` / ``test_logits``: the clients' logits of the same queries when they answered with
    logits (``inf-client-output=logits``; None otherwise), what the logit-input aggregators and the
    attacks on logits read.
    """

    server_probits: torch.Tensor
    server_labels: torch.Tensor
    test_probits: torch.Tensor
    test_valid: torch.Tensor
    test_labels: torch.Tensor
    clients: list[int]
    server_columns: list[int] | None = None
    server_logits: torch.Tensor | None = None
    test_logits: torch.Tensor | None = None

    def save(self, path: str | Path) -> None:
        tmp = Path(path).with_suffix(".tmp")
        torch.save(self.__dict__, tmp)
        tmp.replace(path)  # atomic: an interrupted save never leaves half a file

    @classmethod
    def load(cls, path: str | Path) -> "ProbitData":
        return cls(**torch.load(path, weights_only=True))


def build_aggregators(server_probits: torch.Tensor, server_labels: torch.Tensor, f: int, *, hidden: int = 224,
                      epochs: int = 100, adv_epochs: int = 20, lr: float = 1e-3, attack_steps: int = 10,
                      restarts: int = 2, seed: int = 0, latent: int = 32, copur_steps: int = 30,
                      server_columns: Sequence[int] | None = None,
                      server_logits: torch.Tensor | None = None, adv_attack: str = "fedcal",
                      adv_subsets: int = 1, names: Sequence[str] | None = None,
                      state: Mapping[str, object] | None = None
                      ) -> tuple[dict[str, Callable], list[float], dict[str, object]]:
    """The aggregators of SPEC §7 built for ``f`` adversaries, and the baselines of the
    inference literature; returns them, the DeepSet's per-epoch training losses and the learned
    state of every component built (:func:`learned_state`, what a later build loads — taken before
    ``names`` narrows the aggregators, so a build that evaluates DeepSet-TM alone still saves the
    DeepSet from before its adversarial phase, which a later build needs to load rather than retrain).

    The DeepSet trains on the server split: ``epochs`` epochs on the clients' clean probits,
    then ``adv_epochs`` epochs of adversarial training (worst-case corruption of up to ``f``
    rows per sample, ``attack_steps`` sign-gradient steps, the worst of ``restarts`` starts:
    from the clients' probits and, for the second, from a simplex vertex). The clean warm-up is there because
    an adversarial epoch costs ``attack_steps + 1`` forward/backward passes: on a CPU the
    worst-case phase is affordable only as a fine-tuning of an already trained set function.
    ``adv_attack="literature"`` trains against the robust-inference authors' attack instead
    (:func:`~fedcal.inference.deepset.train_deepset`), ``adv_subsets`` times per sample and epoch.
    With ``adv_epochs`` the DeepSet as it was before that phase is kept too (``deepset_plain``
    and its trimmed view ``deepset_plain_tm``): the ablation's rows without adversarial training.

    Manifold projection and CoPur (:mod:`.purify`) share one autoencoder and fusion classifier
    (width ``hidden``, latent ``latent``, ``epochs`` epochs, learning rate ``lr``) trained on the
    clean server split; CoPur fits its latent in ``copur_steps`` steps. ``server_columns`` are the
    test columns of the split's clients (:class:`ProbitData`). With ``server_logits`` (the clients
    answered with logits) the same two purifiers are also built on the logits
    (``manifold_projection_logit``, ``copur_logit``: a fusion of their own, seeded alike), the
    literature's CoPur.

    ``names``: only these aggregators (:data:`AGGREGATOR_NAMES`; None = all); a learned component
    none of them uses (the DeepSet, either fusion) is not trained. Each component has its own
    seeded generator, so an aggregator built alone is the one built among all.

    ``state``: learned components trained earlier with the same data and settings
    (:func:`learned_state` of that build), loaded instead of trained again.
    """
    state = dict(state or {})
    known = catalogue.names("inference-aggregator")
    unknown = [a for a in names or () if a not in known]
    if unknown:
        raise ValueError(f"unknown aggregators {unknown}; known: {list(known)}")
    wanted = set(known if names is None else names)
    history: list[float] = []
    aggs: dict[str, Callable] = {name: averaging_aggregator(name, f) for name in AGGREGATORS}
    fusion_args = dict(hidden=hidden, latent=latent, seed=seed, columns=server_columns, epochs=epochs, lr=lr,
                       state=state)
    if wanted & {"manifold_projection", "copur"}:
        fusion = _fusion(server_probits, server_labels, space="probits", key="fusion", **fusion_args)
        aggs.update({"manifold_projection": ManifoldProjection(fusion), "copur": CoPur(fusion, steps=copur_steps)})
    if server_logits is not None and wanted & {"manifold_projection_logit", "copur_logit"}:
        if server_logits.shape != server_probits.shape:
            raise ValueError(f"server_logits shape {tuple(server_logits.shape)} != server_probits shape "
                             f"{tuple(server_probits.shape)}")
        logit_fusion = _fusion(server_logits, server_labels, space="logits", key="logit_fusion", **fusion_args)
        aggs.update({"manifold_projection_logit": ManifoldProjection(logit_fusion),
                     "copur_logit": CoPur(logit_fusion, steps=copur_steps)})
    if wanted & {"deepset_plain", "deepset_plain_tm", "deepset", "deepset_tm"}:
        deepsets, history = _deepsets(server_probits, server_labels, f, hidden=hidden, epochs=epochs,
                                      adv_epochs=adv_epochs, lr=lr, attack_steps=attack_steps, restarts=restarts,
                                      seed=seed, adv_attack=adv_attack, adv_subsets=adv_subsets, state=state)
        aggs.update(deepsets)
    return ({a: aggs[a] for a in known if a in aggs and a in wanted}, history,
            learned_state(aggs, history))


def _fusion(server_x: torch.Tensor, server_labels: torch.Tensor, *, space: str, key: str, hidden: int,
            latent: int, seed: int, columns: Sequence[int] | None, epochs: int, lr: float,
            state: Mapping[str, object]) -> ProbitFusion:
    """The autoencoder + fusion classifier of the purifiers on ``space`` (the clients' probits or
    logits), loaded from ``state[key]`` or trained on the server split. Its training has its own
    generator (seed + 1), so the DeepSet's draws do not depend on whether a purifier is built."""
    fusion = ProbitFusion(server_x.shape[1], server_x.shape[2], hidden=hidden, latent=latent, seed=seed,
                          columns=columns, space=space)
    if key in state:
        fusion.load_state_dict(state[key])
        fusion.eval()
    else:
        train_fusion(fusion, server_x, server_labels, epochs=epochs, lr=lr,
                     generator=torch.Generator().manual_seed(seed + 1))
    return fusion


def _deepsets(server_probits: torch.Tensor, server_labels: torch.Tensor, f: int, *, hidden: int, epochs: int,
              adv_epochs: int, lr: float, attack_steps: int, restarts: int, seed: int, adv_attack: str,
              adv_subsets: int, state: Mapping[str, object]) -> tuple[dict[str, Callable], list[float]]:
    """The DeepSet and DeepSet-TM (and, with ``adv_epochs``, their copies from before the
    adversarial phase, ``deepset_plain``/``deepset_plain_tm``), loaded from ``state`` or trained:
    ``epochs`` clean epochs, then ``adv_epochs`` adversarial ones on the same generator; returns
    them and the per-epoch training losses."""
    num_classes = server_probits.shape[2]
    aggs: dict[str, Callable] = {}
    deepset = DeepSet(num_classes, hidden=hidden, seed=seed)
    if "deepset" in state and (not adv_epochs or "deepset_plain" in state):
        deepset.load_state_dict(state["deepset"])
        deepset.eval()
        history = list(state.get("history", []))
        if adv_epochs:
            kept = DeepSet(num_classes, hidden=hidden, seed=seed)
            kept.load_state_dict(state["deepset_plain"])
            kept.eval()
            aggs.update({"deepset_plain": kept, "deepset_plain_tm": DeepSetTM.from_deepset(kept, f)})
    else:
        gen = torch.Generator().manual_seed(seed)
        history = train_deepset(deepset, server_probits, server_labels, epochs=epochs, lr=lr, generator=gen)
        if adv_epochs:
            kept = copy.deepcopy(deepset)
            aggs.update({"deepset_plain": kept, "deepset_plain_tm": DeepSetTM.from_deepset(kept, f)})
            history += train_deepset(deepset, server_probits, server_labels, epochs=adv_epochs, lr=lr,
                                     adversarial=True, f=f, attack_steps=attack_steps, n_restarts=restarts,
                                     generator=gen, adv_attack=adv_attack, subsets=adv_subsets,
                                     progress="DeepSet adversarial training")
    aggs.update({"deepset": deepset, "deepset_tm": DeepSetTM.from_deepset(deepset, f)})
    return aggs, history


def learned_state(aggs: Mapping[str, Callable], history: Sequence[float]) -> dict[str, object]:
    """The learned components of a :func:`build_aggregators` result, as state dicts (what its
    ``state`` argument loads): ``deepset`` (after adversarial training), ``deepset_plain`` (before
    it), ``fusion``, ``logit_fusion`` and the DeepSet's ``history`` — those the build had."""
    out: dict[str, object] = {}
    for key, names in (("deepset", ("deepset", "deepset_tm")), ("deepset_plain", ("deepset_plain", "deepset_plain_tm"))):
        agg = next((aggs[a] for a in names if a in aggs), None)
        if agg is not None:
            out[key] = {k: v.detach().clone() for k, v in agg.state_dict().items()}
    for key, names in (("fusion", ("copur", "manifold_projection")),
                       ("logit_fusion", ("copur_logit", "manifold_projection_logit"))):
        agg = next((aggs[a] for a in names if a in aggs), None)
        if agg is not None:
            out[key] = {k: v.detach().clone() for k, v in agg.fusion.state_dict().items()}
    if "deepset" in out:
        out["history"] = list(history)
    return out


def gradient_view(agg: Callable, grad: str) -> Callable:
    """What a white-box attack differentiates: ``agg`` itself (``grad="exact"``), or with ``"bpda"``
    its BPDA view where it has one (``as_bpda``: the trimmed means, the coordinate-wise median and
    DeepSet-TM's pooling keep their value and take the mean's gradient), as the robust-inference
    authors' code attacks them. Aggregators without such a view (mean, geometric median, the plain
    DeepSet, the purifiers) are differentiated exactly either way."""
    if grad not in PGD_GRADS:
        raise ValueError(f"grad must be one of {PGD_GRADS}, got {grad!r}")
    return agg.as_bpda() if grad == "bpda" and hasattr(agg, "as_bpda") else agg


def _groups(valid: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(query rows, client columns) per distinct validity pattern of ``valid`` (N, n)."""
    patterns, inverse = torch.unique(valid, dim=0, return_inverse=True)
    return [(torch.nonzero(inverse == i).flatten(), torch.nonzero(p).flatten()) for i, p in enumerate(patterns)]


def _needs(agg: Callable) -> int:
    """Smallest number of clients the aggregator accepts (trimming f per side needs n > 2f)."""
    f = getattr(agg, "f", 0) if getattr(agg, "pooling", "trimmed") == "trimmed" else 0
    return 2 * int(f) + 1


@torch.no_grad()
def _correct(agg: Callable, probits: torch.Tensor, labels: torch.Tensor) -> int:
    return int((agg(probits).argmax(dim=-1) == labels).sum())


def attack_accuracy(aggregators: Mapping[str, Callable], data: ProbitData, f_adv: int, attacks: Sequence[str], *,
                    amplification: float = 2.0, pgd_steps: int = 50, seed: int = 0, batch: int = 1000,
                    class_cov: torch.Tensor | None = None, pgd_start: str = "own", pgd_loss: str = "logit",
                    pgd_grad: str = "exact", progress: str = "attacks") -> pd.DataFrame:
    """Accuracy of every aggregator under every attack with ``f_adv`` adversarial rows per query.

    The adversaries of each query are drawn once (seeded by ``seed`` and the query's position)
    and shared by all attacks and aggregators. A query with too few valid clients for an
    aggregator (n' ≤ 2f for trimming) counts as wrong for it, with a warning. Positional
    aggregators (``for_columns``: CoPur, manifold projection) are told which client columns
    answered each group of queries. An aggregator that reads logits (``reads == "logits"``:
    ``copur_logit``, ``manifold_projection_logit``) gets the clients' logits and the attacks'
    logit forms (:mod:`.logit_attacks`); logit flipping flips the clients' logits when the data
    has them (``log p`` otherwise: the same softmax, up to float underflow).

    PGD-CW: ``pgd_steps`` steps from ``pgd_start`` (:data:`~.probit_attacks.PGD_STARTS`) on the
    margin ``pgd_loss`` (capped at :data:`PGD_KAPPA`), differentiated per ``pgd_grad``
    (:func:`gradient_view`); a uniform start is drawn from a generator seeded per batch and shared by
    every aggregator (paired, like the adversaries). Each (query batch, attack) is a step of the
    phase ``progress`` (:func:`fedcal.progress.phase`).
    """
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    known = catalogue.names("inference-attack")
    unknown = [a for a in attacks if a not in known]
    if unknown:
        raise ValueError(f"unknown attacks {unknown}; known: {sorted(known)}")
    if f_adv < 0:
        raise ValueError(f"f_adv must be >= 0, got {f_adv}")
    if pgd_start not in PGD_STARTS or pgd_loss not in PGD_LOSSES or pgd_grad not in PGD_GRADS:
        raise ValueError(f"pgd_start must be one of {PGD_STARTS}, pgd_loss one of {PGD_LOSSES}, pgd_grad one of "
                         f"{PGD_GRADS}; got {pgd_start!r}, {pgd_loss!r}, {pgd_grad!r}")
    reads_logits = [name for name, agg in aggregators.items() if getattr(agg, "reads", "probits") == "logits"]
    if reads_logits and data.test_logits is None:
        raise ValueError(f"aggregators {reads_logits} read logits, but the clients answered with probits "
                         "(inf-client-output=logits collects logits)")
    if class_cov is None:
        class_cov = class_covariance(data.server_probits)
    correct = {(a, k): 0 for a in aggregators for k in attacks}
    groups = _groups(data.test_valid)
    steps = len(attacks) * sum(-(-len(rows) // batch) for rows, cols in groups if len(cols) > 2 * f_adv)
    with phase(progress, steps, "attack batches") as bar:
        total = _attack_groups(aggregators, data, f_adv, attacks, groups, correct, amplification, pgd_steps, seed,
                               batch, class_cov, bar, pgd_start, pgd_loss, pgd_grad)
    return pd.DataFrame([{"aggregator": a, "attack": k, "f_adv": f_adv, "amplification": amplification,
                          "accuracy": correct[a, k] / max(total, 1), "queries": total}
                         for a in aggregators for k in attacks])


def _attack_groups(aggregators, data, f_adv, attacks, groups, correct, amplification, pgd_steps, seed, batch,
                   class_cov, bar, pgd_start, pgd_loss, pgd_grad) -> int:
    """The loop of :func:`attack_accuracy`: adds each aggregator's correct answers per attack to
    ``correct``, one step of ``bar`` per (query batch, attack); returns the queries counted."""
    total = 0
    for rows, cols in groups:
        n = len(cols)
        if n <= 2 * f_adv:
            log.warning("%d queries answered by %d clients: f_adv = %d is not a minority; counted as wrong",
                        len(rows), n, f_adv)
            total += len(rows)
            continue
        # positional aggregators told once per group which client columns answered its queries
        group_aggs = {name: agg.for_columns(cols.tolist()) if hasattr(agg, "for_columns") else agg
                      for name, agg in aggregators.items()}
        for start in range(0, len(rows), batch):
            idx = rows[start:start + batch]
            p = data.test_probits[idx][:, cols]
            z = None if data.test_logits is None else data.test_logits[idx][:, cols]
            y = data.test_labels[idx]
            gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(idx[0]))
            mask = adversary_mask(len(idx), n, f_adv, generator=gen)
            pgd_seed = int(seed) * 1_000_003 + int(idx[0]) + 7_919  # the uniform start's draws, per batch
            ctx = dict(labels=y, class_cov=class_cov, amplification=amplification, steps=pgd_steps, start=pgd_start,
                       loss=pgd_loss, kappa=PGD_KAPPA[pgd_loss])
            for attack in attacks:
                shared = None if white_box(attack) else apply_attack(attack, p, mask, logits=z, **ctx)
                for name, agg in group_aggs.items():
                    if n < _needs(aggregators[name]):
                        continue  # counted as wrong
                    pgd_gen = torch.Generator().manual_seed(pgd_seed)
                    if getattr(agg, "reads", "probits") == "logits":
                        attacked = attack_logits(attack, z, p, mask, aggregator=agg, generator=pgd_gen, **ctx)
                    elif shared is not None:
                        attacked = shared
                    else:
                        attacked = apply_attack(attack, p, mask, aggregator=gradient_view(agg, pgd_grad),
                                                generator=pgd_gen, **ctx)
                    correct[name, attack] += _correct(agg, attacked, y)
                bar.update(1, attack)
            total += len(idx)
    return total
