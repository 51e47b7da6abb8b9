"""Task ``lm``: the Temperature Scaling Attack on a federated GPT-2 language model (SPEC §10).

The federation is the train task's (:func:`fedcal.tasks.train.federate`): the configured strategy
samples ``clients-per-round`` of the ``num-clients`` nodes each round, validates every reply (a
NaN, wrong-shaped or error reply is rejected with its node named, ``rejections.csv``) and
aggregates. What differs is the model and the data: each client is one speaking role of
Shakespeare (:mod:`fedcal.lm.corpus`), the global model a GPT-2 from ``transformers``
(:mod:`fedcal.lm.model`), and a client's round is the same :func:`fedcal.attacks.client_round`
every image client runs — benign, or TSA's CE(softmax(z/τ), y) with η = β·τ — on its next-token
windows (message type ``train.lm``).

Server side, every ``eval-every`` rounds (always 0 and the last): next-token accuracy, perplexity,
ECE / sECE / Brier and the mean top-p nucleus size on the held-out text
(:func:`fedcal.lm.metrics.token_metrics`); after the last round also ``reliability.csv``, the
sampled continuations of fixed prompts (``generations.csv``) and their statistics (rep4,
distinct1/2, nonword). A global model with non-finite logits is a result (logged, metrics NaN),
not a crash. Report: :func:`fedcal.reports.lm.lm_report`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from logging import INFO, WARNING

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from fedcal.attacks import AttackSpec, LocalRoundSpec, attackers_of, behaviour_for, client_round
from fedcal.config import RunConfig
from fedcal.lm.metrics import TOKEN_KEYS
from fedcal.lm.run_inputs import LMEvaluator, LMRunSpec, client_windows, node_model
from fedcal.results import RunStore, run_dir_for
from fedcal.tasks.nodes import (CLIENT_RECORD, check_partitions, client_id, client_record, discover_clients,
                                message_config)
from fedcal.config.lm import MESSAGE_TYPE  # the task's declaration names its message type
from fedcal.tasks.registry import ProgressFn
from fedcal.tasks.train import federate
from fedcal.local_training import resolve_device

if TYPE_CHECKING:
    import pandas as pd



def run_lm(grid: Grid, cfg: RunConfig, progress: ProgressFn | None = None) -> pd.DataFrame:
    """Run one federated language-model experiment on ``grid``; returns the per-round metrics."""
    import pandas as pd  # lazily: the ClientApp process never loads pandas

    evaluator = LMEvaluator(LMRunSpec.from_config(cfg))  # first: a bad prompt or context is a config error
    store = RunStore(run_dir_for(cfg), cfg)
    with store.session(rounds=cfg.num_rounds) as checkpoint:  # resumes an unfinished attempt (federate)
        node_to_client = discover_clients(grid, cfg.num_clients)
        log(INFO, "lm: attackers (%s, %d of %d): %s", cfg.attack, cfg.num_attackers, cfg.num_clients,
            sorted(attackers_of(AttackSpec.from_config(cfg))))

        def evaluate(server_round: int, arrays: ArrayRecord) -> dict[str, float]:
            import pandas as pd  # lazily: the ClientApp process never loads pandas
            last = server_round == cfg.num_rounds
            if not (server_round == 0 or last or server_round % cfg.eval_every == 0):
                return {}
            try:
                result = evaluator(arrays.to_torch_state_dict(), generate=last)
            except FloatingPointError:  # a diverged model is a result (e.g. extreme τ), not a crash
                log(WARNING, "round %d: global language model produced non-finite logits", server_round)
                return {k: float("nan") for k in TOKEN_KEYS}
            if last:
                store.write_table("reliability.csv", pd.DataFrame({k: v.numpy() for k, v in result.bins.items()}))
                store.write_table("generations.csv", result.generations)
            return result.metrics

        final, rows = federate(grid, cfg, store, evaluator.initial_state(), evaluate, progress, node_to_client,
                               message_type=MESSAGE_TYPE, resume=checkpoint)
        store.save_model(final)
        store.finish()
    return pd.DataFrame(rows)


def train_lm(msg: Message, context: Context) -> Message:
    """One client's local round on its role's windows, benign or TSA as its behaviour says."""
    cfg, server_round = message_config(msg, context)
    check_partitions(cfg, context)
    cid = client_id(context)
    spec = LMRunSpec.from_config(cfg)
    data = client_windows(spec, cid)
    model, tokens = node_model(spec)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    behaviour = behaviour_for(AttackSpec.from_config(cfg), cid)
    stats = client_round(model, data[:, :-1], data[:, 1:], tokens.vocab_size, behaviour,
                         LocalRoundSpec.from_config(cfg), server_round, cid,
                         resolve_device(cfg.device))
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return Message(content=RecordDict({
        "arrays": ArrayRecord(state),
        "metrics": MetricRecord({"train-loss": stats.loss, "num-examples": stats.num_examples}),
        CLIENT_RECORD: client_record(cid, behaviour.malicious),
    }), reply_to=msg)
