"""Federated calibration: Flower's evaluate round over the clients' own held-out data.

With ``fed-eval-clients`` = m > 0, at every round ≥ 1 the central evaluation is due, the strategy's
``configure_evaluate`` sends the global model to m clients (sampled by a generator seeded with the
run's seed and the round, never Flower's global one); each client evaluates it on its held-out data
(:func:`fedcal.data.client_heldout`, its share of the test set) and replies with a
:class:`fedcal.calibration_state.CalibrationState` — per-bin counts, confidence sums and correct
counts, no sample. ``aggregate_evaluate`` validates every reply (an error reply, a missing or
malformed state is left out, with the node and the reason logged and recorded), sums the states and
computes the federation's accuracy, ECE, sECE, MCE and RMS CE (``fed_*`` metrics of the round, beside
the central ones), each client's own in ``federated_calibration.csv`` (the run's per-client
calibration audit), and at the final round the federation's reliability diagram
(``federated_reliability.csv``).

Each client also fits its own temperature on the fitting half of its held-out share
(:func:`fedcal.data.temperature_fit_positions`: a fixed half, drawn by a permutation seeded by the run's
seed and the client's partition id) and replies with it (metric ``temperature``); its calibration
state covers the whole share (that is evaluation, not fitting). The server's federated temperature is the weighted median of the valid ones
(:mod:`fedcal.temperature`: counts from the client's validated state, capped at the round's
median; a missing, non-finite or out-of-bounds temperature is left out with its reason in the
per-client table's ``temperature_status``), recorded as ``fed_temperature`` with
``fed_temperature_clients``; the training task divides the global model's test logits by it and
scores them on the test samples no replying client fitted on (``fedtemp_*`` metrics, their count
``fedtemp_n``): the server draws each replying client's fitting half itself (same share, same
seeded permutation) and leaves out their union, so the temperature is never scored on its own fit.
"""

from __future__ import annotations

from logging import WARNING
from typing import Iterable

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from fedcal.temperature import client_temperature, federated_temperature
from fedcal.calibration_state import CalibrationState, from_arrays, merged, state_problem
from fedcal.config import RunConfig
from fedcal.data import client_heldout, heldout_indices, load_dataset, temperature_fit_positions
from fedcal.local_training import predict_logits, resolve_device
from fedcal.results import RunStore
from fedcal.tasks.nodes import CLIENT_RECORD, client_id, client_record, config_record, message_config, shared_model

MESSAGE_TYPE = "evaluate"
STATE_RECORD = "calibration"
FED_CALIBRATION_FILE = "federated_calibration.csv"
FED_RELIABILITY_FILE = "federated_reliability.csv"
#: the federation's metrics a round records (prefixed ``fed_``)
FED_METRICS = ("n", "accuracy", "ece", "sece", "mce", "rmsce")
#: the reply's metric carrying the client's own fitted temperature
TEMPERATURE = "temperature"


# ---------------------------------------------------------------------------------- client side
def evaluate_heldout(msg: Message, context: Context) -> Message:
    """A client's calibration state of the global model on its own held-out data."""
    cfg, _ = message_config(msg, context)
    cid = client_id(context)
    data = client_heldout(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.partition, cfg.dirichlet_alpha,
                          cfg.seed, cid)
    model = shared_model(cfg.model, tuple(data.x.shape[1:]), data.num_classes)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    state = CalibrationState.empty(cfg.n_bins)
    metrics = {"num-examples": len(data)}
    if len(data):
        logits = predict_logits(model, data.x, cfg.eval_batch_size, resolve_device(cfg.device))
        state = state.update_probs(logits.double().softmax(dim=1), data.y)
        fit = torch.from_numpy(temperature_fit_positions(len(data), cfg.seed, cid))
        if len(fit) >= 2 and torch.isfinite(logits[fit]).all():
            metrics[TEMPERATURE] = client_temperature(logits[fit].double(), data.y[fit])
    return Message(content=RecordDict({
        STATE_RECORD: ArrayRecord(state.to_arrays()),
        "metrics": MetricRecord(metrics),
        CLIENT_RECORD: client_record(cid, False),
    }), reply_to=msg)


# ---------------------------------------------------------------------------------- server side
class FederatedCalibration:
    """The strategy's evaluate round (``UpdateAggregationStrategy.evaluation``) of a train run."""

    def __init__(self, cfg: RunConfig, store: RunStore, node_to_client: dict[int, int]):
        self.cfg, self.store, self.node_to_client = cfg, store, node_to_client
        self.results: dict[int, dict[str, float]] = {}
        #: per round, the test-set indices the replying clients fitted their temperatures on
        self.fitted: dict[int, np.ndarray] = {}

    def due(self, server_round: int) -> bool:
        return server_round >= 1 and (server_round == self.cfg.num_rounds or server_round % self.cfg.eval_every == 0)

    def sampled(self, server_round: int) -> list[int]:
        """The round's evaluating nodes: m of the identified ones, in partition order."""
        nodes = sorted(self.node_to_client, key=self.node_to_client.get)
        rng = np.random.default_rng([self.cfg.seed, server_round, 0xCA1])
        pick = rng.choice(len(nodes), size=min(self.cfg.fed_eval_clients, len(nodes)), replace=False)
        return [nodes[i] for i in sorted(pick)]

    def configure(self, server_round: int, arrays: ArrayRecord, grid: Grid) -> Iterable[Message]:
        if not self.due(server_round):
            return []
        config = config_record(self.cfg)
        config["server-round"] = server_round
        content = RecordDict({"arrays": arrays, "config": config})
        return [Message(content=content, message_type=MESSAGE_TYPE, dst_node_id=n) for n in self.sampled(server_round)]

    def aggregate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Validate, merge and record the round's states; returns the federation's metrics."""
        replies = list(replies)
        if not replies:
            return None
        states, rows, reports = [], [], {}
        self.fitted[server_round] = self.fitted_indices(
            {self.node_to_client.get(m.metadata.src_node_id, -1) for m in replies})
        for msg in replies:
            node = msg.metadata.src_node_id
            part = self.node_to_client.get(node, -1)
            state, reason = _read_state(msg, self.cfg.n_bins)
            if state is None:
                log(WARNING, "round %d: calibration state of node %d (partition %d) left out: %s",
                    server_round, node, part, reason)
                rows.append({"round": server_round, "node_id": node, "partition_id": part,
                             **CalibrationState.empty(1).compute(), "status": reason, TEMPERATURE: float("nan")})
                continue
            states.append(state)
            reports[node] = (_reported_temperature(msg), state.n)
            rows.append({"round": server_round, "node_id": node, "partition_id": part, **state.compute(),
                         "status": "ok", TEMPERATURE: _as_float(reports[node][0])})
        total = merged(states, self.cfg.n_bins)
        metrics = {f"fed_{k}": v for k, v in total.compute().items() if k in FED_METRICS}
        metrics["fed_clients"] = float(len(states))
        fed_t = federated_temperature(reports)
        for row in rows:
            node = row["node_id"]
            row["temperature_status"] = ("ok" if node in fed_t.clients else fed_t.left_out[node]
                                         if node in fed_t.left_out else "no state")
            if node in fed_t.left_out:
                log(WARNING, "round %d: temperature of node %d (partition %d) left out: %s", server_round, node,
                    row["partition_id"], fed_t.left_out[node])
        metrics["fed_temperature"] = fed_t.temperature
        metrics["fed_temperature_clients"] = float(len(fed_t.clients))
        self.results[server_round] = metrics
        self.store.append_rows(FED_CALIBRATION_FILE, sorted(rows, key=lambda r: r["partition_id"]))
        if server_round == self.cfg.num_rounds:
            import pandas as pd  # lazily: the ClientApp process never loads pandas

            self.store.write_table(FED_RELIABILITY_FILE,
                                   pd.DataFrame({k: v.numpy() for k, v in total.reliability().items()}))
        return MetricRecord({k: float(v) for k, v in metrics.items() if np.isfinite(v)})

    def fitted_indices(self, partitions: Iterable[int]) -> np.ndarray:
        """The sorted test-set indices in the fitting halves of the clients ``partitions`` (those
        outside [0, num-clients) have no share): drawn as each client draws its own."""
        cfg = self.cfg
        y_test = load_dataset(cfg.dataset, cfg.data_dir).y_test.numpy()
        fitted = [np.zeros(0, dtype=np.int64)]
        for part in sorted(p for p in partitions if 0 <= p < cfg.num_clients):
            share = heldout_indices(y_test, cfg.num_clients, cfg.partition, cfg.dirichlet_alpha, cfg.seed, part)
            fitted.append(share[temperature_fit_positions(len(share), cfg.seed, part)])
        return np.unique(np.concatenate(fitted).astype(np.int64))

    def unfitted(self, server_round: int, n_test: int) -> torch.Tensor:
        """The test-set indices no client replying in the round fitted its temperature on (the
        samples the round's ``fedtemp_*`` metrics are scored on)."""
        keep = np.ones(n_test, dtype=bool)
        keep[self.fitted.get(server_round, np.zeros(0, dtype=np.int64))] = False
        return torch.from_numpy(np.flatnonzero(keep))

    def temperature(self, server_round: int) -> float:
        """The round's federated temperature (NaN when the round had none); keeps the round's metrics."""
        return float(self.results.get(server_round, {}).get("fed_temperature", float("nan")))

    def metrics_of(self, server_round: int) -> dict[str, float]:
        """The round's federated metrics (empty when the round evaluated none)."""
        return self.results.pop(server_round, {})


def _reported_temperature(msg: Message) -> object:
    """The temperature a valid reply reports (None when it reports none; validated by the caller)."""
    metrics = msg.content["metrics"] if "metrics" in msg.content else None
    if not isinstance(metrics, MetricRecord) or TEMPERATURE not in metrics:
        return None
    return metrics[TEMPERATURE]


def _as_float(value: object) -> float:
    """A reported number for the audit table (NaN for anything else)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan")


def _read_state(msg: Message, n_bins: int) -> tuple[CalibrationState | None, str]:
    """A reply's state, or (None, why it is left out)."""
    if msg.has_error():
        return None, f"error reply: {msg.error.reason}"
    if STATE_RECORD not in msg.content or not isinstance(msg.content[STATE_RECORD], ArrayRecord):
        return None, f"reply without a {STATE_RECORD!r} array record"
    try:
        arrays = {k: torch.from_numpy(np.array(v.numpy())) for k, v in msg.content[STATE_RECORD].items()}
    except Exception as e:  # an array that does not decode is the client's fault, not the round's
        return None, f"calibration state does not decode ({type(e).__name__})"
    problem = state_problem(arrays, n_bins)
    return (None, problem) if problem else (from_arrays(arrays), "")
