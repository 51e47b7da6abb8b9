"""Task ``inference``: robust federated inference (SPEC §7).

(a) every node trains its own classifier on its own partition (``train.local``); (b) the server
queries all nodes on its held-out aggregator-training split (``query.probits``) and trains a
DeepSet (adversarially, against f corrupted positions); (c) test queries fan out to every node and
the replies are aggregated by each aggregator. A reply that is not a valid probit matrix, or an
error, counts as that client being absent for that batch; every answer records how many clients
it was built from.

Client side: ``train.local`` (each client trains its own classifier from scratch on its own
Dirichlet partition of what the server did not keep) and ``query.probits`` (answer a batch of
queries with its probability vectors). Report: :func:`fedcal.reports.inference_report`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import shutil
from dataclasses import dataclass, field
from logging import INFO, WARNING
from pathlib import Path

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from fedcal.tasks.nodes import (check_partitions, client_id, config_record, discover_clients, message_config,
                              send_counted, shared_model)
from fedcal.config import RunConfig
from fedcal.data import load_dataset
from fedcal.inference.deepset import write_trained
from fedcal.inference.collect import CollectionSpec, default_collection_path, stored_collection
from fedcal.inference.evaluate import ProbitData, attack_accuracy, build_aggregators
from fedcal.inference.federated import (InferenceClientSpec, assemble, assemble_logits, server_split,
                                        train_client)
from fedcal.progress import phase
from fedcal.results import RunStore, aggregator_hash, collection_hash, load_config, run_dir_for
from fedcal.tasks.registry import ProgressFn
from fedcal.local_training import resolve_device

if TYPE_CHECKING:
    import pandas as pd

PROBITS_FILE = "probits.pt"
ANSWERS_FILE = "answers.csv"  # how many clients each test answer was built from
AGGREGATORS_FILE = "aggregators.pt"  # the learned aggregators' state dicts (fedcal.inference.evaluate.learned_state)


@dataclass
class InferenceResult:
    """What one inference run produced (also on disk in its run directory)."""

    run_dir: Path
    accuracy: pd.DataFrame  # attack_accuracy rows at f_adv = inf-f
    clients_per_answer: list[int] = field(default_factory=list)  # valid clients per test query message
    dropped: dict[int, list[str]] = field(default_factory=dict)  # client id → reasons it was left out


def query_all(grid: Grid, node_to_client: dict[int, int], x: torch.Tensor, cfg: RunConfig, num_classes: int,
              dropped: dict[int, list[str]], logits: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, list[int]]:
    """Fan one batch of queries out to every node; returns (B, n', C) valid probits and the
    client ids they came from. A client that errs, does not answer within ``inf-timeout`` or
    answers with something that is not a probit matrix (a finite logit matrix under
    ``inf-client-output=logits``) is logged and left out. With logits, the server takes their
    softmax itself and, when ``logits`` is a list, appends the (B, n', C) logits to it."""
    content = RecordDict({"queries": ArrayRecord({"x": x}), "config": config_record(cfg)})
    msgs = [Message(content=content, message_type="query.probits", dst_node_id=n) for n in node_to_client]
    replies: dict[int, torch.Tensor | None] = {cid: None for cid in node_to_client.values()}
    record, key = ("logits", "z") if cfg.inf_client_output == "logits" else ("probits", "p")
    for reply in grid.send_and_receive(msgs, timeout=cfg.inf_timeout):
        cid = node_to_client.get(reply.metadata.src_node_id)
        if cid is None or reply.has_error():
            continue
        try:
            replies[cid] = torch.from_numpy(reply.content[record][key].numpy().copy())
        except Exception:  # noqa: BLE001 — a malformed reply is an absent client
            replies[cid] = torch.full((1,), float("nan"))
    if cfg.inf_client_output == "logits":
        probits, z, used, why = assemble_logits(replies, len(x), num_classes)
        if logits is not None:
            logits.append(z)
    else:
        probits, used, why = assemble(replies, len(x), num_classes)
    for cid, reason in why.items():
        log(WARNING, "query: client %d left out of this answer: %s", cid, reason)
        dropped.setdefault(cid, []).append(reason)
    return probits, used


def collect_probits(grid: Grid, cfg: RunConfig, clients_per_answer: list[int],
                    dropped: dict[int, list[str]]) -> ProbitData:
    """Phases (a) of SPEC §7 over Flower: every client trains its own classifier, then the
    server queries all of them on its held-out split and on the test set."""
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    node_to_client = discover_clients(grid, cfg.num_clients)
    if not node_to_client:
        raise RuntimeError("no node reported its partition id; is fedcal.app.client:app the ClientApp?")
    train_msgs = [Message(content=RecordDict({"config": config_record(cfg)}), message_type="train.local", dst_node_id=n)
                  for n in node_to_client]
    failed = [r for r in send_counted(grid, train_msgs, "client training", "clients", timeout=cfg.inf_timeout)
              if r.has_error()]
    for r in failed:
        log(WARNING, "node %s (partition %s) failed to train its local model; it will not answer queries: %s",
            r.metadata.src_node_id, node_to_client.get(r.metadata.src_node_id, "unknown"), r.error.reason)
    clients = sorted(node_to_client.values())
    col = {c: j for j, c in enumerate(clients)}

    with_logits = cfg.inf_client_output == "logits"

    def ask(x: torch.Tensor, what: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        probits = torch.zeros(len(x), len(clients), ds.num_classes)
        logits = torch.zeros(len(x), len(clients), ds.num_classes) if with_logits else None
        valid = torch.zeros(len(x), len(clients), dtype=torch.bool)
        with phase(f"queries ({what} split)", -(-len(x) // cfg.inf_query_batch), "query batches") as bar:
            for i in range(0, len(x), cfg.inf_query_batch):
                z: list[torch.Tensor] = []
                p, used = query_all(grid, node_to_client, x[i:i + cfg.inf_query_batch], cfg, ds.num_classes, dropped,
                                    z)
                cols = [col[c] for c in used]
                probits[i:i + len(p), cols] = p
                if logits is not None:
                    logits[i:i + len(p), cols] = z[0]
                valid[i:i + len(p), cols] = True
                if what == "test":
                    clients_per_answer.append(len(used))
                    log(INFO, "test queries %d-%d: answers built from %d of %d clients", i, i + len(p) - 1, len(used),
                        len(clients))
                bar.update(1)
        return probits, valid, logits

    srv_idx = torch.from_numpy(server_split(ds.y_train.numpy(), cfg.inf_server_frac, cfg.seed)[0])
    sp, sv, sz = ask(ds.x_train[srv_idx], "server")
    # The DeepSet trains on fixed-size sets: the clients that answered the whole split validly.
    keep = sv.all(dim=0)
    if int(keep.sum()) <= 2 * cfg.inf_f:
        raise RuntimeError(f"only {int(keep.sum())} clients answered the aggregator-training split validly; "
                           f"need more than 2 * inf-f = {2 * cfg.inf_f}")
    n_test = cfg.inf_test_queries or len(ds.y_test)
    tp, tv, tz = ask(ds.x_test[:n_test], "test")
    return ProbitData(server_probits=sp[:, keep], server_labels=ds.y_train[srv_idx], test_probits=tp, test_valid=tv,
                      test_labels=ds.y_test[:n_test], clients=clients,
                      server_columns=torch.nonzero(keep).flatten().tolist(),
                      server_logits=None if sz is None else sz[:, keep], test_logits=tz)


def _subset(data: ProbitData, k: int) -> ProbitData:
    if not k or k >= len(data.test_labels):
        return data
    return ProbitData(data.server_probits, data.server_labels, data.test_probits[:k], data.test_valid[:k],
                      data.test_labels[:k], data.clients, data.server_columns, data.server_logits,
                      None if data.test_logits is None else data.test_logits[:k])


def evaluate_run(data: ProbitData, cfg: RunConfig, store: RunStore) -> pd.DataFrame:
    """Phases (b)–(c): build the aggregators from the server split, then write the accuracy
    of every aggregator under every attack (``accuracy.csv``) and the curves against the
    number of adversaries (``curve_f.csv``) and the logit-flip amplification (``curve_amp.csv``).

    The learned aggregators are saved (``aggregators.pt``); a run in the same output directory with
    the same collection and training settings of a component (:func:`fedcal.results.aggregator_hash`:
    the DeepSet, the fusions) loads it instead of training it again: an attack or evaluation change
    costs its evaluation only."""
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    state = _earlier_aggregators(cfg, store.dir)
    aggs, history, learned = build_aggregators(
        data.server_probits, data.server_labels, cfg.inf_f, hidden=cfg.agg_hidden, epochs=cfg.agg_epochs,
        adv_epochs=cfg.agg_adv_epochs, lr=cfg.agg_lr, attack_steps=cfg.agg_attack_steps, restarts=cfg.agg_restarts,
        seed=cfg.seed, latent=cfg.agg_latent, copur_steps=cfg.copur_steps, server_columns=data.server_columns,
        server_logits=data.server_logits, adv_attack=cfg.agg_adv_attack, adv_subsets=cfg.agg_adv_subsets,
        names=cfg.inference_aggregators or None, state=state)
    # what was loaded matches this run's hashes, so it is this run's too
    _save_state({**state, **learned}, store.dir / AGGREGATORS_FILE)
    write_trained(aggs, history, store)
    cell = {"seed": cfg.seed, "n": cfg.num_clients, "f": cfg.inf_f}
    kw = dict(pgd_steps=cfg.inf_pgd_steps, seed=cfg.seed, pgd_start=cfg.inf_pgd_start, pgd_loss=cfg.inf_pgd_loss,
              pgd_grad=cfg.inf_pgd_grad)
    table = attack_accuracy(aggs, _subset(data, cfg.inf_eval_queries), cfg.inf_f, cfg.inference_attacks,
                            amplification=cfg.inf_amplification, progress="attacks", **kw)
    store.write_table("accuracy.csv", table.assign(**cell))
    curve_data = _subset(data, cfg.inf_curve_queries)
    if cfg.inf_f_curve:
        n_valid = int(data.test_valid.sum(dim=1).min())
        rows = [attack_accuracy(aggs, curve_data, fa, cfg.inference_attacks if fa else ("none",),
                                amplification=cfg.inf_amplification, progress=f"accuracy-vs-f curve, f_adv = {fa}",
                                **kw) for fa in range(0, (n_valid - 1) // 2 + 1)]
        store.write_table("curve_f.csv", pd.concat(rows).assign(**cell))
    if cfg.amplification_curve:
        rows = [attack_accuracy(aggs, curve_data, cfg.inf_f, ("logit_flip",), amplification=a,
                                progress=f"amplification curve, a = {a:g}", **kw)
                for a in cfg.amplification_curve]
        store.write_table("curve_amp.csv", pd.concat(rows).assign(**cell))
    return table


def run_inference(grid: Grid, cfg: RunConfig, progress: ProgressFn | None = None) -> InferenceResult:
    """The whole inference task on ``grid``; results land in the run directory.

    The clients' probits are this task's checkpoint: saved (``probits.pt``, after ``answers.csv``,
    so a ``probits.pt`` means a complete collection) as soon as they are collected, so a run
    interrupted later resumes from them without retraining or re-querying the clients — ``run.log``
    says so — and a run in the same output directory that differs only in aggregator or attack
    settings copies them instead of collecting its own. The aggregators and attacks (phases b–c)
    are re-run in full by a resumed run. ``progress`` is part of every task's signature; this task
    has no rounds to report: its phases (client training, queries, the aggregators' training, the
    attacks) report themselves through :func:`fedcal.progress.phase`.
    """
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    if cfg.task != "inference":
        raise ValueError(f"run_inference needs task = 'inference', got {cfg.task!r}")
    store = RunStore(run_dir_for(cfg), cfg)
    path = store.dir / PROBITS_FILE
    result = InferenceResult(run_dir=store.dir, accuracy=pd.DataFrame())
    # an earlier attempt's complete collection, made under this config (start() keeps both files)
    collected = path.exists() and (store.dir / ANSWERS_FILE).exists() and _same_config(store)
    with store.session(resume=False):  # its checkpoint is probits.pt: a checkpoint.pt is never this task's
        if collected:
            log(INFO, "%s: reusing the probits collected earlier", path)
            store.resumed(f"after the clients' collection ({PROBITS_FILE} of an earlier attempt)")
            data = ProbitData.load(path)
        else:
            path.unlink(missing_ok=True)
            earlier = _earlier_collection(cfg, store.dir)
            if cfg.inf_probits == "stored":  # no client trains: the collection of fedcal inference-collect
                data = stored_collection(collection_spec(cfg), load_dataset(cfg.dataset, cfg.data_dir))
                log(INFO, "reading the clients' probits from %s", default_collection_path(collection_spec(cfg)))
                batches = -(-len(data.test_labels) // cfg.inf_query_batch)
                store.write_table(ANSWERS_FILE, pd.DataFrame({"message": range(batches),
                                                              "clients": [len(data.clients)] * batches}))
                data.save(path)
            elif earlier is not None:
                log(INFO, "reusing the client probits of %s (same clients, data and queries)", earlier.name)
                for name in (ANSWERS_FILE, PROBITS_FILE):
                    shutil.copyfile(earlier / name, store.dir / name)
                data = ProbitData.load(path)
            else:
                data = collect_probits(grid, cfg, result.clients_per_answer, result.dropped)
                store.write_table(ANSWERS_FILE, pd.DataFrame({"message": range(len(result.clients_per_answer)),
                                                              "clients": result.clients_per_answer}))
                data.save(path)
            store.log_event(f"checkpoint: the clients' probits ({PROBITS_FILE})")
        result.accuracy = evaluate_run(data, cfg, store)
        store.finish()
    return result


def collection_spec(cfg: RunConfig) -> CollectionSpec:
    """The stored collection of ``cfg``'s live clients (:mod:`fedcal.inference.collect`), named by their
    collection hash (``inf-probits=live``: the file holds what the live clients answered)."""
    return CollectionSpec.from_config(cfg, collection_hash=collection_hash(cfg.replace(inf_probits="live")))


def preflight(cfg: RunConfig) -> None:
    """The inference task's preflight: the dataset loads, and a run reading stored probits finds them."""
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    if cfg.inf_probits == "stored":
        stored_collection(collection_spec(cfg), ds)


def _save_state(state: dict, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)  # atomic: a later run never loads half a file


# which saved entries (fedcal.inference.evaluate.learned_state) belong to which component's hash
_COMPONENT_ENTRIES = {"deepset": ("deepset", "deepset_plain", "history"), "fusion": ("fusion", "logit_fusion")}


def _earlier_aggregators(cfg: RunConfig, here: Path) -> dict:
    """The learned aggregators of runs next to ``here`` that trained them from the same collection and
    the same settings (per component, :func:`fedcal.results.aggregator_hash`), merged; {} if none."""
    want = {c: aggregator_hash(cfg, c) for c in _COMPONENT_ENTRIES}
    state: dict = {}
    for d in sorted(here.parent.glob("*/")):
        if d == here or not (d / AGGREGATORS_FILE).exists():
            continue
        try:
            other = load_config(d)
            if other.task != "inference":
                continue
            same = [c for c in _COMPONENT_ENTRIES if aggregator_hash(other, c) == want[c]]
            if not same:
                continue
            found = torch.load(d / AGGREGATORS_FILE, weights_only=True)
        except (OSError, ValueError, KeyError, RuntimeError):
            continue
        for component in same:
            if any(key in state for key in _COMPONENT_ENTRIES[component]):
                continue  # one run's entries per component: a DeepSet and its history stay together
            if component == "deepset" and cfg.agg_adv_epochs and "deepset_plain" not in found:
                continue  # a store without the pre-adversarial DeepSet cannot be loaded (the build would retrain)
            state.update({key: found[key] for key in _COMPONENT_ENTRIES[component] if key in found})
    if state:
        log(INFO, "reusing the trained aggregators (%s) of earlier runs with the same settings",
            ", ".join(k for k in state if k != "history"))
    return state


def _earlier_collection(cfg: RunConfig, here: Path) -> Path | None:
    """A finished-collection run directory next to ``here`` whose probits this run can reuse:
    same clients, partitions, local training and queries (:func:`fedcal.results.collection_hash`)."""
    want = collection_hash(cfg)
    for d in sorted(here.parent.glob("*/")):
        if d == here or not (d / PROBITS_FILE).exists() or not (d / ANSWERS_FILE).exists():
            continue
        try:
            other = load_config(d)
        except (OSError, ValueError, KeyError):
            continue
        if other.task == "inference" and collection_hash(other) == want:
            return d
    return None


def _same_config(store: RunStore) -> bool:
    try:
        return json.loads((store.dir / "config.json").read_text())["config_hash"] == store.config_hash
    except (OSError, ValueError, KeyError):
        return False


# ---------------------------------------------------------------------------------- client side
MODEL_KEY = "local-model"  # where a node keeps its own classifier (its Context state) between messages


def train_local(msg: Message, context: Context) -> Message:
    """Train this client's classifier from scratch on its own Dirichlet partition."""
    cfg, _ = message_config(msg, context)
    check_partitions(cfg, context)
    cid = client_id(context)
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    model, loss, n = train_client(InferenceClientSpec.from_config(cfg), ds, cid, device=resolve_device(cfg.device))
    context.state[MODEL_KEY] = ArrayRecord({k: v.detach().cpu() for k, v in model.state_dict().items()})
    return Message(content=RecordDict({"metrics": MetricRecord({"train-loss": loss, "num-examples": n})}),
                   reply_to=msg)


def probits(msg: Message, context: Context) -> Message:
    """Answer a batch of queries with this client's probability vectors (its logits under
    ``inf-client-output=logits``; the server takes their softmax)."""
    cfg, _ = message_config(msg, context)
    if MODEL_KEY not in context.state:
        raise RuntimeError("no local model: the node has not run train.local")
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    model = shared_model(cfg.model, ds.input_shape, ds.num_classes)
    model.load_state_dict(context.state[MODEL_KEY].to_torch_state_dict())
    x = torch.from_numpy(msg.content["queries"]["x"].numpy().copy())
    with torch.no_grad():
        z = model.eval()(x)
    if cfg.inf_client_output == "logits":
        return Message(content=RecordDict({"logits": ArrayRecord({"z": z})}), reply_to=msg)
    return Message(content=RecordDict({"probits": ArrayRecord({"p": z.softmax(dim=1)})}), reply_to=msg)
