"""The train task, batched: many ``train`` runs of one architecture trained as one computation
(``engine=batched``; :mod:`fedcal.app.batched` is the engines' entry to it).

A sweep of small models (the paper's 45-run MNIST–MLP table, the Byzantine strategy × attack table)
is thousands of tiny matrix products that leave the cores idle between Python calls. Every client
of a round — and every run of a sweep that shares the architecture, the data set and the round
protocol — takes the same number of SGD steps on batches of the same shape, so R runs × M clients
train as ONE batched model: the parameters of all R·M client models are stacked (leading axis), the
model is applied with ``torch.func.vmap`` over ``functional_call``, per-model temperature τ and
learning rate η are tensors, and one backward pass gives every model its own gradient (the loss is a
sum of per-model losses). Central evaluation runs the R global models the same way.

Only the clients' training is the batched task's own; the rest is the train task's code:
the same seeded client sample per round (:func:`fedcal.reference.sampled_clients`), the same
partitions, the same batch schedule of ``round_generator(seed, round, client)``
(:func:`fedcal.local_training.batch_schedule`), each client's behaviour (its τ and coupling from its
kind's ``loss_temperature``), SGD with the run's momentum and weight decay; the model-poisoning
attackers' replies crafted by the run's colluders from the round's honest updates
(:class:`fedcal.tasks.poisoning.Colluders`, as the Flower path's Grid wrapper does, ``poisoning.csv``
included); the strategy's reply accounting, rejection logging and rule with its pre-aggregation steps
(:meth:`~fedcal.strategies.base.UpdateAggregationStrategy.aggregate_accepted`); the central
evaluation (:func:`fedcal.tasks.train.central_metrics`), the reply accounting and rejections
(:func:`fedcal.tasks.train.record_replies`) and the same run store: metrics.csv, timings.csv,
rejections.csv, aggregation.csv, reliability.csv, model.pt, DONE (each run's lock held while the batch
writes it). Node ids are the partition ids. Batched runs are not checkpointed: an interrupted batched
run starts over from round 0 (its runs move in lockstep, so resuming would need every run of a batch
at one checkpointed round). Float results agree within rounding, not bit for bit: a batched matrix
product sums in another order than R·M separate ones (the test's tolerance and its measured drift are
in docs/performance.md). ``round_seconds`` is the batched round's wall time divided by the number of
runs trained together (each run's amortised share).

Which configs it covers follows from what their components declare (:func:`batched_unsupported`):
the task, the rule, the attack and each pre-aggregation step must be ``batchable`` (a rule that
trains or evaluates on the server is not, nor an attack that changes a client's data, labels or
trained model), and the round must be the stacked step's (:data:`UNBATCHED_SETTINGS` at their
defaults, a model without buffers, every client holding a batch). What it does not cover is run by the
in-process engine instead, so ``engine=batched`` never changes what a sweep computes.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from fedcal.aggregate import add_flat_update
from fedcal.attacks import AttackSpec, behaviour_for, behaviour_kind
from fedcal.attacks.behaviour import round_generator
from fedcal.catalogue import needing
from fedcal.config import RunConfig, setting_of
from fedcal.data import client_partitions, load_dataset
from fedcal.metrics import calibration_metrics_batch
from fedcal.models import build_model
from fedcal.reference import sampled_clients
from fedcal.results import POISONING_FILE, REJECTIONS_FILE, RunStore, run_dir_for
from fedcal.strategies import strategy_from_config
from fedcal.tasks import all_tasks
from fedcal.tasks.poisoning import Colluders, colluders_for
from fedcal.tasks.train import central_metrics, record_replies
from fedcal.local_training import batch_schedule, effective_lr, momentum_reply, resolve_device

log = logging.getLogger("fedcal.batched")

#: The run-config keys that must be equal for runs to train as one batch (the round protocol,
#: the data and the architecture); the others (seed, τ, coupling, attacker ratio, β, momentum,
#: weight decay, strategy and its parameters, attack, partition) may differ from run to run.
GROUP_KEYS = ("dataset", "data_dir", "model", "num_clients", "clients_per_round", "local_steps", "batch_size",
              "num_rounds", "eval_every", "eval_batch_size", "n_bins", "device")
#: Upper bound on the stacked client parameters of one batch (floats); larger groups are split.
MAX_BATCH_FLOATS = 60_000_000
#: The settings whose values other than their default the stacked step does not compute, each with why.
UNBATCHED_SETTINGS = {
    "local_epochs": "clients take different numbers of steps",  # no common (E, B) batch shape to stack
    "optimizer": "the stacked step is SGD's",
    "augment": "the stacked step draws no augmentation",
    "fed_eval_clients": "federated evaluation is a Flower evaluate round",
    "tsa_step_frac": "the adaptive TSA attacker",
    "tsa_blend": "the adaptive TSA attacker",
    "tsa_duty": "the adaptive TSA attacker",
}


def batched_unsupported(cfg: RunConfig) -> str | None:
    """Why ``cfg`` cannot run in the batched train task, or None when it can: a component it chooses
    that does not declare itself batchable, a setting of :data:`UNBATCHED_SETTINGS` that the run reads
    off its default (``tsa-*`` only with ``attack = tsa``),
    a model with buffers (BatchNorm statistics), a client holding fewer samples than a batch."""
    for kind, name in chosen_components(cfg):
        if not batchable(kind, name):
            return f"{kind} {name!r} is not batchable (batchable {kind}s: {', '.join(batchable_names(kind)) or 'none'})"
    for key, why in UNBATCHED_SETTINGS.items():
        if setting_of(key).read_by(cfg) and getattr(cfg, key) != setting_of(key).default:  # a key the run reads
            return f"{key.replace('_', '-')} ({why})"
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    template = build_model(cfg.model, ds.input_shape, ds.num_classes)
    if list(template.buffers()):
        return f"model {cfg.model!r} has buffers (BatchNorm statistics)"
    sizes = [len(p) for p in client_partitions(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.partition,
                                               cfg.dirichlet_alpha, cfg.seed)]
    if min(sizes) < cfg.batch_size:
        return f"a client holds {min(sizes)} samples, fewer than the batch size {cfg.batch_size}"
    return None


def chosen_components(cfg: RunConfig) -> list[tuple[str, str]]:
    """(kind, name) of every component ``cfg`` chooses that the batched task runs."""
    return [("task", cfg.task), ("rule", cfg.strategy), ("attack", cfg.attack),
            *(("pre-aggregation", step) for step in cfg.pre_aggregations)]


def batchable(kind: str, name: str) -> bool:
    """Whether the component ``name`` of ``kind`` declares itself batchable."""
    return name in batchable_names(kind)


def batchable_names(kind: str) -> tuple[str, ...]:
    """The components of ``kind`` that declare themselves ``batchable`` in the catalogue
    (:func:`fedcal.catalogue.needing`); a task declares it on its :class:`~fedcal.tasks.registry.Task`."""
    if kind == "task":
        return tuple(t.name for t in all_tasks() if t.batched)
    return needing(kind, "batchable")


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
    colluders: Colluders | None = None  # a model-poisoning attack's, who craft the attackers' replies
    momentum: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)  # client-momentum buffers
    rejections: list[dict] = field(default_factory=list)
    failed: str | None = None

    @property
    def node_to_client(self) -> dict[int, int]:
        """The batched task's node ids are the partition ids."""
        return {c: c for c in range(self.cfg.num_clients)}


def run_batched(configs: Sequence[RunConfig], on_done: Callable[[RunConfig, str | None], None] | None = None
                ) -> dict[str, str]:
    """Run the ``configs`` (all of one :func:`group_key`, all supported) as one batched
    computation, split into batches of at most MAX_BATCH_FLOATS stacked parameters; returns
    {run dir: error} of the runs that failed. ``on_done(cfg, error)`` is called per run. (The
    engines' entry, :func:`fedcal.app.batched.run_batched`, quiets Flower's log around it.)"""
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
    """One started run store, strategy, initial model, client partition and colluders per config."""
    runs: list[_Run] = []
    for cfg in configs:
        store = RunStore(run_dir_for(cfg), cfg)
        store.start()
        model = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=cfg.seed)
        strategy = strategy_from_config(cfg, node_sort_key=lambda n: n, node_label=lambda n: n)
        parts = client_partitions(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.partition, cfg.dirichlet_alpha,
                                  cfg.seed)
        attack = AttackSpec.from_config(cfg)
        colluders = colluders_for(cfg, lambda rows, store=store: store.append_rows(POISONING_FILE, rows))
        runs.append(_Run(cfg, store, strategy, {n: p.detach().to(device).clone() for n, p in model.named_parameters()},
                         parts, [behaviour_for(attack, c) for c in range(cfg.num_clients)], colluders))
    return runs


def _evaluate_round(runs: list[_Run], server_round: int, seconds: float, first: RunConfig, names: list[str],
                    template: torch.nn.Module, evaluate_forward, x_test: torch.Tensor, y_test: torch.Tensor) -> None:
    """Log one round of every live run: its replies, its evaluation when due (all global models in
    one forward pass, scored at once; the rest as the train task evaluates), its timing."""
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
        if logits is not None:
            metrics = central_metrics(run.cfg, run.store, server_round, logits[i], y_test, scores.get(i))[0]
        if server_round >= 1:
            record_replies(server_round, metrics, strategy=run.strategy, store=run.store,
                           node_to_client=run.node_to_client, rejections=run.rejections)
        run.store.log_round(server_round, metrics)
        run.store.log_timings(server_round, {"round_seconds": seconds})


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


def _train_round(runs: list[_Run], server_round: int, names: list[str], x_train, y_train,
                 batched_forward, template) -> None:
    """Train every sampled client of every run in ``runs`` for one round as one batch, then let each
    run's colluders craft its attackers' replies and aggregate its replies with its strategy's rule."""
    clients, idx, temps, lrs, moms, wds = _round_clients(runs, server_round, x_train.device)
    rows_of = torch.tensor([ri for ri, _ in clients], device=x_train.device)
    params = {n: torch.stack([run.params[n] for run in runs])[rows_of].requires_grad_(True) for n in names}
    use_wd, use_mom = bool((wds != 0).any()), bool((moms != 0).any())
    velocity: dict[str, torch.Tensor] = {}
    template.train()
    for k in range(idx.shape[1]):
        xb, yb = x_train[idx[:, k]], y_train[idx[:, k]]
        logits = batched_forward(params, xb)  # (models, B, C)
        scaled = logits / temps.view(-1, 1, 1)
        # CE(softmax(z/τ), y) averaged over each model's batch; the sum over models gives every
        # model its own gradient (the models share nothing)
        loss = F.cross_entropy(scaled.flatten(0, 1), yb.flatten(), reduction="none").view(len(clients), -1).mean(1)
        grads = torch.autograd.grad(loss.sum(), [params[n] for n in names])
        with torch.no_grad():  # torch.optim.SGD's update, one learning rate per model
            for n, g in zip(names, grads):
                p = params[n]
                shape = (-1,) + (1,) * (p.dim() - 1)
                if use_wd:
                    g = g + wds.view(shape) * p
                if use_mom:
                    v = velocity.get(n)
                    # the first step's buffer is the gradient; with momentum 0 it stays the gradient
                    v = g.clone() if v is None else v.mul_(moms.view(shape)).add_(g)
                    velocity[n] = g = v
                p.addcmul_(lrs.view(shape), g, value=-1.0)  # p − η·g in one pass
    replies = {n: p.detach() for n, p in params.items()}
    _client_momentum(runs, clients, replies, names)
    for ri, run in enumerate(runs):
        rows = [i for i, (r, _) in enumerate(clients) if r == ri]
        cids = [clients[i][1] for i in rows]
        run_replies = {n: replies[n][rows] for n in names}
        if run.colluders is not None:
            _poison(run, server_round, cids, run_replies, names)
        _aggregate(run, server_round, cids, run_replies, run.params, names)


def _client_momentum(runs: list[_Run], clients: list[tuple[int, int]], replies: dict[str, torch.Tensor],
                     names: list[str]) -> None:
    """``client-momentum``: each benign client's stacked reply replaced in place by the
    momentum-smoothed one, its buffer kept on its run across rounds — the Flower path's client step
    (:func:`fedcal.tasks.train._momentum_reply`) through the same
    :func:`fedcal.local_training.momentum_reply`, before the colluders see the honest updates."""
    for i, (ri, cid) in enumerate(clients):
        run = runs[ri]
        beta = run.cfg.client_momentum
        if not beta or run.behaviours[cid].malicious:
            continue
        reply, run.momentum[cid] = momentum_reply({n: run.params[n] for n in names},
                                                  {n: replies[n][i] for n in names}, run.momentum.get(cid), beta)
        for n in names:
            replies[n][i] = reply[n]


def _round_clients(runs: list[_Run], server_round: int, device: torch.device):
    """The round's stacked clients: (run index, partition id) of each (every run's sampled clients,
    ascending), their (models, E, B) batch indices into the training set, and their τ, η, momentum
    and weight decay as (models,) tensors."""
    clients: list[tuple[int, int]] = []
    schedule, temps, lrs, moms, wds = [], [], [], [], []
    for ri, run in enumerate(runs):
        cfg = run.cfg
        for cid in sorted(sampled_clients(server_round, seed=cfg.seed, num_clients=cfg.num_clients,
                                          clients_per_round=cfg.clients_per_round)):
            behaviour = run.behaviours[cid]
            tau, coupled = behaviour_kind(behaviour.kind).loss_temperature(behaviour)
            part = torch.from_numpy(run.parts[cid])
            steps = batch_schedule(len(part), cfg.local_steps, cfg.batch_size,
                                   round_generator(cfg.seed, server_round, cid))
            schedule.append(part[torch.stack(steps)])  # (E, B) indices into the training set
            clients.append((ri, cid))
            temps.append(tau)
            lrs.append(effective_lr(cfg.lr, tau, coupled))
            moms.append(cfg.momentum)
            wds.append(cfg.weight_decay)
    as_tensor = lambda values: torch.tensor(values, dtype=torch.float32, device=device)  # noqa: E731
    return clients, torch.stack(schedule).to(device), *map(as_tensor, (temps, lrs, moms, wds))


def _poison(run: _Run, server_round: int, cids: list[int], replies: dict[str, torch.Tensor], names: list[str]) -> None:
    """The run's colluders' crafted updates in place of its attackers' trained replies, from the
    round's honest updates (float64, finite ones only), as the Flower path's Grid wrapper does
    (:class:`fedcal.tasks.poisoning.PoisoningGrid`)."""
    colluders = run.colluders
    base = {n: run.params[n].cpu() for n in names}
    honest, bad = [], []
    for i, cid in enumerate(cids):
        if cid in colluders.attackers:
            bad.append((i, cid))
            continue
        update = torch.cat([(replies[n][i].cpu().double() - base[n].double()).reshape(-1) for n in names])
        if bool(torch.isfinite(update).all()):
            honest.append((cid, update))
    # the attackers in the order their replies reach the colluders in-process (the round's sample
    # order), so each gets the row it gets there (only Fang's trimmed-mean attack draws one per attacker)
    cfg = run.cfg
    sample = sampled_clients(server_round, seed=cfg.seed, num_clients=cfg.num_clients,
                             clients_per_round=cfg.clients_per_round)
    bad.sort(key=lambda ic: sample.index(ic[1]))
    rows = colluders.craft(server_round, honest, [(cid, cid) for _, cid in bad])
    if rows is None:
        return
    for (i, _), row in zip(bad, rows):
        new = add_flat_update(base, names, row)
        for n in names:
            replies[n][i] = new[n].to(replies[n].device)


def _aggregate(run: _Run, server_round: int, cids: list[int], replies: dict[str, torch.Tensor],
               base: dict[str, torch.Tensor], names: list[str]) -> None:
    """One run's aggregation of its round's stacked ``replies`` (the clients ``cids``, ascending) on the
    sent ``base``: a reply holding NaN/Inf, or whose update overflows float32, is dropped with the
    strategy's reason (the Flower path's reply checks say the same); the rest go through the
    strategy's rule (:meth:`~fedcal.strategies.base.UpdateAggregationStrategy.aggregate_accepted`)."""
    strategy = run.strategy
    account = strategy.begin_round(server_round, len(cids))
    finite = torch.stack([torch.isfinite(replies[n]).flatten(1).all(1) for n in names], dim=1).cpu()
    # Δ = reply − sent, every reply of the run at once (the strategies' float32 update)
    all_updates = torch.cat([(replies[n] - base[n]).flatten(1).float() for n in names], dim=1).cpu()
    overflow = ~torch.isfinite(all_updates).all(dim=1)
    good = []
    for i, cid in enumerate(cids):
        if not bool(finite[i].all()):
            bad = names[int((~finite[i]).nonzero()[0])]
            strategy.drop_reply(server_round, account, cid, f"array '{bad}' contains NaN or Inf")
        elif bool(overflow[i]):
            strategy.drop_reply(server_round, account, cid, "its update (reply − sent arrays) overflows float32")
        else:  # the claimed size is the client's data size, as its train reply's num-examples says
            good.append((cid, None, float(len(run.parts[cid])), all_updates[i]))
    account.accepted = [g[0] for g in good]
    if not good:
        log.warning("%s round %d: no valid reply; the global model is kept", run.store.run_id, server_round)
        return
    new = strategy.aggregate_accepted(server_round, good, {n: base[n].cpu() for n in names}, names, names)
    if new is None:
        return
    account.aggregated = True
    device = next(iter(run.params.values())).device
    run.params = {n: new[n].to(device) for n in names}
