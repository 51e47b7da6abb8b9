"""The strategy × attack table (``fedcal byzantine``): every strategy, pre-aggregation
included, against every attack of Byzantine-robust FL, from finished runs only.

The cells (:class:`fedcal.studies.byzantine.Cell`: table, attack spec, config) are built by
:mod:`fedcal.studies.byzantine`, which says how a strategy spec (``nnm+trimmed_mean``, ``krum``), an
attack spec (``ipm:eps=10``) and the rules' f of a table are set; a row is shown by its strategy spec
(:func:`spec_of`), a column by its attack spec. One table per :class:`~fedcal.studies.byzantine.Group`
(setting, heterogeneity, f).

A **diverged** run (final accuracy NaN: its model's weights are no longer finite) is an attack that
won: it counts at its test set's chance rate (:mod:`fedcal.reports.chance`), marked as at chance and
named as diverged, never blank and never left out of a mean. The **worst case** of a rule is its
lowest mean accuracy over every attack spec of the table, with the attack that achieves it and its
drop from the rule's own benign run; "which rule for which threat" (:func:`which_rule`) is derived from
these numbers.
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

#: the columns that name a table (:class:`fedcal.studies.byzantine.Group`)
GROUP = ["setting", "alpha", "ratio", "f"]
#: "keeps its worst case": a worst-case accuracy within this many points (as a fraction) of the rule's benign run
TOLERANCE = 0.10
#: a cell the study does not run (a line-search attack against a rule it cannot evaluate)
NOT_APPLICABLE = "n/a"
#: the line under a table with a diverged run
DIVERGED_NOTE = ("diverged: the run's final accuracy is NaN (its model's weights are no longer finite); it is counted "
                 "at its test set's chance rate, as a model at chance (the attack won), in the cell's mean.\n")


def spec_of(cfg: RunConfig) -> str:
    """The strategy spec of a run (:func:`fedcal.studies.byzantine.parse_spec`'s inverse): its
    pre-aggregation steps, its strategy (a preset's name where its keys are the preset's:
    :data:`fedcal.catalogue.rules.PRESETS`, ``krum`` for Multi-Krum averaging one update), and a ``:name``
    for each of the strategy's boolean keys (``<strategy>-<name>``) turned on against its default."""
    from fedcal.config import defaults

    prefix = f"{cfg.strategy}_"
    flags = [n[len(prefix):].replace("_", "-") for n, d in defaults().items()
             if n.startswith(prefix) and d is False and getattr(cfg, n) is True]
    from fedcal.catalogue.rules import PRESETS

    name = next((preset for preset, (rule, keys) in PRESETS.items()
                 if rule == cfg.strategy and all(getattr(cfg, k) == v for k, v in keys.items())), cfg.strategy)
    return "+".join([*cfg.pre_aggregations, ":".join([name, *flags])])


def _run_dirs(cells: Sequence, with_config: bool = False) -> list:
    """The distinct run directories of ``cells`` in order (a benign run serves several cells), each
    with its config when ``with_config``."""
    dirs: dict[Path, RunConfig] = {}
    for cell in cells:
        dirs.setdefault(run_dir_for(cell.config), cell.config)
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


def byzantine_rows(cells: Sequence) -> pd.DataFrame:
    """One row per cell whose run finished: its table (``setting``, ``alpha``, ``ratio``, ``f``),
    spec, attack (its spec; ``benign`` for none), seed, accuracy (a diverged run's NaN replaced by its
    test set's chance rate, ``diverged`` True), sECE, ASR (NaN where the attack is not a backdoor), for
    the crafted attacks the attacker replies crafted and in all (:func:`crafted_share`; NaN where not
    recorded), and the shares of attacker and of benign replies the rule excluded (``detected``,
    ``benign_flagged``: :func:`fedcal.reports.defense.flag_rates`; NaN without an aggregation table
    or without replies of that kind), ``chance_level`` (its model within noise of chance or diverged,
    :mod:`fedcal.reports.chance`) and ``stalled`` (above chance, but its last round accepted no reply:
    :func:`fedcal.reports.runs.stalled_runs`)."""
    from fedcal.config import POISONING_ATTACKS

    final = final_metrics(_run_dirs(cells), "the strategy × attack table")
    by_run = {str(r["run_id"]): r for _, r in final.iterrows()}
    rows = []
    for group, attack, cfg in cells:
        run_dir = run_dir_for(cfg)
        r = by_run.get(run_dir.name)
        if r is None:
            continue
        share = crafted_share(run_dir) if cfg.attack in POISONING_ATTACKS else None
        detected, benign_flagged, _ = flag_rates(run_dir, cfg)
        level = cfg_chance(cfg)
        accuracy = float(r["accuracy"])
        diverged = math.isnan(accuracy)
        if diverged and level is not None:
            accuracy = level.rate
        at_chance = diverged or bool(level is not None and level.flags(accuracy))
        rows.append({**group._asdict(), "strategy": spec_of(cfg), "attack": attack, "seed": cfg.seed,
                     "accuracy": accuracy, "sece": math.nan if diverged else r["sece"],
                     "asr": math.nan if diverged else (r["asr"] if "asr" in r else math.nan),
                     "crafted": share[0] if share else float("nan"),
                     "attacker_replies": share[1] if share else float("nan"),
                     "detected": detected, "benign_flagged": benign_flagged,
                     "chance_level": at_chance, "diverged": diverged,
                     STALLED: run_stalled(run_dir) and not at_chance})
    return pd.DataFrame(rows).drop_duplicates()


def crafted_line(rows: pd.DataFrame, where: pd.Series | None = None) -> str:
    """One sentence per table (``where``: a boolean mask of ``rows``, all of them by default): per
    crafted attack spec, the share of attacker replies that were crafted over all its runs (strategies
    × seeds), or that some runs did not record it."""
    r = rows if where is None else rows[where]
    r = r[r["attack"].map(_crafted_attack)]
    parts = []
    for attack, g in r.groupby("attack", sort=False):
        if g["crafted"].isna().any():
            parts.append(f"{attack} not recorded in {int(g['crafted'].isna().sum())} of {len(g)} runs")
        elif g["attacker_replies"].sum() == 0:
            parts.append(f"{attack} no attacker reply")
        else:
            parts.append(f"{attack} {100 * g['crafted'].sum() / g['attacker_replies'].sum():.1f} "
                         f"({int(g['crafted'].sum())} of {int(g['attacker_replies'].sum())})")
    if not parts:
        return ""
    return ("Attacker replies crafted (%; a reply is left as trained where the round has too few honest "
            "updates or the attack refuses them): " + "; ".join(parts) + ".\n")


def _crafted_attack(spec: str) -> bool:
    from fedcal.config import POISONING_ATTACKS

    return spec.split(":")[0] in POISONING_ATTACKS


def byzantine_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds per (table, strategy, attack), and how many of the
    cell's seeds ended at chance (``chance``; diverged ones included), diverged (``diverged``) or
    stalled above chance (``stalled``)."""
    g = rows.groupby([*GROUP, "strategy", "attack"], sort=False)
    table = g.agg(seeds=("seed", "nunique"), accuracy=("accuracy", "mean"), accuracy_sd=("accuracy", "std"),
                  sece=("sece", "mean"), sece_sd=("sece", "std"), asr=("asr", "mean"),
                  asr_sd=("asr", "std"), detected=("detected", "mean"),
                  benign_flagged=("benign_flagged", "mean"), chance=("chance_level", "sum"),
                  diverged=("diverged", "sum"), stalled=(STALLED, "sum")).reset_index()
    return table


def _pct(v: float) -> str:
    """A fraction as a table cell in percent, one decimal; blank for NaN (a cell not run)."""
    return "" if pd.isna(v) else f"{100 * v:.1f}"


def _at_chance(text: str, chance: int, seeds: int, stalled: int = 0, diverged: int = 0) -> str:
    """A cell's text with the chance marker when ``chance`` of its ``seeds`` ended at chance (and how
    many, when not all of them), how many of them diverged, and how many stalled above chance."""
    notes = [f"{chance} of {seeds} seeds"] if 0 < chance < seeds else []
    notes += [f"{diverged} diverged"] if diverged else []
    return (marked(text, chance > 0) + (f" ({', '.join(notes)})" if notes else "")
            + (f" ({stalled} of {seeds} seeds stalled)" if stalled else ""))


def excluded_table(table: pd.DataFrame, order: Sequence[str], attacks: Sequence[str], head: str) -> str:
    """Markdown: per strategy and attack, the share of attacker replies / of benign replies the rule
    excluded (weight 0, or flagged by CalGuard; means over seeds), the benign column benign replies
    only. A strategy that excluded no reply in any of its runs here (FedAvg and the rules that
    combine every reply coordinate-wise never do) is named in one sentence instead of a row of zeros.
    ``table``: :func:`byzantine_table`'s rows of one table."""
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
    return wide.reindex(index=list(order), columns=list(attacks))  # a rule with no finished run yet: a blank row


def worst_cases(table: pd.DataFrame, expected: dict[str, list[str]]) -> pd.DataFrame:
    """Per strategy of one table (:func:`byzantine_table`'s rows of one group): ``benign`` (mean
    accuracy), ``worst`` (its lowest mean accuracy over the attack specs ``expected[strategy]``, a
    diverged seed counting at chance), ``worst_sd`` (that cell's spread over seeds), ``worst_attack``
    (the spec achieving it; the first in column order on a tie), ``drop`` (benign − worst, a fraction)
    and ``complete`` (every expected attack has a finished run; otherwise worst, drop and
    worst_attack are NaN / "": a worst case over some of the attacks is no worst case), and
    ``benign_at_chance`` (a seed of its benign run ended at chance: the rule did not train here, so
    a small drop says nothing of its robustness)."""
    out = []
    for strategy, attacks in expected.items():
        mine = table[table["strategy"] == strategy].set_index("attack")
        benign = mine["accuracy"].get("benign", math.nan)
        attacked = [a for a in attacks if a != "benign"]
        got = mine["accuracy"].reindex(attacked)
        complete = bool(attacked) and got.notna().all()
        low = got.idxmin() if complete else ""
        worst = float(got[low]) if complete else math.nan
        out.append({"strategy": strategy, "benign": benign, "worst": worst,
                    "worst_sd": float(mine["accuracy_sd"].get(low, math.nan)) if complete else math.nan,
                    "worst_attack": low, "drop": benign - worst, "complete": complete,
                    "attacks_run": int(got.notna().sum()), "attacks": len(attacked),
                    "benign_at_chance": bool("chance" in mine and mine["chance"].get("benign", 0) > 0)})
    return pd.DataFrame(out)


def which_rule(table: pd.DataFrame, worst: pd.DataFrame, tolerance: float = TOLERANCE, reference: str = "fedavg",
               reference_label: str = "FedAvg") -> str:
    """"Which rule for which threat", derived from one table's numbers (:func:`byzantine_table`'s
    rows of one group, :func:`worst_cases` of them): the largest drop the ``reference`` rule (FedAvg) suffers (the attack
    that bites), the rule with the best worst case, the rules whose worst case stays within
    ``tolerance`` of their own benign run (or that none does) — of the rules whose every attack ran
    and whose benign run trained (above chance in every seed) —, and per attack the rule with the
    highest mean accuracy, with the rules within the seed spread of it (the difference of the two
    means no larger than the sum of their standard deviations over seeds)."""
    lines = []
    done = worst[worst["complete"] & ~worst["benign_at_chance"]]
    ref = done[done["strategy"] == reference]
    if not ref.empty:
        r = ref.iloc[0]
        lines.append(f"- The attack that bites: {r['worst_attack']} costs {reference_label} {100 * r['drop']:.1f} points "
                     f"({_pct(r['benign'])} → {_pct(r['worst'])} %).")
    if not done.empty:
        best = done.loc[done["worst"].idxmax()]
        lines.append(f"- Best worst case: {best['strategy']}, {_pct(best['worst'])} % under {best['worst_attack']} "
                     f"({100 * best['drop']:.1f} points below its benign run).")
        keep = done[done["drop"] <= tolerance + 1e-12]
        lines.append(f"- Worst case within {100 * tolerance:g} points of their benign run: "
                     + (", ".join(f"{s} ({100 * d:.1f})" for s, d in zip(keep["strategy"], keep["drop"]))
                        if not keep.empty else "none of the rules") + ".")
    untrained = worst[worst["benign_at_chance"]]
    if not untrained.empty:
        lines.append("- Not ranked (a seed of its benign run at chance: it did not train in this setting): "
                     + ", ".join(untrained["strategy"]) + ".")
    missing = worst[~worst["complete"] & ~worst["benign_at_chance"]]
    if not missing.empty:
        lines.append("- Not ranked (attacks not all run yet): " + ", ".join(
            f"{s} ({a} of {n})" for s, a, n in zip(missing["strategy"], missing["attacks_run"], missing["attacks"])) + ".")
    per_attack = []
    for attack, g in table[table["attack"] != "benign"].groupby("attack", sort=False):
        g = g.dropna(subset=["accuracy"])
        if g.empty:
            continue
        top = g.loc[g["accuracy"].idxmax()]
        sd = g["accuracy_sd"].fillna(0.0)
        near = g[(g["strategy"] != top["strategy"])
                 & (top["accuracy"] - g["accuracy"] <= sd + (0.0 if pd.isna(top["accuracy_sd"]) else top["accuracy_sd"]))]
        per_attack.append(f"  - {attack}: {top['strategy']} ({_pct(top['accuracy'])} %)"
                          + (f"; within the seed spread: {', '.join(near['strategy'])}" if not near.empty else ""))
    if per_attack:
        lines.append("- Per attack, the most accurate rule:\n" + "\n".join(per_attack))
    return ("**Which rule for which threat** (derived from the table above)\n\n" + "\n".join(lines) + "\n") if lines else ""


def group_label(setting: str, alpha: float, ratio: float, f: int) -> str:
    """A table's short name in a column head: ``α = 0.5, f = 3`` (cross-silo), ``IID, ratio 0.25`` (partial)."""
    data = "IID" if math.isinf(alpha) else f"α = {alpha:g}"
    return f"{data}, f = {f}" if setting == "cross-silo" else f"{data}, ratio {ratio:g}"


def _change(v: float) -> str:
    """A change of accuracy in points, signed: ``−18.0``, ``+0.4``, ``0.0``."""
    text = f"{abs(100 * v):.1f}"
    return text if text == "0.0" else ("+" if v > 0 else "−") + text


def worst_summary(worst: pd.DataFrame, order: Sequence[str]) -> str:
    """Markdown: per strategy (rows, in ``order``) and table (columns, in :func:`worst_cases`' order),
    the worst-case accuracy, its drop from the rule's benign run and the attack achieving it
    (``71.0 (−18.0, alie)``); ``incomplete`` where an attack has not run, ``at chance`` marked ``†``
    where the rule's benign run did not train."""
    from fedcal.reports.chance import MARK

    cols = {}
    for key, g in worst.groupby(GROUP, sort=False):
        g = g.set_index("strategy")
        cols[group_label(*key)] = [
            "" if s not in g.index else
            ("incomplete" if not g.loc[s, "complete"] else
             f"{_pct(g.loc[s, 'worst'])} ({_change(-g.loc[s, 'drop'])}, {g.loc[s, 'worst_attack']})"
             + (f" {MARK} benign at chance" if g.loc[s, "benign_at_chance"] else ""))
            for s in order]
    frame = pd.DataFrame(cols, index=list(order)).rename_axis("strategy").reset_index()
    return markdown_table(frame, "worst case per rule and table: accuracy (%) (drop from its benign run, the attack)")


def byzantine_seconds(cells: Sequence) -> pd.DataFrame:
    """What a finished run cost per strategy spec: the runs, and the median and largest sum of their
    rounds' wall-clock seconds (``timings.csv``; set-up before round 0 is not counted)."""
    done = {d.name: spec_of(c) for d, c in _run_dirs(cells, with_config=True) if (d / DONE_FILE).exists()}
    timings = load_timings([d for d in _run_dirs(cells) if d.name in done])
    if timings.empty:
        return pd.DataFrame()
    per_run = timings[timings["metric"] == "round_seconds"].groupby("run_id")["value"].sum()
    frame = pd.DataFrame({"strategy": per_run.index.map(done), "seconds": per_run.values})
    g = frame.groupby("strategy", sort=False)["seconds"]
    order = list(dict.fromkeys(spec_of(c.config) for c in cells))
    out = pd.DataFrame({"runs": g.size(), "median (s)": g.median(), "most (s)": g.max(), "total (s)": g.sum()})
    return out.reindex([s for s in order if s in out.index]).rename_axis("strategy").reset_index()


def _group_table(cells: Sequence, group, t: pd.DataFrame, rows: pd.DataFrame) -> list[str]:
    """The Markdown parts of one table (``group``; ``t``: its rows of :func:`byzantine_table`)."""
    mine = [c for c in cells if c.group == group]
    order = list(dict.fromkeys(spec_of(c.config) for c in mine))
    attacks = list(dict.fromkeys(["benign", *(c.attack for c in mine)]))
    expected = {s: list(dict.fromkeys(c.attack for c in mine if spec_of(c.config) == s)) for s in order}
    run = set(zip(t["strategy"], t["attack"]))
    cfg = mine[0].config
    seeds = sorted(set(t["seeds"]))
    head = f"{group.describe(cfg.num_clients, cfg.clients_per_round)}; seeds per cell: {', '.join(map(str, seeds))}"
    with_sd = lambda v, sd: "" if pd.isna(v) else _pct(v) + ("" if pd.isna(sd) else f" ± {100 * sd:.1f}")  # noqa: E731
    acc = _pivot(t, "accuracy", order, attacks)
    piv = {k: _pivot(t, k, order, attacks).fillna(0).astype(int) for k in ("chance", "stalled", "diverged", "seeds")}
    sd = _pivot(t, "accuracy_sd", order, attacks)
    worst = worst_cases(t, expected).set_index("strategy").reindex(order)

    def cell(s: str, a: str) -> str:
        if a not in expected[s]:
            return NOT_APPLICABLE
        if (s, a) not in run:
            return ""
        return _at_chance(_pct(acc.loc[s, a]), piv["chance"].loc[s, a], piv["seeds"].loc[s, a],
                          piv["stalled"].loc[s, a], piv["diverged"].loc[s, a])

    shown = pd.DataFrame({a: [cell(s, a) for s in order] for a in attacks}, index=order)
    shown["worst"] = [_at_chance(with_sd(w["worst"], w["worst_sd"]), piv["chance"].loc[s, w["worst_attack"]],
                                 piv["seeds"].loc[s, w["worst_attack"]], piv["stalled"].loc[s, w["worst_attack"]],
                                 piv["diverged"].loc[s, w["worst_attack"]]) if w["complete"] else ""
                      for s, w in worst.iterrows()]
    shown["drop"] = [f"{100 * w['drop']:.1f}" if w["complete"] and pd.notna(w["drop"]) else "" for _, w in worst.iterrows()]
    shown["worst attack"] = [w["worst_attack"] if w["complete"] else f"incomplete ({w['attacks_run']} of {w['attacks']} attacks)"
                             for _, w in worst.iterrows()]
    shown["largest seed sd"] = [_pct(sd.loc[s].max()) for s in order]
    parts = [markdown_table(shown.rename_axis("strategy").reset_index(), f"accuracy (%), {head}")]
    if piv["chance"].to_numpy().any():
        parts.append(footnote([cfg_chance(c.config) for c in mine]))
    if piv["diverged"].to_numpy().any():
        parts.append(DIVERGED_NOTE)
    if piv["stalled"].to_numpy().any():
        parts.append(STALLED_NOTE.rstrip("\n") + " Kept in the cell's mean: the attack broke the training.\n")
    parts.append(crafted_line(rows, (rows[GROUP] == pd.Series(group._asdict())).all(axis=1)))
    parts.append(which_rule(t, worst.reset_index()))
    sece = _pivot(t, "sece", order, attacks)
    attacked = sece.drop(columns=["benign"], errors="ignore")  # the signed value farthest from 0
    ssd = _pivot(t, "sece_sd", order, attacks)
    sece_shown = pd.DataFrame({a: [NOT_APPLICABLE if a not in expected[s] else
                                   ("diverged" if piv["diverged"].loc[s, a] == piv["seeds"].loc[s, a] > 0 else
                                    _pct(sece.loc[s, a])) for s in order] for a in attacks}, index=order)
    sece_shown["worst"] = [with_sd(r.loc[r.abs().idxmax()], ssd.loc[s, r.abs().idxmax()])
                           if r.notna().any() and worst.loc[s, "complete"] else ""
                           for s, r in attacked.iterrows()]
    parts.append(markdown_table(sece_shown.rename_axis("strategy").reset_index(),
                                f"sECE (%; a diverged seed has none), {head}"))
    if t["asr"].notna().any():
        with_asr = t[t["asr"].notna()]
        cols = [a for a in attacks if a in set(with_asr["attack"])]
        asr, asd = _pivot(with_asr, "asr", order, cols), _pivot(with_asr, "asr_sd", order, cols)
        asr = pd.DataFrame({c: [with_sd(m, d) for m, d in zip(asr[c], asd[c])] for c in cols},
                           index=asr.index).reset_index()
        parts.append(markdown_table(asr, f"backdoor attack success rate (%), {head}"))
    parts.append(excluded_table(t, order, attacks, head))
    return parts


def byzantine_report(cells: Sequence, out_dir: str | os.PathLike[str], title: str = "") -> str:
    """``table.csv`` (long: mean and sd over seeds per table, strategy and attack), ``runs.csv`` (one
    row per cell), ``worst.csv`` (:func:`worst_cases` per table), ``seconds.md``
    (:func:`byzantine_seconds`) and ``table.md`` (per table, in the cells' order: accuracy with each
    strategy's worst case over the attack specs, its drop from benign and the attack achieving it,
    "which rule for which threat" (:func:`which_rule`), sECE, ASR and the replies each rule excluded
    (:func:`excluded_table`); the worst cases and the ASR carry their cell's standard deviation over
    seeds, where there are several); returns the Markdown."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = byzantine_rows(cells)
    if rows.empty:
        raise FileNotFoundError("no finished run for the strategy × attack table")
    rows.to_csv(out / "runs.csv", index=False)
    table = byzantine_table(rows)
    table.to_csv(out / "table.csv", index=False)
    parts = [f"# {title}\n" if title else ""]
    worst_frames = []
    for group in dict.fromkeys(c.group for c in cells):
        t = table[(table[GROUP] == pd.Series(group._asdict())).all(axis=1)]
        if t.empty:
            continue
        parts.extend(_group_table(cells, group, t, rows))
        mine = [c for c in cells if c.group == group]
        order = list(dict.fromkeys(spec_of(c.config) for c in mine))
        expected = {s: list(dict.fromkeys(c.attack for c in mine if spec_of(c.config) == s)) for s in order}
        worst_frames.append(worst_cases(t, expected).assign(**group._asdict()))
    worst = pd.concat(worst_frames, ignore_index=True)
    worst.to_csv(out / "worst.csv", index=False)
    if len(worst_frames) > 1:  # the tables side by side first: how each rule's worst case moves with the setting
        parts.insert(1, worst_summary(worst, list(dict.fromkeys(spec_of(c.config) for c in cells))))
    md = "\n".join(p for p in parts if p) + f"\n{SECE_SIGN}\n"
    (out / "table.md").write_text(md)
    seconds = byzantine_seconds(cells)
    if not seconds.empty:
        (out / "seconds.md").write_text(markdown_table(seconds, formats={"median (s)": "{:.0f}", "most (s)": "{:.0f}",
                                                                         "total (s)": "{:.0f}", "runs": "{:.0f}"}))
    return md
