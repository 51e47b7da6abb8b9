"""The omniscient colluders of the model-poisoning attacks, in simulation: a Grid wrapper that
replaces the malicious clients' train replies by crafted updates before the strategy sees them.

Threat model (docs/attacks.md): the literature evaluates ALIE, IPM, Min-Max / Min-Sum and Fang
with colluding attackers who see every honest update of the round before they reply. A Grid
wrapper is the one place in a Flower simulation where the round's honest replies exist before
the strategy's ``aggregate_train`` reads them, so the strategy — any strategy, unchanged — sees
exactly what it would see from such attackers, and validates and aggregates it as any reply.

Each train round: the honest view is the updates Δ_k = reply_k − sent of the round's replies
from benign clients, in partition-id order (error replies and replies that cannot form an update
are left out: the strategy rejects those too); the f replies of the run's attackers
(:func:`fedcal.attacks.attackers_of`) get sent + :func:`fedcal.attacks.craft_malicious` (attack,
honest view, f; the line-search attacks also the run's rule, :func:`attack_rule`) on the trained
arrays, their buffers (BatchNorm statistics) kept as they trained them. A round the attack cannot be
crafted in (fewer than two honest updates, an attack refusing its input) leaves the replies as
they are, with a warning naming the round and reason. Every attacker reply is recorded
(``poisoning.csv``: round, node, partition, attack, honest updates seen, whether it was crafted and
why not, norms): where rounds are small (5 clients a round, the TSA protocol's), many attacker
replies cannot be crafted, and the strategy × attack table says how many were.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from logging import INFO, WARNING

import numpy as np
import torch
from flwr.app import ArrayRecord, Message
from flwr.serverapp import Grid
from flwr.supercore import log

from fedcal.aggregate import add_flat_update
from fedcal.attacks import AttackSpec, attackers_of, craft_malicious, model_poisoning
from fedcal.attacks.behaviour import round_generator
from fedcal import catalogue
from fedcal.config import RunConfig
from fedcal.strategies.replies import is_buffer_key
from fedcal.tasks.nodes import WrappedGrid


class Colluders:
    """The omniscient colluders of one run (module docstring): who they are, and what they reply in a
    round given its honest updates. Shared by both ways of running the train task — the Grid wrapper
    (:class:`PoisoningGrid`) and the batched train task (``fedcal.tasks.train_batched``) — so both
    craft the same replies from the same honest view. ``record(rows)`` receives one row per attacker
    reply (``poisoning.csv``)."""

    def __init__(self, cfg: RunConfig, record: Callable[[list[dict]], None] | None = None):
        crafted = catalogue.needing("attack", "omniscient")
        if cfg.attack not in crafted:
            raise ValueError(f"attack {cfg.attack!r} is not a model-poisoning attack ({', '.join(crafted)})")
        self.cfg = cfg
        attack = AttackSpec.from_config(cfg)
        self.attackers = attackers_of(attack)
        self.params = catalogue.get("attack", cfg.attack).kwargs(attack)  # its own keys (alie-z, ipm-epsilon, ...)
        self.needs_rule = model_poisoning(cfg.attack).needs_rule  # opt-alie, opt-ipm: the rule in use
        if self.needs_rule:
            attack_rule(cfg, 0)  # a rule without an unweighted view is refused before any round, not in one
        self.record = record

    def craft(self, server_round: int, honest: list[tuple[int | None, torch.Tensor]],
              bad: list[tuple[int, int]]) -> torch.Tensor | None:
        """The (f, d) crafted updates of the attackers' replies ``bad`` — (node id, partition id) each —
        from the round's ``honest`` (partition id, flat float64 update) pairs, viewed in partition-id
        order (not arrival order: the view is the same on every engine and run, and Mimic's
        mimic-target indexes it); None when the round's attack cannot be crafted (the replies stay as
        trained, a warning names the round and reason). Every attacker reply is recorded."""
        if not bad:
            return None
        if len(honest) < 2:
            reason = f"{len(honest)} honest update(s) in the round, the attack needs 2"
            log(WARNING, "round %d: %s not crafted: %s", server_round, self.cfg.attack, reason)
            self._record([self._row(server_round, node, part, len(honest), False, reason) for node, part in bad])
            return None
        view = torch.stack([u for _, u in sorted(honest, key=lambda pu: (pu[0] is None, pu[0] or 0))])
        try:
            rows = craft_malicious(self.cfg.attack, view, len(bad),
                                   generator=round_generator(self.cfg.seed, server_round, -1, stream="poison"),
                                   aggregate=attack_rule(self.cfg, server_round) if self.needs_rule else None,
                                   **self.params)
        except (ValueError, ArithmeticError) as exc:
            log(WARNING, "round %d: %s not crafted (%s); the attackers' replies stay as trained",
                server_round, self.cfg.attack, exc)
            self._record([self._row(server_round, node, part, len(honest), False, str(exc)) for node, part in bad])
            return None
        mean_norm = float(view.mean(0).norm())
        self._record([self._row(server_round, node, part, len(honest), True, "", float(row.norm()), mean_norm)
                      for (node, part), row in zip(bad, rows)])
        log(INFO, "round %d: %s crafted %d repl%s from %d honest updates", server_round, self.cfg.attack,
            len(bad), "y" if len(bad) == 1 else "ies", len(honest))
        return rows

    def _row(self, server_round: int, node: int, part: int, honest: int, crafted: bool, reason: str,
             norm: float = float("nan"), mean_norm: float = float("nan")) -> dict:
        """One ``poisoning.csv`` row; an uncrafted reply's norms are NaN, so that a table can say how
        much of a run's attack was the attack (:func:`fedcal.reports.byzantine.crafted_share`)."""
        return {"round": server_round, "node_id": node, "partition_id": part, "attack": self.cfg.attack,
                "honest": honest, "crafted": crafted, "reason": reason, "norm": norm, "honest_mean_norm": mean_norm}

    def _record(self, rows: list[dict]) -> None:
        if self.record is not None:
            self.record(rows)


class PoisoningGrid(WrappedGrid):
    """``grid`` with the run's model-poisoning attack applied to its train replies (module
    docstring). ``record(rows)`` receives one row per attacker reply."""

    def __init__(self, grid: Grid, cfg: RunConfig, node_to_client: dict[int, int],
                 record: Callable[[list[dict]], None] | None = None, arrays_key: str = "arrays"):
        self.grid, self.colluders, self.node_to_client = grid, Colluders(cfg, record), node_to_client
        self.key = arrays_key

    def send_and_receive(self, messages: Iterable[Message], *, timeout=None):
        messages = list(messages)
        replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        train = [m for m in messages if m.metadata.message_type.partition(".")[0] == "train"
                 and self.key in m.content]
        if train:
            self._poison(train[0], replies, {m.metadata.dst_node_id: i for i, m in enumerate(train)})
        return replies

    def _poison(self, sent_msg: Message, replies: list[Message], sent_order: dict[int, int]) -> None:
        sent = sent_msg.content[self.key]
        config = sent_msg.content.get("config") if "config" in sent_msg.content else None
        server_round = int(config.get("server-round", 0)) if config is not None else 0
        keys = [k for k in sent.keys() if np.issubdtype(np.dtype(sent[k].dtype), np.floating)
                and not is_buffer_key(k)]
        if not keys:
            return
        base = {k: torch.from_numpy(np.array(sent[k].numpy(), copy=True)) for k in sent.keys()}
        honest, bad = [], []
        for msg in replies:
            if msg.has_error():
                continue
            part = self.node_to_client.get(msg.metadata.src_node_id)
            if part in self.colluders.attackers:
                bad.append(msg)
                continue
            update = _update(msg, base, keys, self.key)
            if update is not None:
                honest.append((part, update))
        # the crafted rows go to the attackers in the order the round's messages were sent (the strategy's
        # sample order; in process the replies come back in it), not in the order their replies arrived
        # (Ray's): an attack whose rows differ (Fang's) gives each colluder the same row on every engine
        bad.sort(key=lambda m: sent_order.get(m.metadata.src_node_id, len(sent_order)))
        rows = self.colluders.craft(server_round, honest, [(m.metadata.src_node_id,
                                                            self.node_to_client[m.metadata.src_node_id]) for m in bad])
        if rows is None:
            return
        for msg, row in zip(bad, rows):
            new = add_flat_update(base, keys, row)
            arrays = msg.content[self.key]
            msg.content[self.key] = ArrayRecord({
                k: (new[k] if k in keys else torch.from_numpy(np.array(arrays[k].numpy(), copy=True)))
                for k in sent.keys()})


def _update(msg: Message, base: dict[str, torch.Tensor], keys: list[str], key: str) -> torch.Tensor | None:
    """The reply's flat float64 update over ``keys``, or None when it has none (the strategy
    rejects such a reply with its reason)."""
    try:
        arrays = msg.content[key]
        parts = [torch.from_numpy(np.array(arrays[k].numpy(), copy=True)).double() - base[k].double() for k in keys]
        if any(p.shape != base[k].shape for p, k in zip(parts, keys)):
            return None
        flat = torch.cat([p.reshape(-1) for p in parts])
    except Exception:  # noqa: BLE001 — a malformed reply is not part of the honest view
        return None
    return flat if bool(torch.isfinite(flat).all()) else None


def attack_rule(cfg: RunConfig, server_round: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The server's rule as the line-search attacks (``opt-alie``, ``opt-ipm``) evaluate it: the
    run's pre-aggregation steps, then its rule with its parameters as the strategy shrinks them
    to the round's n (its class's :meth:`~fedcal.strategies.base.UpdateAggregationStrategy.unweighted`),
    every client weighted alike (FedAvg, Multi-Krum's mean and the geometric median weigh by claimed
    sizes, which the attackers may set themselves; ByzFL's rules are unweighted). ValueError for a rule
    that has no such view (the config refuses it: a rule with history or a root set)."""
    from fedcal import aggregate as agg
    from fedcal.strategies.registry import pre_aggregation_steps

    component = catalogue.get("rule", cfg.strategy)
    rule = component.load().unweighted(server_round, **component.kwargs(cfg))
    if rule is None:
        raise ValueError(f"strategy {cfg.strategy!r} is not one the line-search attacks can evaluate")
    return agg.compose(pre_aggregation_steps(cfg), rule) if cfg.pre_aggregations else rule


def colluders_for(cfg: RunConfig, record: Callable[[list[dict]], None] | None = None) -> Colluders | None:
    """The run's :class:`Colluders` when ``cfg.attack`` is a model-poisoning attack; None otherwise."""
    return Colluders(cfg, record) if "omniscient" in catalogue.get("attack", cfg.attack).needs else None


def poisoning_grid(grid: Grid, cfg: RunConfig, node_to_client: dict[int, int],
                   record: Callable[[list[dict]], None] | None = None) -> Grid:
    """``grid`` wrapped in :class:`PoisoningGrid` when ``cfg.attack`` is a model-poisoning attack;
    ``grid`` itself otherwise."""
    if "omniscient" not in catalogue.get("attack", cfg.attack).needs:
        return grid
    return PoisoningGrid(grid, cfg, node_to_client, record)
