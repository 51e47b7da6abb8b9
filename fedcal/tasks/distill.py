"""Task ``distill``: RFD-LoRA (SPEC §8) and the LoRA-adapter baselines, over Flower's Message API.

Every client holds a frozen pretrained text classifier (:mod:`fedcal.text.backbone`) with a LoRA
adapter of its own rank (``dst-ranks`` cycled over the clients, or the node config's ``lora-rank``
on a real SuperNode) and a trainable head. Each round (message type ``train.distill``):

* the server sends the run config, the round and the **anchor-set id** (a hash of the public
  anchors' indices) to every node — and, for a baseline, the global adapter arrays its strategy
  (:mod:`fedcal.strategies.lora`) chose for that node;
* a client restores its adapter from ``context.state`` (so it persists across rounds, in simulation
  and on a SuperNode), applies the baseline's global arrays if any, trains ``dst-local-epochs`` on
  its private shard (poisoned with the trigger if it is a backdoor client), stores its adapter back
  and replies with its clipped anchor logits (``rfd``; a backdoor client under ``dst-logit-attack``
  scales or flips them before clipping, under ``dst-anchor-attack`` uploads the target class on the
  anchors it attacks: :mod:`fedcal.distill.anchor_attack`) or its adapter arrays (baselines), plus
  the anchor-set id it computed itself;
* the server validates every reply — an error reply, NaN/Inf, a wrong shape, another anchor set,
  a second reply of one node — and drops a bad one with a warning naming the node; the reasons go
  to ``rejections.csv`` (round, node_id, partition_id, reason) as in the train task. A node's
  claims are input: an rfd reply's ``rank`` metric must be one of ``dst-ranks`` (an integer; inf,
  NaN, a string or 99999 is a bad reply, never a crash or a metric of its own), a baseline's rank
  is read from its adapter's shapes and checked by the strategy (one rank in every layer, one of
  ``dst-ranks``, the model's layer sizes). An error reply is a bad reply whatever its text says
  (a client built with a rank outside ``dst-ranks`` answers with one: that node is left out,
  the run goes on). With fewer than ``dst-min-replies`` valid replies the round keeps the
  student / global model (``round_kept`` = 1 in its metrics);
* ``rfd``: :func:`fedcal.distill.student.build_consensus` (clip, then mom / median / mean) and
  :func:`~fedcal.distill.student.distill_step` on the server's student; baselines: the strategy's
  ``aggregate_train``, and the global adapter model is rebuilt from its record;
* every ``dst-eval-every`` rounds (always 0 and the last): CA, RA and ASR of the student / global
  model on the test split and its triggered copy — NaN, with a warning, for a model whose logits
  are not finite, and a run whose last evaluation is such fails (:class:`fedcal.results.RunFailed`,
  no ``DONE``): a broken model is never reported as numbers. Every round: the reply counts, ``round_kept``,
  the bytes each client uploaded (the size of the reply's ArrayRecord payload, measured on the
  server: ``upload_bytes`` mean and ``upload_bytes_r<rank>`` per rank); ``round_seconds`` in
  ``timings.csv``.

The run ends with ``model.pt`` (the student's trainable state, or the global adapter / FLoRA's
merged updates) and ``DONE``. The math lives in :mod:`fedcal.distill`, the data in :mod:`fedcal.text` and
what nodes derive from the config in :mod:`fedcal.distill.run_data`; this module only moves tensors between them and Flower. Report:
:func:`fedcal.reports.distill.distill_report`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import copy
import functools
import time
from logging import INFO, WARNING

import torch
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid
from flwr.supercore import log

from fedcal.config import RunConfig
from fedcal.checkpoint import (check_finite, check_history, check_rng_state, check_tensors_like, require, rng_state,
                               set_rng_state)
from fedcal.results import REJECTIONS_FILE, Checkpoint, RunFailed, RunStore, run_dir_for
from fedcal.strategies.lora import to_state
from fedcal.tasks.client_state import collect_states, from_plain, restore_states
from fedcal.tasks.distill_replies import upload_bytes, valid_uploads
from fedcal.tasks.nodes import (
    check_partitions,
    client_id,
    config_record,
    discover_clients,
    identified_grid,
    message_config,
)
from fedcal.distill.clients import is_lora_a_key
from fedcal.distill.methods import LoraMethod, load_base_weights, lora_method
from fedcal.distill.run_data import (DistillRunSpec, base_classifier, client_batch, distill_data, evaluate_backdoor,
                                  inputs_of, is_eval_round, is_finite_evaluation, server_round,
                                  student_and_optimizer)
from fedcal.config.distill import MESSAGE_TYPE  # the task's declaration names its message type
from fedcal.tasks.registry import ProgressFn
from fedcal.tasks.train import record_rejections
from fedcal.local_training import resolve_device

if TYPE_CHECKING:
    import pandas as pd

ADAPTER_KEY = "distill-adapter"  # a client's adapter state between rounds (its Context state)
BASE_KEY = "distill-base"  # what a client keeps besides its adapter (FLoRA: its base weights, updates merged)
RANK_KEY = "lora-rank"  # optional node config: the node's own LoRA rank (a real SuperNode's resources)


# ------------------------------------------------------------------------------------ node side
def client_rank(cfg: RunConfig, context: Context, cid: int) -> int:
    """The node's LoRA rank: its node config's ``lora-rank`` if given, else ``dst-ranks`` cycled
    over the client ids (:func:`fedcal.distill.clients.assign_ranks`)."""
    from fedcal.distill.clients import assign_ranks

    if RANK_KEY in context.node_config:
        return int(context.node_config[RANK_KEY])
    return assign_ranks(cfg.num_clients, cfg.distill_ranks)[cid]


# ---------------------------------------------------------------------------------- client side
def distill_round(msg: Message, context: Context) -> Message:
    """One client round: restore the adapter, apply the server's arrays (the method's
    :meth:`~fedcal.distill.methods.LoraMethod.receive`), train locally, store the adapter, reply
    with anchor logits (:func:`_logits_reply`) or the adapter arrays the method uploads."""
    from fedcal.distill.clients import (
        adapter_state,
        load_adapter_state,
        lora_model,
    )

    cfg, server_round = message_config(msg, context)
    check_partitions(cfg, context)
    cid = client_id(context)
    rank = client_rank(cfg, context, cid)
    spec = DistillRunSpec.from_config(cfg)
    method = lora_method(spec.dst_method)
    data = distill_data(spec)
    device = str(resolve_device(cfg.device))
    base = base_classifier(data.backbone, data.num_classes, device, data.lora_layers)
    # lora_model refuses a rank outside dst-ranks with "client k: LoRA rank r is not in the allowed
    # set [...]": an error reply, which the server drops naming the node and this reason.
    model = lora_model(base, rank, alpha=cfg.dst_alpha, target_modules=cfg.lora_targets,
                       seed=method.init_seed(spec.seed, cid),
                       allowed_ranks=cfg.distill_ranks, client=cid, freeze_a=method.freeze_a)
    if BASE_KEY in context.state:  # the weights the method keeps beside the adapter (FLoRA's merged base)
        load_base_weights(model, to_state(context.state[BASE_KEY]))
    if ADAPTER_KEY in context.state:
        load_adapter_state(model, to_state(context.state[ADAPTER_KEY]))
    sent = msg.content.get("arrays", None)
    if sent is not None:
        method.receive(model, to_state(sent), seed=cfg.seed, cid=cid, server_round=server_round)
    batch, labels, poisoned = client_batch(spec, cid)
    gen = torch.Generator().manual_seed(int(cfg.seed) * 1_000_003 + cid * 1009 + server_round)
    stats = local_train(model, inputs_of(batch), batch["attention_mask"], labels, epochs=cfg.dst_local_epochs,
                        batch_size=cfg.batch_size, lr=cfg.dst_client_lr, weight_decay=cfg.dst_weight_decay,
                        warmup_frac=cfg.dst_warmup, generator=gen)
    state = adapter_state(model)
    context.state[ADAPTER_KEY] = ArrayRecord(state)
    kept = method.kept_weights(model)
    if kept is not None:
        context.state[BASE_KEY] = ArrayRecord(kept)
    malicious = cid in data.backdoor
    metrics = MetricRecord({"num-examples": int(labels.numel()), "partition-id": cid, "rank": rank,
                            "train-loss": float(stats.mean_loss), "malicious": int(malicious),
                            "poisoned": int(poisoned)})
    content = RecordDict({"metrics": metrics, "anchor": ConfigRecord({"anchor-set": data.anchor_id})})
    if method.uploads_logits:
        content["logits"] = ArrayRecord({"z": _logits_reply(model, cfg, data, malicious)})
    else:
        content["arrays"] = ArrayRecord(method.upload(state))
    return Message(content=content, reply_to=msg)


def _logits_reply(model, cfg: RunConfig, data, malicious: bool) -> torch.Tensor:
    """A logit-uploading client's clipped anchor logits; a backdoor client under
    ``dst-logit-attack`` scales or flips them before clipping, under ``dst-anchor-attack`` uploads
    the target class on the anchors it attacks (:mod:`fedcal.distill.anchor_attack`)."""
    from fedcal.distill import clip_logits
    from fedcal.distill.clients import anchor_logits

    attack = cfg.dst_logit_attack if malicious else "none"
    z = anchor_logits(model, inputs_of(data.anchor_batch), data.anchor_batch["attention_mask"],
                      clip=cfg.dst_clip if attack == "none" else 3e38, batch_size=cfg.eval_batch_size)
    if attack != "none":  # the logit-energy attack acts before the client's clipping
        z = clip_logits(z * (cfg.dst_attack_factor if attack == "scale" else -cfg.dst_attack_factor), cfg.dst_clip)
    if malicious and cfg.dst_anchor_attack != "none":  # anchor-set poisoning (fedcal.distill.anchor_attack)
        from fedcal.distill.anchor_attack import chosen_anchor_rows, crafted_logits

        rows = data.anchor_attack_rows if cfg.dst_anchor_attack == "trigger" else \
            chosen_anchor_rows(z, cfg.dst_anchor_attack_frac, cfg.dst_target)
        z = crafted_logits(z, rows, cfg.dst_target, cfg.dst_clip)
    return z


def local_train(*args, **kwargs):
    """:func:`fedcal.distill.clients.local_train` (looked up here, so a test can watch what the
    clients train from)."""
    from fedcal.distill.clients import local_train as _train

    return _train(*args, **kwargs)


# ---------------------------------------------------------------------------------- server side


def run_distill(grid: Grid, cfg: RunConfig, progress: ProgressFn | None = None) -> pd.DataFrame:
    """The whole distill run on ``grid`` (see the module docstring); returns the per-round metrics.
    An unfinished earlier attempt of the config resumes from its checkpoint (:func:`_distill_rounds`)."""
    if cfg.task != "distill":
        raise ValueError(f"run_distill needs task = 'distill', got {cfg.task!r}")
    data = distill_data(DistillRunSpec.from_config(cfg))  # first: a too small corpus is a config error
    store = RunStore(run_dir_for(cfg), cfg)
    with store.session(rounds=cfg.dst_rounds) as checkpoint:
        return _distill_rounds(grid, cfg, data, store, checkpoint, progress)


def _distill_rounds(grid: Grid, cfg: RunConfig, data, store: RunStore, checkpoint: Checkpoint | None,
                    progress: ProgressFn | None) -> pd.DataFrame:
    """:func:`run_distill` within its session: the setup, the rounds and the end of the run.

    Every ``checkpoint-every`` rounds the run is checkpointed: the student and its optimiser (or
    the global adapter model, record and strategy state), each client's ``Context.state``
    (:mod:`fedcal.tasks.client_state`), the recorded uploads, the rows, rejections and the
    process's random streams. With ``checkpoint`` the run continues after its round, every piece
    restored (the random streams last) — equal to the uninterrupted run."""
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    device = str(resolve_device(cfg.device))
    base = base_classifier(data.backbone, data.num_classes, device, data.lora_layers)
    node_to_client = discover_clients(grid, cfg.num_clients)
    log(INFO, "distill: %s on %s, %d clients (backdoor: %s), %d anchors (id %s)", cfg.dst_method, cfg.dst_corpus,
        cfg.num_clients, sorted(data.backdoor), len(data.anchors), data.anchor_id)
    evaluate = functools.partial(evaluate_backdoor, data=data, batch_size=cfg.eval_batch_size)
    ranks = sorted(set(cfg.distill_ranks))
    server = _DistillServer.start(base, cfg, ranks, node_to_client, store)
    rows, rejections = [], []
    clock = [time.perf_counter()]
    evaluated = {}  # round → whether its evaluation measured a model (finite logits)

    def finish_round(server_round: int, metrics: dict) -> None:
        if is_eval_round(server.spec, server_round):
            metrics.update(evaluate(server.model))
            evaluated[server_round] = is_finite_evaluation(metrics)
            if not evaluated[server_round]:
                log(WARNING, "round %d: the %s's logits are not finite: CA, RA and ASR are NaN", server_round,
                    "student" if server.strategy is None else "global model")
        store.log_round(server_round, metrics)
        now = time.perf_counter()
        store.log_timings(server_round, {"round_seconds": now - clock[0]})
        clock[0] = now  # a checkpoint's cost is counted in the next round's seconds
        rows.append({"round": server_round, **metrics})
        if progress is not None:
            progress(server_round, metrics)

    aggregated, first_round = 0, 1
    checkpoint = store.resumable(checkpoint, functools.partial(server.check_resumable, base=base,
                                                               node_to_client=node_to_client))
    if checkpoint is None:
        finish_round(0, {})
    else:
        state = checkpoint.state
        first_round = checkpoint.round + 1
        rows, rejections, aggregated = server.restore(state, base, node_to_client)
        restore_states(grid, node_to_client, state["clients"])
        if progress is not None:  # the rounds done before: a progress bar starts where the run is
            for row in rows:
                progress(int(row["round"]), {k: v for k, v in row.items() if k != "round"})
        set_rng_state(state["rng"])  # last: every stream continues from the checkpoint on
        clock[0] = time.perf_counter()

    for rnd in range(first_round, cfg.dst_rounds + 1):
        replies = list(grid.send_and_receive(server.messages(rnd, cfg, data, grid, node_to_client)))
        metrics: dict[str, float] = {"replies_received": len(replies)}
        kept, accepted, rejected, bytes_by_node = server.aggregate(rnd, replies, metrics, base=base, data=data,
                                                                   ranks=ranks, node_to_client=node_to_client)
        if kept:
            log(WARNING, "round %d: %d valid replies (< dst-min-replies = %d): the %s is kept", rnd, accepted,
                cfg.dst_min_replies, "student" if server.strategy is None else "global adapter")
        else:
            aggregated += 1
        metrics.update(replies_accepted=accepted, replies_rejected=len(rejected), round_kept=int(kept))
        record_rejections(store, rejections, rejected, rnd, node_to_client)
        metrics.update(upload_bytes(bytes_by_node, server.rank_of))
        finish_round(rnd, metrics)
        if store.checkpoint_due(rnd, cfg.dst_rounds):
            store.save_checkpoint(rnd, functools.partial(server.checkpoint_state, rows=rows, rejections=rejections,
                                                         aggregated=aggregated, grid=grid,
                                                         node_to_client=node_to_client))
    _check_result(store, cfg, aggregated=aggregated, rejected=len(rejections),
                  final_finite=evaluated.get(cfg.dst_rounds, True))
    store.save_model(server.final_state())
    if server.strategy is None:
        server.upload_log.save()
    store.finish()
    return pd.DataFrame(rows)


def _check_result(store: RunStore, cfg: RunConfig, *, aggregated: int, rejected: int, final_finite: bool) -> None:
    """A run that never aggregated, or whose final model's logits are not finite, fails
    (:class:`RunFailed`, no ``DONE``): a broken model is never reported as numbers."""
    if aggregated == 0:
        raise RunFailed(f"run {store.dir.name}: no round had {cfg.dst_min_replies} valid replies ({rejected} "
                        f"rejected, reasons in {REJECTIONS_FILE}); the model is untrained and the run is not marked DONE")
    if not final_finite:
        raise RunFailed(f"run {store.dir.name}: the final model's logits are not finite (CA, RA and ASR are NaN in "
                        "metrics.csv); the run is not marked DONE")


class _DistillServer:
    """What a distill run's server holds and its rounds change: a logit-uploading method's
    (``rfd``'s) student, optimiser and upload log, or a baseline's global adapter model, record and
    strategy; and the rank of every node, read from a checked reply. One object, so each step of
    :func:`_distill_rounds` is a method that says what it touches; what differs by ``dst-method``
    are the method's hooks (:mod:`fedcal.distill.methods`: the global model may be rebuilt, not
    only updated)."""

    def __init__(self, method: LoraMethod, model, spec: DistillRunSpec, *, optimizer=None, upload_log=None,
                 strategy=None, arrays=None):
        self.method, self.model, self.spec = method, model, spec
        self.optimizer, self.upload_log = optimizer, upload_log  # a student (rfd)
        self.strategy, self.arrays = strategy, arrays  # the baselines
        self.rank_of: dict[int, int] = {}  # node → rank: rfd from its checked metric, a baseline from its adapter

    @classmethod
    def start(cls, base, cfg: RunConfig, ranks: list[int], node_to_client: dict[int, int],
              store: RunStore) -> "_DistillServer":
        from fedcal.distill.replay import UploadLog

        spec = DistillRunSpec.from_config(cfg)
        method = lora_method(spec.dst_method)
        if method.uploads_logits:
            model, optimizer = student_and_optimizer(base, spec)
            # every round's valid uploads, for server-side replays
            return cls(method, model, spec, optimizer=optimizer, upload_log=UploadLog(store.dir))
        model, arrays, strategy = _baseline_start(method, base, spec, cfg, ranks, node_to_client)
        return cls(method, model, spec, strategy=strategy, arrays=arrays)

    def messages(self, rnd: int, cfg: RunConfig, data, grid: Grid, node_to_client: dict[int, int]) -> list[Message]:
        """Round ``rnd``'s train messages: the config, the round and the anchor-set id to every
        node (rfd), or what the strategy configures for the nodes that identified themselves."""
        rec = config_record(cfg)
        rec["server-round"] = rnd
        rec["anchor-set"] = data.anchor_id
        if self.strategy is None:
            nodes = sorted(node_to_client, key=node_to_client.get)
            return [Message(RecordDict({"config": rec}), message_type=MESSAGE_TYPE, dst_node_id=n) for n in nodes]
        # the strategy sees only the nodes that identified themselves
        return list(self.strategy.configure_train(rnd, self.arrays, rec, identified_grid(grid, node_to_client)))

    def aggregate(self, rnd: int, replies: list[Message], metrics: dict, *, base, data,
                  ranks: list[int], node_to_client: dict[int, int]) -> tuple[bool, int, list, dict[int, int]]:
        """The round's valid replies into the student (a distillation step, its metrics into
        ``metrics``) or the global adapter model; returns (model kept, replies accepted,
        (node, reason) rejections, upload bytes by node)."""
        if self.strategy is None:
            shape = (len(data.anchors), data.num_classes)
            uploads, senders, rejected, bytes_by_node = valid_uploads(replies, rnd, node_to_client, data.anchor_id,
                                                                       shape, ranks, self.rank_of)
            self.upload_log.add(rnd, senders, uploads)
            step = server_round(self.model, self.optimizer, uploads, data, self.spec, rnd)
            if step is not None:
                metrics.update(step)
            return step is None, len(uploads), rejected, bytes_by_node
        new, _ = self.strategy.aggregate_train(rnd, replies)
        account = self.strategy.replies[rnd]
        self.rank_of.update(self.strategy.node_ranks)  # read from the adapters' shapes, checked
        if new is not None:
            self.arrays = new
            self.model = self.method.apply_global(self.model, to_state(new), base, self.spec)
        return new is None, len(account.accepted), list(account.rejections), dict(self.strategy.last_bytes)

    def checkpoint_state(self, *, rows: list, rejections: list, aggregated: int, grid: Grid,
                         node_to_client: dict[int, int]) -> dict:
        """The checkpoint's content (see :func:`_distill_rounds`), built when the store saves it."""
        part = {n: c for n, c in node_to_client.items()}
        return {
            "model": self.method.server_state(self.model),
            "model_rank": int(next(p for n, p in self.model.named_parameters() if is_lora_a_key(n)).shape[0]),
            "ranks": {part[n]: r for n, r in self.rank_of.items() if n in part},
            "rows": rows, "rejections": rejections, "aggregated": aggregated,
            **({"optimizer": self.optimizer.state_dict(),
                "uploads": {k: torch.from_numpy(v) for k, v in self.upload_log.arrays.items()}}
               if self.strategy is None else {"strategy": self.strategy.state_dict(), "arrays": to_state(self.arrays)}),
            "clients": collect_states(grid, node_to_client),
            "rng": rng_state()}

    def check_resumable(self, checkpoint: Checkpoint, *, base, node_to_client: dict[int, int]) -> None:
        """Raise (ValueError, saying what) unless the run can continue from ``checkpoint``'s state:
        every key present, one row per round up to its round, the tensors finite, each client's
        state readable, the server's state taken by a copy of this server and shaped like its
        model, the random streams restorable. Changes nothing."""
        state = checkpoint.state
        require(state, ("model", "model_rank", "ranks", "rows", "rejections", "aggregated", "clients", "rng",
                        *(("optimizer", "uploads") if self.strategy is None else ("strategy", "arrays"))))
        check_history(state, checkpoint.round)
        check_finite(state, ("uploads", "arrays"))
        for plain in dict(state["clients"]).values():
            from_plain(plain)
        trial = copy.copy(self)
        trial.model, trial.optimizer, trial.upload_log, trial.strategy, trial.rank_of = copy.deepcopy(
            (self.model, self.optimizer, self.upload_log, self.strategy, dict(self.rank_of)))
        trial.restore(state, base, node_to_client)
        check_tensors_like(state["model"], self.method.server_state(trial.model), "model")
        check_rng_state(state["rng"])

    def restore(self, state: dict, base, node_to_client: dict[int, int]) -> tuple[list, list, int]:
        """A checkpoint's server side put back; returns its rows, rejections and rounds aggregated."""
        self.model = self.method.restored_model(self.model, base, state["model_rank"], self.spec)
        self.method.load_server_state(self.model, state["model"])
        node_of = {c: n for n, c in node_to_client.items()}
        self.rank_of.update((node_of[c], r) for c, r in state["ranks"].items() if c in node_of)
        if self.strategy is None:
            self.optimizer.load_state_dict(state["optimizer"])
            self.upload_log.arrays = {k: v.numpy() for k, v in state["uploads"].items()}
        else:
            self.strategy.load_state_dict(state["strategy"], node_of)
            self.arrays = ArrayRecord(state["arrays"])
        return list(state["rows"]), list(state["rejections"]), int(state["aggregated"])

    def final_state(self) -> dict[str, torch.Tensor]:
        """``model.pt``: the student's adapter state, or what the strategy saves of the global
        model (:meth:`~fedcal.strategies.lora.LoraStrategy.final_state`: FLoRA's merged updates)."""
        from fedcal.distill.clients import adapter_state

        state = adapter_state(self.model)
        return state if self.strategy is None else self.strategy.final_state(state, self.arrays)


def _baseline_start(method: LoraMethod, base, spec: DistillRunSpec, cfg: RunConfig, ranks: list[int],
                    node_to_client: dict[int, int]):
    """(global adapter model, its first record, strategy) of an adapter-federating baseline: the
    method's :meth:`~fedcal.distill.methods.LoraMethod.global_start` and its strategy
    (:meth:`~fedcal.distill.methods.LoraMethod.strategy_class`), built with the method's
    :meth:`~fedcal.distill.methods.LoraMethod.strategy_options` and its component's ``params`` (its own
    run-config keys, declared in its :class:`~fedcal.catalogue.Component`)."""
    from fedcal import catalogue
    from fedcal.distill.clients import adapter_state

    model, first = method.global_start(base, ranks, spec)
    options = {**method.strategy_options(ranks), **catalogue.get("lora-method", cfg.dst_method).kwargs(cfg)}
    # every reply's rank checked against dst-ranks and its layers against the model's (template)
    strategy = method.strategy_class()(alpha=cfg.dst_alpha, min_replies=cfg.dst_min_replies,
                                       node_label=node_to_client.get, message_type=MESSAGE_TYPE,
                                       node_sort_key=lambda n: node_to_client.get(n, 1 << 62),
                                       allowed_ranks=ranks, template=adapter_state(model),
                                       **options)
    return model, ArrayRecord(first), strategy

__all__ = ["ADAPTER_KEY", "MESSAGE_TYPE", "client_rank", "distill_round", "run_distill"]
