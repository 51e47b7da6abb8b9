"""Robust federated inference's results pages: inference-results.md (the current tables) and
inference-archive.md (superseded ones), from the generated tables under docs/results/inference-*
(:mod:`fedcal.pages.build_results` writes them)."""

from pathlib import Path

import pandas as pd

from fedcal.config import RunConfig
from fedcal.pages import DOCS, inference_alpha, inference_audit, inference_claims, inference_text
from fedcal.reports import markdown_table, without_chance, worst_case
from fedcal.reports.inference import percent_cell

INFERENCE_COMMAND = (
    "fedcal inference --nf 17:4 --seeds 0-2 --report docs/results/inference-cifar10 dataset=cifar10 model=cnn "
    "lr=0.05 data-dir=../shared/data engine=inprocess output-dir=runs/inference-cifar10 inf-local-epochs=5 "
    "agg-adv-epochs=25 inf-pgd-steps=20 inf-curve-queries=1000")
GRID = "inference-cifar10-grid-3seeds"
GRID_COMMAND = (
    f"fedcal inference --nf 10:3 --nf 17:4 --nf 25:5 --seeds 0-2 --report docs/results/{GRID} "
    "dataset=cifar10 model=cnn lr=0.05 data-dir=../shared/data engine=inprocess output-dir=runs/inference-cifar10 "
    "inf-local-epochs=5 agg-adv-epochs=25 inf-pgd-steps=20 inf-curve-queries=1000")


RESNET8_KEYS = (
    "dataset=cifar10 model=resnet8 dirichlet-alpha=0.5 lr=0.05 momentum=0.9 weight-decay=5e-4 inf-augment=crop-flip "
    "inf-local-epochs=20 data-dir=../shared/data engine=inprocess output-dir=runs/inference-resnet8 "
    "agg-adv-epochs=25 inf-pgd-steps=20 inf-curve-queries=1000")
RESNET8_COMMAND = ("fedcal inference --nf 17:4 --seeds 0-4 --report docs/results/inference-cifar10-resnet8 "
                   + RESNET8_KEYS)
RESNET8_GRID_COMMAND = ("fedcal inference --nf 10:3 --nf 17:4 --nf 25:5 --seeds 0 --report "
                        "docs/results/inference-cifar10-resnet8-grid " + RESNET8_KEYS)
#: the aggregators that see the answers as a set (no client identity), against the positional baselines
POSITIONAL = ("copur", "manifold_projection")


def resnet8_results() -> list[str]:
    """The sections on the literature's ResNet-8 clients, when their reports exist. Every
    claim in the prose is computed from the cells, so a re-run cannot leave a stale sentence."""
    res = DOCS / "results" / "inference-cifar10-resnet8"
    if not (res / "table_n17_f4.md").exists():
        return []
    cells = pd.read_csv(res / "cells.csv")
    worst = worst_case(without_chance(cells), by=("seed", "aggregator"))  # a constant answer is never "robust"
    ranking = worst.groupby("aggregator")["accuracy"].mean().sort_values(ascending=False)
    attacks = worst.groupby("aggregator")["worst_attack"].agg(lambda a: ", ".join(sorted(set(a))))
    seeds = sorted(cells["seed"].unique())
    clean = cells[cells["attack"] == "none"].groupby("aggregator")["accuracy"].mean()
    set_aggs = [a for a in ranking.index if a not in POSITIONAL]
    best_set, runner_up = set_aggs[0], set_aggs[1]
    spread = worst.groupby("aggregator")["accuracy"].std().fillna(0)
    close = ranking[best_set] - ranking[runner_up] < max(spread[best_set], spread[runner_up])
    r = ranking
    order = (r["deepset_plain"] < min(r["deepset_plain_tm"], r["deepset"])
             and max(r["deepset_plain_tm"], r["deepset"]) < r["deepset_tm"])
    sia = [a for a in set_aggs if "sia_whitebox" in attacks[a]]
    lines = [
        "## ResNet-8 clients, the literature's setting (CIFAR-10, n = 17, f = 4, Dirichlet α = 0.5, "
        + (f"seed {seeds[0]})" if len(seeds) == 1 else f"seeds {seeds[0]}–{seeds[-1]})"),
        "", "```bash", RESNET8_COMMAND, "```", "",
        "A reading of the robust-inference experiment closer to the literature's: SPEC §7's α = 0.5, ResNet-8 clients trained with "
        "SGD momentum 0.9, weight decay 5·10⁻⁴ and crop-and-flip for 20 local epochs (the setting measured under "
        "Choices and limits to put the plain mean above 55 %); aggregators, attacks and budgets as in the table "
        f"above. Accuracy (%) on the first {cells['queries'].iloc[0]:,} test images"
        + ("" if len(seeds) == 1 else f", mean ± std over {len(seeds)} seeds") + ":", "",
        (res / "table_n17_f4.md").read_text().split("\n", 2)[2],
        _clients_sentence(res),
        "Ranking by worst-case accuracy: " + ", ".join(f"{a} {100 * v:.2f}" for a, v in ranking.items()) + ". "
        "The attack achieving the worst case, per aggregator: " + "; ".join(
            f"{a}: {attacks[a]}" for a in ranking.index) + ".", "",
    ]
    if (res / "ablation_n17_f4.md").exists():
        lines += ["The robust elements of DeepSet-TM with these clients:", "",
                  (res / "ablation_n17_f4.md").read_text().split("\n", 2)[2], ""]
    lines += [
        f"With these clients the plain mean's clean accuracy is {100 * clean['mean']:.2f} %, "
        + ("above" if clean["mean"] > 0.55 else "below") + " the literature's clean level (55 %). "
        + (f"{best_set} has the best worst case of the set aggregators"
           + (" — DeepSet-TM, as the literature reports" if best_set == "deepset_tm" else "")
           + (f", ahead of {runner_up} by less than one seed-to-seed standard deviation" if close else "") + "; ")
        + ("the ablation keeps the literature's order (each robust element raises the worst case, both together "
           "the most)" if order else "the ablation does not keep the literature's order (read its table)")
        + f"; and {len(sia)} of the {len(set_aggs)} set aggregators reach their worst case under SIA white-box "
        "(one-hot rows on the runner-up class), which keeps them far below the literature's worst case — the gap "
        "is not (only) the clients' strength. "
        + (f"The positional {ranking.index[0]} has the best worst case overall at these 20 PGD-CW steps"
           + (" (its ℓ2,1 fit is untouched by the one-hot rows)" if ranking.index[0] == "copur" else "") + ". "
           if ranking.index[0] in POSITIONAL else ""),
        "",
        "How these were made: the clients' probits (phase a, the ResNet-8 training) were collected on a lent "
        "machine with one NVIDIA H100 (`device=auto` trains the clients on CUDA; the five seeds in parallel in "
        "11 minutes), the aggregators built and attacked (phases b–c, which run on the CPU whatever `device` "
        "says) on 2 CPU cores from the saved `probits.pt`, about 7 minutes per seed. On 2 CPU cores alone a "
        "seed takes about 26 minutes.", ""]
    lines += resnet8_pgd50(cells)
    grid = DOCS / "results" / "inference-cifar10-resnet8-grid"
    if (DOCS / "results" / RESNET8_GRID_SEEDS / "scalability.md").exists():
        lines += resnet8_grid_seeds(DOCS / "results" / RESNET8_GRID_SEEDS)
    elif (grid / "scalability.md").exists():
        lines += ["### ResNet-8 clients: (n, f) = (10, 3), (17, 4), (25, 5), seed 0", "", "```bash",
                  RESNET8_GRID_COMMAND, "```", "",
                  (grid / "scalability.md").read_text().split("\n", 2)[2],
                  _grid_summary(grid, set_aggregators=True)
                  + "\nIts (17, 4) cell is seed 0 of the table above (the same run). The n = 10 clients were "
                  "trained on the H100 beside the five seeds, the n = 25 clients on 2 CPU cores (15 minutes; the "
                  "cell took 27 minutes in all). Per-attack tables of each cell are "
                  "`docs/results/inference-cifar10-resnet8-grid/table_n*_f*.md`.", ""]
    return lines


#: the ResNet-8 (n, f) grid over seeds: seed 0's grid, the five-seed (17, 4) table and the seeds added to the
#: other two cells by a later command, combined by fedcal/pages/inference_seeds.py
RESNET8_GRID_SEEDS = "inference-cifar10-resnet8-grid-3seeds"
RESNET8_GRID_MORE = "inference-cifar10-resnet8-grid-seeds1-2"
RESNET8_GRID_MORE_COMMAND = (f"fedcal inference --nf 10:3 --nf 25:5 --seeds 1-2 --report docs/results/{RESNET8_GRID_MORE} "
                             + RESNET8_KEYS)
RESNET8_GRID_SEEDS_COMMAND = (
    f"python -m fedcal.pages inference_seeds --seeds 0-2 --dataset cifar10 --data-dir ../shared/data --out "
    f"docs/results/{RESNET8_GRID_SEEDS} docs/results/inference-cifar10-resnet8-grid "
    f"docs/results/inference-cifar10-resnet8 docs/results/{RESNET8_GRID_MORE}")


def _grid_trend(grid: Path) -> str:
    """How each aggregator's worst case moves with n over the seeds, and whether that is more than the seeds'
    spread (a single-seed grid's fall with n was not)."""
    cells = without_chance(pd.read_csv(grid / "cells.csv"))
    per_seed = worst_case(cells, by=("n", "f", "seed", "aggregator"))
    w = per_seed.groupby(["aggregator", "n"])["accuracy"].agg(["mean", "std"])
    aggs = sorted(w.index.get_level_values(0).unique())
    ns = sorted(cells["n"].unique())
    falling = [a for a in aggs if all(w.loc[(a, lo), "mean"] > w.loc[(a, hi), "mean"] for lo, hi in zip(ns, ns[1:]))]
    peak = {a: int(w.loc[a, "mean"].idxmax()) for a in aggs}
    # the spread of a row's means over (n, f) against its seeds' spread: a trend or noise
    small = [a for a in aggs if w.loc[a, "mean"].max() - w.loc[a, "mean"].min() < w.loc[a, "std"].max()]
    count = {2: "two", 3: "three", 4: "four", 5: "five"}.get(cells["seed"].nunique(), str(cells["seed"].nunique()))
    return (f"Over the {count} seeds the worst case falls from n = {ns[0]} to n = {ns[-1]} steadily for "
            + (", ".join(falling) if falling else "no aggregator") + "; it is highest at n = "
            + "; at n = ".join(f"{n} for {sum(v == n for v in peak.values())} of {len(aggs)}" for n in ns)
            + f" aggregators, and for {len(small)} of {len(aggs)} the spread of its row over (n, f) is smaller than "
            "its largest seed-to-seed standard deviation" + (": seed 0's fall with n (the single-seed grid) is not "
            "a trend over seeds." if len(falling) <= len(aggs) / 2 else "."))


def resnet8_grid_seeds(grid: Path) -> list[str]:
    """The ResNet-8 (n, f) grid over seeds 0–2: three commands (seed 0's grid, the seeds added to
    (10, 3) and (25, 5); (17, 4) is the five-seed table's), the combined worst-case table, and its
    winners and trends computed from the cells."""
    trend = _grid_trend(grid)
    return ["### ResNet-8 clients: (n, f) = (10, 3), (17, 4), (25, 5), seeds 0–2", "", "```bash",
            RESNET8_GRID_COMMAND, RESNET8_GRID_MORE_COMMAND, RESNET8_GRID_SEEDS_COMMAND, "```", "",
            "The first command made seed 0 of every cell (on a lent H100 and 2 CPU cores; its run store stayed "
            "there, its report is in the repository), the second seeds 1–2 of (10, 3) and (25, 5) on 2 CPU cores "
            "(27–32 minutes a cell, beside other jobs); seeds 1–2 of (17, 4) are the five-seed table's above. All three use the "
            "same keys; the third command writes the tables `fedcal inference` writes, from the reports' cells, "
            "each run once (the grid's (17, 4) seed-0 cell and the five-seed table's seed 0 are the same run, "
            "identical rows) and refuses two different runs for one seed.", "",
            (grid / "scalability.md").read_text().split("\n", 2)[2],
            _grid_summary(grid, set_aggregators=True) + "\n" + trend
            + f" Per-attack tables of each cell, over the three seeds: `docs/results/{RESNET8_GRID_SEEDS}/table_n*_f*.md`"
            " (ablations: `ablation_n*_f*.md`).", ""]


RESNET8_PGD50_COMMAND = (
    "fedcal inference --nf 17:4 --seeds 0-4 --report docs/results/inference-cifar10-resnet8-pgd50 "
    + RESNET8_KEYS.replace("inf-pgd-steps=20", "inf-pgd-steps=50")
    + " inf-attacks=none,pgd_cw inf-f-curve=false 'inf-amp-curve=\"\"'")


def resnet8_pgd50(cells: pd.DataFrame) -> list[str]:
    """PGD-CW at the default 50 steps against the table's 20, on the same probits: does the worst case move?"""
    res = DOCS / "results" / "inference-cifar10-resnet8-pgd50"
    if not (res / "cells.csv").exists():
        return []
    p50 = pd.read_csv(res / "cells.csv")
    key, pgd = ["seed", "aggregator"], inference_audit.PGD_ATTACK
    cells = cells[cells["seed"].isin(p50["seed"])]
    # the 50-step worst case: every other attack of the 20-step table, with PGD-CW's row replaced
    cells50 = pd.concat([cells[cells["attack"] != pgd], p50[p50["attack"] == pgd]], ignore_index=True)
    per_seed = {"pgd20": cells[cells["attack"] == pgd].set_index(key)["accuracy"],
                "pgd50": p50[p50["attack"] == pgd].set_index(key)["accuracy"],
                "worst20": worst_case(without_chance(cells), by=key).set_index(key)["accuracy"],
                "worst50": worst_case(without_chance(cells50), by=key).set_index(key)["accuracy"]}
    agg = pd.DataFrame(per_seed).groupby("aggregator").agg(["mean", "std", "count"])
    order = agg[("worst50", "mean")].sort_values(ascending=False).index
    cell = lambda c, a: percent_cell(*agg.loc[a, c])  # noqa: E731
    rows = pd.DataFrame({"aggregator": order,
                         "PGD-CW, 20 steps": [cell("pgd20", a) for a in order],
                         "PGD-CW, 50 steps": [cell("pgd50", a) for a in order],
                         "worst case, 20 steps": [cell("worst20", a) for a in order],
                         "worst case, 50 steps": [cell("worst50", a) for a in order]})
    clean = [d[d["attack"] == "none"].set_index(key)["accuracy"] for d in (cells, p50)]
    same_clean = bool((clean[0] - clean[1]).dropna().abs().max() < 1e-9)
    top20 = agg[("worst20", "mean")].idxmax()
    return ["### PGD-CW at its default 50 steps", "", "```bash", RESNET8_PGD50_COMMAND, "```", "",
            "The tables above run PGD-CW with 20 steps to fit the CPU budget; the run config's default (and "
            "the literature's reading) is 50. The same runs' probits (copied, not re-collected: the client collection "
            "does not depend on the attacks) attacked with 50 steps, only PGD-CW evaluated; `worst case` takes "
            "the minimum over the other attacks of the table above and this PGD-CW. Accuracy (%), mean ± std "
            f"over {p50['seed'].nunique()} seeds:", "", markdown_table(rows), "",
            ("The clean column is the same in both runs (same probits, same aggregators). " if same_clean else
             "The clean accuracies of the two runs differ, so the aggregators were not rebuilt identically. ")
            + f"With 50 steps the best worst case is {order[0]}'s"
            + (f" (with 20 steps it was {top20}'s)" if top20 != order[0] else ", as with 20 steps") + ".", ""]


def _grid_summary(grid: Path, set_aggregators: bool = False) -> str:
    """The (n, f) grid's winners — the highest worst case per cell, and, with ``set_aggregators``, the
    highest among those that see the answers as a set — then the clients' accuracies at n = 10 and 25."""
    cells = pd.read_csv(grid / "cells.csv")
    w = worst_case(without_chance(cells), by=("n", "f", "seed", "aggregator"))
    w = w.groupby(["n", "f", "aggregator"], as_index=False)["accuracy"].mean()  # over the seeds, if several
    winners = lambda d: "; ".join(f"n = {r.n}, f = {r.f}: {r.aggregator}"  # noqa: E731
                                  for r in d.loc[d.groupby(["n", "f"])["accuracy"].idxmax()].itertuples())
    mean = "mean " if cells["seed"].nunique() > 1 else ""
    text = f"Highest {mean}worst-case accuracy per (n, f): " + winners(w)
    if set_aggregators:
        text += "; among the set aggregators: " + winners(w[~w["aggregator"].isin(POSITIONAL)])
    return text + ". " + _clients_sentence(grid, n=10, tail=False) + _clients_sentence(grid, n=25, tail=False)


def _clients_sentence(*folders: Path, n: int = 17, tail: bool = True) -> str:
    """The range of the clients' own test accuracies, from the first report folder that has them."""
    for res in folders:
        if (res / "clients.csv").exists():
            c = pd.read_csv(res / "clients.csv")
            c = c[c["n"] == n]
            seeds = sorted(c["seed"].unique())
            which = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}–{seeds[-1]}"
            return (f"The {n} clients' own test accuracies ({which}) range over {100 * c['accuracy'].min():.1f}–"
                    f"{100 * c['accuracy'].max():.1f}% (mean {100 * c['accuracy'].mean():.1f}%)"
                    + ("; the `none` column is what each aggregator makes of them without an attack.\n" if tail
                       else ". "))
    return ""


def _audit_sections() -> list[str]:
    """The literature-protocol sections (fedcal/pages/inference_audit.py)."""
    return inference_audit.audit_sections()


def _inference_claims() -> str:
    """The robust-inference claim-by-claim rows (fedcal/pages/inference_audit.py), once their runs exist."""
    return inference_claims.claims_table()


INFERENCE_RESULTS_HEAD = """# Robust federated inference: results

The current tables of robust federated inference, with the command behind each. What it does, how to run it and how to read these tables: [inference.md](inference.md); the tables these supersede (the small CNN clients at Dirichlet α = 1): [inference-archive.md](inference-archive.md).

## Against the paper

The robust-inference claims, checked on the tables below by the rules of the claims table ([results.md](results.md), *Robust federated inference, claim by claim*; all claims: [glance.md](glance.md)):

<!-- table: docs/results/literature/verdicts-inference.md -->
"""

INFERENCE_ARCHIVE_HEAD = """# Robust federated inference: superseded tables

Tables a later reading replaced, kept with their commands so their numbers can be traced: the first setting, small CNN clients at Dirichlet α = 1 (replaced by the ResNet-8 clients at the literature's α = 0.5 of [inference-results.md](inference-results.md)).

"""


def inference_results(verdicts: str) -> str:
    """docs/inference-results.md: the current tables, read from the generated tables, under ``verdicts`` (the
    claims' verdicts, pasted as fedcal/pages/include_tables.py pastes them)."""
    lines = [INFERENCE_RESULTS_HEAD + verdicts + "<!-- /table -->", ""]
    lines += resnet8_results()
    lines += _alpha_section()
    lines += _audit_sections()
    lines += _text_section()
    return "\n".join(lines)


def inference_archive() -> str:
    """docs/inference-archive.md: the small CNN clients' tables (α = 1), which the ResNet-8 clients' replace."""
    res = DOCS / "results" / "inference-cifar10"
    if not (res / "cells.csv").exists():
        return ""
    cells = pd.read_csv(res / "cells.csv")
    worst = worst_case(without_chance(cells), by=("seed", "aggregator"))  # a constant answer is never "robust"
    ranking = worst.groupby("aggregator")["accuracy"].mean().sort_values(ascending=False)
    per_seed_best = worst.loc[worst.groupby("seed")["accuracy"].idxmax(), "aggregator"].value_counts()
    table = (res / "table_n17_f4.md").read_text().split("\n", 2)[2]
    attacks = worst.groupby("aggregator")["worst_attack"].agg(lambda a: ", ".join(sorted(set(a))))
    seeds = sorted(cells["seed"].unique())
    seed_text = f"seeds {seeds[0]}–{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    ablation = res / "ablation_n17_f4.md"
    lines = [
        INFERENCE_ARCHIVE_HEAD.rstrip("\n"), "",
        f"## Results: CIFAR-10, n = 17 clients, f = 4 adversarial, Dirichlet α = {RunConfig().dirichlet_alpha:g}, "
        f"{seed_text}",
        "", "*Replaced by the ResNet-8 clients at the literature's α = 0.5 "
        "([inference-results.md](inference-results.md), first table).*",
        "", "```bash", INFERENCE_COMMAND, "```", "",
        f"Accuracy (%) on the first {cells['queries'].iloc[0]:,} CIFAR-10 test images, mean ± std over "
        f"{cells['seed'].nunique()} seeds (a seed changes the partition, the clients' initialisation and "
        "batches, the server's split, the DeepSet's initialisation and the adversaries of every query). "
        "`worst case` is the lowest accuracy over the attacks, taken per seed and then averaged.", "",
        table,
        _clients_sentence(res, DOCS / "results" / GRID),
        "Ranking by mean worst-case accuracy: " + ", ".join(
            f"{a} {100 * v:.2f}" for a, v in ranking.items()) + ". "
        f"Highest worst-case accuracy per seed: " + ", ".join(
            f"{a} in {k} of {cells['seed'].nunique()} seeds" for a, k in per_seed_best.items()) + ". "
        "The attack achieving the worst case, per aggregator: " + "; ".join(
            f"{a}: {attacks[a]}" for a in ranking.index) + ".", "",
    ]
    if ablation.exists():
        lines += ["The robust elements of DeepSet-TM, one at a time (the same runs; `clean` is the `none` column, "
                  "`worst case` as above):", "", ablation.read_text().split("\n", 2)[2], ""]
        lines += ["The purification baselines have the best clean accuracy: their fusion classifier is "
                  "positional and learns which client is good at what, which no set aggregator can. CoPur's ℓ2,1 fit "
                  "withstands the one-hot attacks far better than the ℓ2 projection (SIA white-box: twice the set "
                  "aggregators' accuracy), but PGD-CW through its unrolled fit brings its worst case down to the "
                  "set aggregators' level, and manifold projection collapses under it. In the ablation each robust "
                  "element raises the worst case and costs some clean accuracy; trimmed pooling and adversarial "
                  "training together give the highest worst case.", ""]
    for png, caption in (("acc_vs_f.png", "Worst-case accuracy over all attacks against the number of adversarial "
                          "clients per query (aggregators built for f = 4; first 1,000 test images)."),
                         ("acc_vs_amplification.png", "Accuracy under logit flipping against its amplification a "
                          "(f = 4; first 1,000 test images).")):
        if (res / png).exists():
            lines += [f"![{png}](results/inference-cifar10/{png})", "", caption, ""]
    grid_dir = DOCS / "results" / GRID
    if (grid_dir / "scalability.md").exists():
        lines += ["## Scalability: (n, f) = (10, 3), (17, 4), (25, 5), seeds 0–2", "",
                  "*Replaced by the ResNet-8 clients' grid over the same (n, f) and seeds "
                  "([inference-results.md](inference-results.md)).*", "", "```bash", GRID_COMMAND, "```", "",
                  "The same keys as the table above, whose runs are this grid's (17, 4) cell (one run store). Its "
                  "runs were made on 2 CPU cores over two sittings (6–15 minutes a cell) by three commits of fedcal "
                  "(each run's provenance names its own) between which only the defense configuration, the "
                  "sweep and Byzantine reports and the strategy registry changed — nothing a robust-inference run "
                  "executes.", "",
                  (grid_dir / "scalability.md").read_text().split("\n", 2)[2],
                  _grid_summary(grid_dir, set_aggregators=True) + "\n" + _grid_trend(grid_dir)
                  + f" Per-attack tables of each cell, over the three seeds: `docs/results/{GRID}/table_n*_f*.md` "
                  "(ablations: `ablation_n*_f*.md`), the curves against f `acc_vs_f_n*_f*.png`.", ""]
        lines += [f"![acc_vs_f_n25_f5.png](results/{GRID}/acc_vs_f_n25_f5.png)", "",
                  "Worst-case accuracy against the number of adversarial clients, n = 25 (aggregators built for "
                  "f = 5; first 1,000 test images, mean over the three seeds).", ""]
    return "\n".join(lines)


def _alpha_section() -> list[str]:
    """The heterogeneity levels (fedcal/pages/inference_alpha.py)."""
    return inference_alpha.alpha_section(DOCS / "results")


def _text_section() -> list[str]:
    """The text domain (fedcal/pages/inference_text.py)."""
    return inference_text.text_section()


