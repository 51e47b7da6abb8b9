"""Task ``train``: federated training under client poisoning — the Temperature Scaling
Attack (:mod:`fedcal.attacks.tsa`) and the poisoning baselines (:mod:`fedcal.attacks`) —
aggregated by any strategy of :mod:`fedcal.strategies`.

Server side: the configured strategy runs ``num-rounds`` rounds through Flower's strategy API
with clients chosen reproducibly per (seed, round), and the global model is evaluated
centrally on the test set (SPEC §1 metrics) every ``eval-every`` rounds; each round's metrics
are appended to the run store as soon as they exist, with the round's reply accounting
(``replies_received``, ``replies_accepted``, ``replies_rejected`` for every round ≥ 1) and the
reasons in ``rejections.csv`` (round, node_id, partition_id, reason), and each aggregated round's
weights in ``aggregation.csv`` (round, node_id, partition_id, weight: 0 = excluded by the rule,
plus what the rule computed — CalGuard's calibration signature and decision). A run in which no round
aggregated anything raises at its end instead of writing ``DONE``. Client side: one ``train`` handler for
every client, benign or malicious — what it does is chosen from the run config and its client
id (:func:`fedcal.attacks.behaviour_for`). Report: :func:`fedcal.reports.write_report`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import copy
import functools
import math

import time
from collections.abc import Callable
from pathlib import Path
from logging import INFO, WARNING

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from fedcal.tasks.nodes import (CLIENT_RECORD, check_partitions, client_id, client_record, config_record,
                                discover_clients, identified_grid, message_config, shared_model)
from fedcal.attacks import BENIGN, AttackSpec, LocalRoundSpec, attackers_of, behaviour_for, client_round
from fedcal.config import RunConfig, setting_of
from fedcal.attacks.backdoor import PixelBackdoor, attack_success_rate, triggered_test_set
from fedcal.aggregate.calguard import drift_arrays
from fedcal.calibration_state import CalibrationState
from fedcal.data import client_data, client_heldout, load_dataset, pixel_space, root_set
from fedcal.strategies.calguard import DRIFT_RECORD
from fedcal.calibration_metrics import (INTERVALS_FILE, bootstrap_intervals, calibration_estimators, estimator_metrics,
                                        recorded_columns)
from fedcal.metrics import METRIC_KEYS, calibration_metrics, reliability_bins
from fedcal.models import build_model
from fedcal.checkpoint import (check_history, check_rng_state, check_tensors_like, require, rng_state,
                               set_rng_state)
from fedcal.results import AUDIT_FILE, POISONING_FILE, REJECTIONS_FILE, Checkpoint, RunFailed, RunStore, run_dir_for
from fedcal.strategies import strategy_from_config
from fedcal.strategies.registry import server_arguments
from fedcal.strategies.base import UpdateAggregationStrategy
from fedcal.tasks.federated_eval import FederatedCalibration
from fedcal.tasks.client_state import collect_states, restore_states
from fedcal.tasks.poisoning import poisoning_grid
from fedcal.tasks.registry import ProgressFn
from fedcal.local_training import momentum_reply, predict_logits, resolve_device

if TYPE_CHECKING:
    import pandas as pd


# ---------------------------------------------------------------------------------- server side
#: the columns of the run's REJECTIONS_FILE: round, node id, the client's partition id (−1 when
#: unknown), reason
REJECTION_COLUMNS = ["round", "node_id", "partition_id", "reason"]


def root_train_fn_for(cfg: RunConfig, ds, device: torch.device) -> Callable[[ArrayRecord, int], ArrayRecord]:
    """FLTrust's server update: the benign local procedure (same B, β, number of local steps) on
    the root set (:func:`fedcal.data.root_set`).

    FLTrust (Cao et al., NDSS 2021, Alg. 1–2) runs the same R local iterations at the server as at
    the clients, and rescales every client update to the norm of the server's: the server's step
    count sets the federation's step size. With ``local-epochs`` the clients' step counts follow
    their data sizes; one epoch over a 100-sample root set would be 2 steps against a mean client's
    19 (MNIST), shrinking every update about tenfold. So the server takes the steps of E epochs
    over the mean client's data, ⌈N / K / B⌉·E, batches drawn from the root set."""
    x_root, y_root = root_set(ds, cfg.root_size, cfg.seed)
    model = build_model(cfg.model, ds.input_shape, ds.num_classes)
    if cfg.local_epochs:
        steps = cfg.local_epochs * math.ceil(len(ds.y_train) / cfg.num_clients / cfg.batch_size)
        root_cfg = cfg.replace(local_epochs=0, local_steps=steps)
    else:
        root_cfg = cfg

    def root_train(arrays: ArrayRecord, server_round: int) -> ArrayRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        client_round(model, x_root, y_root, ds.num_classes, BENIGN, LocalRoundSpec.from_config(root_cfg), server_round,
                     client_id=-1, device=device)
        return ArrayRecord({k: v.detach().cpu() for k, v in model.state_dict().items()})

    return root_train


def run_train(grid: Grid, cfg: RunConfig, progress: ProgressFn | None = None) -> pd.DataFrame:
    """Run one federated training experiment on ``grid``; returns the per-round metrics table.
    An unfinished earlier attempt of the config resumes from its checkpoint (:func:`federate`)."""
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    store = RunStore(run_dir_for(cfg), cfg)
    with store.session(rounds=cfg.num_rounds) as checkpoint:
        ds = load_dataset(cfg.dataset, cfg.data_dir)
        device = resolve_device(cfg.device)
        model = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=cfg.seed)
        node_to_client = discover_clients(grid, cfg.num_clients)
        log(INFO, "attackers (%s, %d of %d): %s", cfg.attack,
            cfg.num_attackers, cfg.num_clients, sorted(attackers_of(AttackSpec.from_config(cfg))))
        takes = server_arguments(cfg)  # what the rule works with on the server, if anything
        root_fn = root_train_fn_for(cfg, ds, device) if "root_train_fn" in takes else None
        guard = dict(root_set=root_set(ds, cfg.root_size, cfg.seed) if cfg.calguard_signal == "root" else None,
                     model=build_model(cfg.model, ds.input_shape, ds.num_classes).to(device)
                     ) if "model" in takes else {}

        triggered = triggered_test_set(ds.x_test, ds.y_test, PixelBackdoor(cfg.backdoor_target, cfg.backdoor_frac),
                                       pixel_space(cfg.dataset)) if setting_of("backdoor_target").read_by(cfg) else None

        # the clients' calibration states and temperatures (its round's temperature rescales the test logits)
        fed_cal = FederatedCalibration(cfg, store, node_to_client) if cfg.fed_eval_clients else None

        def evaluate(server_round: int, arrays: ArrayRecord) -> dict[str, float]:
            if not (server_round in (0, cfg.num_rounds) or server_round % cfg.eval_every == 0):
                return {}
            model.load_state_dict(arrays.to_torch_state_dict())
            logits = predict_logits(model, ds.x_test, cfg.eval_batch_size, device)
            metrics, finite = central_metrics(cfg, store, server_round, logits, ds.y_test,
                                              also_nan=("asr",) if triggered is not None else ())
            if not finite:
                return metrics
            temperature = fed_cal.temperature(server_round) if fed_cal is not None else float("nan")
            # the federated temperature, post hoc (accuracy unchanged), on the test samples no client fitted on
            held = fed_cal.unfitted(server_round, len(ds.y_test)) if math.isfinite(temperature) else None
            if held is not None and len(held):
                metrics.update({f"fedtemp_{k}": v for k, v in calibration_metrics(
                    logits[held].double() / temperature, ds.y_test[held], cfg.n_bins).items()})
                metrics["fedtemp_n"] = float(len(held))
            if triggered is not None:  # the backdoor's success beside the clean accuracy
                pred = predict_logits(model, triggered.x, cfg.eval_batch_size, device).argmax(1)
                metrics["asr"] = attack_success_rate(pred, triggered.labels, triggered.target)
            return metrics

        initial = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        final, rows = federate(grid, cfg, store, initial, evaluate, progress, node_to_client,
                               root_train_fn=root_fn, resume=checkpoint, evaluation=fed_cal, **guard)
        store.save_model(final)
        store.finish()
    return pd.DataFrame(rows)


def central_metrics(cfg: RunConfig, store: RunStore, server_round: int, logits: torch.Tensor, labels: torch.Tensor,
                    scores: dict[str, float] | None = None,
                    also_nan: tuple[str, ...] = ()) -> tuple[dict[str, float], bool]:
    """(metrics, finite) of one round's central evaluation from the global model's test ``logits``,
    shared by both ways of running the task (Flower's rounds, the batched train task): accuracy,
    ECE, sECE, Brier, NLL (``scores`` when already computed: the batched task scores every run at
    once) and the chosen estimators; on the final round the reliability bins and the bootstrap
    intervals are written. A diverged model (non-finite logits, e.g. extreme τ) is a result, not a
    crash: every metric (and ``also_nan``) NaN, with a warning."""
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    estimators = calibration_estimators(cfg.calibration_metrics)
    if not torch.isfinite(logits).all():
        log(WARNING, "%s round %d: global model produced non-finite logits", store.run_id, server_round)
        return {k: float("nan") for k in [*METRIC_KEYS, *recorded_columns(estimators), *also_nan]}, False
    if server_round == cfg.num_rounds:
        bins = reliability_bins(logits, labels, cfg.n_bins)
        store.write_table("reliability.csv", pd.DataFrame({k: v.numpy() for k, v in bins.items()}))
        if cfg.calibration_bootstrap:
            store.write_table(INTERVALS_FILE, pd.DataFrame(bootstrap_intervals(
                logits, labels, estimators, cfg.n_bins, cfg.calibration_bootstrap, cfg.seed)))
    metrics = dict(scores) if scores is not None else calibration_metrics(logits, labels, cfg.n_bins)
    metrics.update(estimator_metrics(logits.softmax(dim=-1), labels, estimators, cfg.n_bins))
    return metrics, True


def federate(grid: Grid, cfg: RunConfig, store: RunStore, initial: dict[str, torch.Tensor],
             evaluate: Callable[[int, ArrayRecord], dict[str, float]], progress: ProgressFn | None,
             node_to_client: dict[int, int], *, strategy: UpdateAggregationStrategy | None = None,
             num_rounds: int | None = None, resume: Checkpoint | None = None,
             evaluation: FederatedCalibration | None = None, **strategy_kwargs) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """The rounds of a federated training run, for any model: ``strategy`` (default: the configured
    one, :func:`fedcal.strategies.strategy_from_config` given ``strategy_kwargs``) runs ``num_rounds``
    (default ``num-rounds``) rounds from the ``initial`` state; after each (and before the first)
    ``evaluate(round, arrays)`` returns the global model's metrics (may be empty: not due). Each
    round's metrics, with the reply accounting, go to the run store at once, its ``round_seconds``
    to ``timings.csv``; rejections to ``rejections.csv``, the rule's per-reply weights to
    ``aggregation.csv``.

    Every ``checkpoint-every`` rounds the run is checkpointed (:meth:`RunStore.save_checkpoint`):
    the global model, the rule's state (:meth:`~fedcal.strategies.base.UpdateAggregationStrategy.state_dict`),
    the process's random streams, the rows and rejections so far. Given ``resume`` (the
    checkpoint :meth:`RunStore.session` found), the run continues after its round with all of
    them restored — the random streams last, right before the first resumed round — and ends as
    the uninterrupted run would have. The clients' draws are seeded by seed, round and client; the
    only state a client keeps between rounds is its momentum buffer (``client-momentum``), and
    with it on every node's ``Context.state`` is checkpointed too (``"clients"``:
    :func:`fedcal.tasks.client_state.collect_states`) and sent back to its node on resume.

    Returns (final state, rows of per-round metrics). Raises :class:`RunFailed` — the run is not
    finished — when no round aggregated anything. The caller saves the model and finishes the run.
    """
    num_rounds = cfg.num_rounds if num_rounds is None else num_rounds
    grid = identified_grid(grid, node_to_client)  # nodes left out at the handshake are never sampled
    nodes_grid = grid  # the nodes' own state queries go around the poisoning colluders
    stateful = bool(cfg.client_momentum)  # the clients keep state across rounds: it is checkpointed
    # the model-poisoning attacks' omniscient colluders craft the attackers' replies (fedcal.tasks.poisoning)
    grid = poisoning_grid(grid, cfg, node_to_client, lambda rows: store.append_rows(POISONING_FILE, rows))
    strategy = _round_strategy(cfg, store, node_to_client, strategy, evaluation, strategy_kwargs)
    rows: list[dict[str, float]] = []
    rejections: list[dict] = []
    aggregated_before = 0  # rounds that aggregated before the checkpoint this attempt resumed from
    arrays, first_round = ArrayRecord(initial), 1
    resume = store.resumable(resume, functools.partial(check_resumable, initial=initial, strategy=strategy,
                                                       node_to_client=node_to_client, client_states=stateful))
    if resume is not None:
        arrays, first_round, rows, rejections, aggregated_before = _resumed(resume, strategy, node_to_client,
                                                                            progress, num_rounds)
    clock = [time.perf_counter()]

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        metrics = {**evaluate(server_round, arrays), **_federated_metrics(strategy, server_round)}
        if server_round >= 1:  # evaluate_fn runs after the round's aggregate_train
            record_replies(server_round, metrics, strategy=strategy, store=store, node_to_client=node_to_client,
                            rejections=rejections)
        store.log_round(server_round, metrics)
        now = time.perf_counter()
        store.log_timings(server_round, {"round_seconds": now - clock[0]})  # train, aggregate, evaluate
        clock[0] = now  # a checkpoint's cost is counted in the next round's seconds
        rows.append({"round": server_round, **metrics})
        if store.checkpoint_due(server_round, num_rounds):
            store.save_checkpoint(server_round, lambda: {
                "arrays": arrays.to_torch_state_dict(), "strategy": strategy.state_dict(), "rows": rows,
                "rejections": rejections, "aggregated": aggregated_before + strategy.rounds_aggregated,
                "rng": rng_state(), **({"clients": collect_states(nodes_grid, node_to_client)} if stateful else {})})
        if progress is not None:
            progress(server_round, metrics)
        return MetricRecord({k: float(v) for k, v in metrics.items()})

    if resume is not None:
        if stateful:
            restore_states(nodes_grid, node_to_client, resume.state["clients"])
        set_rng_state(resume.state["rng"])  # last: every stream continues from the checkpoint on
        clock[0] = time.perf_counter()
    result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=num_rounds, train_config=config_record(cfg),
                            evaluate_fn=evaluate_fn, first_round=first_round)
    if num_rounds >= 1 and aggregated_before + strategy.rounds_aggregated == 0:
        raise RunFailed(
            f"run {store.dir.name}: no round aggregated anything ({len(rejections)} replies rejected in "
            f"{num_rounds} round(s), reasons in {REJECTIONS_FILE}); the model is untrained and the run is "
            "not marked DONE")
    return result.arrays.to_torch_state_dict(), rows


def _round_strategy(cfg: RunConfig, store: RunStore, node_to_client: dict[int, int],
                    strategy: UpdateAggregationStrategy | None, evaluation: FederatedCalibration | None,
                    strategy_kwargs: dict) -> UpdateAggregationStrategy:
    """The run's strategy (the configured one unless given), with the clients' merged calibration
    states as its federated evaluation when ``fed-eval-clients`` asks for them."""
    if strategy is None:
        strategy = strategy_from_config(cfg, node_sort_key=lambda n: node_to_client.get(n, 1 << 62),
                                        node_label=node_to_client.get, available=len(node_to_client),
                                        **strategy_kwargs)
    if cfg.fed_eval_clients and strategy.evaluation is None:  # the clients' calibration states, merged
        strategy.evaluation = evaluation or FederatedCalibration(cfg, store, node_to_client)
    return strategy


def check_resumable(resume: Checkpoint, *, initial: dict[str, torch.Tensor], strategy: UpdateAggregationStrategy,
                    node_to_client: dict[int, int], client_states: bool = False) -> None:
    """Raise (ValueError, saying what) unless :func:`federate` can continue from ``resume``'s state:
    every key present (``clients``, the nodes' states, when ``client_states``), the global model shaped like ``initial`` and finite, one row per round up to
    the checkpoint's, the rule's state taken by a copy of ``strategy``, the random streams
    restorable. Changes nothing (the run store starts the run over when it raises:
    :meth:`RunStore.resumable`)."""
    state = resume.state
    require(state, ("arrays", "strategy", "rows", "rejections", "aggregated", "rng",
                    *(("clients",) if client_states else ())))
    if client_states and not isinstance(state["clients"], dict):
        raise ValueError(f"its client states are a {type(state['clients']).__name__}, not a dict")
    check_tensors_like(state["arrays"], initial, "global model")
    check_history(state, resume.round)
    if not isinstance(state["strategy"], dict):
        raise ValueError(f"its rule state is a {type(state['strategy']).__name__}, not a dict")
    copy.deepcopy(strategy).load_state_dict(state["strategy"], {c: n for n, c in node_to_client.items()})
    check_rng_state(state["rng"])


def _federated_metrics(strategy: UpdateAggregationStrategy, server_round: int) -> dict[str, float]:
    """The round's federated calibration (``fed_*``), when its evaluate round ran one."""
    hook = strategy.evaluation
    return hook.metrics_of(server_round) if isinstance(hook, FederatedCalibration) else {}


def _resumed(resume: Checkpoint, strategy: UpdateAggregationStrategy, node_to_client: dict[int, int],
             progress: ProgressFn | None, num_rounds: int) -> tuple[ArrayRecord, int, list[dict], list[dict], int]:
    """What :func:`federate` continues from after ``resume``'s round: the global arrays, the first
    round to run, the rows and rejections so far and the rounds aggregated before; the rule's state
    is loaded into ``strategy`` and the rounds done are replayed into ``progress``."""
    state = resume.state
    arrays, first_round = ArrayRecord(state["arrays"]), resume.round + 1
    strategy.load_state_dict(state["strategy"], {c: n for n, c in node_to_client.items()})
    rows, rejections, aggregated_before = list(state["rows"]), list(state["rejections"]), int(state["aggregated"])
    log(INFO, "resuming after round %d of %d", resume.round, num_rounds)
    if progress is not None:  # the rounds done before: a progress bar starts where the run is
        for row in rows:
            progress(int(row["round"]), {k: v for k, v in row.items() if k != "round"})
    return arrays, first_round, rows, rejections, aggregated_before


def record_replies(server_round: int, metrics: dict[str, float], *, strategy: UpdateAggregationStrategy,
                    store: RunStore, node_to_client: dict[int, int], rejections: list[dict]) -> None:
    """The round's reply accounting into its metrics, its rejections appended to ``rejections``
    and written to rejections.csv, the rule's per-reply weights to aggregation.csv."""
    account = strategy.replies.get(server_round)
    metrics["replies_received"] = account.received if account else 0
    metrics["replies_accepted"] = len(account.accepted) if account else 0
    metrics["replies_rejected"] = len(account.rejections) if account else 0
    record_rejections(store, rejections, list(account.rejections) if account else [], server_round, node_to_client)
    audit = strategy.audit_rows() if account and account.aggregated else []
    store.append_rows(AUDIT_FILE, [{"round": server_round, **row} for row in audit])


def record_rejections(store: RunStore, rejections: list[dict], rejected: list[tuple[int, str]], server_round: int,
                      node_to_client: dict[int, int]) -> None:
    """Round ``server_round``'s (node, reason) rejections appended to ``rejections`` (with each
    node's partition id, −1 when unknown) and the run's rejections.csv rewritten: from round 1 on
    the table exists, and later it is rewritten only when it grew (most rounds of most runs reject
    nothing). Shared by every task that federates over untrusted replies."""
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    for node, reason in rejected:
        part = node_to_client.get(node)
        rejections.append({"round": server_round, "node_id": node,
                           "partition_id": -1 if part is None else part, "reason": reason})
    if server_round == 1 or rejected:
        store.write_table(REJECTIONS_FILE, pd.DataFrame(rejections, columns=REJECTION_COLUMNS))


# ---------------------------------------------------------------------------------- client side
def train(msg: Message, context: Context) -> Message:
    """One client's local round on the arrays the server sent, as its behaviour dictates."""
    cfg, server_round = message_config(msg, context)
    check_partitions(cfg, context)
    cid = client_id(context)
    data = client_data(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.partition, cfg.dirichlet_alpha,
                       cfg.seed, cid)
    device = resolve_device(cfg.device)
    model = shared_model(cfg.model, tuple(data.x.shape[1:]), data.num_classes)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    behaviour = behaviour_for(AttackSpec.from_config(cfg), cid)
    # the rule reads its clients' calibration drift (CalGuard without a root set)
    drift = setting_of("calguard_signal").read_by(cfg) and cfg.calguard_signal == "clients"
    held = _held_out_state(cfg, cid, model, device) if drift else None
    stats = client_round(model, data.x, data.y, data.num_classes, behaviour, LocalRoundSpec.from_config(cfg),
                         server_round, cid, device)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    if cfg.client_momentum and not behaviour.malicious:
        state.update(_momentum_reply(msg.content["arrays"].to_torch_state_dict(), context, model,
                                     cfg.client_momentum))
    content = RecordDict({
        "arrays": ArrayRecord(state),
        "metrics": MetricRecord({"train-loss": stats.loss, "num-examples": stats.num_examples}),
        CLIENT_RECORD: client_record(cid, behaviour.malicious),
    })
    if drift:  # CalGuard without a root set: the global model's and the candidate's calibration states
        content[DRIFT_RECORD] = ArrayRecord(drift_arrays(held[1], _held_out_state(cfg, cid, model, device, held)[1]))
    return Message(content=content, reply_to=msg)


#: the ``Context.state`` record of a client's momentum buffer (``client-momentum``)
MOMENTUM_KEY = "client-momentum"


def _momentum_reply(sent: dict[str, torch.Tensor], context: Context, model: torch.nn.Module,
                    beta: float) -> dict[str, torch.Tensor]:
    """The momentum-smoothed parameters this client sends after training ``model`` from the
    server's ``sent`` state (:func:`fedcal.local_training.momentum_reply`), its buffer read from
    and written back to ``context.state`` (kept across rounds on its node, and checkpointed with
    the run). A buffer not shaped like the model is named in a warning and restarted from zero."""
    names = [name for name, _ in model.named_parameters()]
    held = context.state.get(MOMENTUM_KEY)
    buffer = held.to_torch_state_dict() if isinstance(held, ArrayRecord) else None
    if held is not None and (buffer is None or set(buffer) != set(names)
                             or any(buffer[k].shape != sent[k].shape for k in names)):
        log(WARNING, "client %s: its momentum buffer is not shaped like the model; it starts again from zero",
            client_id(context))
        buffer = None
    reply, buffer = momentum_reply({k: sent[k] for k in names},
                                   {k: p.detach().cpu() for k, p in model.named_parameters()}, buffer, beta)
    context.state[MOMENTUM_KEY] = ArrayRecord(buffer)
    return reply


def _held_out_state(cfg: RunConfig, cid: int, model: torch.nn.Module, device: torch.device,
                    held: tuple | None = None) -> tuple:
    """(held-out data, the calibration state of ``model`` on it) of client ``cid`` (``held``: the
    data loaded before)."""
    data = held[0] if held is not None else client_heldout(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.partition,
                                                           cfg.dirichlet_alpha, cfg.seed, cid)
    state = CalibrationState.empty(cfg.n_bins)
    if len(data):
        state = state.update_probs(predict_logits(model, data.x, cfg.eval_batch_size, device).double().softmax(1),
                                   data.y)
    return data, state


def progress_label(cfg: RunConfig) -> str:
    """A training run's progress label: what its attackers do."""
    return "benign" if cfg.attack == "none" else f"{cfg.attack} τ={cfg.tau:g}"


def final_summary(run_dir: Path) -> str:
    """The final round's metrics of a training run, one line."""
    from fedcal.reports.runs import final_metrics  # the reports (pandas) only when a command asks

    last = final_metrics(run_dir).iloc[0]
    line = "final round {}: accuracy {:.2f}%  ECE {:.2f}%  sECE {:+.2f}%  Brier {:.4f}  NLL {:.4f}".format(
        int(last["round"]), 100 * last["accuracy"], 100 * last["ece"], 100 * last["sece"], last["brier"], last["nll"])
    return line + _interval_note(Path(run_dir))


def _interval_note(run_dir: Path) -> str:
    """The bootstrap intervals of ECE and sECE (``calibration-bootstrap``), as a second line; ""
    for a run that recorded none."""
    import csv

    path = run_dir / INTERVALS_FILE
    if not path.exists():
        return ""
    with open(path, newline="") as f:
        rows = {r["metric"]: r for r in csv.DictReader(f)}
    said = [f"{name} [{100 * float(rows[m]['lo']):{sign}.2f}, {100 * float(rows[m]['hi']):{sign}.2f}]%"
            for m, name, sign in (("ece", "ECE", ""), ("sece", "sECE", "+")) if m in rows]
    if not said:
        return ""
    first = next(iter(rows.values()))
    level = round(100 * float(first["level"]))
    return f"\n{level} % bootstrap intervals over the test set ({first['resamples']} resamples): " + "  ".join(said)


def load_images(cfg: RunConfig) -> None:
    """The image tasks' preflight: the dataset loads (a missing file fails naming the key, before Ray starts)."""
    load_dataset(cfg.dataset, cfg.data_dir)
