"""ServerApp logic of robust federated inference (SPEC §7).

(a) every node trains its own classifier on its own partition (``train.local``); (b) the server
queries all nodes on its held-out aggregator-training split (``query.probits``) and trains a
DeepSet (adversarially, against f corrupted positions); (c) test queries fan out to every node and
the replies are aggregated by each aggregator. A reply that is not a valid probit matrix, or an
error, counts as that client being absent for that batch; every answer records how many clients
it was built from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from logging import INFO, WARNING

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from fedcal.config import RunConfig
from fedcal.data import load_dataset
from fedcal.inference import AGGREGATORS, DeepSet, accuracy, as_trimmed, train_deepset
from fedcal.inference.federated import assemble, server_split
from fedcal.simulations.tsa import discover_clients


@dataclass
class InferenceOptions:
    f: int = 1  # adversarial clients tolerated (trimmed means, adversarial training)
    server_frac: float = 0.1  # training data kept by the server for the aggregator
    local_epochs: int = 1
    query_batch: int = 500
    agg_hidden: int = 224
    agg_epochs: int = 200
    agg_lr: float = 1e-3
    adversarial: bool = True
    timeout: float = 600.0


@dataclass
class InferenceResult:
    accuracy: dict[str, float] = field(default_factory=dict)
    clients_per_answer: list[int] = field(default_factory=list)  # one entry per test batch
    dropped: dict[int, list[str]] = field(default_factory=dict)  # client id → reasons


def _config(cfg: RunConfig, opts: InferenceOptions) -> ConfigRecord:
    return ConfigRecord({**cfg.to_flower(), "server-frac": opts.server_frac, "local-epochs": opts.local_epochs})


def query_all(grid: Grid, node_to_client: dict[int, int], x: torch.Tensor, cfg: RunConfig, opts: InferenceOptions,
              num_classes: int, result: InferenceResult) -> tuple[torch.Tensor, list[int]]:
    """Fan one batch out to every node; (B, n', C) valid probits and the client ids used."""
    content = RecordDict({"queries": ArrayRecord({"x": x}), "config": _config(cfg, opts)})
    msgs = [Message(content=content, message_type="query.probits", dst_node_id=n) for n in node_to_client]
    replies: dict[int, torch.Tensor | None] = {cid: None for cid in node_to_client.values()}
    for reply in grid.send_and_receive(msgs, timeout=opts.timeout):
        cid = node_to_client.get(reply.metadata.src_node_id)
        if cid is None or reply.has_error():
            continue
        try:
            replies[cid] = torch.from_numpy(reply.content["probits"]["p"].numpy().copy())
        except Exception:  # noqa: BLE001 — a malformed reply is an absent client
            replies[cid] = torch.full((1,), float("nan"))
    probits, used, dropped = assemble(replies, len(x), num_classes)
    for cid, why in dropped.items():
        log(WARNING, "query: client %d left out of this answer: %s", cid, why)
        result.dropped.setdefault(cid, []).append(why)
    return probits, used


def run_inference(grid: Grid, cfg: RunConfig, opts: InferenceOptions | None = None) -> InferenceResult:
    opts = opts or InferenceOptions()
    result = InferenceResult()
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    node_to_client = discover_clients(grid, cfg.num_clients)
    if not node_to_client:
        raise RuntimeError("no node reported its partition id; is the responder ClientApp running?")
    train_msgs = [Message(content=RecordDict({"config": _config(cfg, opts)}), message_type="train.local",
                          dst_node_id=n) for n in node_to_client]
    failed = [r.metadata.src_node_id for r in grid.send_and_receive(train_msgs, timeout=opts.timeout) if r.has_error()]
    if failed:
        log(WARNING, "%d nodes failed to train their local model", len(failed))

    srv_idx, _ = server_split(ds.y_train.numpy(), opts.server_frac, cfg.seed)
    xs, ys = ds.x_train[torch.from_numpy(srv_idx)], ds.y_train[torch.from_numpy(srv_idx)]
    batches = []
    for i in range(0, len(ys), opts.query_batch):
        p, used = query_all(grid, node_to_client, xs[i:i + opts.query_batch], cfg, opts, ds.num_classes, result)
        batches.append((p, used, ys[i:i + opts.query_batch]))
    # DeepSet pools over however many clients answer, so it trains on the clients that answered
    # validly on the whole split (a client absent there is simply not part of its training sets).
    common = sorted(set.intersection(*(set(b[1]) for b in batches)))
    if len(common) <= 2 * opts.f:
        raise RuntimeError(f"only {len(common)} clients answered the aggregator-training split validly; "
                           f"need more than 2f = {2 * opts.f}")
    train_p = torch.cat([b[0][:, [b[1].index(c) for c in common]] for b in batches])
    train_y = torch.cat([b[2] for b in batches])
    deepset = DeepSet(ds.num_classes, hidden=opts.agg_hidden, seed=cfg.seed)
    train_deepset(deepset, train_p, train_y, epochs=opts.agg_epochs, lr=opts.agg_lr, adversarial=opts.adversarial,
                  f=opts.f, generator=torch.Generator().manual_seed(cfg.seed))
    aggregators = {"mean": AGGREGATORS["mean"](), "median": AGGREGATORS["median"](),
                   "geometric_median": AGGREGATORS["geometric_median"](),
                   "trimmed_mean": AGGREGATORS["trimmed_mean"](opts.f),
                   "deepset": deepset, "deepset_tm": as_trimmed(deepset, opts.f)}
    correct = {k: 0.0 for k in aggregators}
    total = 0
    for i in range(0, len(ds.y_test), opts.query_batch):
        x, y = ds.x_test[i:i + opts.query_batch], ds.y_test[i:i + opts.query_batch]
        p, used = query_all(grid, node_to_client, x, cfg, opts, ds.num_classes, result)
        result.clients_per_answer.append(len(used))
        log(INFO, "test batch %d: answers built from %d of %d clients", i // opts.query_batch, len(used),
            len(node_to_client))
        if len(used) <= 2 * opts.f:
            log(WARNING, "test batch %d: too few valid clients (%d) for f = %d; counted as wrong", i, len(used), opts.f)
        else:
            with torch.no_grad():
                for name, agg in aggregators.items():
                    correct[name] += accuracy(agg, p, y) * len(y)
        total += len(y)
    result.accuracy = {k: v / total for k, v in correct.items()}
    return result


def server_app_for(cfg: RunConfig, opts: InferenceOptions, sink: list) -> ServerApp:
    """A ServerApp running :func:`run_inference`; the result is appended to ``sink``."""
    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context) -> None:
        sink.append(run_inference(grid, cfg, opts))

    return app
