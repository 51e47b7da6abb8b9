"""The LM case study's tables and plots, from finished ``lm`` run directories only.

* ``table.md`` / ``table.csv`` — per τ (benign = τ 1), mean over seeds (± standard deviation from
  two seeds on): next-token accuracy, perplexity, ECE, sECE, Brier, the mean top-p nucleus size,
  and the sampled continuations' rep4, distinct-1/2 and non-word share;
* ``reliability.png`` — next-token reliability diagrams per τ (bins pooled over seeds);
* ``nucleus.png`` — mean nucleus size and sECE against τ;
* ``continuations.md`` — for the lowest seed, each prompt's first sampled continuation under every
  τ side by side (as generated: the report never edits text).

A row averages runs that differ only in their seed (and the τ the table shows); runs of other
configurations are rows of their own, named in a ``config`` column. A next-token accuracy within noise
of chance — the rate of the most frequent next token of the held-out windows, what a model answering
one token always scores (:mod:`fedcal.reports.chance`) — is flagged.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from fedcal.reports.chance import ChanceLevel, footnote, labels_chance, marked
from fedcal.reports.groups import CONFIG, frame_config_labels
from fedcal.reports.markdown import SECE_SIGN, markdown_table
from fedcal.reports.plots import _save, plt, reliability_grid
from fedcal.reports.runs import final_metrics

#: the run-config keys the LM table shows: τ (benign = τ 1), the attack and its coupling
SHOWN = ("tau", "attack", "coupled")
CHANCE = "chance_level"

COLUMNS = {"accuracy": "accuracy %", "perplexity": "perplexity", "ece": "ECE %", "sece": "sECE %", "brier": "Brier",
           "nucleus": "nucleus size", "rep4": "rep-4 %", "distinct1": "distinct-1 %", "distinct2": "distinct-2 %",
           "nonword": "non-words %"}
PERCENT = ("accuracy", "ece", "sece", "rep4", "distinct1", "distinct2", "nonword")


def _tau(row: pd.Series) -> float:
    return 1.0 if row["attack"] == "none" else float(row["tau"])


def _label(tau: float) -> str:
    return "benign (τ 1)" if tau == 1 else f"τ {tau:g}"


def lm_chance(cfg) -> ChanceLevel | None:
    """The chance level of an lm run's next-token accuracy: the held-out windows' targets (every
    position's next token) over the vocabulary. Read only where the run's small model is cached (its
    tokenizer makes the windows, :func:`fedcal.lm.run_inputs.cached_test_targets`); None otherwise — a
    report never pretrains a model."""
    from fedcal.lm.run_inputs import LMRunSpec, cached_test_targets

    try:
        found = cached_test_targets(LMRunSpec.from_config(cfg))
    except Exception:  # noqa: BLE001 — no corpus or model here: the flag is unknown, the table still stands
        return None
    return None if found is None else labels_chance(*found)


def lm_table(finals: pd.DataFrame) -> pd.DataFrame:
    """Per (config, τ): runs and the mean (± sd) of every metric of :data:`COLUMNS` (percent where a
    rate); the accuracy of a row with chance-level runs carries the chance marker."""
    rows = []
    many = CONFIG in finals.columns and finals[CONFIG].nunique() > 1
    for key, group in finals.groupby([CONFIG, "tau_eff"] if many else ["tau_eff"], sort=True):
        tau = key[-1] if isinstance(key, tuple) else key
        if group["seed"].duplicated().any():
            raise ValueError(f"two runs of one seed in the lm row τ = {tau:g}: {', '.join(group['run_id'])}")
        row = ({CONFIG: key[0]} if many else {}) | {"τ": _label(tau), "runs": len(group)}
        for key, name in COLUMNS.items():
            if key not in group:
                continue
            vals = group[key].astype(float) * (100 if key in PERCENT else 1)
            text = f"{vals.mean():.2f}"
            if len(vals) > 1:
                text += f" ± {vals.std(ddof=1):.2f}"
            row[name] = text
        k = int(group[CHANCE].sum()) if CHANCE in group else 0
        if k and "accuracy %" in row:
            row["accuracy %"] = marked(row["accuracy %"], True) + ("" if k == len(group) else f" ({k}/{len(group)})")
        rows.append(row)
    return pd.DataFrame(rows)


def _pooled_bins(run_dirs: Sequence[Path]) -> pd.DataFrame | None:
    tables = [pd.read_csv(d / "reliability.csv") for d in run_dirs if (d / "reliability.csv").exists()]
    if not tables:
        return None
    base = tables[0][["lower", "upper"]].copy()
    count = sum(t["count"] for t in tables)
    base["count"] = count
    for col in ("confidence", "accuracy"):
        base[col] = sum(t[col].fillna(0) * t["count"] for t in tables) / count.where(count > 0)
    return base


def lm_report(run_dirs: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str], title: str = "") -> str:
    """Write the LM case study's table, plots and continuations into ``out_dir`` from finished
    ``lm`` runs; returns the table's Markdown."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    finals = final_metrics(run_dirs, "the lm table")
    if finals.empty:
        raise ValueError("no finished lm run to report")
    finals = finals.copy()  # one block: the columns below are added to it one by one
    finals["tau_eff"] = finals.apply(_tau, axis=1)
    finals[CONFIG] = frame_config_labels(finals, SHOWN)
    from fedcal.results import load_config, run_id_of

    dirs = {run_id_of(d): Path(d) for d in run_dirs}  # the run's id, not its folder's name (a copy may be renamed)

    levels = {r: lm_chance(load_config(dirs[r])) for r in finals["run_id"]}
    finals[CHANCE] = [bool(levels[r] is not None and levels[r].flags(float(a)))
                      for r, a in zip(finals["run_id"], finals["accuracy"])]
    table = lm_table(finals)
    table.to_csv(out / "table.csv", index=False)
    md = markdown_table(table, title or "TSA on a federated language model")
    if finals[CHANCE].any():
        md += "\n" + footnote(levels.values(), "next-token accuracy")
    md += f"\n{SECE_SIGN}\n"
    (out / "table.md").write_text(md)

    # diagrams and curves: one per (config, τ) — each pools the seeds of one configuration only
    lines = finals.groupby([CONFIG, "tau_eff"], sort=True)
    name = (lambda c, t: f"{_label(t)} [{c}]" if c else _label(t))  # noqa: E731
    by_tau = {(c, tau): [dirs[r] for r in g["run_id"]] for (c, tau), g in lines}
    panels = [(name(c, t), b) for (c, t), ds in by_tau.items() if (b := _pooled_bins(ds)) is not None]
    if panels:
        reliability_grid(panels, out / "reliability.png")

    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for config, block in finals.groupby(CONFIG, sort=True):
        means = block.groupby("tau_eff")[["nucleus", "sece"]].mean()
        axes[0].plot(means.index, means["nucleus"], "o-", label=config or None)
        axes[1].plot(means.index, 100 * means["sece"], "o-", label=config or None)
    if finals[CONFIG].nunique() > 1:
        axes[0].legend(fontsize=6)
    axes[0].set(xscale="log", xlabel="τ of the attackers", ylabel="mean top-p nucleus (tokens)")
    axes[1].axhline(0, color="k", lw=0.8)
    axes[1].set(xscale="log", xlabel="τ of the attackers", ylabel="next-token sECE %")
    fig.tight_layout()
    _save(fig, out / "nucleus.png")

    seed = finals["seed"].min()
    texts = {}
    for (config, tau), dirs in by_tau.items():
        for d in dirs:
            path = d / "generations.csv"
            if path.exists() and int(finals.loc[finals["run_id"] == run_id_of(d), "seed"].iloc[0]) == seed:
                gens = pd.read_csv(path, keep_default_na=False)
                texts[name(config, tau)] = gens[gens["sample"] == 0].set_index("prompt_id")
    if texts:
        first = next(iter(texts.values()))
        lines = [f"**Sampled continuations (seed {seed}, top-p, first sample of each prompt)**", ""]
        for pid, prompt in first["prompt"].items():
            rows = pd.DataFrame({"model": list(texts),
                                 "continuation": [g.loc[pid, "continuation"].replace("\n", " / ").replace("|", "\\|")
                                                  for g in texts.values()]})
            lines += [f"**Prompt {pid}:** {prompt}", "", markdown_table(rows)]
        (out / "continuations.md").write_text("\n".join(lines))
    return md
