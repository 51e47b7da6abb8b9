"""The strategy × attack table (``fedcal byzantine``): every strategy, pre-aggregation
included, against every attack of Byzantine-robust FL, from finished runs only.

The cells are (attacker ratio, config) pairs built by :mod:`fedcal.studies.byzantine`, which says
how a strategy spec (``nnm+trimmed_mean``) and the rules' f per ratio (:func:`assumed_f`) are set;
a row is shown by its spec (:func:`spec_of`) and the f its ratio gave the rules.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from fedcal.config import RunConfig
from fedcal.reports.chance import cfg_chance, footnote, marked
from fedcal.reports.defense import flag_rates
from fedcal.reports.markdown import SECE_SIGN, markdown_table
from fedcal.reports.runs import STALLED, STALLED_NOTE, final_metrics, run_stalled
from fedcal.results import DONE_FILE, POISONING_FILE, load_timings, run_dir_for


def spec_of(cfg: RunConfig) -> str:
    """The strategy spec of a run (:func:`fedcal.studies.byzantine.parse_spec`'s inverse): its
    pre-aggregation steps, its strategy, and a ``:name`` for each of the strategy's boolean keys
    (``<strategy>-<name>``) turned on against its default."""
    from fedcal.config import defaults

    prefix = f"{cfg.strategy}_"
    flags = [n[len(prefix):].replace("_", "-") for n, d in defaults().items()
             if n.startswith(prefix) and d is False and getattr(cfg, n) is True]
    return "+".join([*cfg.pre_aggregations, ":".join([cfg.strategy, *flags])])


def assumed_f(ratio: float, clients_per_round: int) -> int:
    """f = ⌈ratio · M⌉ (at least 1): the rules' assumed Byzantine replies per round."""
    return max(1, math.ceil(ratio * clients_per_round - 1e-9))


def _run_dirs(cells: Sequence[tuple[float, RunConfig]], with_config: bool = False) -> list:
    """The distinct run directories of ``cells`` in order (a benign run serves several cells), each
    with its config when ``with_config``."""
    dirs: dict[Path, RunConfig] = {}
    for _, c in cells:
        dirs.setdefault(run_dir_for(c), c)
    return list(dirs.items()) if with_config else list(dirs)


def crafted_share(run_dir: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(attacker replies crafted, attacker replies) of a model-poisoning run, from its
    ``poisoning.csv``; (0, 0) when no attacker replied in any round; None when the run predates the
    record of the replies left uncrafted (its file lists crafted replies only: the share is unknown)."""
    path = Path(run_dir) / POISONING_FILE
    if not path.exists():
        return (0, 0)
    table = pd.read_csv(path)
    if "crafted" not in table.columns:
        return None
    crafted = table["crafted"].astype(str).str.lower() == "true"
    return int(crafted.sum()), len(table)


def byzantine_rows(cells: Sequence[tuple[float, RunConfig]]) -> pd.DataFrame:
    """One row per cell whose run finished: spec, attack (``benign`` for none), ratio, the rules'
    f, seed, accuracy, sECE, ASR (NaN where the attack is not a backdoor), for the crafted
    attacks the attacker replies crafted and in all (:func:`crafted_share`; NaN where not recorded),
    and the shares of attacker and of benign replies the rule excluded (``detected``,
    ``benign_flagged``: :func:`fedcal.reports.defense.flag_rates`; NaN without an aggregation table
    or without replies of that kind), ``chance_level`` (its model within noise of chance,
    :mod:`fedcal.reports.chance`) and ``stalled`` (above chance, but its last round accepted no reply:
    :func:`fedcal.reports.runs.stalled_runs`)."""
    from fedcal.config import POISONING_ATTACKS

    final = final_metrics(_run_dirs(cells), "the strategy × attack table")
    by_run = {str(r["run_id"]): r for _, r in final.iterrows()}
    rows = []
    for ratio, cfg in cells:
        run_dir = run_dir_for(cfg)
        r = by_run.get(run_dir.name)
        if r is None:
            continue
        share = crafted_share(run_dir) if cfg.attack in POISONING_ATTACKS else None
        detected, benign_flagged, _ = flag_rates(run_dir, cfg)
        level = cfg_chance(cfg)
        rows.append({"strategy": spec_of(cfg), "attack": "benign" if cfg.attack == "none" else cfg.attack,
                     "ratio": ratio, "f": assumed_f(ratio, cfg.clients_per_round), "seed": cfg.seed,
                     "accuracy": r["accuracy"], "sece": r["sece"], "asr": r["asr"] if "asr" in r else float("nan"),
                     "crafted": share[0] if share else float("nan"),
                     "attacker_replies": share[1] if share else float("nan"),
                     "detected": detected, "benign_flagged": benign_flagged,
                     "chance_level": (at_chance := bool(level is not None and level.flags(float(r["accuracy"])))),
                     STALLED: run_stalled(run_dir) and not at_chance})
    return pd.DataFrame(rows).drop_duplicates()


def crafted_line(rows: pd.DataFrame, ratio: float) -> str:
    """One sentence per attacker ratio: per crafted attack, the share of attacker replies that were
    crafted over all its runs (strategies × seeds), or that some runs did not record it."""
    from fedcal.config import POISONING_ATTACKS

    r = rows[(rows["ratio"] == ratio) & rows["attack"].isin(POISONING_ATTACKS)]
    if r.empty:
        return ""
    parts = []
    for attack, g in r.groupby("attack", sort=False):
        if g["crafted"].isna().any():
            parts.append(f"{attack} not recorded in {int(g['crafted'].isna().sum())} of {len(g)} runs")
        elif g["attacker_replies"].sum() == 0:
            parts.append(f"{attack} no attacker reply")
        else:
            parts.append(f"{attack} {100 * g['crafted'].sum() / g['attacker_replies'].sum():.1f} "
                         f"({int(g['crafted'].sum())} of {int(g['attacker_replies'].sum())})")
    return ("Attacker replies crafted (%; a reply is left as trained where the round has too few honest "
            "updates or the attack refuses them): " + "; ".join(parts) + ".\n")


def byzantine_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds per (strategy, ratio, attack), and how many of the
    cell's seeds ended at chance (``chance``) or stalled above it (``stalled``)."""
    g = rows.groupby(["ratio", "strategy", "attack"], sort=False)
    table = g.agg(seeds=("seed", "nunique"), accuracy=("accuracy", "mean"), accuracy_sd=("accuracy", "std"),
                  sece=("sece", "mean"), sece_sd=("sece", "std"), asr=("asr", "mean"),
                  asr_sd=("asr", "std"), detected=("detected", "mean"),
                  benign_flagged=("benign_flagged", "mean"), chance=("chance_level", "sum"),
                  stalled=(STALLED, "sum")).reset_index()
    return table


def _pct(v: float) -> str:
    """A fraction as a table cell in percent, one decimal; blank for NaN (a cell not run)."""
    return "" if pd.isna(v) else f"{100 * v:.1f}"


def _at_chance(text: str, chance: int, seeds: int, stalled: int = 0) -> str:
    """A cell's text with the chance marker when ``chance`` of its ``seeds`` ended at chance (and how
    many, when not all of them), and how many stalled above chance."""
    return (marked(text, chance > 0) + (f" ({chance} of {seeds} seeds)" if 0 < chance < seeds else "")
            + (f" ({stalled} of {seeds} seeds stalled)" if stalled else ""))


def excluded_table(table: pd.DataFrame, order: Sequence[str], attacks: Sequence[str], head: str) -> str:
    """Markdown: per strategy and attack, the share of attacker replies / of benign replies the rule
    excluded (weight 0, or flagged by CalGuard; means over seeds), the benign column benign replies
    only. A strategy that excluded no reply in any of its runs here (FedAvg and the rules that
    combine every reply coordinate-wise never do) is named in one sentence instead of a row of zeros.
    ``table``: :func:`byzantine_table`'s rows of one attacker ratio."""
    det, fp = _pivot(table, "detected", order, attacks), _pivot(table, "benign_flagged", order, attacks)
    some = (det.fillna(0) > 0).any(axis=1) | (fp.fillna(0) > 0).any(axis=1)
    if not some.any():
        return ""
    cells = pd.DataFrame({a: [_pct(f) if a == "benign" else (f"{_pct(d)} / {_pct(f)}" if pd.notna(d) else "")
                              for d, f in zip(det.loc[some, a], fp.loc[some, a])] for a in attacks},
                         index=det.index[some]).reset_index()
    md = markdown_table(cells, f"replies excluded (%, attacker / benign replies; benign runs: benign replies), {head}")
    never = list(det.index[~some])
    if never:
        md += f"\nNo reply excluded in any run: {', '.join(never)}.\n"
    return md


def _pivot(table: pd.DataFrame, value: str, order: Sequence[str], attacks: Sequence[str]) -> pd.DataFrame:
    wide = table.pivot(index="strategy", columns="attack", values=value)
    return wide.reindex(index=[s for s in order if s in wide.index], columns=list(attacks))


def byzantine_seconds(cells: Sequence[tuple[float, RunConfig]]) -> pd.DataFrame:
    """What a finished run cost per strategy spec: the runs, and the median and largest sum of their
    rounds' wall-clock seconds (``timings.csv``; set-up before round 0 is not counted)."""
    done = {d.name: spec_of(c) for d, c in _run_dirs(cells, with_config=True) if (d / DONE_FILE).exists()}
    timings = load_timings([d for d in _run_dirs(cells) if d.name in done])
    if timings.empty:
        return pd.DataFrame()
    per_run = timings[timings["metric"] == "round_seconds"].groupby("run_id")["value"].sum()
    frame = pd.DataFrame({"strategy": per_run.index.map(done), "seconds": per_run.values})
    g = frame.groupby("strategy", sort=False)["seconds"]
    order = list(dict.fromkeys(spec_of(c) for _, c in cells))
    out = pd.DataFrame({"runs": g.size(), "median (s)": g.median(), "most (s)": g.max()})
    return out.reindex([s for s in order if s in out.index]).rename_axis("strategy").reset_index()


def byzantine_report(cells: Sequence[tuple[float, RunConfig]], out_dir: str | os.PathLike[str],
                     title: str = "") -> str:
    """``table.csv`` (long: mean and sd over seeds), ``runs.csv`` (one row per cell), ``seconds.md``
    (:func:`byzantine_seconds`) and ``table.md`` (per attacker ratio: accuracy, sECE, ASR and the replies
    each rule excluded (:func:`excluded_table`), strategy × attack, with each strategy's worst
    accuracy over the attacks and the attack that gave it; the worst cases and the ASR carry their
    cell's standard deviation over seeds, where there are several); returns the Markdown."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = byzantine_rows(cells)
    if rows.empty:
        raise FileNotFoundError("no finished run for the strategy × attack table")
    rows.to_csv(out / "runs.csv", index=False)
    table = byzantine_table(rows)
    table.to_csv(out / "table.csv", index=False)
    order = list(dict.fromkeys(spec_of(c) for _, c in cells))
    # the attacks asked for, run or not: a column nobody has finished yet still counts against the worst case
    attacks = ["benign", *[a for a in dict.fromkeys(c.attack for _, c in cells) if a != "none"]]
    parts = [f"# {title}\n" if title else ""]
    # the spread over seeds of the cell a worst case (or the ASR) comes from; none for one seed
    with_sd = lambda v, sd: "" if pd.isna(v) else _pct(v) + ("" if pd.isna(sd) else f" ± {100 * sd:.1f}")  # noqa: E731
    for ratio, t in table.groupby("ratio", sort=True):
        seeds = sorted(set(t["seeds"]))
        f = sorted(set(rows.loc[rows["ratio"] == ratio, "f"]))
        acc = _pivot(t, "accuracy", order, attacks)
        attacked = acc.drop(columns=["benign"], errors="ignore")
        # a worst case over some of the attacks is no worst case: a row with a cell not run yet (or a
        # diverged run's NaN) gets none, and says how many of the attacks it has
        complete = attacked.notna().all(axis=1)
        sd = _pivot(t, "accuracy_sd", order, attacks)
        # a cell with seeds at chance or stalled keeps them in its mean (the attack won there) and says so
        chance = _pivot(t, "chance", order, attacks).fillna(0).astype(int)
        stalled = _pivot(t, "stalled", order, attacks).fillna(0).astype(int)
        seeds_of = _pivot(t, "seeds", order, attacks).fillna(0).astype(int)
        low = {s: r.idxmin() for (s, r), ok in zip(attacked.iterrows(), complete) if ok}  # the worst attack
        worst = [_at_chance(with_sd(attacked.loc[s, a], sd.loc[s, a]), chance.loc[s, a], seeds_of.loc[s, a],
                            stalled.loc[s, a]) if (a := low.get(s)) else "" for s in attacked.index]
        for a in attacks:
            acc[a] = [_at_chance(_pct(v), chance.loc[s, a], seeds_of.loc[s, a], stalled.loc[s, a])
                      if pd.notna(v) else ""
                      for s, v in acc[a].items()]
        acc["worst"] = worst
        acc["worst attack"] = [low[s] if s in low else f"incomplete ({int(r.notna().sum())} of {r.size} attacks)"
                               for s, r in attacked.iterrows()]
        acc = acc.reset_index()
        head = f"attacker ratio {ratio:g} (rules' f = {', '.join(map(str, f))}; seeds per cell: {', '.join(map(str, seeds))})"
        parts.append(markdown_table(acc, f"accuracy (%), {head}"))
        if chance.to_numpy().any():
            parts.append(footnote(cfg_chance(c) for r_, c in cells if r_ == ratio))
        if stalled.to_numpy().any():
            parts.append(STALLED_NOTE.rstrip("\n") + " Kept in the cell's mean: the attack broke the training.\n")
        parts.append(crafted_line(rows, ratio))
        sece = _pivot(t, "sece", order, attacks)
        attacked = sece.drop(columns=["benign"], errors="ignore")  # the signed value farthest from 0
        sd = _pivot(t, "sece_sd", order, attacks)
        sece["worst"] = [with_sd(r.loc[r.abs().idxmax()], sd.loc[s, r.abs().idxmax()]) if r.notna().all() else ""
                         for s, r in attacked.iterrows()]
        parts.append(markdown_table(sece.reset_index(), f"sECE (%), {head}",
                                    {c: _pct for c in sece.columns if c != "worst"}))
        if t["asr"].notna().any():
            with_asr = t[t["asr"].notna()]
            cols = [a for a in attacks if a in set(with_asr["attack"])]
            asr, sd = _pivot(with_asr, "asr", order, cols), _pivot(with_asr, "asr_sd", order, cols)
            asr = pd.DataFrame({c: [with_sd(m, d) for m, d in zip(asr[c], sd[c])] for c in cols},
                               index=asr.index).reset_index()
            parts.append(markdown_table(asr, f"backdoor attack success rate (%), {head}"))
        parts.append(excluded_table(t, order, attacks, head))
    md = "\n".join(p for p in parts if p) + f"\n{SECE_SIGN}\n"
    (out / "table.md").write_text(md)
    seconds = byzantine_seconds(cells)
    if not seconds.empty:
        (out / "seconds.md").write_text(markdown_table(seconds, formats={"median (s)": "{:.0f}", "most (s)": "{:.0f}",
                                                                         "runs": "{:.0f}"}))
    return md
