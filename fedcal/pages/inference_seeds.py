"""One robust-inference table over seeds from reports of one configuration made by separate commands.

    python -m fedcal.pages inference_seeds --seeds 0-2 --dataset cifar10 --data-dir ../shared/data \\
        --out docs/results/inference-cifar10-resnet8-grid-3seeds docs/results/inference-cifar10-resnet8-grid \\
        docs/results/inference-cifar10-resnet8 docs/results/inference-cifar10-resnet8-grid-seeds1-2

Each positional argument is a ``fedcal inference`` report folder (its ``cells.csv`` and, where it
has one, ``clients.csv``). The run stores behind an (n, f) grid's first seed may be gone (made on a
lent machine) while its report remains; a later command adds seeds, and this tool writes the tables
``fedcal inference`` would have written for all of them (:func:`fedcal.reports.inference.write_inference_tables`:
per-(n, f) tables, the ablation, ``scalability.md``) — no curves, which need the runs' files.

The reports must be of one configuration (the same keys but ``--nf`` and ``--seeds``): that is the
caller's to ensure, from the commands shown beside the table. A run reported twice (the same rows) is
kept once; two different runs claiming one (seed, n, f) stop the tool
(:func:`fedcal.reports.inference.combine_cells`). The chance-level flags are re-taken on the dataset's
test labels (older reports have none).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd


def combine_clients(folders: list[Path], seeds: list[int]) -> pd.DataFrame:
    """The reports' ``clients.csv`` (each client's own test accuracy) over ``seeds``, each (seed, n, f,
    client) once; a client reported with two accuracies is two runs claiming one seed."""
    frames = [pd.read_csv(d / "clients.csv") for d in folders if (d / "clients.csv").exists()]
    if not frames:
        return pd.DataFrame()
    clients = pd.concat(frames, ignore_index=True)
    clients = clients[clients["seed"].isin(seeds)].drop_duplicates(ignore_index=True)
    keys = ["seed", "n", "f", "client"]
    if clients.duplicated(keys).any():
        raise SystemExit("two different runs report the same (seed, n, f) clients: one seed is never counted twice")
    return clients.sort_values(keys, ignore_index=True)


def main(argv: list[str] | None = None) -> None:
    from fedcal.reports.chance import image_chance
    from fedcal.reports.inference import combine_cells, write_inference_tables
    from fedcal.studies.common import parse_ints  # the --seeds syntax of fedcal's own commands

    ap = argparse.ArgumentParser(prog="python -m fedcal.pages inference_seeds", description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="fedcal inference report folders (their cells.csv)")
    ap.add_argument("--out", type=Path, required=True, help="the folder of the combined tables")
    ap.add_argument("--seeds", required=True, help="the seeds the table holds, e.g. 0-2 (every (n, f) the same)")
    ap.add_argument("--dataset", required=True, help="the runs' dataset (for the chance level of its test labels)")
    ap.add_argument("--data-dir", default="", help="where the dataset's test labels are")
    ap.add_argument("--title", default="")
    args = ap.parse_args(argv)
    seeds = sorted(set(parse_ints(args.seeds, "--seeds")))
    frames = [pd.read_csv(d / "cells.csv") for d in args.folders]
    queries = int(pd.concat([f["queries"] for f in frames]).max())
    chance = image_chance(args.dataset, args.data_dir, n=queries)
    cells = combine_cells(frames, seeds=seeds, chance=chance)
    have = cells.groupby(["n", "f"])["seed"].agg(lambda s: sorted(set(s)))
    short = {nf: s for nf, s in have.items() if s != seeds}
    if short:
        raise SystemExit("not every (n, f) has the seeds asked for: " + "; ".join(
            f"n = {n}, f = {f}: seeds {s}" for (n, f), s in short.items()))
    print(write_inference_tables(cells, args.out, [chance], title=args.title))
    clients = combine_clients(args.folders, seeds)
    if not clients.empty:
        clients.to_csv(args.out / "clients.csv", index=False)


if __name__ == "__main__":
    main()
