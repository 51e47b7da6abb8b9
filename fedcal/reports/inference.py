"""The robust-federated-inference report (flwr-free): tables and plots of finished inference
runs, from what each run saved (``accuracy.csv``, the curves, ``probits.pt``).

``inference_configs`` lists the runs of an (n, f) × seed grid; ``inference_report`` writes
per-(n, f) tables of aggregators × attacks ("mean ± std" over seeds, :func:`seed_table`), the
robust-elements ablation of DeepSet-TM (:func:`ablation_table`), the worst case per (n, f)
(``scalability.md``) and the accuracy curves; ``client_accuracies`` is
each client's own test accuracy. Only finished runs (a ``DONE`` matching their config hash) are
read: an unfinished run's files may be partial, so it is left out and named in a warning line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from fedcal.config import RunConfig
from fedcal.inference.evaluate import AGGREGATOR_NAMES
from fedcal.inference.probit_attacks import PROBIT_ATTACKS
from fedcal.reports.markdown import markdown_table
from fedcal.reports.runs import finished_only
from fedcal.results import UnfinishedRunError, load_config


def inference_configs(base: RunConfig, nf: Sequence[tuple[int, int]], seeds: Sequence[int]) -> list[RunConfig]:
    """One robust-federated-inference config per (n, f) and seed."""
    return [base.replace(task="inference", num_clients=n, clients_per_round=min(base.clients_per_round, n),
                         inf_f=f, seed=s) for n, f in nf for s in seeds]


def worst_case(df: pd.DataFrame, by: Sequence[str] = ("aggregator",)) -> pd.DataFrame:
    """Per group, the lowest accuracy over attacks and the attack achieving it."""
    idx = df.groupby(list(by))["accuracy"].idxmin()
    out = df.loc[idx, [*by, "accuracy", "attack"]].rename(columns={"attack": "worst_attack"})
    return out.reset_index(drop=True)


def percent_cell(mean: float, std: float, count: int) -> str:
    """A fraction as "mean ± std" in percent; the mean alone for a single seed (its spread is unknown, not 0)."""
    return f"{100 * mean:.2f}" if count <= 1 else f"{100 * mean:.2f} ± {100 * std:.2f}"


def seed_table(cells: pd.DataFrame, order: Sequence[str] = AGGREGATOR_NAMES) -> pd.DataFrame:
    """Aggregators × attacks (+ worst case) of accuracy in %, "mean ± std" over seeds.

    ``cells`` holds :func:`fedcal.inference.evaluate.attack_accuracy` rows with a ``seed``
    column (one f_adv). The worst case is taken per seed, then averaged.
    """
    if cells["f_adv"].nunique() != 1:
        raise ValueError("seed_table expects rows of a single f_adv")
    worst = worst_case(cells, by=("aggregator", "seed")).assign(attack="worst case")
    full = pd.concat([cells[["aggregator", "seed", "attack", "accuracy"]], worst[["aggregator", "seed", "attack",
                                                                                   "accuracy"]]])
    stats = full.groupby(["aggregator", "attack"])["accuracy"].agg(["mean", "std", "count"]).reset_index()
    stats["cell"] = [percent_cell(m, s, k) for m, s, k in zip(stats["mean"], stats["std"], stats["count"])]
    attacks = [a for a in PROBIT_ATTACKS if a in set(cells["attack"])] + ["worst case"]
    table = stats.pivot(index="aggregator", columns="attack", values="cell")[attacks]
    present = [a for a in order if a in table.index] + [a for a in table.index if a not in order]
    return table.loc[present]


# The robust-elements ablation of DeepSet-TM: which of its two elements (trimmed pooling,
# adversarial training) each aggregator has.
ABLATION_ROWS = {"deepset_plain": ("DeepSet", "no", "no"), "deepset_plain_tm": ("+ CWTM", "yes", "no"),
                 "deepset": ("+ adversarial training", "no", "yes"),
                 "deepset_tm": ("+ both (DeepSet-TM)", "yes", "yes")}


def ablation_table(table: pd.DataFrame) -> pd.DataFrame:
    """The four DeepSet variants of a :func:`seed_table` (clean and worst-case accuracy), labelled
    by their robust elements; empty when the runs had no adversarial phase (no plain DeepSet)."""
    rows = [a for a in ABLATION_ROWS if a in table.index]
    if len(rows) < len(ABLATION_ROWS):
        return pd.DataFrame()
    out = pd.DataFrame([ABLATION_ROWS[a] for a in rows], columns=["variant", "trimmed pooling", "adversarial training"])
    out["aggregator"] = rows
    for col in ("none", "worst case"):
        if col in table.columns:
            out["clean" if col == "none" else col] = table.loc[rows, col].to_list()
    return out


def _read_cells(run_dirs: Sequence[str | Path], name: str) -> pd.DataFrame:
    frames = [pd.read_csv(Path(d) / name) for d in run_dirs if (Path(d) / name).exists()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def inference_report(run_dirs: Sequence[str | Path], out_dir: str | Path, title: str = "") -> str:
    """Tables and plots of finished inference runs (their ``accuracy.csv`` and curves).

    Writes ``cells.csv`` (every run's rows), ``table_n<n>_f<f>.md/.csv`` (aggregators ×
    attacks + worst case, mean ± std over seeds) per (n, f), ``ablation_n<n>_f<f>.md`` (the four
    DeepSet variants, when the runs trained adversarially), ``scalability.md`` (worst case
    per (n, f)), and ``acc_vs_f.png`` / ``acc_vs_amplification.png`` from the curves. Returns
    the Markdown of all tables. Unfinished runs are left out (each named in a warning line);
    with no finished run, :class:`fedcal.results.UnfinishedRunError`.
    """
    from fedcal.reports.plots import inference_curve

    given = list(run_dirs)
    run_dirs = finished_only(given, "the inference report")
    if not run_dirs:
        raise UnfinishedRunError(f"no finished run among the {len(given)} run directories: nothing to report")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells = _read_cells(run_dirs, "accuracy.csv")
    if cells.empty:
        raise FileNotFoundError(f"no accuracy.csv in {len(run_dirs)} finished run directories: no inference run")
    cells.to_csv(out / "cells.csv", index=False)
    parts = [f"**{title}**\n"] if title else []
    for (n, f), g in cells.groupby(["n", "f"]):
        table = seed_table(g)
        table.to_csv(out / f"table_n{n}_f{f}.csv")
        md = markdown_table(table.reset_index(), f"n = {n}, f = {f}: accuracy (%) per attack, {_over_seeds(g)}")
        (out / f"table_n{n}_f{f}.md").write_text(md)
        parts.append(md)
        ablation = ablation_table(table)
        if not ablation.empty:
            md = markdown_table(ablation, f"n = {n}, f = {f}: robust elements of DeepSet-TM, accuracy (%), "
                                          f"{_over_seeds(g)}")
            (out / f"ablation_n{n}_f{f}.md").write_text(md)
            parts.append(md)
    worst = worst_case(cells, by=("n", "f", "seed", "aggregator"))
    scal = worst.groupby(["n", "f", "aggregator"])["accuracy"].agg(["mean", "std", "count"]).reset_index()
    scal["cell"] = [percent_cell(m, s, k) for m, s, k in zip(scal["mean"], scal["std"], scal["count"])]
    wide = scal.pivot(index="aggregator", columns=["n", "f"], values="cell")
    wide.columns = [f"n={n}, f={f}" for n, f in wide.columns]
    wide = wide.loc[[a for a in AGGREGATOR_NAMES if a in wide.index]]
    md = markdown_table(wide.reset_index(), f"worst-case accuracy (%) over attacks per (n, f), {_over_seeds(cells)}")
    (out / "scalability.md").write_text(md)
    parts.append(md)
    for name, x, png in (("curve_f.csv", "f_adv", "acc_vs_f.png"),
                         ("curve_amp.csv", "amplification", "acc_vs_amplification.png")):
        curve = _read_cells(run_dirs, name)
        for (n, f), g in (curve.groupby(["n", "f"]) if not curve.empty else []):
            suffix = "" if curve[["n", "f"]].drop_duplicates().shape[0] == 1 else f"_n{n}_f{f}"
            g.to_csv(out / f"{Path(png).stem}{suffix}.csv", index=False)
            inference_curve(g, x, out / f"{Path(png).stem}{suffix}.png",
                            f"n = {n}, aggregators built for f = {f}, {_over_seeds(g, spread=False)}")
    clients = client_accuracies(run_dirs)
    if not clients.empty:
        clients.to_csv(out / "clients.csv", index=False)
    text = "\n".join(parts)
    (out / "tables.md").write_text(text)
    return text


def client_accuracies(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Each client's own test accuracy (its probits' argmax, on the queries it answered validly)
    in each finished inference run, from the saved probits (unfinished runs left out, each named
    in a warning line)."""
    from fedcal.inference.evaluate import ProbitData

    rows = []
    for d in finished_only(run_dirs, "clients.csv"):
        if not (d / "probits.pt").exists():
            continue
        cfg = load_config(d)
        data = ProbitData.load(d / "probits.pt")
        hit = (data.test_probits.argmax(-1) == data.test_labels[:, None]) & data.test_valid
        acc = hit.sum(0) / data.test_valid.sum(0).clamp_min(1)
        rows += [{"seed": cfg.seed, "n": cfg.num_clients, "f": cfg.inf_f, "client": c, "accuracy": float(a)}
                 for c, a in zip(data.clients, acc)]
    return pd.DataFrame(rows)


def _over_seeds(rows: pd.DataFrame, spread: bool = True) -> str:
    """Which seeds ``rows`` cover, for titles: "seed 0", or "(mean ± std over) 5 seeds"."""
    seeds = sorted(int(s) for s in rows["seed"].unique())
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"mean ± std over {len(seeds)} seeds" if spread else f"{len(seeds)} seeds"
