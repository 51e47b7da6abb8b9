"""Shared machinery of fedcal's strategies: seeded sampling, reply validation, updates.

:class:`UpdateAggregationStrategy` subclasses Flower's ``FedAvg`` and overrides only
``configure_train`` (to remember the arrays each round was sent, and for optional seeded
sampling), ``aggregate_train`` (to validate replies and aggregate *updates*
Δ_k = reply − sent with a rule from :mod:`fedcal.aggregate`) and ``summary``. A subclass
implements one method, :meth:`aggregate_updates`, on an (n, d) tensor, and logs its own
settings in ``summary`` before calling ``super().summary()``.

Only Flower's public API is used: train Messages are built with
``Message(content=..., dst_node_id=..., message_type=MessageType.TRAIN)`` and error replies
are checked here (``Message.has_error()``), not through ``FedAvg``'s private helpers.

Bad replies — error replies, NaN/Inf values, a missing, extra, wrongly shaped or wrongly
typed array, an invalid buffer (BatchNorm ``running_var`` < 0, a negative counter), an update
that overflows float32, a missing or invalid weight, a second reply of the same node — are
dropped with a warning naming the node, its partition id (``node_label``) and the reason; the
round continues with the rest, and when nothing valid remains the global model is kept. So it is
when the rule itself fails (a ValueError, an ArithmeticError, LAPACK's ``LinAlgError``) or its
result is not finite, with the reason logged. Every round's accounting (received, accepted,
rejected with reasons) is kept in :attr:`replies`.

This covers *train* replies. The evaluate round is FedAvg's (``fraction_evaluate=0``: central
evaluation) or a task's own (:class:`fedcal.strategies.evaluation.TaskEvaluation`; it checks its replies).
"""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import Callable, Iterable, Sequence
from logging import INFO, WARNING
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg as _FlowerFedAvg
from flwr.serverapp.strategy import Result
from flwr.supercore import log

from fedcal import aggregate as agg
from fedcal.strategies.evaluation import TaskEvaluation
from fedcal.strategies.keywords import naming_the_class_called
from fedcal.strategies.naming import NodeNaming
from fedcal.strategies.options import MetricsAggrFn
from fedcal.strategies.rounds import run_rounds
from fedcal.strategies.replies import (RoundReplies, check_reply, counted_replies, is_buffer_key, tensor_of,
                                       wait_for_nodes)
from fedcal.aggregate.compose import PreStep, pre_aggregate
from fedcal.aggregate.compose import _step_name as step_name

#: whether this Flower's ``Strategy.start`` takes ``should_stop`` (Flower 1.43's early stop)
_FLOWER_STOPS_EARLY = "should_stop" in inspect.signature(_FlowerFedAvg.start).parameters


class UpdateAggregationStrategy(TaskEvaluation, NodeNaming, _FlowerFedAvg):
    """Base of fedcal's strategies: Flower's FedAvg arguments plus seeded sampling and buffers.

    Every argument is keyword-only. The first ten are those of
    :class:`flwr.serverapp.strategy.FedAvg`, with the same defaults and meaning:

    Parameters
    ----------
    fraction_train : float (default 1.0)
        Fraction of the connected nodes trained each round (at least ``min_train_nodes``).
    fraction_evaluate : float (default 1.0)
        Fraction of the connected nodes asked to evaluate each round (0 skips federated
        evaluation).
    min_train_nodes : int (default 2)
        Minimum number of nodes trained per round.
    min_evaluate_nodes : int (default 2)
        Minimum number of nodes evaluating per round.
    min_available_nodes : int (default 2)
        Nodes that must be connected before a round is configured (the strategy waits).
    weighted_by_key : str (default "num-examples")
        Key of each reply's MetricRecord holding its weight (its claimed data size): weighs the
        replies in the rule and the buffers as the rule's :attr:`size_weighting` says (as claimed
        by FedAvg only), and the train metrics (Flower's weighted mean).
    arrayrecord_key : str (default "arrays")
        Key of the ArrayRecord in sent and received messages.
    configrecord_key : str (default "config")
        Key of the ConfigRecord in sent messages.
    train_metrics_aggr_fn : callable, optional
        ``(list[RecordDict], weighted_by_key) -> MetricRecord`` for the training replies'
        metrics (default: Flower's weighted average).
    evaluate_metrics_aggr_fn : callable, optional
        The same for evaluation replies.
    sampling_seed : int, optional
        When set, the nodes trained in round r are ``random.Random(f"{seed}/{r}")``'s sample
        of the connected nodes sorted by ``node_sort_key`` (Flower's own sampling uses the
        global ``random`` over per-run random node ids, so it cannot be reproduced).
    node_sort_key : callable, optional
        Maps a node id to a sortable key (default: the node id). It orders the nodes before
        seeded sampling and the valid replies before aggregation.
    node_label : callable, optional
        Maps a node id to the client's partition id (or any name; None when unknown). Every
        warning and rejection names the node as ``node <id> (partition <label>)``.
    buffer_key : callable, optional
        ``buffer_key(name) -> bool`` marks arrays that are not trained (validated, kept out of
        similarity computations, aggregated by :meth:`aggregate_buffers`: the data-size
        weighted mean under FedAvg, robustly under the robust rules). Default: BatchNorm
        statistics and counters; non-floating arrays are always buffers.
    message_type : str, optional
        Type of the training messages: ``"train"`` (Flower's, the default) or
        ``"train.<action>"`` for a ClientApp that answers its training under another handler (the
        lm task's ``train.lm``, the detect task's ``train.detect``).
    pre_aggregation : sequence of callables, optional
        Pre-aggregation steps of :mod:`fedcal.aggregate` (``nnm``, ``static_clip``, ``arc``,
        ``centered_clip``, each with its parameters bound, e.g. ``functools.partial(nnm, f=2)``),
        run in order on the round's validated (n, d) updates before the rule (what
        :func:`fedcal.aggregate.compose` (steps, rule) computes); a step must keep one row per client.
    """

    #: How the rule weighs the replies' claimed data sizes (their ``weighted_by_key`` values, which
    #: no server can check): ``"claimed"`` — as claimed (FedAvg, as McMahan et al. and Flower
    #: weigh); ``"capped"`` — each at most the round's median claim
    #: (:func:`fedcal.aggregate.cap_at_median`), so one client claiming 1e30 examples weighs what a
    #: median client weighs; ``"ignored"`` — not at all (the literature's unweighted rule). A subclass
    #: states its own; the default is ``"capped"``, so a new robust rule cannot be bought by a claim.
    #: With pre-aggregation steps even a ``"claimed"`` rule gets capped sizes (:attr:`trusts_claims`).
    size_weighting: str = "capped"

    @naming_the_class_called
    def __init__(
        self,
        *,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 1.0,
        min_train_nodes: int = 2,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int = 2,
        weighted_by_key: str = "num-examples",
        arrayrecord_key: str = "arrays",
        configrecord_key: str = "config",
        train_metrics_aggr_fn: MetricsAggrFn | None = None,
        evaluate_metrics_aggr_fn: MetricsAggrFn | None = None,
        sampling_seed: int | None = None,
        node_sort_key: Callable[[int], Any] | None = None,
        node_label: Callable[[int], Any] | None = None,
        buffer_key: Callable[[str], bool] | None = None,
        message_type: str = MessageType.TRAIN,
        pre_aggregation: Sequence[PreStep] | None = None,
    ) -> None:
        if message_type.partition(".")[0] != MessageType.TRAIN:
            raise ValueError(f"message_type {message_type!r} must be train or train.<action>")
        super().__init__(
            fraction_train=fraction_train,
            fraction_evaluate=fraction_evaluate,
            min_train_nodes=min_train_nodes,
            min_evaluate_nodes=min_evaluate_nodes,
            min_available_nodes=min_available_nodes,
            weighted_by_key=weighted_by_key,
            arrayrecord_key=arrayrecord_key,
            configrecord_key=configrecord_key,
            train_metrics_aggr_fn=train_metrics_aggr_fn,
            evaluate_metrics_aggr_fn=evaluate_metrics_aggr_fn,
        )
        self.sampling_seed = sampling_seed
        #: the type of the training messages: ``train`` (Flower's), or ``train.<action>`` for a task
        #: whose clients answer another handler (the lm task's ``train.lm``)
        self.message_type = message_type
        #: the pre-aggregation steps run on the validated updates before the rule (empty: none)
        self.pre_aggregation: tuple[PreStep, ...] = tuple(pre_aggregation or ())
        self.node_sort_key = node_sort_key or (lambda node_id: node_id)
        self.node_label = node_label
        self.buffer_key = buffer_key or is_buffer_key
        self._custom_sort = node_sort_key is not None
        self._said_unlabelled = False
        self._sent: dict[int, ArrayRecord] = {}
        #: effective aggregation weight of each node in the last round (for logging/analysis)
        self.last_weights: dict[int, float] = {}
        #: nodes whose replies were dropped in the last round, with the reason (error replies
        #: and duplicates included; the full list is ``replies[round].rejections``)
        self.last_rejected: dict[int, str] = {}
        #: per round: received / accepted / rejected replies (:class:`RoundReplies`)
        self.replies: dict[int, RoundReplies] = {}
        #: what a rule computed about each accepted node in the last round, beyond its weight
        #: (e.g. CalGuard's calibration signature); see :meth:`audit_rows`
        self.last_audit: dict[int, dict[str, Any]] = {}
        #: the float64 data-size weights of the round being aggregated (accepted order; capped
        #: at the median claim unless the rule :attr:`trusts_claims`)
        self._round_weights: torch.Tensor | None = None
        #: the accepted replies' contents, in aggregation order, while :meth:`aggregate_updates`
        #: runs (None otherwise): for rules that take Flower's RecordDict hooks (Bulyan's
        #: ``selection_rule``)
        self.round_contents: list[RecordDict] | None = None

    @property
    def trusts_claims(self) -> bool:
        """Whether the rule weighs the replies by their sizes as claimed: only a ``"claimed"`` rule
        (FedAvg) without pre-aggregation steps. Steps make the pipeline a robust one (centred
        clipping composed with the mean *is* centred clipping, an unweighted rule), whose mean
        must not let a claim buy a majority either; every other rule gets the claims capped at the
        round's median (what a rule that ignores sizes never reads)."""
        return self.size_weighting == "claimed" and not self.pre_aggregation

    def round_sizes(self, claims: torch.Tensor) -> torch.Tensor:
        """The float64 data-size weights of a round from its accepted replies' claims (in
        aggregation order): as claimed when :attr:`trusts_claims`, else capped at their median;
        then brought into float32's range by a power of two when a claim is absurd (1e39): the
        ratios, and ordinary sizes themselves, are unchanged."""
        claims = torch.as_tensor(claims, dtype=torch.float64)
        return agg.fit_weights(claims if self.trusts_claims else agg.cap_at_median(claims), torch.float64)

    @property
    def rounds_aggregated(self) -> int:
        """How many rounds produced a new global model."""
        return sum(r.aggregated for r in self.replies.values())

    def summary(self) -> None:
        """Log the strategy's settings (called by ``start``): fedcal's, then Flower's FedAvg's."""
        log(INFO, "\t├──> fedcal update aggregation:")
        log(INFO, "\t│\t├── Sampling seed: %s",
            "none (Flower's random sampling)" if self.sampling_seed is None else self.sampling_seed)
        log(INFO, "\t│\t├── Node order: %s", "custom node_sort_key" if self._custom_sort else "node id")
        log(INFO, "\t│\t├── Node labels: %s", "node_label" if self.node_label is not None else "none")
        log(INFO, "\t│\t├── Pre-aggregation: %s",
            " → ".join(map(step_name, self.pre_aggregation)) if self.pre_aggregation else "none")
        log(INFO, "\t│\t├── Claimed data sizes ('%s'): %s", self.weighted_by_key,
            "as claimed" if self.trusts_claims else
            "ignored" if self.size_weighting == "ignored" else "capped at the round's median claim")
        log(INFO, "\t│\t└── Buffers: %s",
            "BatchNorm statistics and non-floating arrays" if self.buffer_key is is_buffer_key
            else "custom buffer_key and non-floating arrays")
        super().summary()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """What the rule carries from one round to the next, for a run's checkpoint: ``{}`` for a
        rule that keeps nothing (FedAvg, the medians, MultiKrum, FLTrust, …); FoolsGold's
        histories and CalGuard's deviation pool and strikes otherwise. Per-node state is keyed
        by the node's label (its partition id, :meth:`keyed_by_label`): node ids are drawn anew
        in every run, so a resumed run's nodes have other ids."""
        return {}

    def load_state_dict(self, state: dict[str, Any], node_of: dict[Any, int]) -> None:
        """Put back what :meth:`state_dict` returned; ``node_of`` maps each label (partition id)
        to the node id it has in this run."""
        if state:
            raise ValueError(f"{type(self).__name__} keeps no state between rounds, got {sorted(state)}")

    def keyed_by_label(self, values: dict[int, Any]) -> dict[Any, Any]:
        """``{node id: value}`` as ``{label: value}`` (a checkpoint outlives node ids); a node
        without a label cannot be told apart in another run: ValueError naming it."""
        out = {}
        for node, value in values.items():
            label = self.label(node)
            if label is None:
                raise ValueError(f"{self.who(node)} has no label: its state cannot be checkpointed (give node_label)")
            out[label] = value
        return out

    @staticmethod
    def keyed_by_node(values: dict[Any, Any], node_of: dict[Any, int]) -> dict[int, Any]:
        """``{label: value}`` back as ``{node id: value}`` with this run's ``node_of``; a label
        with no node in this run is left out with a warning (its node did not connect)."""
        missing = sorted(str(k) for k in values if k not in node_of)
        if missing:
            log(WARNING, "checkpointed state of partition(s) %s dropped: no such node in this run", ", ".join(missing))
        return {node_of[k]: v for k, v in values.items() if k in node_of}

    # ------------------------------------------------------------------ resuming
    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, timeout: float = 3600,
              train_config: ConfigRecord | None = None, evaluate_config: ConfigRecord | None = None,
              evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
              should_stop: Callable[[int, Result], bool] | None = None, *, first_round: int = 1) -> Result:
        """Flower's ``Strategy.start`` (``first_round`` = 1: exactly Flower's loop), or the rounds
        ``first_round`` … ``num_rounds`` of a resumed run from ``initial_arrays``, the global
        model after round ``first_round − 1``: the same calls in the same order as Flower's loop
        (configure, send and receive, aggregate train; the same for evaluation; ``evaluate_fn``
        after each round), without the round-0 evaluation, which the run made before it stopped.
        Flower's ``start`` always begins at round 1, hence this one loop of fedcal's own.

        ``should_stop(round, result) -> bool`` is Flower's early stop (``Strategy.start`` from
        Flower 1.43 on): called after each round (never for round 0) with the results so far; True
        ends the run there. With a Flower whose ``start`` lacks it (1.42), fedcal's loop honours it."""
        if first_round <= 1 and (should_stop is None or _FLOWER_STOPS_EARLY):
            early = {} if should_stop is None else {"should_stop": should_stop}
            return super().start(grid=grid, initial_arrays=initial_arrays, num_rounds=num_rounds, timeout=timeout,
                                 train_config=train_config, evaluate_config=evaluate_config, evaluate_fn=evaluate_fn,
                                 **early)
        return run_rounds(self, grid, initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn,
                          should_stop, first_round)

    # ------------------------------------------------------------------ configure
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._sent = {server_round: arrays}  # updates are replies minus exactly these arrays
        if self.sampling_seed is None or self.fraction_train == 0.0:
            return [Message(content=m.content, dst_node_id=m.metadata.dst_node_id, message_type=self.message_type)
                    for m in super().configure_train(server_round, arrays, config, grid)]
        num_nodes = int(len(list(grid.get_node_ids())) * self.fraction_train)
        sample_size = max(num_nodes, self.min_train_nodes)
        all_nodes = wait_for_nodes(grid, max(self.min_available_nodes, sample_size))
        ordered = sorted(all_nodes, key=self.node_sort_key)
        node_ids = random.Random(f"{self.sampling_seed}/{server_round}").sample(ordered, sample_size)
        log(INFO, "configure_train: sampled %s nodes (out of %s), seeded", len(node_ids), len(all_nodes))
        config["server-round"] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return [Message(content=record, dst_node_id=node_id, message_type=self.message_type)
                for node_id in node_ids]

    # ------------------------------------------------------------------ aggregate
    @classmethod
    def unweighted(cls, server_round: int, **params: Any) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """The rule of round ``server_round`` with its own keyword arguments ``params`` as a function of the
        round's (n, d) updates alone, every client weighted alike: what the attacks that search against the
        server's rule evaluate (opt-alie, opt-ipm). None for a rule that also depends on earlier rounds or
        on the server's own data."""
        return None

    def aggregate_updates(self, server_round: int, node_ids: list[int], updates: torch.Tensor,
                          weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Aggregate an (n, d) float32 update matrix; return (Δ (d,), per-node weights (n,)).

        ``weights`` are the replies' ``weighted_by_key`` values (data sizes). The returned
        per-node weights (any non-negative scale; the base normalises them) only describe the
        aggregation in :attr:`last_weights`, they are not reused.
        """
        raise NotImplementedError

    def aggregate_buffers(self, server_round: int, node_ids: list[int], values: torch.Tensor,
                          weights: torch.Tensor) -> torch.Tensor:
        """Aggregate the (n, m) float64 matrix of the accepted replies' non-trained arrays
        (BatchNorm statistics, counters), already validated; ``weights`` are their float64 data
        sizes. Default: the data-size weighted mean (FedAvg); the robust rules override it."""
        return agg.buffer_mean(values, weights)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Validate the round's replies, aggregate the valid ones' updates (the rule) and buffers,
        and return the new global arrays and the train metrics; (None, None) keeps the model."""
        replies = list(replies)
        sent = self._sent.get(server_round)
        if sent is None:
            raise RuntimeError(f"aggregate_train for round {server_round} without configure_train")
        account = self.begin_round(server_round, len(replies))
        failures = sum(msg.has_error() for msg in replies)
        if replies:
            log(INFO, "aggregate_train: received %s results and %s failures", len(replies) - failures, failures)
        keys = list(sent.keys())
        train_keys = self.trainable_keys(sent)
        base = {k: tensor_of(sent[k]) for k in keys}
        good = self._valid_replies(server_round, replies, sent, base, train_keys, account)
        if not good:
            log(WARNING, "round %d: no valid reply (%d received, %d rejected); the global model is kept",
                server_round, account.received, len(account.rejections))
            return None, None
        new = self.aggregate_accepted(server_round, good, base, keys, train_keys)
        if new is None:
            return None, None
        metrics = None
        try:
            metrics = self.train_metrics_aggr_fn([g[1] for g in good], self.weighted_by_key)
        except Exception as exc:  # noqa: BLE001 — metrics must not cost the round its model
            log(WARNING, "round %d: train metrics not aggregated: %s", server_round, exc)
        account.aggregated = True
        return ArrayRecord({k: new[k] for k in keys}), metrics

    def begin_round(self, server_round: int, received: int) -> RoundReplies:
        """Round ``server_round``'s accounting (``received`` replies); the last round's records cleared."""
        self.replies[server_round] = account = RoundReplies(received=received)
        self.last_rejected, self.last_weights, self.last_audit = {}, {}, {}
        return account

    def drop_reply(self, server_round: int, account: RoundReplies, node: int, reason: str) -> None:
        """Leave ``node``'s reply out of the round: recorded, and logged naming the node and reason."""
        account.rejections.append((node, reason))
        self.last_rejected[node] = reason
        log(WARNING, "round %d: dropped reply of %s: %s", server_round, self.who(node), reason)

    def aggregate_accepted(self, server_round: int, good: list[tuple], base: dict[str, torch.Tensor], keys: list[str],
                           train_keys: list[str]) -> dict[str, torch.Tensor] | None:
        """The new arrays ``keys`` from the accepted ``good`` (node, content, claimed size, flat update) on
        the sent ``base``: sizes as the rule weighs them (:meth:`round_sizes`), pre-aggregation, rule, buffers;
        None keeps the model (reason logged). :meth:`aggregate_train`'s second half; the batched task's rule."""
        nodes = [g[0] for g in good]
        self._round_weights = weights = self.round_sizes(torch.tensor([g[2] for g in good], dtype=torch.float64))
        try:
            new = self._aggregate_trained(server_round, good, nodes, weights, base, train_keys)
            if new is None:
                return None
            new.update(self._aggregate_buffers(server_round, good, nodes, weights, base,
                                               [k for k in keys if k not in train_keys]))
        # a rule refusing its input, or failing numerically (a LAPACK solver not converging), must not end the run
        except (ValueError, ArithmeticError, torch.linalg.LinAlgError) as exc:
            log(WARNING, "round %d: aggregation failed (%s); the global model is kept", server_round, exc)
            return None
        if any(not bool(torch.isfinite(v).all()) for v in new.values() if v.is_floating_point()):
            log(WARNING, "round %d: new model is not finite in its dtype; the global model is kept", server_round)
            return None
        return new

    def _valid_replies(self, server_round: int, replies: list[Message], sent: ArrayRecord,
                       base: dict[str, torch.Tensor], train_keys: list[str], account: RoundReplies
                       ) -> list[tuple[int, RecordDict, float, torch.Tensor | None]]:
        """(node, content, weight, flat update) of every reply that passes validation, in node order;
        the others are rejected (logged and recorded in ``account``)."""
        good: list[tuple[int, RecordDict, float, torch.Tensor | None]] = []
        for msg in counted_replies(replies, functools.partial(self.drop_reply, server_round, account)):
            node = msg.metadata.src_node_id
            reason, weight = self._check_reply(msg.content, sent)
            update = None
            if reason is None and train_keys:
                update = self._flat_update(msg.content[self.arrayrecord_key], base, train_keys)
                if not bool(torch.isfinite(update).all()):
                    reason = "its update (reply − sent arrays) overflows float32"
            if reason:
                self.drop_reply(server_round, account, node, reason)
            else:
                good.append((node, msg.content, weight, update))
        # Replies arrive in completion order, which differs between engines and runs; a fixed
        # order makes the floating-point sums (and so whole runs) reproducible.
        good.sort(key=lambda g: (self.node_sort_key(g[0]), g[0]))
        account.accepted = [g[0] for g in good]
        return good

    def _aggregate_trained(self, server_round: int, good: list, nodes: list[int], weights: torch.Tensor,
                           base: dict[str, torch.Tensor], train_keys: list[str]) -> dict[str, torch.Tensor] | None:
        """The trained arrays after the rule's aggregate of the updates ({} without trained keys;
        None when the aggregate is not finite)."""
        if not train_keys:
            return {}
        updates = torch.stack([g[3] for g in good])
        if self.pre_aggregation:
            updates = self.pre_aggregate(updates)
        self.round_contents = [g[1] for g in good]
        try:
            delta, node_w = self.aggregate_updates(server_round, nodes, updates, weights.float())
        finally:
            self._round_weights = None  # this round's float64 sizes are not the next call's
            self.round_contents = None
        if not torch.isfinite(delta).all():  # a rule must never produce a NaN model
            log(WARNING, "round %d: aggregate is not finite; the global model is kept", server_round)
            return None
        node_w = node_w.double()
        total = node_w.sum()
        node_w = node_w / total if total > 0 else node_w
        self.last_weights = {n: float(w) for n, w in zip(nodes, node_w)}
        updated = agg.add_flat_update(base, train_keys, delta)
        return {k: updated[k] for k in train_keys}

    def _aggregate_buffers(self, server_round: int, good: list, nodes: list[int], weights: torch.Tensor,
                           base: dict[str, torch.Tensor], buffer_keys: list[str]) -> dict[str, torch.Tensor]:
        """The buffers (BatchNorm statistics, counters) merged by :meth:`aggregate_buffers`, in their dtypes."""
        if not buffer_keys:
            return {}
        values = torch.stack([torch.cat([tensor_of(g[1][self.arrayrecord_key][k]).double().reshape(-1)
                                         for k in buffer_keys]) for g in good])
        merged = self.aggregate_buffers(server_round, nodes, values, weights)
        new, offset = {}, 0
        for k in buffer_keys:
            size = base[k].numel()
            piece = merged[offset:offset + size].reshape(base[k].shape)
            new[k] = (piece if base[k].is_floating_point() else piece.round()).to(base[k].dtype)
            offset += size
        return new

    def pre_aggregate(self, updates: torch.Tensor) -> torch.Tensor:
        """The validated (n, d) updates after the :attr:`pre_aggregation` steps, one row per client
        still (ValueError otherwise: the round keeps the global model)."""
        mixed = pre_aggregate(updates, self.pre_aggregation)
        if mixed.shape[0] != updates.shape[0]:
            raise ValueError(f"pre-aggregation turned the {updates.shape[0]} client updates into {mixed.shape[0]} "
                             "rows; a strategy's steps must keep one row per client (bucketing does not)")
        return mixed

    def audit_rows(self) -> list[dict[str, Any]]:
        """The last round's aggregation, one row per accepted node in aggregation order:
        ``node_id``, ``partition_id`` (−1 when unknown), ``weight`` (its normalised share of the
        aggregate; 0 = excluded) and whatever the rule recorded in :attr:`last_audit`."""
        rows = []
        for node, weight in self.last_weights.items():
            label = self.label(node)
            rows.append({"node_id": node, "partition_id": -1 if label is None else label, "weight": weight,
                         **self.last_audit.get(node, {})})
        return rows

    # ------------------------------------------------------------------ helpers
    def trainable_keys(self, sent: ArrayRecord) -> list[str]:
        """Names of the trained (floating, non-buffer) arrays, in record order."""
        return [k for k in sent.keys() if self._trainable(k, sent)]

    @staticmethod
    def _flat_update(arrays: ArrayRecord, base: dict[str, torch.Tensor], keys: list[str]) -> torch.Tensor:
        """Δ = arrays − base over ``keys`` (base: the sent arrays as tensors), one float32 vector."""
        return torch.cat([(tensor_of(arrays[k]) - base[k]).reshape(-1).float() for k in keys])

    def _trainable(self, key: str, sent: ArrayRecord) -> bool:
        return np.issubdtype(np.dtype(sent[key].dtype), np.floating) and not self.buffer_key(key)

    def _check_reply(self, content: RecordDict, sent: ArrayRecord) -> tuple[str | None, float]:
        """(reason it is invalid or None, its weight): :func:`fedcal.strategies.replies.check_reply`."""
        return check_reply(content, sent, self.arrayrecord_key, self.weighted_by_key,
                           lambda k: self._trainable(k, sent))
