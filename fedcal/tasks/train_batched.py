"""Engine ``batched``: many ``train`` runs of one architecture trained as one computation.

A sweep of small models (the paper's 45-run MNIST–MLP table) is thousands of tiny matrix
products that leave the cores idle between Python calls. Every client of a round — and every
run of a sweep that shares the architecture, the data set and the round protocol — takes the
same number of SGD steps on batches of the same shape, so R runs × M clients train as ONE
batched model: the parameters of all R·M client models are stacked (leading axis), the model
is applied with ``torch.func.vmap`` over ``functional_call``, per-model temperature τ and
learning rate η are tensors, and one backward pass gives every model its own gradient (the
loss is a sum of per-model losses). Central evaluation runs the R global models the same way.

What each run computes is the in-process engine's run (asserted by
``tests/test_batched.py``): the same seeded client sample per round
(:func:`fedcal.reference.sampled_clients`), the same partitions, the same batch schedule of
``round_generator(seed, round, client)`` (:func:`fedcal.local_training.batch_schedule`), the TSA
client's τ and η = β·τ, SGD with the run's momentum and weight decay, the reply checks of the
strategies (a non-finite reply or update is rejected and logged with the reason), the
strategy's own rule (``aggregate_updates`` of the configured fedcal strategy, so FoolsGold's
history, MultiKrum's f/m, the trimmed mean's f are the strategy's), the float64 update, and the
same run store: metrics.csv, timings.csv, rejections.csv, aggregation.csv, reliability.csv, model.pt,
DONE (each run's lock held while the batch writes it). Batched runs are not checkpointed: an
interrupted batched run starts over from round 0 (its runs move in lockstep, so resuming would
need every run of a batch at one checkpointed round).
Float results agree within rounding, not bit for bit: a batched matrix product sums in another
order than R·M separate ones (the test's tolerance and its measured drift are in
docs/performance.md). ``round_seconds`` is the batched round's wall time divided by the number
of runs trained together (each run's amortised share).

Cells the batched computation does not cover — another task, a strategy that trains or
evaluates on the server (FLTrust, CalGuard), attacks other than TSA without the adaptive
variants, models with buffers (BatchNorm), a client with fewer samples than the batch size —
are run by the in-process engine instead (:func:`batched_unsupported` says why), so
``engine=batched`` never changes what a sweep computes.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from fedcal import aggregate as agg
from fedcal.app.quiet import quiet_flower
from fedcal.attacks import AttackSpec, behaviour_for
from fedcal.attacks.behaviour import round_generator
from fedcal.config import RunConfig
from fedcal.data import client_partitions, load_dataset
from fedcal.calibration_metrics import (INTERVALS_FILE, bootstrap_intervals, calibration_estimators, estimator_metrics,
                                        recorded_columns)
from fedcal.metrics import METRIC_KEYS, calibration_metrics_batch, reliability_bins
from fedcal.models import build_model
from fedcal.reference import sampled_clients
from fedcal.results import AUDIT_FILE, REJECTIONS_FILE, RunFailed, RunStore, run_dir_for
from fedcal.strategies import strategy_from_config
from fedcal.strategies.replies import RoundReplies
from fedcal.tasks import all_tasks, get_task
from fedcal.local_training import batch_schedule, effective_lr, resolve_device

log = logging.getLogger("fedcal.batched")

#: The run-config keys that must be equal for runs to train as one batch (the round protocol,
#: the data and the architecture); the others (seed, τ, coupling, attacker ratio, β, momentum,
#: weight decay, strategy and its parameters, partition) may differ from run to run.
GROUP_KEYS = ("dataset", "data_dir", "model", "num_clients", "clients_per_round", "local_steps", "batch_size",
              "num_rounds", "eval_every", "eval_batch_size", "n_bins", "device")
#: Strategies that need the server to train or evaluate a model (not batched).
SERVER_MODEL_STRATEGIES = ("fltrust", "calguard")
#: Upper bound on the stacked client parameters of one batch (floats); larger groups are split.
MAX_BATCH_FLOATS = 60_000_000
REJECTION_COLUMNS = ["round", "node_id", "partition_id", "reason"]


def batched_unsupported(cfg: RunConfig) -> str | None:
    """Why ``cfg`` cannot run in the batched engine, or None when it can."""
    if not get_task(cfg.task).batched:
        batched = ", ".join(repr(t.name) for t in all_tasks() if t.batched)
        return f"task {cfg.task!r} (only {batched} is batched)"
    if cfg.strategy in SERVER_MODEL_STRATEGIES:
        return f"strategy {cfg.strategy!r} trains or evaluates a model on the server"
    if cfg.attack not in ("none", "tsa"):
        return f"attack {cfg.attack!r} (only TSA is batched)"
    if cfg.pre_aggregation:
        return f"pre-aggregation {cfg.pre_aggregation!r} (the batched rules take none)"
    if cfg.attack == "tsa" and (cfg.tsa_step_frac != 1 or cfg.tsa_blend != 1 or cfg.tsa_duty != 1):
        return "the adaptive TSA attacker (tsa-step-frac / tsa-blend / tsa-duty)"
    if cfg.local_epochs:  # the clients' step counts then differ: no common (E, B) batch shape to stack
        return "local-epochs (clients take different numbers of steps)"
    if cfg.augment != "none":
        return f"augment {cfg.augment!r}"
    if cfg.fed_eval_clients:
        return "fed-eval-clients (federated evaluation is a Flower evaluate round)"
    if cfg.optimizer != "sgd":
        return f"optimizer {cfg.optimizer!r} (the batched step is SGD's)"
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    template = build_model(cfg.model, ds.input_shape, ds.num_classes)
    if list(template.buffers()):
        return f"model {cfg.model!r} has buffers (BatchNorm statistics)"
    sizes = [len(p) for p in client_partitions(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.partition,
                                               cfg.dirichlet_alpha, cfg.seed)]
    if min(sizes) < cfg.batch_size:
        return f"a client holds {min(sizes)} samples, fewer than the batch size {cfg.batch_size}"
    return None


def group_key(cfg: RunConfig) -> tuple:
    """Runs with equal keys train in one batch."""
    return tuple(getattr(cfg, k) for k in GROUP_KEYS)


@dataclass
class _Run:
    """One run of the batch: its config, store, strategy, global parameters and records."""

    cfg: RunConfig
    store: RunStore
    strategy: object
    params: dict[str, torch.Tensor]
    parts: tuple
    behaviours: list  # per partition id (the run's attackers are fixed for the whole run)
    rejections: list[dict] = field(default_factory=list)
    failed: str | None = None


def run_batched(configs: Sequence[RunConfig], on_done: Callable[[RunConfig, str | None], None] | None = None
                ) -> dict[str, str]:
    """Run the ``configs`` (all of one :func:`group_key`, all supported) as one batched
    computation, split into batches of at most MAX_BATCH_FLOATS stacked parameters; returns
    {run dir: error} of the runs that failed. ``on_done(cfg, error)`` is called per run."""
    configs = list(configs)
    if not configs:
        return {}
    keys = {group_key(c) for c in configs}
    if len(keys) != 1:
        raise ValueError(f"run_batched needs runs of one group ({', '.join(GROUP_KEYS)} equal); got {len(keys)}")
    for c in configs:
        why = batched_unsupported(c)
        if why:
            raise ValueError(f"{run_dir_for(c)}: not batched: {why}")
    first = configs[0]
    ds = load_dataset(first.dataset, first.data_dir)
    size = sum(p.numel() for p in build_model(first.model, ds.input_shape, ds.num_classes).parameters())
    per_batch = max(1, MAX_BATCH_FLOATS // (size * first.clients_per_round * 3))  # params, grads, momentum
    failures: dict[str, str] = {}
    with quiet_flower(False):  # the strategies log Flower's notices
        for start in range(0, len(configs), per_batch):
            failures.update(_run_batch(configs[start:start + per_batch], ds, on_done))
    return failures


def _run_batch(configs: list[RunConfig], ds, on_done) -> dict[str, str]:
    """Run ``configs`` (one architecture, one dataset) as one stacked computation: start them,
    train round after round, evaluate on the schedule, finish each (or record why it failed)."""
    first = configs[0]
    device = resolve_device(first.device)
    template = build_model(first.model, ds.input_shape, ds.num_classes).to(device)
    names = [n for n, _ in template.named_parameters()]
    if names != list(template.state_dict()):
        raise ValueError(f"model {first.model!r}: its state holds more than its parameters")
    x_train, y_train = ds.x_train.to(device), ds.y_train.to(device)
    x_test, y_test = ds.x_test.to(device), ds.y_test

    def forward(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return functional_call(template, params, (x,))

    batched_forward = vmap(forward)  # (B, …) parameters and (B, b, …) inputs → (B, b, C)
    evaluate_forward = vmap(forward, in_dims=(0, None))  # R global models on the same inputs
    runs = _start_runs(configs, ds, device)
    clock = time.perf_counter()
    _evaluate_round(runs, 0, 0.0, first, names, template, evaluate_forward, x_test, y_test)
    clock = time.perf_counter()
    for server_round in range(1, first.num_rounds + 1):
        live = [r for r in runs if r.failed is None]
        if not live:
            break
        try:
            _train_round(live, server_round, names, x_train, y_train, batched_forward, template)
        except Exception:  # noqa: BLE001 — a batch that cannot train fails its runs, never silently
            err = traceback.format_exc()
            for run in live:
                run.failed = err
            break
        now = time.perf_counter()
        _evaluate_round(runs, server_round, (now - clock) / len(live), first, names, template, evaluate_forward,
                        x_test, y_test)
        clock = time.perf_counter()
    return _finish_runs(runs, on_done)


def _start_runs(configs: list[RunConfig], ds, device: torch.device) -> list[_Run]:
    """One started run store, strategy, initial model and client partition per config."""
    runs: list[_Run] = []
    for cfg in configs:
        store = RunStore(run_dir_for(cfg), cfg)
        store.start()
        model = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=cfg.seed)
        strategy = strategy_from_config(cfg, node_sort_key=lambda n: n, node_label=lambda n: n)
        parts = client_partitions(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.partition, cfg.dirichlet_alpha,
                                  cfg.seed)
        attack = AttackSpec.from_config(cfg)
        runs.append(_Run(cfg, store, strategy, {n: p.detach().to(device).clone() for n, p in model.named_parameters()},
                         parts, [behaviour_for(attack, c) for c in range(cfg.num_clients)]))
    return runs


def _evaluate_round(runs: list[_Run], server_round: int, seconds: float, first: RunConfig, names: list[str],
                    template: torch.nn.Module, evaluate_forward, x_test: torch.Tensor, y_test: torch.Tensor) -> None:
    """Log one round of every live run: its replies, its evaluation when due (all global models in
    one forward pass), its timing; the final round also writes the reliability bins."""
    due = server_round in (0, first.num_rounds) or server_round % first.eval_every == 0
    live = [r for r in runs if r.failed is None]
    logits = None
    if due and live:
        stacked = {n: torch.stack([r.params[n] for r in live]) for n in names}
        template.eval()
        with torch.no_grad():
            chunks = [evaluate_forward(stacked, x_test[i:i + first.eval_batch_size]).float().cpu()
                      for i in range(0, len(x_test), first.eval_batch_size)]
        logits = torch.cat(chunks, dim=1)
    finite = [bool(torch.isfinite(logits[i]).all()) for i in range(len(live))] if logits is not None else []
    ok = [i for i, good in enumerate(finite) if good]
    scores = dict(zip(ok, calibration_metrics_batch(logits[ok], y_test, first.n_bins))) if ok else {}
    for i, run in enumerate(live):
        metrics: dict[str, float] = {}
        run_logits = None
        if logits is not None:
            if finite[i]:
                run_logits = logits[i]
                metrics.update(scores[i])
                metrics.update(estimator_metrics(run_logits.softmax(dim=-1), y_test,
                                                 calibration_estimators(run.cfg.calibration_metrics), run.cfg.n_bins))
            else:  # a diverged model is a result (e.g. extreme τ), not a crash
                log.warning("%s round %d: global model produced non-finite logits", run.store.run_id, server_round)
                nan_keys = (*METRIC_KEYS, *recorded_columns(calibration_estimators(run.cfg.calibration_metrics)))
                metrics.update({k: float("nan") for k in nan_keys})
        if server_round >= 1:
            _record_replies(run, server_round, metrics)
        run.store.log_round(server_round, metrics)
        run.store.log_timings(server_round, {"round_seconds": seconds})
        if server_round == first.num_rounds and run_logits is not None:
            bins = reliability_bins(run_logits, y_test, run.cfg.n_bins)
            run.store.write_table("reliability.csv", pd.DataFrame({k: v.numpy() for k, v in bins.items()}))
            if run.cfg.calibration_bootstrap:
                run.store.write_table(INTERVALS_FILE, pd.DataFrame(bootstrap_intervals(
                    run_logits, y_test, calibration_estimators(run.cfg.calibration_metrics), run.cfg.n_bins,
                    run.cfg.calibration_bootstrap, run.cfg.seed)))


def _finish_runs(runs: list[_Run], on_done) -> dict[str, str]:
    """Finish every run that aggregated something (model, DONE); the others record why they failed.
    Returns {run directory: why} of the failed ones."""
    failures: dict[str, str] = {}
    for run in runs:
        if run.failed is None and run.strategy.rounds_aggregated == 0 and run.cfg.num_rounds >= 1:
            run.failed = (f"run {run.store.dir.name}: no round aggregated anything ({len(run.rejections)} replies "
                          f"rejected, reasons in {REJECTIONS_FILE}); the model is untrained and the run is not marked DONE")
        if run.failed is None:
            run.store.save_model({n: p.cpu() for n, p in run.params.items()})
            run.store.finish()
        else:
            failures[str(run.store.dir)] = run.failed
            run.store.log_event(f"failed: {run.failed.strip().splitlines()[-1]}")
            run.store.release()
        if on_done is not None:
            on_done(run.cfg, run.failed)
    return failures


def _record_replies(run: _Run, server_round: int, metrics: dict[str, float]) -> None:
    """The round's reply accounting, rejections and audit rows: as the train task records them."""
    account = run.strategy.replies.get(server_round)
    metrics["replies_received"] = account.received if account else 0
    metrics["replies_accepted"] = len(account.accepted) if account else 0
    metrics["replies_rejected"] = len(account.rejections) if account else 0
    for node, reason in account.rejections if account else ():
        run.rejections.append({"round": server_round, "node_id": node, "partition_id": node, "reason": reason})
    if server_round == 1 or (account and account.rejections):
        run.store.write_table(REJECTIONS_FILE, pd.DataFrame(run.rejections, columns=REJECTION_COLUMNS))
    audit = run.strategy.audit_rows() if account and account.aggregated else []
    run.store.append_rows(AUDIT_FILE, [{"round": server_round, **row} for row in audit])


def _train_round(runs: list[_Run], server_round: int, names: list[str], x_train, y_train,
                 batched_forward, template) -> None:
    """Train every sampled client of every run in ``runs`` for one round as one batch, then
    aggregate each run's replies with its strategy's rule."""
    device = x_train.device
    clients: list[tuple[int, int]] = []  # (run index, partition id), each run's clients ascending
    schedule, temps, lrs, moms, wds = [], [], [], [], []
    for ri, run in enumerate(runs):
        cfg = run.cfg
        for cid in sorted(sampled_clients(server_round, seed=cfg.seed, num_clients=cfg.num_clients,
                                          clients_per_round=cfg.clients_per_round)):
            behaviour = run.behaviours[cid]
            tau, coupled = (behaviour.tau, behaviour.coupled) if behaviour.kind == "tsa" else (1.0, True)
            part = torch.from_numpy(run.parts[cid])
            steps = batch_schedule(len(part), cfg.local_steps, cfg.batch_size,
                                   round_generator(cfg.seed, server_round, cid))
            schedule.append(part[torch.stack(steps)])  # (E, B) indices into the training set
            clients.append((ri, cid))
            temps.append(tau)
            lrs.append(effective_lr(cfg.lr, tau, coupled))
            moms.append(cfg.momentum)
            wds.append(cfg.weight_decay)
    idx = torch.stack(schedule).to(device)  # (models, E, B)
    per_model = [ri for ri, _ in clients]
    rows_of = torch.tensor(per_model, device=device)
    params = {n: torch.stack([run.params[n] for run in runs])[rows_of].requires_grad_(True) for n in names}
    t = torch.tensor(temps, dtype=torch.float32, device=device)
    lr = torch.tensor(lrs, dtype=torch.float32, device=device)
    mom = torch.tensor(moms, dtype=torch.float32, device=device)
    wd = torch.tensor(wds, dtype=torch.float32, device=device)
    use_wd, use_mom = bool((wd != 0).any()), bool((mom != 0).any())
    velocity: dict[str, torch.Tensor] = {}
    template.train()
    for k in range(idx.shape[1]):
        xb, yb = x_train[idx[:, k]], y_train[idx[:, k]]
        logits = batched_forward(params, xb)  # (models, B, C)
        scaled = logits / t.view(-1, 1, 1)
        # CE(softmax(z/τ), y) averaged over each model's batch; the sum over models gives every
        # model its own gradient (the models share nothing)
        loss = F.cross_entropy(scaled.flatten(0, 1), yb.flatten(), reduction="none").view(len(clients), -1).mean(1)
        grads = torch.autograd.grad(loss.sum(), [params[n] for n in names])
        with torch.no_grad():  # torch.optim.SGD's update, one learning rate per model
            for n, g in zip(names, grads):
                p = params[n]
                shape = (-1,) + (1,) * (p.dim() - 1)
                if use_wd:
                    g = g + wd.view(shape) * p
                if use_mom:
                    v = velocity.get(n)
                    # the first step's buffer is the gradient; with momentum 0 it stays the gradient
                    v = g.clone() if v is None else v.mul_(mom.view(shape)).add_(g)
                    velocity[n] = g = v
                p.addcmul_(lr.view(shape), g, value=-1.0)  # p − η·g in one pass
    replies = {n: p.detach() for n, p in params.items()}
    # the first array holding NaN/Inf of every model (None when finite), all models at once
    finite = torch.stack([torch.isfinite(replies[n]).flatten(1).all(1) for n in names], dim=1).cpu()
    first_bad = [None if bool(row.all()) else names[int((~row).nonzero()[0])] for row in finite]
    for ri, run in enumerate(runs):
        rows = [i for i, (r, _) in enumerate(clients) if r == ri]
        cids = [clients[i][1] for i in rows]
        _aggregate(run, server_round, cids, {n: replies[n][rows] for n in names}, run.params, names,
                   [first_bad[i] for i in rows])


def _aggregate(run: _Run, server_round: int, cids: list[int], replies: dict[str, torch.Tensor],
               base: dict[str, torch.Tensor], names: list[str], first_bad: list[str | None] | None = None) -> None:
    """One run's aggregation: the strategies' reply checks, their rule, the float64 update.
    ``first_bad``: per reply, the first array holding NaN/Inf (None: finite), when known."""
    strategy = run.strategy
    account = RoundReplies(received=len(cids))
    strategy.replies[server_round] = account
    strategy.last_rejected, strategy.last_weights, strategy.last_audit = {}, {}, {}

    def reject(node: int, reason: str) -> None:
        account.rejections.append((node, reason))
        strategy.last_rejected[node] = reason
        log.warning("%s round %d: dropped reply of node %d (partition %d): %s", run.store.run_id, server_round,
                    node, node, reason)

    # Δ = reply − sent, every reply of the run at once (the strategies' float32 update)
    all_updates = torch.cat([(replies[n] - base[n]).flatten(1).float() for n in names], dim=1).cpu()
    overflow = ~torch.isfinite(all_updates).all(dim=1)
    updates, good = [], []
    for i, cid in enumerate(cids):
        if first_bad is not None:
            bad = first_bad[i]
        else:
            bad = next((n for n in names if not bool(torch.isfinite(replies[n][i]).all())), None)
        if bad is not None:
            reject(cid, f"array '{bad}' contains NaN or Inf")
            continue
        if bool(overflow[i]):
            reject(cid, "its update (reply − sent arrays) overflows float32")
            continue
        updates.append(all_updates[i])
        good.append(cid)
    account.accepted = list(good)
    if not good:
        log.warning("%s round %d: no valid reply; the global model is kept", run.store.run_id, server_round)
        return
    # the sizes as the rule weighs them (capped at their median unless it trusts claims), as the
    # Flower path does with the replies' num-examples: both engines aggregate the same model
    weights = strategy.round_sizes(torch.tensor([float(len(run.parts[c])) for c in good], dtype=torch.float64))
    strategy._round_weights = weights  # noqa: SLF001 — the base strategy sets it the same way
    try:
        delta, node_w = strategy.aggregate_updates(server_round, good, torch.stack(updates), weights.float())
    except (ValueError, ArithmeticError) as exc:  # a rule refusing its input must not end the run
        log.warning("%s round %d: aggregation failed (%s); the global model is kept", run.store.run_id,
                    server_round, exc)
        return
    finally:
        strategy._round_weights = None  # noqa: SLF001
    if not torch.isfinite(delta).all():
        log.warning("%s round %d: aggregate is not finite; the global model is kept", run.store.run_id, server_round)
        return
    node_w = node_w.double()
    total = node_w.sum()
    node_w = node_w / total if total > 0 else node_w
    strategy.last_weights = {n: float(w) for n, w in zip(good, node_w)}
    cpu_base = {n: base[n].cpu() for n in names}
    new = agg.add_flat_update(cpu_base, names, delta)
    if any(not bool(torch.isfinite(new[n]).all()) for n in names):
        log.warning("%s round %d: new model is not finite in its dtype; the global model is kept",
                    run.store.run_id, server_round)
        return
    account.aggregated = True
    device = next(iter(run.params.values())).device
    run.params = {n: new[n].to(device) for n in names}


def simulate_batched(cfg: RunConfig) -> None:
    """``fedcal run engine=batched`` of one config (an unsupported one raises, naming why)."""
    why = batched_unsupported(cfg)
    if why:
        raise RunFailed(f"engine=batched cannot run this config: {why}; use engine=inprocess")
    failures = run_batched([cfg])
    if failures:
        raise RunFailed(next(iter(failures.values())))
