"""The robust-federated-inference report (flwr-free): tables and plots of finished inference
runs, from what each run saved (``accuracy.csv``, the curves, ``probits.pt``).

``inference_configs`` lists the runs of an (n, f) × seed grid; ``inference_report`` writes
per-(n, f) tables of aggregators × attacks ("mean ± std" over seeds, :func:`seed_table`), the
robust-elements ablation of DeepSet-TM (:func:`ablation_table`), the worst case per (n, f)
(``scalability.md``) and the accuracy curves; ``client_accuracies`` is
each client's own test accuracy. Only finished runs (a ``DONE`` matching their config hash) are
read: an unfinished run's files may be partial, so it is left out and named in a warning line.

Runs that differ in more than their seed and the table's own (n, f) are told apart by a ``config``
column (:mod:`fedcal.reports.groups`). An aggregator (or client) whose clean accuracy — attack
``none`` — is within noise of chance on the run's test queries is flagged (``chance_level`` in
``cells.csv``, a marker and a footnote in the tables; :mod:`fedcal.reports.chance`): a constant
answer is unmoved by every attack, so its worst case is no robustness, and :func:`robust_ranking`
leaves it out of the ranking.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from fedcal.inference.evaluate import AGGREGATOR_NAMES
from fedcal.inference.probit_attacks import PROBIT_ATTACKS
from fedcal.reports.chance import ChanceLevel, footnote, image_chance, labels_chance, marked
from fedcal.reports.groups import CONFIG, config_labels
from fedcal.reports.markdown import markdown_table
from fedcal.reports.runs import finished_only
from fedcal.results import UnfinishedRunError, load_config

CHANCE = "chance_level"
#: the run-config keys the inference tables show: n (num-clients, with clients-per-round capped at
#: it by inference_configs) and f
SHOWN = ("num_clients", "clients_per_round", "inf_f")


def worst_case(df: pd.DataFrame, by: Sequence[str] = ("aggregator",)) -> pd.DataFrame:
    """Per group, the lowest accuracy over attacks and the attack achieving it (and, when ``df`` has
    one, its ``chance_level`` flag)."""
    idx = df.groupby(list(by))["accuracy"].idxmin()
    keep = [*by, "accuracy", "attack", *([CHANCE] if CHANCE in df.columns and CHANCE not in by else [])]
    out = df.loc[idx, keep].rename(columns={"attack": "worst_attack"})
    return out.reset_index(drop=True)


def without_chance(cells: pd.DataFrame) -> pd.DataFrame:
    """``cells`` without the rows of aggregators whose clean accuracy is at chance level in any of
    them (their ``chance_level`` column; unchanged for tables written before it existed): what a
    ranking of worst cases may rank."""
    if CHANCE not in cells.columns:
        return cells
    return cells[~cells["aggregator"].isin(set(cells.loc[cells[CHANCE].astype(bool), "aggregator"]))]


def robust_ranking(cells: pd.DataFrame, by: Sequence[str] = ("seed", "aggregator")) -> tuple[pd.Series, list[str]]:
    """(aggregators by mean worst-case accuracy, best first; the aggregators left out because their
    clean accuracy is at chance level in some seed). A constant predictor is unmoved by every attack:
    its worst case equals its clean accuracy and would otherwise rank it "robust"."""
    kept = without_chance(cells)
    at_chance = sorted(set(cells["aggregator"]) - set(kept["aggregator"]))
    ranking = worst_case(kept, by=by).groupby("aggregator")["accuracy"].mean() if len(kept) else pd.Series(dtype=float)
    return ranking.sort_values(ascending=False), at_chance


def percent_cell(mean: float, std: float, count: int) -> str:
    """A fraction as "mean ± std" in percent; the mean alone for a single seed (its spread is unknown, not 0)."""
    return f"{100 * mean:.2f}" if count <= 1 else f"{100 * mean:.2f} ± {100 * std:.2f}"


def seed_table(cells: pd.DataFrame, order: Sequence[str] = AGGREGATOR_NAMES) -> pd.DataFrame:
    """Aggregators × attacks (+ worst case) of accuracy in %, "mean ± std" over seeds.

    ``cells`` holds :func:`fedcal.inference.evaluate.attack_accuracy` rows with a ``seed``
    column (one f_adv). The worst case is taken per seed, then averaged. With a ``chance_level``
    column, the clean and worst-case cells of an aggregator at chance level carry the chance marker
    (``k/n seeds`` when not every seed's).
    """
    if cells["f_adv"].nunique() != 1:
        raise ValueError("seed_table expects rows of a single f_adv")
    worst = worst_case(cells, by=("aggregator", "seed")).assign(attack="worst case")
    full = pd.concat([cells[["aggregator", "seed", "attack", "accuracy"]], worst[["aggregator", "seed", "attack",
                                                                                   "accuracy"]]])
    stats = full.groupby(["aggregator", "attack"])["accuracy"].agg(["mean", "std", "count"]).reset_index()
    stats["cell"] = [percent_cell(m, s, k) for m, s, k in zip(stats["mean"], stats["std"], stats["count"])]
    if CHANCE in cells.columns:
        flagged = cells[cells[CHANCE].astype(bool)].groupby("aggregator")["seed"].nunique()
        seeds = cells.groupby("aggregator")["seed"].nunique()
        stats["cell"] = [marked(c, a in flagged.index and k in ("none", "worst case"))
                         + ("" if a not in flagged.index or k not in ("none", "worst case")
                            or flagged[a] == seeds[a] else f" ({flagged[a]}/{seeds[a]} seeds)")
                         for c, a, k in zip(stats["cell"], stats["aggregator"], stats["attack"])]
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


def _read_cells(run_dirs: Sequence[str | Path], name: str, labels: dict[Path, str] | None = None) -> pd.DataFrame:
    frames = [pd.read_csv(Path(d) / name).assign(**({CONFIG: labels[Path(d)]} if labels else {}))
              for d in run_dirs if (Path(d) / name).exists()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def run_chance(run_dir: str | Path, queries: int | None = None) -> ChanceLevel | None:
    """The chance level of an inference run's test queries: from its saved probits (their labels and
    class count), else from its dataset's first ``queries`` test labels on disk."""
    from fedcal.inference.evaluate import ProbitData

    path = Path(run_dir) / "probits.pt"
    if path.exists():
        data = ProbitData.load(path)
        return labels_chance(data.test_labels.numpy(), int(data.test_probits.shape[-1]))
    cfg = load_config(run_dir)
    return image_chance(cfg.dataset, cfg.data_dir, n=queries)


def _flag_chance(acc: pd.DataFrame, chance: ChanceLevel | None) -> pd.DataFrame:
    """``acc`` (one run's accuracy.csv) with ``chance_level``: the aggregator's clean accuracy (attack
    ``none``; False when the run did not evaluate it) is within noise of chance."""
    clean = acc[acc["attack"] == "none"].groupby("aggregator")["accuracy"].min()
    flagged = {a for a, v in clean.items() if chance is not None and chance.flags(float(v))}
    return acc.assign(**{CHANCE: acc["aggregator"].isin(flagged)})


def _with_config(table: pd.DataFrame, label: str, many: bool) -> pd.DataFrame:
    return table.assign(**{CONFIG: label}).set_index(CONFIG, append=True).reorder_levels([1, 0]) if many else table


def inference_report(run_dirs: Sequence[str | Path], out_dir: str | Path, title: str = "") -> str:
    """Tables and plots of finished inference runs (their ``accuracy.csv`` and curves).

    Writes ``cells.csv`` (every run's rows, with ``chance_level`` and, for runs of several
    configurations, ``config``), ``table_n<n>_f<f>.md/.csv`` (aggregators × attacks + worst case, mean
    ± std over seeds) per (n, f), ``ablation_n<n>_f<f>.md`` (the four DeepSet variants, when the runs
    trained adversarially), ``scalability.md`` (worst case per (n, f)), and ``acc_vs_f.png`` /
    ``acc_vs_amplification.png`` from the curves. Returns the Markdown of all tables. Unfinished runs
    are left out (each named in a warning line); with no finished run,
    :class:`fedcal.results.UnfinishedRunError`.
    """
    given = list(run_dirs)
    run_dirs = finished_only(given, "the inference report")
    if not run_dirs:
        raise UnfinishedRunError(f"no finished run among the {len(given)} run directories: nothing to report")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfgs = [load_config(d) for d in run_dirs]
    labels = dict(zip(run_dirs, config_labels(cfgs, SHOWN)))
    many = len(set(labels.values())) > 1
    cells, levels = _accuracy_cells(run_dirs, labels, many)
    text = write_inference_tables(cells, out, levels, title=title)
    _write_curves(run_dirs, out, labels=labels, many=many)
    clients = client_accuracies(run_dirs)
    if not clients.empty:
        clients.to_csv(out / "clients.csv", index=False)
    return text


def write_inference_tables(cells: pd.DataFrame, out_dir: str | Path, levels: Sequence[ChanceLevel | None],
                           title: str = "") -> str:
    """``cells.csv``, ``table_n<n>_f<f>.md/.csv``, ``ablation_n<n>_f<f>.md``, ``scalability.md`` and
    ``tables.md`` from ``cells`` (``accuracy.csv`` rows with ``seed``, ``n``, ``f``, ``chance_level``
    and, for several configurations, ``config``); ``levels`` are the chance levels the flags were
    taken against (for the footnote). Returns the Markdown of all tables."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    many = CONFIG in cells.columns
    cells.to_csv(out / "cells.csv", index=False)
    note = footnote(list(levels), "clean accuracy (and hence the worst case)") if cells[CHANCE].any() else ""
    parts = [f"**{title}**\n"] if title else []
    for (n, f), block in cells.groupby(["n", "f"]):
        parts += _write_nf_tables(block, n, f, out, many=many, note=note)
    parts.append(_write_scalability(cells, out, by=[CONFIG] if many else [], note=note))
    text = "\n".join(parts)
    (out / "tables.md").write_text(text)
    return text


#: what identifies one row of an inference run's ``accuracy.csv`` within a table of one configuration
CELL_KEYS = ("seed", "n", "f", "aggregator", "attack", "f_adv", "amplification")


def combine_cells(frames: Sequence[pd.DataFrame], seeds: Sequence[int] | None = None,
                  chance: ChanceLevel | None = None) -> pd.DataFrame:
    """The ``cells.csv`` of several reports of one configuration (runs of other (n, f) or seeds, made
    by separate commands) as one table's cells, each (seed, n, f) once.

    A row present in two reports with the same accuracy is the same run reported twice (e.g. the
    (17, 4) cell of an (n, f) grid that is also seed 0 of a table over seeds) and is kept once; the
    same key with another accuracy is two different runs claiming one seed — a ``ValueError``, never a
    silent average. ``seeds`` keeps only those seeds (so every (n, f) of the table has the same
    seeds). ``chance`` re-takes the ``chance_level`` flags against one chance level (reports written
    before the flag existed have none); without it every frame must carry the column.
    """
    if not frames:
        raise ValueError("combine_cells needs at least one cells frame")
    keys = list(CELL_KEYS)
    for i, fr in enumerate(frames):
        missing = [k for k in [*keys, "accuracy", "queries"] if k not in fr.columns]
        if missing:
            raise ValueError(f"cells frame {i} lacks {missing}: not a fedcal inference report's cells.csv")
        if CONFIG in fr.columns:
            raise ValueError(f"cells frame {i} holds several configurations ({CONFIG!r} column): combine "
                             "reports of one configuration only")
    cols = [*keys, "accuracy", "queries"]
    cells = pd.concat([fr[cols] for fr in frames], ignore_index=True)
    if seeds is not None:
        cells = cells[cells["seed"].isin(list(seeds))]
    cells = cells.drop_duplicates(ignore_index=True)
    clash = cells[cells.duplicated(keys, keep=False)]
    if not clash.empty:
        s, n, f = clash.iloc[0][["seed", "n", "f"]]
        raise ValueError(f"two different runs report seed {s} at n = {n}, f = {f} ({len(clash)} rows disagree): "
                         "one seed is never counted twice")
    if cells["queries"].nunique() > 1:
        raise ValueError(f"the reports evaluated different query counts {sorted(cells['queries'].unique())}: "
                         "not one configuration")
    if chance is None:
        if not all(CHANCE in fr.columns for fr in frames):
            raise ValueError("a report has no chance_level column: pass the chance level to re-take the flags")
        flags = pd.concat([fr[[*keys, CHANCE]] for fr in frames]).drop_duplicates(keys)
        return cells.merge(flags, on=keys, how="left")
    return pd.concat([_flag_chance(g, chance) for _, g in cells.groupby(["seed", "n", "f"], sort=True)],
                     ignore_index=True)


def _accuracy_cells(run_dirs: list[Path], labels: dict, many: bool) -> tuple[pd.DataFrame, list]:
    """Every run's ``accuracy.csv`` rows with ``chance_level`` (and ``config`` when ``many``),
    and each run's chance level; runs without ``accuracy.csv`` are not inference runs."""
    frames, levels = [], []
    for d in run_dirs:
        if not (d / "accuracy.csv").exists():
            continue
        acc = pd.read_csv(d / "accuracy.csv")
        chance = run_chance(d, int(acc["queries"].max()) if "queries" in acc.columns else None)
        levels.append(chance)
        frames.append(_flag_chance(acc, chance).assign(**({CONFIG: labels[d]} if many else {})))
    if not frames:
        raise FileNotFoundError(f"no accuracy.csv in {len(run_dirs)} finished run directories: no inference run")
    return pd.concat(frames, ignore_index=True), levels


def _write_nf_tables(block: pd.DataFrame, n, f, out: Path, *, many: bool, note: str) -> list[str]:
    """``table_n<n>_f<f>.md/.csv`` (aggregators × attacks, mean ± std over seeds) and, when the
    runs trained adversarially, ``ablation_n<n>_f<f>.md`` for one (n, f); returns their Markdown."""
    tables, ablations, parts = [], [], []
    for label, g in block.groupby([CONFIG]) if many else [("", block)]:
        label = label[0] if isinstance(label, tuple) else label
        table = seed_table(g)
        tables.append(_with_config(table, label, many))
        ablation = ablation_table(table)
        if not ablation.empty:
            ablations.append(ablation.assign(**{CONFIG: label})[[CONFIG, *ablation.columns]] if many else ablation)
    table = pd.concat(tables)
    table.to_csv(out / f"table_n{n}_f{f}.csv")
    flagged = block[CHANCE].any()
    md = markdown_table(table.reset_index(), f"n = {n}, f = {f}: accuracy (%) per attack, {_over_seeds(block)}")
    md += ("\n" + note) if flagged else ""
    (out / f"table_n{n}_f{f}.md").write_text(md)
    parts.append(md)
    if ablations:
        md = markdown_table(pd.concat(ablations, ignore_index=True),
                            f"n = {n}, f = {f}: robust elements of DeepSet-TM, accuracy (%), {_over_seeds(block)}")
        md += ("\n" + note) if flagged else ""
        (out / f"ablation_n{n}_f{f}.md").write_text(md)
        parts.append(md)
    return parts


def _write_scalability(cells: pd.DataFrame, out: Path, *, by: list[str], note: str) -> str:
    """``scalability.md``: each aggregator's worst case over attacks per (n, f), mean ± std over
    seeds, a chance-level worst case marked; returns its Markdown."""
    worst = worst_case(cells, by=(*by, "n", "f", "seed", "aggregator"))
    scal = worst.groupby([*by, "n", "f", "aggregator"])["accuracy"].agg(["mean", "std", "count"]).reset_index()
    scal["cell"] = [percent_cell(m, s, k) for m, s, k in zip(scal["mean"], scal["std"], scal["count"])]
    if CHANCE in worst.columns:
        keys = [*by, "n", "f", "aggregator"]
        hit = set(worst.loc[worst[CHANCE].astype(bool), keys].itertuples(index=False, name=None))
        rows = scal[keys].itertuples(index=False, name=None)
        scal["cell"] = [marked(c, k in hit) for c, k in zip(scal["cell"], rows)]
    wide = scal.pivot(index=[*by, "aggregator"], columns=["n", "f"], values="cell")
    wide.columns = [f"n={n}, f={f}" for n, f in wide.columns]
    rank = {a: i for i, a in enumerate(AGGREGATOR_NAMES)}
    wide = wide.reset_index()
    wide = wide[wide["aggregator"].isin(rank)].assign(_o=lambda t: t["aggregator"].map(rank))
    wide = wide.sort_values([*by, "_o"], kind="stable").drop(columns="_o")
    md = markdown_table(wide, f"worst-case accuracy (%) over attacks per (n, f), {_over_seeds(cells)}")
    md += ("\n" + note) if cells[CHANCE].any() else ""
    (out / "scalability.md").write_text(md)
    return md


def _write_curves(run_dirs: list[Path], out: Path, *, labels: dict, many: bool) -> None:
    """``acc_vs_f`` and ``acc_vs_amplification`` (.csv and .png) per (n, f) and configuration,
    suffixed by them when the runs hold more than one."""
    from fedcal.reports.plots import inference_curve

    by = [CONFIG] if many else []
    for name, x, png in (("curve_f.csv", "f_adv", "acc_vs_f.png"),
                         ("curve_amp.csv", "amplification", "acc_vs_amplification.png")):
        curve = _read_cells(run_dirs, name, labels if many else None)
        keys = [*by, "n", "f"]
        for key, g in (curve.groupby(keys) if not curve.empty else []):
            key = key if isinstance(key, tuple) else (key,)
            n, f = key[-2:]
            single = curve[keys].drop_duplicates().shape[0] == 1
            suffix = "" if single else f"_n{n}_f{f}" + (f"_c{sorted(set(labels.values())).index(key[0])}"
                                                           if many else "")
            g.to_csv(out / f"{Path(png).stem}{suffix}.csv", index=False)
            inference_curve(g, x, out / f"{Path(png).stem}{suffix}.png",
                            f"n = {n}, aggregators built for f = {f}, {_over_seeds(g, spread=False)}"
                            + (f" [{key[0]}]" if many else ""))


def client_accuracies(run_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Each client's own test accuracy (its probits' argmax, on the queries it answered validly)
    in each finished inference run, from the saved probits (unfinished runs left out, each named
    in a warning line), and whether it is within noise of chance on those queries
    (``chance_level``)."""
    from fedcal.inference.evaluate import ProbitData

    rows = []
    for d in finished_only(run_dirs, "clients.csv"):
        if not (d / "probits.pt").exists():
            continue
        cfg = load_config(d)
        data = ProbitData.load(d / "probits.pt")
        hit = (data.test_probits.argmax(-1) == data.test_labels[:, None]) & data.test_valid
        answered = data.test_valid.sum(0)
        acc = hit.sum(0) / answered.clamp_min(1)
        classes = int(data.test_probits.shape[-1])
        for j, (c, a) in enumerate(zip(data.clients, acc)):
            own = data.test_labels[data.test_valid[:, j]].numpy()
            chance = labels_chance(own, classes) if len(own) else None
            rows.append({"seed": cfg.seed, "n": cfg.num_clients, "f": cfg.inf_f, "client": c, "accuracy": float(a),
                         CHANCE: bool(chance is not None and chance.flags(float(a)))})
    return pd.DataFrame(rows)


def _over_seeds(rows: pd.DataFrame, spread: bool = True) -> str:
    """Which seeds ``rows`` cover, for titles: "seed 0", or "(mean ± std over) 5 seeds"."""
    seeds = sorted(int(s) for s in rows["seed"].unique())
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"mean ± std over {len(seeds)} seeds" if spread else f"{len(seeds)} seeds"
