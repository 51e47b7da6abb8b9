"""CalGuard: drop the replies that would move the global model's confidence unlike the others."""

from __future__ import annotations

from logging import INFO, WARNING
from typing import TYPE_CHECKING, Unpack

import numpy as np
import torch
from flwr.app import ArrayRecord
from flwr.supercore import log
from torch import nn

from fedcal import aggregate as agg
from fedcal.aggregate import calguard as cg
from fedcal import sequential as sq
from fedcal.aggregate.numerics import row_norms64
from fedcal.config.defense import CALGUARD_SIGNALS
from fedcal.strategies.base import UpdateAggregationStrategy
from fedcal.strategies.options import StrategyOptions
from fedcal.strategies.replies import tensor_of

if TYPE_CHECKING:
    from fedcal.config import RunConfig

#: what CalGuard's sequential test may be fed (``sequential_signal``): the config's choices
SEQUENTIAL_SIGNALS = CALGUARD_SIGNALS
#: the reply's record of its client's two calibration states (``signal = "clients"``)
DRIFT_RECORD = "calibration-drift"


class CalGuard(UpdateAggregationStrategy):
    """A calibration-aware defense (:mod:`fedcal.aggregate.calguard` has the math): every valid reply is
    applied to the current global model and its *logit-scale shift* on the server's clean root
    set is compared with the other replies' (deviation from the round's median, robust z against
    the deviations of the last ``window`` rounds); a reply with ``|z| > kappa``, or from a client
    flagged ``strikes`` times before, is dropped and the rest are averaged with their data sizes
    (FedAvg), each claim capped at the round's median claim (a kept client claiming 1e30 examples
    must not become the whole aggregate). With ``sequential`` (:class:`fedcal.sequential.ClientCusum`), each client's robust
    scores are also summed over the rounds it is sampled in (two one-sided CUSUMs): a client whose
    scores sit persistently low (a TSA client at τ < 1, which no single round gives away) or high
    is dropped from its alarm on, and its replies leave the median and the pooled scale.

    Parameters
    ----------
    model : nn.Module (required)
        A model of the federation's architecture (its weights are overwritten); the replies'
        arrays are its ``state_dict``, and its last ``nn.Linear`` must produce the logits.
    root_x : torch.Tensor (required with ``signal = "root"``)
        The inputs of the server's clean root set (at least :data:`fedcal.aggregate.calguard.MIN_ROOT_SIZE`
        samples, finite, the model's input shape; checked here).
    root_y : torch.Tensor (required with ``signal = "root"``)
        Its integer labels, of at least two classes, each below the model's output count.
    signal : str (default "root")
        ``root``: the logit-scale shift of each reply's candidate on the root set; ``clients``: no root
        set — each reply's candidate's mean-confidence shift against the global model on its client's
        held-out data (its sECE drift audited beside it), from the two calibration states the reply
        carries under :data:`DRIFT_RECORD`
        (:func:`fedcal.aggregate.calguard.client_drift`; self-reported, so a lying client is not
        caught). A reply without a valid drift record is flagged, its reason logged and audited.
    kappa : float (default 5.0)
        Flag a reply whose robust score exceeds κ in absolute value.
    window : int (default 10)
        Rounds of deviations pooled for the robust scale σ.
    strikes : int (default 3)
        A client flagged this many times is dropped in every later round (0 = never); clients
        are told apart by ``node_label`` (their partition id) when given, else by node id.
    mode : str (default "filter")
        ``filter`` drops flagged replies; ``audit`` computes and records everything but averages
        every reply (FedAvg), so an operator sees an attack without acting on it.
    sequential : fedcal.sequential.ClientCusum, optional (default None: off)
        The per-client sequential test fed with every round's scores (its thresholds calibrated
        on benign clients, docs/defense.md); alarms count per ``node_label`` like the strikes.
    sequential_signal : str (default "ratio")
        What the sequential test is fed: ``ratio``, the robust score of each reply's logit-scale
        shift per unit of its update's norm (s / ‖Δ‖: the direction's effect on confidence, not
        the step's size, which grows with a client's data), or ``scale``, the per-round test's own
        z. docs/defense.md compares the two.
    **options : StrategyOptions
        The shared arguments (Flower's FedAvg ones, seeded sampling, buffers), see the base.

    After each round :attr:`last_audit` holds, per node, the signature, deviation, score, σ and
    decision, and :meth:`audit_rows` returns them with the aggregation weight. ``start`` refuses
    initial arrays that do not fit ``model`` (:meth:`check_arrays`) before the first round.
    """

    size_weighting = "capped"

    def __init__(self, *, model: nn.Module, root_x: torch.Tensor | None = None, root_y: torch.Tensor | None = None,
                 kappa: float = 5.0, window: int = 10, strikes: int = 3, mode: str = "filter",
                 sequential: sq.ClientCusum | None = None, sequential_signal: str = "ratio", signal: str = "root",
                 **options: Unpack[StrategyOptions]) -> None:
        super().__init__(**options)
        if not isinstance(model, nn.Module):
            raise TypeError(f"CalGuard needs the federation's nn.Module, got {type(model).__name__}")
        if mode not in cg.CALGUARD_MODES:
            raise ValueError(f"mode must be one of {cg.CALGUARD_MODES}, got {mode!r}")
        if not kappa > 0:
            raise ValueError(f"kappa must be > 0, got {kappa}")
        if sequential is not None and not isinstance(sequential, sq.ClientCusum):
            raise TypeError(f"sequential must be a fedcal.sequential.ClientCusum, got {type(sequential).__name__}")
        if sequential_signal not in SEQUENTIAL_SIGNALS:
            raise ValueError(f"sequential_signal must be one of {SEQUENTIAL_SIGNALS}, got {sequential_signal!r}")
        if signal not in cg.CALGUARD_SOURCES:
            raise ValueError(f"signal must be one of {cg.CALGUARD_SOURCES}, got {signal!r}")
        self.model, self.signal = model, signal
        self.root_x, self.root_y = root_x, root_y.long() if isinstance(root_y, torch.Tensor) else root_y
        if signal == "root":
            self._check_root(model)
        self.kappa, self.mode = float(kappa), mode
        self.scale = cg.DeviationScale(window)
        self.strikes = cg.Strikes(strikes)
        self.sequential, self.sequential_signal = sequential, sequential_signal
        self.signal_scale = cg.DeviationScale(window)  # the robust scale of the ratio signal

    def _check_root(self, model: nn.Module) -> None:
        """ValueError unless the root set is usable and fits ``model``."""
        cg.check_root_set(self.root_x, self.root_y)
        with torch.no_grad():  # the root set must fit the model: fail at start, not in round 1
            model.eval()
            try:
                out = model(self.root_x[:2].to(next(model.parameters()).device))
            except Exception as exc:  # noqa: BLE001 — any shape/dtype error is the caller's root set
                raise ValueError(f"root inputs of shape {tuple(self.root_x.shape)} do not fit the model: {exc}") from exc
        if out.dim() != 2 or int(self.root_y.max()) >= out.shape[1]:
            raise ValueError(f"root labels reach {int(self.root_y.max())} but the model has {out.shape[-1]} outputs")

    def check_arrays(self, arrays: ArrayRecord) -> None:
        """ValueError naming the first array that does not fit :attr:`model` (a missing or unexpected
        key, another shape): CalGuard loads every candidate into its model, so arrays of another
        architecture would fail only in round 1, after every client had trained."""
        want = {k: tuple(v.shape) for k, v in self.model.state_dict().items()}
        have = {k: tuple(arrays[k].shape) for k in arrays.keys()}
        missing, extra = sorted(set(want) - set(have)), sorted(set(have) - set(want))
        if missing or extra:
            raise ValueError(f"CalGuard's model does not fit the arrays: missing {missing[:3]}, unexpected {extra[:3]}")
        for k, shape in want.items():
            if have[k] != shape:
                raise ValueError(f"CalGuard's model does not fit the arrays: '{k}' has shape {have[k]}, the model's "
                                 f"{shape}")

    def start(self, grid, initial_arrays: ArrayRecord, *args, **kwargs):
        """The base ``start`` (Flower's arguments, ``should_stop`` included), after
        :meth:`check_arrays` of the initial arrays (before any message)."""
        self.check_arrays(initial_arrays)
        return super().start(grid, initial_arrays, *args, **kwargs)

    def summary(self) -> None:
        """Log CalGuard's settings, then the shared ones."""
        log(INFO, "\t├──> CalGuard settings:")
        if self.signal == "root":
            log(INFO, "\t│\t├── Root set: %d samples, %d classes", len(self.root_y), len(torch.unique(self.root_y)))
        else:
            log(INFO, "\t│\t├── Signal: the clients' own calibration drift on their held-out data (no root set)")
        log(INFO, "\t│\t└── Mode: %s, kappa %.3g, window %d rounds, strikes %d", self.mode, self.kappa,
            self.scale.window, self.strikes.limit)
        if self.sequential is not None:
            q = self.sequential
            log(INFO, "\t│\t└── Sequential test on %s: two one-sided CUSUMs per client, k %.3g, h low %.3g, "
                "h high %.3g, clip %.3g", self.sequential_signal, q.k, q.h_low, q.h_high, q.clip)
        super().summary()

    def aggregate_updates(self, server_round, node_ids, updates, weights):
        if self.signal == "root":
            sent = self._sent[server_round]
            keys = self.trainable_keys(sent)
            base = {k: tensor_of(sent[k]) for k in sent.keys()}
            current = cg.RootStats.of(cg.root_logits(self.model, base, self.root_x), self.root_y)
            signatures = [cg.signature(cg.RootStats.of(cg.root_logits(
                self.model, agg.add_flat_update(base, keys, u), self.root_x), self.root_y), current) for u in updates]
            shifts = torch.tensor([s["scale_shift"] for s in signatures], dtype=torch.float64)
        else:
            signatures = self._client_drifts(server_round, node_ids)
            shifts = torch.tensor([s["conf_shift"] for s in signatures], dtype=torch.float64)
        clients = [self._client(n) for n in node_ids]
        # the update's L2 norm: recorded for the audit, and the ratio signal's denominator
        norms = row_norms64(updates)
        ratio = self.sequential is not None and self.sequential_signal == "ratio"
        decision = cg.decide(shifts, clients, scale=self.scale, strikes=self.strikes, kappa=self.kappa,
                             sequential=self.sequential, server_round=server_round,
                             signal=shifts / norms if ratio else None, signal_scale=self.signal_scale if ratio else None)
        dev, z, sigma, outlier, banned = (decision.deviation, decision.score, decision.sigma, decision.outlier,
                                          decision.struck_out)
        flagged = decision.flagged
        keep = ~flagged if self.mode == "filter" else torch.ones_like(flagged)
        node_w = torch.where(keep, weights.double(), torch.zeros_like(weights.double()))
        if float(node_w.sum()) > 0:
            delta = (updates.double() * (node_w / node_w.sum())[:, None]).sum(0).float()
        else:
            log(WARNING, "CalGuard round %d: every reply flagged; the global model is kept", server_round)
            delta = torch.zeros(updates.shape[1], dtype=torch.float32)
        self.last_audit = {
            n: {**sig, "update_norm": float(u), "deviation": float(d), "score": float(s), "sigma": sigma,
                "outlier": bool(o), "struck_out": bool(b), "flagged": bool(f),
                "decision": ("dropped" if f else "kept") if self.mode == "filter" else ("would drop" if f else "kept")}
            for n, sig, u, d, s, o, b, f in zip(node_ids, signatures, norms, dev, z, outlier, banned, flagged)}
        if self.sequential is not None:
            for n, c, a, x in zip(node_ids, clients, decision.sequential, decision.sequential_score):
                stat = self.sequential.statistic(c)
                self.last_audit[n].update({"sequential_score": float(x), "cusum_low": stat.low,
                                           "cusum_high": stat.high, "sequential": bool(a)})
                if a and stat.alarm_round == server_round:
                    log(INFO, "CalGuard round %d: %s alarmed by the sequential test (%s CUSUM %.3g > %.3g after %d "
                        "replies); %s from now on", server_round, self.who(n), stat.alarm,
                        stat.low if stat.alarm == "low" else stat.high,
                        self.sequential.h_low if stat.alarm == "low" else self.sequential.h_high, stat.count,
                        "dropped" if self.mode == "filter" else "flagged (audit only)")
        dropped = [n for n, f in zip(node_ids, flagged) if f]
        if dropped:
            log(INFO, "CalGuard round %d: %s %s (score |z| > %.3g, struck out after %d flags, or alarmed by the "
                "sequential test)", server_round,
                "dropped" if self.mode == "filter" else "flagged (audit only)",
                self.by_node({n: float(s) for n, s, f in zip(node_ids, z, flagged) if f}), self.kappa,
                self.strikes.limit)
        return delta, node_w

    def _client_drifts(self, server_round: int, node_ids: list[int]) -> list[dict]:
        """Each accepted reply's calibration drift (:func:`fedcal.aggregate.calguard.client_drift`);
        a reply without a valid drift record gets a NaN signature (flagged by the rule), its reason
        logged and in the audit's ``drift_status``."""
        out = []
        for node, content in zip(node_ids, self.round_contents or [None] * len(node_ids)):
            sig, reason = None, f"no {DRIFT_RECORD!r} array record"
            if content is not None and DRIFT_RECORD in content and isinstance(content[DRIFT_RECORD], ArrayRecord):
                try:
                    arrays = {k: torch.from_numpy(np.array(v.numpy())) for k, v in content[DRIFT_RECORD].items()}
                    sig, reason = cg.client_drift(arrays)
                except Exception as e:  # noqa: BLE001 — an array that does not decode is the client's fault
                    sig, reason = None, f"drift record does not decode ({type(e).__name__})"
            if sig is None:
                log(WARNING, "CalGuard round %d: %s flagged: %s", server_round, self.who(node), reason)
                sig = {k: float("nan") for k in cg.DRIFT_COLUMNS}
            out.append({**sig, "drift_status": reason or "ok"})
        return out

    def state_dict(self):
        """The deviation pool of the last ``window`` rounds and every client's strikes (clients
        are counted by partition id, so the strikes outlive the run's node ids); with the
        sequential test also its per-client statistics and alarms and the ratio signal's pool."""
        if self.node_label is None and (self.strikes.count or (self.sequential is not None and self.sequential.clients)):
            raise ValueError("CalGuard's strikes are counted by node id (no node_label): they cannot be checkpointed")
        state = {"scale": self.scale.state_dict(), "strikes": self.strikes.state_dict()}
        if self.sequential is not None:
            state.update(sequential=self.sequential.state_dict(), signal_scale=self.signal_scale.state_dict())
        return state

    def load_state_dict(self, state, node_of):
        if ("sequential" in state) != (self.sequential is not None):
            raise ValueError("CalGuard's checkpoint and this strategy disagree on the sequential test "
                             f"(checkpoint: {'with' if 'sequential' in state else 'without'}, strategy: "
                             f"{'with' if self.sequential is not None else 'without'})")
        self.scale.load_state_dict(state["scale"])
        self.strikes.load_state_dict(state["strikes"])
        if self.sequential is not None:
            self.sequential.load_state_dict(state["sequential"])
            self.signal_scale.load_state_dict(state["signal_scale"])

    def _client(self, node_id: int):
        """The identity strikes are counted under: the partition id when known, else the node id."""
        label = self.label(node_id)
        return node_id if label is None else label

    def aggregate_buffers(self, server_round, node_ids, values, weights):
        """The coordinate-wise median of the kept replies' buffers (all replies' in audit mode, or
        when every reply was dropped): the signature is measured with the sent buffers, so it says
        nothing about a reply's BatchNorm statistics, which a robust rule must outvote."""
        keep = torch.tensor([self.last_audit.get(n, {}).get("decision") != "dropped" for n in node_ids])
        if not bool(keep.any()):
            keep = torch.ones(len(node_ids), dtype=torch.bool)
        return agg.buffer_median(values[keep])


def config_kwargs(cfg: RunConfig) -> dict[str, object]:
    """CalGuard's own keyword arguments from the run config's ``calguard-*`` keys (its catalogue
    ``params``): the sequential test is built when ``calguard-cusum`` is set, with a warning when its
    default thresholds meet a participation rate they were not calibrated for."""
    sequential = (sq.ClientCusum(k=cfg.calguard_cusum_k, h_low=cfg.calguard_cusum_h_low, h_high=cfg.calguard_cusum_h_high)
                  if cfg.calguard_cusum else None)
    if sequential is not None:
        _warn_uncalibrated_thresholds(cfg)
    return {"kappa": cfg.calguard_kappa, "window": cfg.calguard_window, "strikes": cfg.calguard_strikes,
            "mode": cfg.calguard_mode, "sequential": sequential, "sequential_signal": cfg.calguard_cusum_signal,
            "signal": cfg.calguard_signal}


def _warn_uncalibrated_thresholds(cfg: RunConfig) -> None:
    """Warn when the sequential test runs on its default thresholds in a federation whose clients reply
    far more (or less) often than in the runs they were calibrated on: a benign client's CUSUM climbs
    with its replies, so at 10 of 50 a round the defaults left out one benign reply in six (measured,
    docs/defense.md). fedcal does not derive thresholds from the rate — the null's growth is not a
    simple law of it — so the remedy is the calibration the docs show, on benign audit runs."""
    from fedcal.config import CUSUM_CALIBRATED_REPLIES, setting_of

    if (cfg.calguard_cusum_h_low, cfg.calguard_cusum_h_high) != (setting_of("calguard_cusum_h_low").default,
                                                                 setting_of("calguard_cusum_h_high").default):
        return  # thresholds of the user's own
    replies = cfg.num_rounds * cfg.clients_per_round / cfg.num_clients
    if not 0.75 <= replies / CUSUM_CALIBRATED_REPLIES <= 1.25:
        log(WARNING, "calguard-cusum: the default thresholds (h-low %g, h-high %g) were calibrated on runs with "
            "about %g replies per client (5 of 50 a round, 100 rounds); here each client replies about %.3g "
            "times, so benign clients may be excluded far more often (about one reply in six at 20 per client): "
            "calibrate calguard-cusum-h-low / -h-high on benign audit runs of this federation (docs/defense.md, "
            "\"The sequential test's thresholds at 10 clients a round\")", cfg.calguard_cusum_h_low,
            cfg.calguard_cusum_h_high, CUSUM_CALIBRATED_REPLIES, replies)
