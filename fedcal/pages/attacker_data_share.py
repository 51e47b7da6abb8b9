"""How much of the training data, per class, the attackers of a run hold: what a defense that
excludes them removes from the federation (docs/defense-results.md, the CIFAR-10 closed loop).

For every finished run directory given, the Dirichlet partition of its config is rebuilt
(:func:`fedcal.data.client_partitions`, as the clients draw it) and the attackers
(:func:`fedcal.attacks.attackers_of`) are looked up; printed per seed: the attackers' share of
all training samples and the smallest share of one class left to the benign clients.

Usage (from the repository root)::

    python -m fedcal.pages attacker_data_share runs/closed-cifar/*-calguard-tsa5-*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from fedcal.attacks import AttackSpec, attackers_of
from fedcal.data import client_partitions, load_dataset
from fedcal.reports.markdown import markdown_table
from fedcal.results import load_config


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m fedcal.pages attacker_data_share", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="finished run directories")
    rows = []
    for d in sorted(ap.parse_args(argv).runs):
        cfg = load_config(d)
        labels = load_dataset(cfg.dataset, cfg.data_dir).y_train.numpy()
        parts = client_partitions(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.partition, cfg.dirichlet_alpha,
                                  cfg.seed)
        bad = attackers_of(AttackSpec.from_config(cfg))
        held = np.concatenate([parts[c] for c in sorted(bad)]) if bad else np.array([], int)
        k = int(labels.max()) + 1
        per_class = np.bincount(labels[held], minlength=k) / np.bincount(labels, minlength=k)
        rows.append({"run": d.name, "seed": cfg.seed, "attackers": len(bad),
                     "attackers_share_%": round(100 * len(held) / len(labels), 1),
                     "benign_min_class_share_%": round(100 * (1 - per_class.max()), 1),
                     "class_most_held": int(per_class.argmax())})
    print(markdown_table(pd.DataFrame(rows)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
