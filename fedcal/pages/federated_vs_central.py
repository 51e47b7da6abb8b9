"""Federated vs central calibration under TSA: how far the clients' merged estimate lies from the
central test set's, how noisy it is, at which client counts.

    python -m fedcal.pages federated_vs_central OUT_DIR [key=value ...]

For τ = 0.2 and 5 (TSA, the run-config's other keys as given, digits by default: K = 10 clients,
M = 5 per round, Dirichlet α = 0.5, 20 rounds) one Flower run (engine=inprocess) with
``fed-eval-clients`` = 5: its ``fed_*`` metrics beside the central ones at every evaluation round
(``rounds.csv``). Then, on each run's final global model, every client's calibration state of its
held-out data (fedcal.calibration_state, the states the evaluate round merges), and for m = 1, 2,
3, 5 and K, 500 seeded draws of m clients whose states are merged: the mean and standard deviation
of the federated ECE and sECE and their mean absolute gap to the central values (``subsets.csv``,
``subsets.md``). With m = K the union of the held-out data is the test set and the gap is 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

BASE = dict(dataset="digits", model="mlp", num_clients=10, clients_per_round=5, num_rounds=20, eval_every=5,
            attack="tsa", attacker_ratio=0.3, lr=0.05, batch_size=16, local_steps=5, partition="dirichlet",
            dirichlet_alpha=0.5, fed_eval_clients=5, engine="inprocess", device="cpu")
TAUS = (0.2, 5.0)
DRAWS = 500


def _states(cfg, run_dir):
    """Every client's calibration state of the run's final model on its held-out data."""
    from fedcal.calibration_state import CalibrationState
    from fedcal.data import client_heldout
    from fedcal.local_training import predict_logits
    from fedcal.results import load_model

    _, model, _ = load_model(run_dir)
    out = []
    for p in range(cfg.num_clients):
        data = client_heldout(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.partition, cfg.dirichlet_alpha,
                              cfg.seed, p)
        out.append(CalibrationState.empty(cfg.n_bins).update_probs(predict_logits(model, data.x).double().softmax(1),
                                                                    data.y))
    return out


def _subsets(tau, cfg, states):
    from fedcal.calibration_state import merged

    central = merged(states, cfg.n_bins).compute()
    rng = np.random.default_rng([cfg.seed, 0xFED])
    rows = []
    for m in sorted({1, 2, 3, 5, cfg.num_clients}):
        draws = [merged([states[i] for i in rng.choice(cfg.num_clients, m, replace=False)], cfg.n_bins).compute()
                 for _ in range(DRAWS)]
        ece = np.array([d["ece"] for d in draws])
        sece = np.array([d["sece"] for d in draws])
        rows.append({"tau": tau, "m": m, "central_ece_%": 100 * central["ece"], "fed_ece_mean_%": 100 * ece.mean(),
                     "fed_ece_sd_%": 100 * ece.std(), "ece_gap_%": 100 * np.abs(ece - central["ece"]).mean(),
                     "central_sece_%": 100 * central["sece"], "fed_sece_mean_%": 100 * sece.mean(),
                     "fed_sece_sd_%": 100 * sece.std(), "sece_gap_%": 100 * np.abs(sece - central["sece"]).mean(),
                     "held_out_mean": float(np.mean([d["n"] for d in draws]))})
    return rows


def main(argv: list[str]) -> int:
    from fedcal.app.engine import simulate
    from fedcal.config import RunConfig, parse_override
    from fedcal.reports.markdown import markdown_table
    from fedcal.results import load_metrics

    ap = argparse.ArgumentParser(prog="python -m fedcal.pages federated_vs_central", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, metavar="OUT_DIR", help="where the runs and the tables go")
    ap.add_argument("overrides", nargs="*", metavar="key=value", help="run-config keys")
    args = ap.parse_args(argv)
    try:
        given = dict(map(parse_override, args.overrides))
    except ValueError as exc:
        ap.error(str(exc))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    overrides = {**BASE, "output_dir": str(out / "runs"),
                 **{k.replace("-", "_"): v for k, v in given.items()}}
    rounds, subsets = [], []
    for tau in TAUS:
        cfg = RunConfig.from_flower({k.replace("_", "-"): v for k, v in {**overrides, "tau": tau}.items()})
        run_dir = simulate(cfg, progress=False)
        m = load_metrics(run_dir).pivot_table(index="round", columns="metric", values="value")
        keep = ["ece", "fed_ece", "sece", "fed_sece", "fed_clients", "fed_n"]
        rounds.append(m[[c for c in keep if c in m.columns]].dropna(subset=["fed_ece"]).reset_index().assign(tau=tau))
        subsets += _subsets(tau, cfg, _states(cfg, run_dir))
    pd.concat(rounds).to_csv(out / "rounds.csv", index=False)
    table = pd.DataFrame(subsets)
    table.to_csv(out / "subsets.csv", index=False)
    fmt = {c: "{:.2f}" for c in table.columns if c.endswith("%")}
    md = markdown_table(table, f"federated vs central calibration of the final model under TSA ({DRAWS} client "
                               "subsets of size m each)", formats={**fmt, "tau": "{:g}", "m": "{:.0f}",
                                                                  "held_out_mean": "{:.0f}"})
    (out / "subsets.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
