"""ServerApp of the Temperature Scaling Attack simulation.

Runs FedAvg (data-size weighted) through Flower's strategy API for ``num-rounds`` rounds,
with clients chosen reproducibly per (seed, round), and evaluates the global model on the
test set after every round (SPEC §1 metrics). Each round's metrics are appended to the run
store as soon as they exist.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from logging import INFO, WARNING

import numpy as np
import pandas as pd
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from fedcal import strategies
from fedcal.attacks import BENIGN, attackers_of, client_round
from fedcal.config import RunConfig
from fedcal.data import load_dataset
from fedcal.metrics import METRIC_KEYS, calibration_metrics, reliability_bins
from fedcal.models import build_model
from fedcal.results import RunStore, run_dir_for
from fedcal.strategies import UpdateAggregationStrategy
from fedcal.train import predict_logits, resolve_device

app = ServerApp()

# progress(round, metrics) → None; called after each round's evaluation.
ProgressFn = Callable[[int, dict[str, float]], None]


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point for ``flwr run`` and deployments: config from Flower's run config;
    ``task = "inference"`` runs robust federated inference instead of TSA training."""
    cfg = RunConfig.from_flower(context.run_config)
    if cfg.task == "inference":
        from fedcal.simulations.inference import run_inference  # it imports this module

        run_inference(grid, cfg)
    else:
        run_tsa(grid, cfg)


def server_app_for(cfg: RunConfig, progress: ProgressFn | None = None) -> ServerApp:
    """A ServerApp bound to an already-validated config (used by ``fedcal run``)."""
    bound = ServerApp()

    @bound.main()
    def _main(grid: Grid, context: Context) -> None:
        run_tsa(grid, cfg, progress)

    return bound


def discover_clients(grid: Grid, expected: int, timeout: float = 600.0) -> dict[int, int]:
    """Ask every connected node for its partition id; returns {node id: partition id}.

    Waits until ``expected`` nodes are connected. Nodes that do not answer are logged
    and left out (they are then never sampled).
    """
    t0, warned = time.monotonic(), False
    while len(nodes := list(grid.get_node_ids())) < expected:
        waited = time.monotonic() - t0
        if waited > timeout:
            raise TimeoutError(f"only {len(nodes)} of {expected} nodes connected after {timeout:.0f}s; "
                               f"run-config 'num-clients' must equal the number of SuperNodes")
        if waited > 10 and not warned:
            warned = True
            log(WARNING, "waiting for %d nodes (%d connected). With `flwr run` on a local simulation, start "
                "as many virtual nodes as 'num-clients': --federation-config \"num-supernodes=%d\"; in a "
                "deployment, start %d SuperNodes with --node-config \"partition-id=k num-partitions=%d\"",
                expected, len(nodes), expected, expected, expected)
        time.sleep(0.5)
    messages = [Message(content=RecordDict(), message_type="query.identity", dst_node_id=n) for n in nodes]
    mapping: dict[int, int] = {}
    for reply in grid.send_and_receive(messages, timeout=timeout):
        node = reply.metadata.src_node_id
        if reply.has_error():
            log(WARNING, "node %s did not report its identity: %s", node, reply.error.reason)
            continue
        mapping[node] = int(reply.content["identity"]["partition-id"])
    dupes = len(mapping) - len(set(mapping.values()))
    if dupes:
        raise ValueError(f"{dupes} nodes share a partition id; give each node its own 'partition-id'")
    return mapping


def root_train_fn_for(cfg: RunConfig, ds, device: torch.device) -> Callable[[ArrayRecord, int], ArrayRecord]:
    """FLTrust's server update: the benign local procedure (same E, B, β) on a seeded root
    set of ``root-size`` samples drawn from the training data."""
    rng = np.random.default_rng([cfg.seed, 0xF17])
    idx = torch.from_numpy(rng.choice(len(ds.y_train), size=min(cfg.root_size, len(ds.y_train)), replace=False))
    x_root, y_root = ds.x_train[idx], ds.y_train[idx]
    model = build_model(cfg.model, ds.input_shape, ds.num_classes)

    def root_train(arrays: ArrayRecord, server_round: int) -> ArrayRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        client_round(model, x_root, y_root, ds.num_classes, BENIGN, cfg, server_round, client_id=-1, device=device)
        return ArrayRecord({k: v.detach().cpu() for k, v in model.state_dict().items()})

    return root_train


def build_strategy(cfg: RunConfig, node_to_client: dict[int, int],
                   root_train_fn: Callable[[ArrayRecord, int], ArrayRecord] | None = None) -> UpdateAggregationStrategy:
    """The configured aggregation strategy, sampling clients reproducibly."""
    common = dict(
        fraction_train=cfg.clients_per_round / cfg.num_clients,
        fraction_evaluate=0.0,  # the global model is evaluated centrally, on the test set
        min_train_nodes=cfg.clients_per_round,
        min_evaluate_nodes=0,
        min_available_nodes=cfg.num_clients,
        weighted_by_key="num-examples",
        sampling_seed=cfg.seed,
        node_sort_key=lambda n: node_to_client.get(n, 1 << 62),
    )
    name = cfg.strategy
    if name == "fedavg":
        return strategies.FedAvg(**common)
    if name == "fltrust":
        if root_train_fn is None:
            raise ValueError("strategy 'fltrust' needs a root_train_fn")
        return strategies.FLTrust(root_train_fn, **common)
    if name == "foolsgold":
        return strategies.FoolsGold(kappa=cfg.foolsgold_kappa, **common)
    if name == "multikrum":
        return strategies.MultiKrum(num_malicious_nodes=cfg.krum_f, num_nodes_to_select=cfg.krum_m or None, **common)
    if name == "trimmed_mean":
        return strategies.TrimmedMean(trim=cfg.trim_f, **common)
    if name == "median":
        return strategies.Median(**common)
    if name == "geometric_median":
        return strategies.GeometricMedian(**common)
    if name == "median_of_means":
        return strategies.MedianOfMeans(num_groups=cfg.mom_groups, seed=cfg.seed, **common)
    raise ValueError(f"unknown strategy {name!r}")


def run_tsa(grid: Grid, cfg: RunConfig, progress: ProgressFn | None = None) -> pd.DataFrame:
    """Run one federated TSA experiment on ``grid``; returns the per-round metrics table."""
    store = RunStore(run_dir_for(cfg), cfg)
    store.start()
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    device = resolve_device(cfg.device)
    model = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=cfg.seed)
    node_to_client = discover_clients(grid, cfg.num_clients)
    log(INFO, "attackers (%s, %d of %d): %s", cfg.attack,
        cfg.num_attackers, cfg.num_clients, sorted(attackers_of(cfg)))
    root_fn = root_train_fn_for(cfg, ds, device) if cfg.strategy == "fltrust" else None
    strategy = build_strategy(cfg, node_to_client, root_fn)
    rows: list[dict[str, float]] = []
    clock = [time.perf_counter()]

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        metrics: dict[str, float] = {}
        due = server_round in (0, cfg.num_rounds) or server_round % cfg.eval_every == 0
        logits = None
        if due:
            model.load_state_dict(arrays.to_torch_state_dict())
            logits = predict_logits(model, ds.x_test, cfg.eval_batch_size, device)
            if torch.isfinite(logits).all():
                metrics.update(calibration_metrics(logits, ds.y_test, cfg.n_bins))
            else:  # a diverged model is a result (e.g. extreme τ), not a crash
                log(WARNING, "round %d: global model produced non-finite logits", server_round)
                metrics.update({k: float("nan") for k in METRIC_KEYS})
                logits = None
        now = time.perf_counter()
        metrics["round_seconds"] = now - clock[0]  # whole round: train, aggregate, evaluate
        clock[0] = now
        store.log_round(server_round, metrics)
        rows.append({"round": server_round, **metrics})
        if server_round == cfg.num_rounds and logits is not None:
            bins = reliability_bins(logits, ds.y_test, cfg.n_bins)
            store.write_table("reliability.csv", pd.DataFrame({k: v.numpy() for k, v in bins.items()}))
        if progress is not None:
            progress(server_round, metrics)
        return MetricRecord({k: float(v) for k, v in metrics.items()})

    initial = ArrayRecord({k: v.detach().cpu() for k, v in model.state_dict().items()})
    result = strategy.start(
        grid=grid,
        initial_arrays=initial,
        num_rounds=cfg.num_rounds,
        train_config=ConfigRecord(cfg.to_flower()),
        evaluate_fn=evaluate_fn,
    )
    final = result.arrays if result.arrays is not None else initial  # no round aggregated: still initial
    store.save_model(final.to_torch_state_dict())
    store.finish()
    return pd.DataFrame(rows)
