"""Assemble docs/results.md (current TSA tables), docs/results-archive.md (superseded ones) and robust federated
inference's inference.md (guide), inference-results.md and inference-archive.md from the generated tables
(docs/results/*/table.md).

    python docs/tools/build_results.py [--check]

The prose states directions only; every number on the page comes from a generated table.
"""

import sys
from pathlib import Path

import pandas as pd

from fedcal.config import RunConfig
from fedcal.reports import markdown_table, without_chance, worst_case
from fedcal.reports.inference import percent_cell

DOCS = Path(__file__).resolve().parents[1]


def table_text(path: Path) -> str:
    """A generated Markdown table without its bold title line."""
    text = path.read_text()
    return text.split("\n", 2)[2] if text.startswith("**") else text


def table(name: str) -> str:
    return table_text(DOCS / "results" / name / "table.md")


# the stealth measurement's protocol, audited on the paper-scale benign runs of seeds 0-2
STEALTH_AUDIT = ("paper-mnist-stealth-protocols", "paper-mnist-stealth-weights", "paper-cifar10-stealth-protocols",
                 "paper-cifar10-stealth-weights")


# The keys every CIFAR10-CNN cell of the tau grid and the seed-0 sweeps shares (one run store).
CIFAR_KEYS = "engine=inprocess eval-every=10 dataset=cifar10 model=cnn lr=0.05 data-dir=../shared/data output-dir=runs/cifar-tau-seeds"

# The keys of every paper-scale CIFAR10-CNN run (the τ table over seeds and the analyses on its runs).
PAPER_CIFAR = ("engine=inprocess eval-every=10 dataset=cifar10 model=cnn lr=0.05 local-epochs=2 augment=crop-flip "
               "data-dir=../shared/data output-dir=runs/paper-cifar")

SECTIONS = [
    ("mnist-mlp-tau", "MNIST–MLP (784-200-200-10, β = 0.01), τ ∈ {0.2, 0.5, 1, 2, 5}",
     "fedcal taus --taus 0.2,0.5,1,2,5 --report docs/results/mnist-mlp-tau dataset=mnist data-dir=../shared/data",
     ["reliability.png", "trajectories.png"],
     "τ > 1 drives the global model **over-confident** (d_sece < 0) and τ < 1 **under-confident** "
     "(d_sece > 0), monotonically in τ; accuracy barely moves (d_accuracy). Acceptance: "
     "τ = 5 at least 5 points of sECE below benign, τ = 0.2 at least 2 above, accuracy within 3 — "
     "read the d_sece and d_accuracy columns. With E = 5 local *steps* (SPEC) and β = 0.01 the benign "
     "model is itself still under-confident after 100 rounds; the attack shifts calibration relative to it."),
    ("mnist-mlp-tau-5seeds", "MNIST–MLP, the full τ grid over seeds 0–4",
     "for s in 0 1 2 3 4; do fedcal taus --taus 0.2,0.25,0.33,0.5,1,2,3,4,5 --jobs 2 --report runs/mnist-tau-by-seed/$s "
     "seed=$s engine=inprocess dataset=mnist data-dir=../shared/data output-dir=runs/mnist-tau-seeds; done   # 45 runs\n"
     "fedcal report runs/mnist-tau-seeds/* --out docs/results/mnist-mlp-tau-5seeds",
     ["reliability.png", "trajectories.png"],
     "Mean ± standard deviation over five seeds (seed changes the model initialisation, the partition, the "
     "attacker subset, client sampling and batches). The calibration shift grows monotonically with |log τ| "
     "in both directions and is many standard deviations wide; the accuracy cost grows with τ > 1 and, "
     "averaged over seeds, exceeds the single-seed figure of the first table at τ = 5. Reliability "
     "diagrams are seed 0's; trajectories average the seeds."),
    ("paper-mnist-mlp-tau-5seeds", "MNIST–MLP at paper scale (one local epoch per round), the τ grid over seeds 0–4",
     "for s in 0 1 2 3 4; do fedcal taus --taus 0.2,0.25,0.33,0.5,1,2,3,4,5 --jobs 2 --report runs/paper-mnist-tau-by-seed/$s "
     "seed=$s engine=inprocess dataset=mnist data-dir=../shared/data local-epochs=1 output-dir=runs/paper; done   # 45 runs\n"
     "fedcal report runs/paper/mnist-mlp-fedavg-* --out docs/results/paper-mnist-mlp-tau-5seeds",
     ["reliability.png", "trajectories.png"],
     "The paper-scale reading of the 5-step MNIST τ table over seeds ([results-archive.md](results-archive.md)): every client takes one pass over its own data "
     "per round (`local-epochs=1`: ⌈n_k / 64⌉ steps, 19 for a client of 1,200 images) instead of 5 steps; "
     "everything else is the same. The benign model now reaches the literature's accuracy level and is far "
     "better calibrated than the 5-step one; the attack's directions are unchanged — τ > 1 over-confident, "
     "τ < 1 under-confident, monotone in τ — with "
     "accuracy within about a point. The runs are named apart from the 5-step ones (`local-epochs` enters "
     "the run hash)."),
    ("cifar10-cnn-tau", "CIFAR10–CNN (two 5×5 conv + pool, two linear; β = 0.05), τ ∈ {0.2, 1, 5}",
     "fedcal taus --taus 0.2,1,5 --report docs/results/cifar10-cnn-tau dataset=cifar10 model=cnn lr=0.05 "
     "data-dir=../shared/data",
     ["reliability.png", "trajectories.png"],
     "The same directions as on MNIST: τ = 5 over-confident, τ = 0.2 under-confident, accuracy within a "
     "few points."),
    ("cifar10-cnn-tau-5seeds", "CIFAR10–CNN, τ ∈ {0.2, 1, 5} over seeds 0–4",
     "fedcal sweep --grid seed=0,1,2,3,4 --grid tau=0.2,5 --jobs 2 engine=inprocess eval-every=10 dataset=cifar10 "
     "model=cnn lr=0.05 data-dir=../shared/data output-dir=runs/cifar-tau-seeds\n"
     "fedcal sweep --grid seed=0,1,2,3,4 --jobs 2 attack=none engine=inprocess eval-every=10 dataset=cifar10 "
     "model=cnn lr=0.05 data-dir=../shared/data output-dir=runs/cifar-tau-seeds\n"
     "fedcal report runs/cifar-tau-seeds/* --out docs/results/cifar10-cnn-tau-5seeds",
     ["reliability.png", "trajectories.png"],
     "Mean ± standard deviation over five seeds, central evaluation every 10 rounds (trajectories have a point "
     "every 10 rounds; the table is the final round). Over seeds the two directions hold with shifts several "
     "standard deviations wide, while the accuracy changes stay within about one standard deviation of zero. "
     "Reliability diagrams are seed 0's; trajectories average the seeds."),
    ("cifar10-cnn-tau-grid", "CIFAR10–CNN, the full τ grid (seed 0)",
     "fedcal taus --taus 0.2,0.25,0.33,0.5,1,2,3,4,5 --jobs 2 --report docs/results/cifar10-cnn-tau-grid " + CIFAR_KEYS,
     ["reliability.png", "trajectories.png"],
     "The nine τ of SPEC §2 on seed 0 (its τ = 0.2, 1 and 5 cells are those of the five-seed table above, "
     "shared through the run store). sECE falls monotonically with τ across the whole grid, from "
     "under-confident at τ < 1 to strongly over-confident at τ > 1, while accuracy stays within half a point of "
     "benign up to τ = 3 and pays a few points only at τ = 4–5. The reliability diagrams show the mechanism: "
     "τ > 1 moves mass into the high-confidence bins without raising their accuracy. Trajectories (a point every "
     "10 rounds) show the ordering by τ holding at most evaluated rounds from round 30 on, through the "
     "round-to-round swings of 5-of-50 non-IID client sampling."),
    ("paper-cifar10-cnn-tau-3seeds",
     "CIFAR10–CNN at paper scale (two local epochs, crop-and-flip), τ ∈ {0.2, 1, 5} over seeds 0–2",
     "fedcal sweep --grid seed=0,1,2 --grid tau=0.2,5 --jobs 2 --report runs/sweep-paper-cifar-tsa " + PAPER_CIFAR + "\n"
     "fedcal sweep --grid seed=0,1,2 --jobs 2 --report runs/sweep-paper-cifar-benign attack=none " + PAPER_CIFAR + "\n"
     "fedcal report runs/paper-cifar/* --out docs/results/paper-cifar10-cnn-tau-3seeds   # 9 runs: 95 min on 2 cores",
     ["reliability.png", "trajectories.png"],
     "The paper-scale reading of the CIFAR τ table: every client takes two passes over its own "
     "data per round with random crop and flip, everything else as in the 5-step table (β = 0.05, no "
     "momentum, 5 of 50 clients per round, 100 rounds). The benign model reaches the literature's accuracy "
     "level, near-calibrated, and the attack keeps both directions — τ = 5 over-confident, τ = 0.2 "
     "under-confident — with accuracy within about a point of benign. The seed spread of the benign sECE is "
     "of the size of the shifts, so read d_sece (each attacked run against the benign run of its own seed), "
     "which is more than twice its own seed spread in both directions. The benign seed-0 run has the config (and hash) of the probe's two-epoch "
     "cell; re-made here under `--jobs 2` it does not end exactly where the probe's did — most likely float "
     "rounding under another thread count over 100 rounds, not traced further."),
    ("paper-cifar10-cnn-tau-grid", "CIFAR10–CNN at paper scale, the full τ grid (seed 0, made on an H100)",
     "fedcal taus --taus 0.2,0.25,0.33,0.5,1,2,3,4,5 --jobs 9 --report docs/results/paper-cifar10-cnn-tau-grid seed=0 "
     + PAPER_CIFAR + "   # 9 runs: 6 min on one H100 (device=auto), about 95 min on 2 cores with --jobs 2",
     ["reliability.png", "trajectories.png"],
     "The nine τ of SPEC §2 at paper scale. Unlike every other table on this page, these runs were made on "
     "a lent machine with one NVIDIA H100 and 16 cores (`device=auto` trains on CUDA there; torch 2.11, the "
     "image's, recorded in each run's provenance). Every τ < 1 is under-confident and every τ > 1 over-confident, sECE falling monotonically with τ from "
     "τ = 0.25 on (τ = 0.2 is a little less under-confident than 0.25), while accuracy stays within a point of "
     "benign except at τ = 5 — the shape of the 5-step grid, at the literature's "
     "accuracy level. Its τ = 0.2, 1 and 5 cells have the configurations (and run names) of the three-seed "
     "table's seed-0 runs, which were made on 2 CPU cores; the two machines do not end at the same model "
     "after 100 rounds:"),
    ("defenses-mnist", "Defenses: robust aggregation against TSA, MNIST–MLP",
     "fedcal taus --taus 0.2,1,5 --strategies fedavg,fltrust,foolsgold,multikrum "
     "--report docs/results/defenses-mnist dataset=mnist data-dir=../shared/data",
     ["defenses.png"],
     "FLTrust: a 100-sample root set from the training data, trained by the server with the benign "
     "procedure. MultiKrum: f = 1, m = n − f. d_* columns compare each run with the benign run of the "
     "same strategy. No rule removes the shift: TSA updates stay collinear with benign ones (the η–τ "
     "coupling), so FoolsGold (built against sybils) behaves like FedAvg; FLTrust rescales every update "
     "to the root update's norm, which slows the whole federation (more under-confident even when "
     "benign), and shrinks but keeps the shift; MultiKrum dampens τ = 5 and leaves τ = 0.2 intact. "
     "A defense aimed at calibration itself, CalGuard, with these rules over three seeds: "
     "[defense.md](defense.md); its tables: [defense-results.md](defense-results.md)."),
    ("defenses-cifar10", "Defenses: robust aggregation against TSA, CIFAR10–CNN",
     "fedcal taus --taus 0.2,1,5 --strategies fedavg,fltrust,foolsgold,multikrum --jobs 2 "
     "--report docs/results/defenses-cifar10 dataset=cifar10 model=cnn lr=0.05 data-dir=../shared/data "
     "engine=inprocess eval-every=10",
     ["defenses.png"],
     "Run with the in-process engine (the same apps without Ray) and central evaluation every 10 rounds "
     "(the table needs the final round only). These runs aggregate in a fixed client order, so their FedAvg "
     "rows differ from the CIFAR τ table above in the first decimal: 100 rounds amplify float rounding. "
     "Unlike on MNIST, FLTrust and MultiKrum remove the over-confidence of τ = 5 here (d_sece near zero "
     "or positive) while FoolsGold does not; FLTrust also shrinks the τ = 0.2 shift, MultiKrum does not. "
     "MultiKrum's benign run is itself less accurate and more over-confident than FedAvg's: dropping one "
     "of five updates every round discards honest non-IID information. One seed only: the effect sizes "
     "of these defenses need the seed grid before they are trusted."),
]

HEADER = """# Results: the Temperature Scaling Attack reproduced

What the attack does, how to run it and how to read a τ table: [tsa.md](tsa.md).

Every number on this page is read from a table that the command above it produced, on this
project's 2-core CPU machine (the sections whose title says *made on an H100* ran on a lent GPU
machine), from `../shared/data` (MNIST byte-exact; CIFAR-10 recovered from
JPEG, see its README). Tables and figures come from the run store only (`metrics.csv` per run;
`fedcal report RUN_DIR ... --out DIR` rebuilds them from finished runs). Metrics are those of the
final global model (round 100), evaluated at τ = 1 on the full test set; accuracy, ECE and sECE in
percent (sECE < 0: over-confident, > 0: under-confident); `d_accuracy`/`d_sece` are the changes
against the benign run. Whether these attacks also change robustness (PGD, CW, corruptions) is
measured on the same grids in [robustness-results.md](robustness-results.md#the-bridge-does-tsa-change-robustness).
RFD-LoRA's tables (backdoor clients against LoRA text classifiers) are on their own page:
[distill-results.md](distill-results.md) (the first tables, on a small encoder: [distill-archive.md](distill-archive.md)).

Configuration (SPEC §2, "table" row): K = 50 clients, M = 5 per round, 13 attackers (25%,
seeded), Dirichlet α = 1, SGD, B = 64, 100 rounds, aggregation weighted by client data size.
Attackers train with CE(softmax(z/τ), y) and η = β·τ; τ = 1 is the benign run (no attacker at all).

The tables on this page are at *paper scale*: they train to the literature's level with local
*epochs* per round: one on MNIST (`local-epochs=1`), two with the standard crop-and-flip
augmentation on CIFAR-10 (`local-epochs=2 augment=crop-flip`, chosen by the probe below). The first,
literal reading of the protocol, E = 5 local *steps* per round, and its single-seed tables are in
[results-archive.md](results-archive.md), each under a note naming the table that replaced it.

"""

ARCHIVE_HEADER = """# Results: the Temperature Scaling Attack, superseded tables

Tables a later reading replaced, kept with their commands so their numbers can be traced; each
section opens with the table that replaced it on [results.md](results.md), which states how to
read them. The claims checked against the paper read only the tables of results.md.

Configuration (SPEC §2, "table" row): K = 50 clients, M = 5 per round, 13 attackers (25%,
seeded), Dirichlet α = 1, SGD, B = 64, E = 5 local steps, 100 rounds, seed 0, aggregation weighted
by client data size. Attackers train with CE(softmax(z/τ), y) and η = β·τ; τ = 1 is the benign run
(no attacker at all).

Every table on this page uses this literal reading, E = 5 local *steps* per round (`local-steps=5`,
no augmentation): 320 samples, a quarter to a third of a client's data, per round, which leaves
the models less trained than the literature's (see the benign rows below). The paper-scale tables
that replace them train to the literature's level with local *epochs* per
round: one on MNIST (`local-epochs=1`), two with the standard crop-and-flip augmentation on CIFAR-10
(`local-epochs=2 augment=crop-flip`): a
different reading of the same protocol, whose runs are named apart (and kept in their own output
directory); no table mixes the two.

"""


def anchor(title: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    import re

    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


#: the sections of results-archive.md: the E = 5-step and single-seed tables, each -> the section that replaced it
SUPERSEDED = {
    "mnist-mlp-tau": "paper-mnist-mlp-tau-5seeds",
    "mnist-mlp-tau-5seeds": "paper-mnist-mlp-tau-5seeds",
    "cifar10-cnn-tau": "paper-cifar10-cnn-tau-3seeds",
    "cifar10-cnn-tau-5seeds": "paper-cifar10-cnn-tau-3seeds",
    "cifar10-cnn-tau-grid": "paper-cifar10-cnn-tau-grid",
    "defenses-mnist": "defense-results.md (MNIST–MLP at paper scale, three seeds)",
    "defenses-cifar10": "defense-results.md (CIFAR10–CNN at paper scale, three seeds)",
    "mnist-posthoc": "paper-mnist-posthoc-ovr",
    "mnist-triage": "paper-mnist-triage",
    "mnist-similarity": "paper-mnist-similarity",
    "mnist-stealth": "paper-mnist-stealth-protocols",
    "cifar10-posthoc": "paper-cifar10-posthoc-ovr",
    "cifar10-triage": "paper-cifar10-triage",
    "cifar10-similarity": "paper-cifar10-similarity",
    "cifar10-stealth": "paper-cifar10-stealth",
    "mnist-extreme-tau": "paper-mnist-extreme-tau",
    "mnist-sens-ratio": "paper-cifar10-sens-ratio",
    "mnist-sens-alpha": "paper-cifar10-sens-alpha",
    "mnist-sens-beta": "paper-cifar10-sens-beta",
    "cifar10-extreme-tau": "paper-cifar10-extreme-tau",
    "cifar10-sens-ratio": "paper-cifar10-sens-ratio",
    "cifar10-sens-alpha": "paper-cifar10-sens-alpha",
    "cifar10-sens-beta": "paper-cifar10-sens-beta",
}


def replaced_note(name: str) -> str:
    """The one line at the top of an archived section: the table that replaced it, linked."""
    by = SUPERSEDED[name]
    if by.endswith(")"):  # a page of its own
        page, what = by.split(" ", 1)
        return f"*Replaced by [{page}]({page}) {what}.*"
    titles = {n: t for n, t, *_ in [*SECTIONS, *ANALYSES]}
    note = f"*Replaced by [{titles[by]}](results.md#{anchor(titles[by])})"
    if name.startswith("mnist-sens"):
        note += " (no paper-scale MNIST sensitivity was made; the claims read the CIFAR10–CNN one)"
    return note + ".*"


LITERATURE_INTRO = """## How these results compare with the literature's

Claim by claim, in two tables: the Temperature Scaling Attack's (this page and the pages it names)
and robust federated inference's ([inference-results.md](inference-results.md)). *Paper scale* is the reading that
trains the models to the literature's accuracy level.
"""


def literature_section() -> str:
    """The comparison with the TSA literature, claim by claim (docs/tools/tsa_claims.py, beside this file)."""
    return LITERATURE_INTRO + "\n" + _sibling("tsa_claims").claims_table()


# Columns shown as short decimals ("0.2", "0.005"); every other float with four decimals.
SHORT = ("tau", "lr", "dirichlet-alpha", "attacker-ratio", "gamma", "momentum", "weight-decay")


def _short(v) -> str:
    """A config value (τ, lr, α, …) exactly as set: shortest form, never rounded (a fixed number
    of decimals once printed lr = 0.025 as 0.03)."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def _plain(v) -> str:
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else f"{v:.4f}"
    return str(v)


def markdown(df: pd.DataFrame, pct: tuple[str, ...] = (), digits: int = 2) -> str:
    """A Markdown table of a CSV's columns; columns in ``pct`` are fractions shown in percent."""
    formats = {c: _short for c in SHORT}
    formats.update({c: (lambda v: f"{100 * v:.{digits}f}") for c in pct})
    return markdown_table(df, formats=formats, default=_plain)


def _probe_table(folder: Path) -> str:
    """The probe's runs, one row each (the committed cells.csv: a run's per-round rows stay in its git-ignored
    rounds.csv, which a clean clone does not have), then the means over seeds."""
    cols = ["seed", "momentum", "weight-decay", "accuracy", "ece", "sece", "nll", "chance_level", "replies_rejected"]
    t = pd.read_csv(folder / "cells.csv")
    t = t.sort_values(["momentum", "weight-decay", "seed"])[cols]
    t["replies_rejected"] = t["replies_rejected"].astype(int)
    t = t.rename(columns={"replies_rejected": "last round's replies rejected"})
    body = "Accuracy, ECE and sECE in %:\n\n" + markdown(t, pct=("accuracy", "ece", "sece"))
    if (folder / "seeds.md").exists():
        body += "\nOver the seeds (`seeds.md`):\n\n" + table_text(folder / "seeds.md")
    return body


def analysis_tables() -> dict[str, str]:
    """Markdown summaries of the analysis CSVs (read, never typed)."""
    res = DOCS / "results"
    out = {}
    for name in ("paper-mnist-posthoc-ovr", "paper-cifar10-posthoc-ovr"):
        if not (f := res / name / "posthoc.csv").exists():
            continue
        t = pd.read_csv(f)
        methods = ["none", "temperature", "platt", "isotonic", "histogram", "platt-ovr", "isotonic-ovr"]
        seeds = t["seed"].nunique()
        parts = []
        for value, what in (("sece", "sECE (%)"), ("accuracy", "Accuracy (%)")):
            w = t.pivot_table(index=["run", "n_cal"], columns="method", values=value).reset_index()
            parts.append(f"{what}, mean over {seeds} seeds, on the held-out rest of the test set:\n\n"
                         + markdown(w[["run", "n_cal", *methods]], pct=tuple(methods)))
        out[name] = "\n".join(parts)
    for name in ("mnist-triage", "cifar10-triage", "paper-mnist-triage", "paper-cifar10-triage"):
        if (f := res / name / "triage.csv").exists():
            t = pd.read_csv(f)
            t = t[t["gamma"].round(6).isin([0.5, 0.7, 0.9, 0.99])]
            seeds = t["seed"].nunique() if "seed" in t.columns else 1
            cols = ["sent", "unnecessary", "missed", "unnecessary_change", "missed_change"]
            if seeds > 1:
                t = t.groupby(["run", "gamma"], sort=False)[cols].mean().reset_index()
                t[cols] = t[cols].map(lambda v: f"{v:.1f}")  # a mean of counts: one decimal
            what = f", mean over {seeds} seeds" if seeds > 1 else ""
            out[name] = f"Counts on the 10,000 test images at a few thresholds γ{what}:\n\n" + markdown(
                t[["run", "gamma", *cols]])
    for ds in ("mnist", "cifar10", "paper-cifar10", "paper-mnist"):
        if (f := res / f"{ds}-posthoc" / "posthoc.csv").exists():
            t = pd.read_csv(f)
            w = t.pivot_table(index=["run", "n_cal"], columns="method", values="sece").reset_index()
            out[f"{ds}-posthoc"] = "sECE (%) on the held-out rest of the test set:\n\n" + markdown(
                w[["run", "n_cal", "none", "temperature", "platt", "isotonic", "histogram"]],
                pct=("none", "temperature", "platt", "isotonic", "histogram"))
        if (f := res / f"{ds}-similarity" / "similarity.csv").exists():
            t = pd.read_csv(f)
            g = t.groupby("pair", sort=False).agg(pairs=("cka", "size"), logit_cosine_mean=("logit_cosine", "mean"),
                                                  logit_cosine_std=("logit_cosine", "std"), cka_mean=("cka", "mean"),
                                                  cka_std=("cka", "std")).reset_index()
            out[f"{ds}-similarity"] = markdown(g)
        if (f := res / f"{ds}-stealth" / "stealth.csv").exists():
            t = pd.read_csv(f)
            shown = [1, 5, 10, *([int(t["step"].max())] if t["step"].max() > 10 else [])]  # and a whole round's
            w = t[t["step"].isin(shown)].pivot(index="variant", columns="step", values="cosine").reset_index()
            w.columns = ["variant", *[f"step {c}" for c in w.columns[1:]]]
            out[f"{ds}-stealth"] = markdown(w)
    # tables a command wrote as Markdown, without their titles: the summary `fedcal stealth` wrote (mean ±
    # std over seeds), and a τ table over seeds (`fedcal report`)
    for name, file in [*((n, "stealth.md") for n in STEALTH_AUDIT), ("paper-cifar10-extreme-tau", "table.md")]:
        if (f := res / name / file).exists():
            out[name] = table_text(f)
    if (res / "paper-cifar10-probe-3seeds" / "cells.csv").exists():
        out["paper-cifar10-probe-3seeds"] = _probe_table(res / "paper-cifar10-probe-3seeds")
    sweeps = (("extreme-tau", "tau"), ("sens-ratio", "attacker-ratio"), ("sens-alpha", "dirichlet-alpha"),
              ("sens-beta", "lr"), ("paper-probe", "local-epochs"))
    for name in ("paper-cifar10-sens-ratio", "paper-cifar10-sens-alpha", "paper-cifar10-sens-beta",
                 "paper-mnist-extreme-tau"):  # over seeds
        if (f := res / name / "seeds.md").exists():
            out[name] = table_text(f)
    for name, x in ((f"{ds}-{sweep}", key) for ds in ("mnist", "cifar10") for sweep, key in sweeps):
        if (f := res / name / "cells.csv").exists():
            t = pd.read_csv(f)
            keys = [k for k in (x, "tau") if k in t.columns and (k == x or t[k].nunique() > 1)]
            t = t.sort_values(keys)
            out[name] = "Accuracy, ECE and sECE in %:\n\n" + markdown(t[[*dict.fromkeys(keys), "accuracy", "ece",
                                                                         "sece", "brier", "nll"]],
                                                                      pct=("accuracy", "ece", "sece"))
    return out


ANALYSES = [
    ("cifar10-paper-probe",
     "CIFAR10–CNN at paper scale: the probe (benign, crop-and-flip, one or two local epochs, seed 0)",
     "fedcal sweep --grid local-epochs=1,2 --jobs 1 --report docs/results/cifar10-paper-probe engine=inprocess "
     "dataset=cifar10 model=cnn lr=0.05 eval-every=10 augment=crop-flip attack=none data-dir=../shared/data "
     "output-dir=runs/paper",
     [],
     "The question for CIFAR-10: which reading trains the benign CNN to the literature's accuracy "
     "*and* keeps it about as well calibrated as the literature's benign model. An earlier probe measured five local "
     "epochs without augmentation as strongly over-confident; here the standard CIFAR augmentation (random "
     "crop and flip) with two local epochs per round reaches the literature's accuracy level with a small "
     "positive sECE, so it is the paper-scale CIFAR reading (the τ table over three seeds at this reading is "
     "above, the defense table at it over three seeds in defense-results.md). One local epoch ends lower, and its last rounds swing by "
     "several points (5 of 50 clients per round)."),
    ("paper-cifar10-probe-3seeds",
     "CIFAR10–CNN at paper scale: momentum and weight decay (benign, seeds 0–2)",
     "fedcal sweep --grid seed=0,1,2 --grid momentum=0,0.9 --grid weight-decay=0,5e-4 --jobs 2 "
     "--report docs/results/paper-cifar10-probe-3seeds " + PAPER_CIFAR + " tau=1",
     [],
     "A last look at the benign accuracy gap (the literature's CIFAR10–CNN benign accuracy is quoted as "
     "68.55 %): plain SGD, the paper-scale reading, against SGD with momentum 0.9, weight decay 5 × 10⁻⁴, or "
     "both. Seed 0 of every reading was made on the lent H200, seeds 1–2 of the three new readings here on 2 CPU "
     "cores (each run on one machine); the plain-SGD runs are the β and α sweeps' β = 0.05, τ = 1 runs. Weight "
     "decay alone changes "
     "little; momentum adds about half a point and some under-confidence; momentum with weight decay is the most "
     "accurate reading on the two seeds that trained to the end, still below the literature's value and the most "
     "under-confident — and on seed 0 its model diverged in the last rounds (its last round rejected every reply; the run's "
     "rejections.csv names the clients and says why; the table marks it and leaves it out of the means). No "
     "reading closes the gap stably at this step size (β = 0.05 is an effective step of 0.5 under momentum 0.9), "
     "so plain SGD stays the paper-scale reading."),
    ("paper-mnist-posthoc-ovr",
     "Post-hoc calibration, top-label vs one-vs-rest (paper-scale MNIST–MLP, seeds 0–2)",
     "fedcal posthoc runs/paper/mnist-mlp-fedavg-{none,tsa0.2,tsa5}-s{0,1,2}-* "
     "--methods temperature,platt,isotonic,histogram,platt-ovr,isotonic-ovr --out docs/results/paper-mnist-posthoc-ovr",
     ["posthoc.png"],
     "Why fedcal's post-hoc results contradict the literature's, where only temperature scaling "
     "helps and Platt scaling and isotonic regression sometimes amplify signed miscalibration. fedcal's "
     "Platt, isotonic and histogram calibrators (SPEC §5) are *top-label*: they fit the predicted class's "
     "confidence to its correctness directly, so removing the shift is what they are built to do, and they "
     "keep the argmax. For a multiclass model the literature's Platt and isotonic are, unless a paper says "
     "otherwise, the *one-vs-rest* reduction (Zadrozny & Elkan 2002; scikit-learn's `CalibratedClassifierCV`): "
     "one binary calibrator per class on that class's logit, the ten outputs renormalised. Fitted on the same "
     "held-out images (`platt-ovr`, `isotonic-ovr`, equal to scikit-learn's within 1e-4, "
     "`tests/test_calibrate.py`), those miscalibrate every model — benign or attacked, in either direction "
     "— by more than the attack itself did: one-vs-rest Platt turns each strongly under-confident at every "
     "n_cal, one-vs-rest isotonic over-confident at 10 samples and under-confident from 50; with 10 or 50 "
     "samples both cost accuracy as well (the renormalised per-class maps can change the argmax), while "
     "temperature scaling and the top-label calibrators keep the accuracy and bring sECE near 0 from 50 "
     "samples on (with 10, top-label Platt and isotonic still miss by a few points, in opposite directions). So both findings hold, for different calibrators: the literature's reading matches the "
     "one-vs-rest rows, fedcal's SPEC rows answer the defender's question (can a little clean data undo the "
     "attack's confidence shift?) with the calibrators built for it."),
    ("mnist-posthoc", "Post-hoc calibration of the attacked global models (MNIST–MLP, seed 0)",
     "fedcal posthoc runs/mnist-tau-seeds/mnist-mlp-fedavg-{none,tsa0.2,tsa5}-s0-* --out docs/results/mnist-posthoc",
     ["posthoc.png"],
     "Each calibrator is fitted on n_cal test images held out at random and scored on the rest (`none`: the "
     "global model as is, on the same images). With 50 or more samples every calibrator removes most of "
     "the TSA shift in either direction: post-hoc calibration is a cheap defense wherever the server has "
     "a little clean labelled data. Temperature scaling keeps a small positive sECE here; the top-label "
     "methods (isotonic, histogram, Platt) get closest to zero with 250+ samples; with 10 samples Platt and "
     "histogram binning can make things worse."),
    ("mnist-triage", "Triage thresholds (SPEC §6; MNIST–MLP, seed 0)",
     "fedcal triage runs/mnist-tau-seeds/mnist-mlp-fedavg-{tsa0.2,tsa5}-s0-* "
     "--benign runs/mnist-tau-seeds/mnist-mlp-fedavg-none-s0-* --out docs/results/mnist-triage",
     ["triage.png"],
     "A sample goes to a human when its confidence is below γ. The over-confident τ = 5 model sends fewer "
     "samples and so misses more of its own errors (missed_change > 0); the under-confident τ = 0.2 model "
     "floods the verifiers with correct predictions (unnecessary_change > 0) — the operational cost of a "
     "calibration attack at an unchanged accuracy."),
    ("paper-mnist-triage", "Triage thresholds at paper scale (MNIST–MLP, one local epoch per round, seeds 0–2)",
     "fedcal triage runs/paper/mnist-mlp-fedavg-{tsa0.2,tsa5}-s{0,1,2}-* "
     "--benign runs/paper/mnist-mlp-fedavg-none-s{0,1,2}-* --out docs/results/paper-mnist-triage",
     ["triage.png"],
     "The triage analysis of [results-archive.md](results-archive.md) on the paper-scale runs of the τ grid, each attacked model against the benign "
     "model of its own seed. The operational cost keeps its direction on models trained to the literature's "
     "level: the over-confident τ = 5 model sends fewer samples to the verifiers and misses more of its errors, "
     "the under-confident τ = 0.2 model sends more correct predictions for verification."),
    ("mnist-similarity", "Representation similarity (SPEC §4; MNIST–MLP, seeds 0–4)",
     "fedcal similarity runs/mnist-tau-seeds/mnist-mlp-fedavg-tsa{0.2,5}-s* "
     "--benign runs/mnist-tau-seeds/mnist-mlp-fedavg-none-s* --out docs/results/mnist-similarity",
     ["similarity.png"],
     "Logit cosine and linear CKA of penultimate features on the test set. Attacked global models are as "
     "close to benign ones as benign models of different seeds are to each other: representation "
     "similarity does not reveal TSA."),
    ("mnist-stealth", "Update similarity per local step (SPEC §4; MNIST–MLP)",
     "fedcal stealth runs/mnist-tau-seeds/mnist-mlp-fedavg-none-s0-* --out docs/results/mnist-stealth",
     ["stealth.png"],
     "From the benign run's final global model and client 0's data, the same batches: cosine of each "
     "attacked update to the benign update. Coupled TSA stays aligned; the uncoupled τ = 0.2 update drifts "
     "away as steps accumulate; label flipping points elsewhere; Gaussian noise of σ ≥ 0.01 on 199k "
     "parameters dwarfs a β = 0.01 update (cosine near 0)."),
    ("cifar10-posthoc", "Post-hoc calibration of the attacked global models (CIFAR10–CNN, seed 0)",
     "fedcal posthoc runs/cifar-tau-seeds/cifar10-cnn-fedavg-{none,tsa0.2,tsa5}-s0-* --out docs/results/cifar10-posthoc",
     ["posthoc.png"],
     "As on MNIST: each calibrator fitted on n_cal held-out test images and scored on the rest. The "
     "47%-accurate CIFAR models need more calibration data than the MNIST ones: with ten samples "
     "most fits push the models further towards over-confidence, 50–100 samples mostly overshoot into "
     "under-confidence, "
     "and only from 250 samples do all four methods bring all three models — the strongly over-confident "
     "τ = 5 model included — within a few points of zero. Re-running the seed-0 cells reproduces this "
     "table byte for byte."),
    ("cifar10-triage", "Triage thresholds (SPEC §6; CIFAR10–CNN, seed 0)",
     "fedcal triage runs/cifar-tau-seeds/cifar10-cnn-fedavg-{tsa0.2,tsa5}-s0-* "
     "--benign runs/cifar-tau-seeds/cifar10-cnn-fedavg-none-s0-* --out docs/results/cifar10-triage",
     ["triage.png"],
     "The same operational cost as on MNIST: the over-confident τ = 5 model misses more of its errors at "
     "every threshold (missed_change > 0) and sends fewer correct predictions; the under-confident τ = 0.2 "
     "model sends more correct predictions for verification at the usual thresholds and misses fewer errors."),
    ("cifar10-similarity", "Representation similarity (SPEC §4; CIFAR10–CNN, seeds 0–4)",
     "fedcal similarity runs/cifar-tau-seeds/cifar10-cnn-fedavg-tsa{0.2,5}-s* "
     "--benign runs/cifar-tau-seeds/cifar10-cnn-fedavg-none-s* --out docs/results/cifar10-similarity",
     ["similarity.png"],
     "Logit cosine and linear CKA of penultimate features against benign models of every seed (25 pairs per "
     "τ, five of them same-seed). τ = 0.2 models are as close to benign ones as benign models of different "
     "seeds are to each other; τ = 5 models are too by logit cosine, but against benign models of *other* seeds "
     "every pair's CKA falls below the lowest benign–benign CKA (scatter): on CIFAR-10 the strongest "
     "over-confidence attack leaves a trace in the penultimate features that linear CKA picks up and logit "
     "cosine does not — a detector would still need benign reference models of the same task."),
    ("cifar10-stealth", "Update similarity per local step (SPEC §4; CIFAR10–CNN)",
     "fedcal stealth runs/cifar-tau-seeds/cifar10-cnn-fedavg-none-s0-* --out docs/results/cifar10-stealth",
     ["stealth.png"],
     "From the benign run's final global model and client 0's data, as on MNIST. Here the coupled TSA "
     "updates do *not* stay near-collinear with the benign one: with β = 0.05 (η = 0.25 at τ = 5) and a "
     "model that is right only half the time, the cosine falls well below the ~0.9 that SPEC §2 expects "
     "within a few steps, and coupled τ = 5 ends no more aligned than uncoupled τ = 5. Coupling still "
     "matters at τ = 0.2 (the uncoupled update turns orthogonal), and TSA stays far closer to the benign "
     "update than label flipping (near zero or negative) and Gaussian noise (near zero)."),
    ("paper-cifar10-posthoc-ovr",
     "Post-hoc calibration at paper scale, top-label vs one-vs-rest (CIFAR10–CNN, seeds 0–2)",
     "fedcal posthoc runs/paper-cifar/cifar10-cnn-fedavg-{none,tsa0.2,tsa5}-s{0,1,2}-* "
     "--methods temperature,platt,isotonic,histogram,platt-ovr,isotonic-ovr --out docs/results/paper-cifar10-posthoc-ovr",
     ["posthoc.png"],
     "The MNIST comparison above, on the paper-scale CIFAR runs. Temperature scaling and the top-label "
     "calibrators keep the accuracy and, from 250 samples on, bring every model — benign, under- or "
     "over-confident — within about two points of zero sECE; with 10 samples most of them push the models "
     "into over-confidence, and 100 samples overshoot the other way. The one-vs-rest forms again miscalibrate every model by more than the attack "
     "did (Platt under-confident at every n_cal, isotonic over-confident at 10 and 50 samples and "
     "under-confident from 100) and cost accuracy — one-vs-rest isotonic at every n_cal, one-vs-rest Platt "
     "up to 100 samples (from 250 on it gains about a point). So the same split holds on CIFAR-10: "
     "the literature's amplification is the one-vs-rest calibrators', fedcal's top-label calibrators undo the "
     "attack's shift."),
    ("paper-cifar10-triage", "Triage thresholds at paper scale (CIFAR10–CNN, seeds 0–2)",
     "fedcal triage runs/paper-cifar/cifar10-cnn-fedavg-{tsa0.2,tsa5}-s{0,1,2}-* "
     "--benign runs/paper-cifar/cifar10-cnn-fedavg-none-s{0,1,2}-* --out docs/results/paper-cifar10-triage",
     ["triage.png"],
     "Each attacked model against the benign model of its own seed. The operational cost keeps its direction "
     "on the paper-scale CIFAR models: the over-confident τ = 5 model sends fewer samples to the verifiers "
     "and misses more of its errors at every threshold, the under-confident τ = 0.2 model sends more correct "
     "predictions and misses fewer errors."),
    ("paper-mnist-similarity", "Representation similarity at paper scale (MNIST–MLP, seeds 0–2)",
     "fedcal sweep --grid seed=0,1,2 --jobs 2 --report runs/sweep-paper-mnist-tau0.2 tau=0.2 engine=inprocess "
     "dataset=mnist data-dir=../shared/data local-epochs=1 output-dir=runs/paper-mnist-extreme   # τ = 1 and 5: "
     "the extreme-τ sweep's coupled runs\n"
     "fedcal similarity runs/paper-mnist-extreme/mnist-mlp-fedavg-tsa{0.2,5}-s* --benign "
     "runs/paper-mnist-extreme/mnist-mlp-fedavg-tsa1-s* --out docs/results/paper-mnist-similarity",
     ["similarity.png"],
     "The representation-similarity analysis on paper-scale MNIST models (the claims table reads "
     "it): each attacked model against the benign (τ = 1) model of every seed, the benign pairs as the "
     "reference. The same-seed pairs are close to 1 (the attacked run shares its seed's initialisation, "
     "partition and batches); against other seeds' benign models τ = 0.2 lies within the benign pairs' "
     "range and τ = 5 below it, as on CIFAR-10 — by little on MNIST (similarity.csv)."),
    ("paper-cifar10-similarity", "Representation similarity at paper scale (CIFAR10–CNN, seeds 0–2)",
     "fedcal similarity runs/paper-cifar/cifar10-cnn-fedavg-tsa{0.2,5}-s* "
     "--benign runs/paper-cifar/cifar10-cnn-fedavg-none-s* --out docs/results/paper-cifar10-similarity",
     ["similarity.png"],
     "As in the 5-step reading: τ = 0.2 models are as close to benign models of other seeds as benign models "
     "are to each other, while every τ = 5 model's CKA against a benign model of another seed falls below the "
     "lowest benign–benign CKA (similarity.csv), at a logit cosine in the benign range. The trace of the "
     "strongest over-confidence attack in the penultimate features survives paper-scale training — yet every "
     "pair stays above the paper's own thresholds (logit cosine ≥ 0.85, CKA above ~ 0.8, its Section 5.3), "
     "the claim the claims table checks."),
    ("paper-cifar10-stealth", "Update similarity per local step at paper scale (CIFAR10–CNN)",
     "fedcal stealth runs/paper-cifar/cifar10-cnn-fedavg-none-s0-* --steps 36 --out docs/results/paper-cifar10-stealth",
     ["stealth.png"],
     "A check of the 5-step contradiction on a paper-scale model: from the paper-scale benign run's "
     "final global model and client 0's data, for 36 steps of B = 64 (client 0's two-epoch round; "
     "the same batches for every variant, no augmentation). The contradiction stays: coupled TSA's cosine to "
     "the benign update falls well below SPEC §2's ~0.9 within a few steps at β = 0.05, on a model that "
     "is right two times in three, and coupled τ = 5 is no more aligned than uncoupled τ = 5 by the end of "
     "the round. Uncoupled τ = 0.2 (β with a 5× gradient) diverges: its update is NaN from step 10 on. TSA "
     "still stays far closer to the benign update than label flipping and Gaussian noise."),
    ("paper-mnist-stealth-protocols",
     "Update similarity: the measurement audited (MNIST–MLP at paper scale, seeds 0–2)",
     "fedcal sweep --grid seed=0,1,2 --jobs 2 --report runs/sweep-paper-mnist-benign attack=none engine=inprocess "
     "dataset=mnist data-dir=../shared/data local-epochs=1 output-dir=runs/paper   # the benign runs of the τ grid\n"
     "fedcal stealth runs/paper/mnist-mlp-fedavg-none-s{0,1,2}-* --steps 19 --round 0,10,final "
     "--reference same,others --variants tsa,labelflip_k1,noise_sigma0.01 "
     "--out docs/results/paper-mnist-stealth-protocols",
     ["stealth.png"],
     "The literature reports TSA's updates as near-collinear with benign ones (a cosine of at "
     "least 0.93; SPEC §2: about 0.9 or more, with the uncoupled ablation drifting away as local steps "
     "accumulate), while fedcal's measurement above finds far less on CIFAR-10. The TSA paper's text could not "
     "be read here — the stored copies of arXiv 2602.06638 hold its abstract only, and the authors' public code "
     "(leekichang/temperature-scaling) holds their federated loop with the temperature, `model(x) / T` under "
     "SGD, but no similarity measurement — so each protocol choice SPEC leaves open is measured on its own, "
     "on the paper-scale benign runs of three seeds, for one local epoch of the average client (19 steps of "
     "B = 64) on client 0's data: the start model (`--round`: the initial global model, the global model after "
     "round 10 recomputed from the run's configuration, and the final model — fedcal's choice so far), the "
     "benign reference (`same`: client 0's own benign update on the same batches — fedcal's choice; `others`: "
     "the mean benign update of four other clients on their own data, what a server comparing the updates of a "
     "round sees) and, in the next section, the compared vectors. Neither network has BatchNorm or any other "
     "buffer (their state dicts are their parameters), so which tensors are flattened does not matter here.\n\n"
     "The start model decides. From the initial model coupled TSA's update stays collinear with the benign one "
     "at both τ through the whole epoch while the uncoupled τ = 0.2 update drifts away step by step — the "
     "picture SPEC §2 describes; from the trained models (round 10, the final model) coupled TSA "
     "loses that alignment at one τ or the other. Why it is exact at the start: while the model predicts the "
     "same distribution at every temperature (flat predictions, p_τ = p), the coupled attacker's logit "
     "gradient η·(p_τ − y)/τ = β(p − y) is the benign one (`tests/test_analysis.py` checks cosine 1 with the "
     "output layer zeroed); once the model is confident, p_τ at τ = 5 is far flatter than p, so the attacker "
     "keeps pushing on samples the benign client has already fitted, and at τ = 0.2 far sharper. Against "
     "other clients' updates (non-IID data) no client is collinear, a benign one included: from the initial "
     "model TSA sits at the benign client's level, so a server comparing the updates of a round cannot single "
     "it out early in training; on the final model coupled τ = 5 falls below that level."),
    ("paper-mnist-stealth-weights",
     "Update similarity on the local models' weights instead of their updates (MNIST–MLP at paper scale, seeds 0–2)",
     "fedcal stealth runs/paper/mnist-mlp-fedavg-none-s{0,1,2}-* --steps 19 --round final --compare weights "
     "--variants tsa,labelflip_k1,noise_sigma0.01 --out docs/results/paper-mnist-stealth-weights",
     ["stealth.png"],
     "The other reading of \"the cosine between a TSA update and a benign one\": the local models' weights "
     "θ_global + Δθ instead of the updates Δθ, from the final model. Both vectors share θ_global, which "
     "dwarfs one epoch's update, so every variant looks collinear — label flipping and Gaussian noise too — "
     "and the uncoupled drift does not show. The literature's contrast between the coupled and the uncoupled "
     "attacker therefore needs the updates, as fedcal measures them; what it differs in is the start model "
     "(above)."),
    ("paper-cifar10-stealth-protocols",
     "Update similarity: the measurement audited (CIFAR10–CNN at paper scale, seeds 0–2, made on an H200)",
     "fedcal stealth runs/paper-cifar/cifar10-cnn-fedavg-none-s{0,1,2}-* --steps 36 --round 0,10,final "
     "--reference same,others --variants tsa,labelflip_k1,noise_sigma0.01 "
     "--out docs/results/paper-cifar10-stealth-protocols",
     ["stealth.png"],
     "The MNIST audit above, on the paper-scale CIFAR-10 benign runs of seeds 0–2 (the defense table's, "
     "defense-results.md), for client 0's two-epoch round (36 steps of B = 64, no augmentation). It ran on the lent "
     "H200 beside those runs, one call per seed as each benign run finished; stealth.csv is the three calls' "
     "rows concatenated, which is what the command above writes (each run's rows depend on that run alone). "
     "The CNN has no BatchNorm or other buffer either.\n\n"
     "The start model decides on CIFAR-10 too, and explains the contradiction the sections above found. From "
     "the initial model coupled TSA stays near-collinear with the client's own benign update through the "
     "whole round (0.89 at τ = 0.2, 0.92 at τ = 5 after 36 steps, tight over seeds — the literature's level), "
     "while the uncoupled attacker drifts away (0.46 and 0.59): the coupling's benefit the literature "
     "describes. From the model after round 10 or the final model coupled TSA loses that alignment (0.40 / "
     "0.70 after round 10, 0.57 / 0.49 from the final model), and coupled τ = 5 ends no more aligned than "
     "uncoupled τ = 5 (0.49 / 0.50) — what the single-seed measurement above reported; uncoupled τ = 0.2 "
     "diverges there (β with a 5× gradient: its update is NaN, shown as nan). Against other clients' updates "
     "(non-IID data) no update is collinear, a benign one included: from the initial model TSA sits at the "
     "benign client's level (0.50 / 0.46 against 0.53), from the final model below it (−0.04 / 0.11 against "
     "0.14). The literature's ≥ 0.93 is therefore a start-of-training figure; fedcal measured a trained model. "
     "At the paper's own protocol (the update after 10 local steps from the initial model, its Section 5.3) the "
     "coupled cosine is 0.857 at τ = 0.2 and 0.956 at τ = 5 (mean over seeds): τ = 0.2 stays below the "
     "paper's minimum of about 0.93, the claims table's verdict."),
    ("mnist-extreme-tau", "Extreme τ at fixed β (MNIST–MLP, seed 0)",
     "fedcal sweep --grid tau=1,2,5,8,10,12,15,20 --jobs 2 --plot-x tau --report docs/results/mnist-extreme-tau "
     "engine=inprocess dataset=mnist data-dir=../shared/data",
     ["sweep_tau.png"],
     "(τ = 1 here is TSA at τ = 1, which computes exactly the benign run.) Over-confidence keeps growing "
     "with τ while accuracy declines steadily; with β = 0.01 and E = 5 steps accuracy stays within 2 points of "
     "benign up to τ = 20, where the paper sees it degrade noticeably from τ ≈ 10 (its Section 5.3)."),
    ("mnist-sens-ratio", "Sensitivity: attacker ratio (MNIST–MLP, seed 0)",
     "fedcal sweep --grid attacker-ratio=0.1,0.2,0.3,0.4 --grid tau=0.2,1,5 --jobs 2 --plot-x attacker-ratio "
     "--plot-hue tau --report docs/results/mnist-sens-ratio engine=inprocess dataset=mnist data-dir=../shared/data",
     ["sweep_attacker-ratio.png"], "The shift grows with the share of attackers in both directions."),
    ("mnist-sens-alpha", "Sensitivity: Dirichlet α (MNIST–MLP, seed 0)",
     "fedcal sweep --grid dirichlet-alpha=0.1,0.5,1.0,10.0 --grid tau=0.2,1,5 --jobs 2 --plot-x dirichlet-alpha "
     "--plot-hue tau --report docs/results/mnist-sens-alpha engine=inprocess dataset=mnist data-dir=../shared/data",
     ["sweep_dirichlet-alpha.png"], "Lines per τ against the label skew of the partition (small α: strong skew)."),
    ("mnist-sens-beta", "Sensitivity: benign learning rate β (MNIST–MLP, seed 0)",
     "fedcal sweep --grid lr=0.005,0.01,0.02 --grid tau=0.2,1,5 --jobs 2 --plot-x lr --plot-hue tau "
     "--report docs/results/mnist-sens-beta engine=inprocess dataset=mnist data-dir=../shared/data",
     ["sweep_lr.png"], "β × 0.5 and × 2 around the default; the attacker's η = β·τ follows β."),

    ("cifar10-extreme-tau", "Extreme τ at fixed β (CIFAR10–CNN, seed 0)",
     "fedcal sweep --grid tau=1,2,5,8,10,12,15,20 --jobs 2 --plot-x tau --report docs/results/cifar10-extreme-tau " + CIFAR_KEYS,
     ["sweep_tau.png"],
     "(τ = 1 is TSA at τ = 1, which computes exactly the benign run; every cell shares the run store of the τ "
     "tables, so τ = 2 and 5 are their cells.) sECE falls steeply up to τ = 5, plateaus up to τ ≈ 12 and "
     "falls again beyond; accuracy declines slowly up to τ ≈ 12 and then faster, the largest step between τ = 15 "
     "and 20. Where MNIST's decline stays steady up to τ = 20, CIFAR-10's steepens past τ = 15."),
    ("paper-cifar10-extreme-tau", "Extreme τ at fixed β (CIFAR10–CNN at paper scale, seeds 0–2, made on an H200)",
     "fedcal sweep --grid seed=0,1,2 --grid tau=2,8,10,12,15,20 --jobs 6 --report runs/sweep-paper-cifar-extreme "
     + PAPER_CIFAR + "   # 18 runs; τ = 1 and 5 are the defense table's FedAvg runs (defense-results.md)\n"
     "fedcal report runs/paper-cifar/cifar10-cnn-fedavg-{none,tsa2,tsa5,tsa8,tsa10,tsa12,tsa15,tsa20}-s* "
     "--out docs/results/paper-cifar10-extreme-tau",
     ["trajectories.png"],
     "The extreme-τ sweep at the paper-scale reading (two local epochs, crop-and-flip), over three seeds. "
     "Its 18 runs were made on a lent machine with one NVIDIA H200 (`device=auto`; torch 2.11, recorded in "
     "each run's provenance) in the same wave as the paper-scale CIFAR-10 defense table of defense-results.md, whose "
     "benign and τ = 5 FedAvg runs are the τ = 1 and τ = 5 rows here (one run store). Over-confidence keeps "
     "growing with τ (Δ sECE −4.0 at τ = 2, −7.8 at τ = 5, about −12.8 at τ = 12–15, −15.7 at τ = 20), "
     "and accuracy declines steadily from τ = 5 on (−0.9, −3.0 at τ = 8, −3.4 at τ = 10, −5.1 at τ = 12, −8.8 "
     "at τ = 20): the noticeable drop from τ ≈ 10 the literature describes (its Section 5.3, Figure 8), at its "
     "accuracy level, though gradual rather than a collapse. At τ = 20 seed 1's training diverged (its final "
     "metrics are NaN): that row averages seeds 0 and 2 and names seed 1 in its last column."),
    ("paper-mnist-extreme-tau", "Extreme τ at fixed β, coupled and uncoupled (MNIST–MLP at paper scale, seeds 0–2)",
     "fedcal sweep --grid seed=0,1,2 --grid tau=1,5,10,15,20 --grid coupled=true,false --jobs 2 --plot-x tau "
     "--plot-hue coupled --report docs/results/paper-mnist-extreme-tau engine=inprocess dataset=mnist "
     "data-dir=../shared/data local-epochs=1 output-dir=runs/paper-mnist-extreme",
     ["sweep_tau.png"],
     "The extreme-τ claim (the TSA paper's Section 5.3: \"overly large τ noticeably degrades accuracy "
     "(starting around τ ≈ 10)\") at the paper-scale MNIST reading, in both readings of \"fixed β\": the "
     "coupled attacker (η = β·τ, fedcal's TSA) and the uncoupled one (η = β whatever τ). Neither loses more "
     "than 2 points by τ = 20 on average. The coupled "
     "attacker's over-confidence grows with τ and levels off beyond τ ≈ 10, at an accuracy within about a "
     "point of benign; the uncoupled attacker's gradient shrinks as 1/τ, so its over-confidence is smaller "
     "and turns back toward benign as τ grows, at a slightly larger and noisier accuracy cost. (τ = 1 is "
     "TSA at τ = 1, the benign computation, in both readings.) 30 runs, about 40 s each on 2 CPU cores."),
    ("cifar10-sens-ratio", "Sensitivity: attacker ratio (CIFAR10–CNN, seed 0)",
     "fedcal sweep --grid attacker-ratio=0.1,0.2,0.3,0.4 --grid tau=0.2,5 --jobs 2 --plot-x attacker-ratio "
     "--plot-hue tau --report docs/results/cifar10-sens-ratio " + CIFAR_KEYS,
     ["sweep_attacker-ratio.png"],
     "τ = 0.2 and τ = 5 only: the benign run does not depend on the attacker ratio (it is the τ = 1 row of "
     "the τ table). τ = 0.2 stays above τ = 5 at every ratio and 40% attackers give by far the widest gap, but "
     "on one seed the final-round sECE is not monotone in the ratio: the attacker subset changes with the "
     "ratio, and the clients sampled in the last rounds move a single 5-of-50 model's calibration by several "
     "points (see the swings in the τ-grid trajectories). The trend in the ratio needs the seed grid (at "
     "paper scale over three seeds on results.md: it stays inside the seed spread up to 30 % attackers)."),
    ("cifar10-sens-alpha", "Sensitivity: Dirichlet α (CIFAR10–CNN, seed 0)",
     "fedcal sweep --grid dirichlet-alpha=0.1,0.5,1.0,10.0 --grid tau=0.2,1,5 --jobs 2 --plot-x dirichlet-alpha "
     "--plot-hue tau --report docs/results/cifar10-sens-alpha " + CIFAR_KEYS,
     ["sweep_dirichlet-alpha.png"],
     "At every α the order is the attack's: τ = 0.2 above the benign sECE (τ = 1), τ = 5 below it. The benign "
     "model's own calibration at round 100 moves with α, so read the gaps to the τ = 1 line. The over-confidence "
     "shift of τ = 5 is smallest under the strongest skew (α = 0.1), where it costs the most accuracy; with "
     "near-IID clients (α = 10) both directions stay wide and τ = 5 costs no accuracy. Over three seeds at "
     "paper scale (results.md) the skew reverses this: τ = 5's shift is largest at α ≤ 0.5."),
    ("cifar10-sens-beta", "Sensitivity: benign learning rate β (CIFAR10–CNN, seed 0)",
     "fedcal sweep --grid lr=0.025,0.05,0.1 --grid tau=0.2,1,5 --jobs 2 --plot-x lr --plot-hue tau "
     "--report docs/results/cifar10-sens-beta " + CIFAR_KEYS,
     ["sweep_lr.png"],
     "β × 0.5 and × 2 around the default; the attacker's η = β·τ follows β. The direction holds at every "
     "β. At β × 0.5 both shifts are about as wide as at the default; at β × 2 (η = 0.5 for τ = 5) both "
     "shrink, τ = 5's to under a third of its default size, and τ = 0.2 now costs about two points of "
     "accuracy — a federation that trains with larger steps is less exposed to this attacker."),
    ("paper-cifar10-sens-ratio",
     "Sensitivity at paper scale: attacker ratio (CIFAR10–CNN, seeds 0–2, made on an H200)",
     "fedcal sweep --grid seed=0,1,2 --grid attacker-ratio=0.1,0.2,0.3,0.4 --grid tau=0.2,5 --jobs 10 "
     "--plot-x attacker-ratio --plot-hue tau --report docs/results/paper-cifar10-sens-ratio " + PAPER_CIFAR,
     ["sweep_attacker-ratio.png"],
     "The attacker-ratio sweep at the paper-scale reading (two local epochs, crop-and-flip), "
     "over three seeds, made on a lent machine with one NVIDIA H200 (`device=auto`, torch 2.11; the table "
     "was rebuilt here from that run store by the same command, which finds every cell finished). The benign "
     "reference is the α sweep's α = 1, τ = 1 row below (TSA at τ = 1 is the benign computation, made in the "
     "same wave): 65.13 ± 1.65 % accuracy, sECE +2.49 ± 2.78. The single-seed "
     "5-step reading ([results-archive.md](results-archive.md)) saw the trend needing seeds; over seeds the picture is: at every ratio τ = 0.2 "
     "ends above τ = 5 on average, but from 10 % to 30 % attackers the seed-to-seed spread (2–9 points of "
     "sECE) is as wide as the shift itself — at 20 % neither direction leaves the benign range (+2.83 ± 3.62 "
     "and +0.84 ± 2.33) — and only at 40 % do both shifts stand clear of it on every seed (+18.64 ± 10.20 "
     "and −14.81 ± 3.56). With 5 of 50 clients a round, how many attackers happen to be sampled in the last "
     "rounds sets the final model's calibration more than the ratio does, so a ratio trend needs more "
     "seeds than three, or a larger round. Accuracy ends 0–3.3 points below the benign reference (the most "
     "at τ = 5 with 10 %, whose seeds spread ± 4.26). One τ = 5 reply at 40 % was rejected (NaN update, named in its run's rejections.csv)."),
    ("paper-cifar10-sens-alpha",
     "Sensitivity at paper scale: Dirichlet α (CIFAR10–CNN, seeds 0–2, made on an H200)",
     "fedcal sweep --grid seed=0,1,2 --grid dirichlet-alpha=0.1,0.5,1.0,10.0 --grid tau=0.2,1,5 --jobs 10 "
     "--plot-x dirichlet-alpha --plot-hue tau --report docs/results/paper-cifar10-sens-alpha " + PAPER_CIFAR,
     ["sweep_dirichlet-alpha.png"],
     "The same wave and machine as the ratio sweep above (τ = 1 is TSA at τ = 1: the benign reference of "
     "each α; at α = 1 these are runs of this wave, not the τ table's: 100 rounds of float rounding on "
     "another machine move a run like a change of seed). The attack's direction holds at every α on average. It contradicts the "
     "single-seed 5-step reading on one point: there τ = 5's over-confidence was smallest under the "
     "strongest skew; at paper scale it is largest under skew (−18.78 ± 17.89 at α = 0.1 and "
     "−20.25 ± 8.60 at α = 0.5 against −5.43 ± 2.93 at α = 1) and costs accuracy there (50.33 and "
     "51.41 % against 55.60 and 58.53 % at τ = 1), while at α ≥ 1 it costs 1–2 points. At α = 0.5 "
     "one seed of τ = 5 ended at chance: its final model, the round-97 aggregate (every client's local "
     "training from it returned NaN in rounds 98–100: 15 replies rejected, the model kept, as the "
     "rejected-replies column counts), puts one class at confidence 1 (accuracy 10 %, sECE −90, drawn "
     "as the cross; at round 90 it had 61 %) — the over-confident attacker with η = 5β can wreck a skewed federation outright; that seed "
     "is left out of the row's means, not hidden. τ = 0.2 ends at +8.32 to +10.77 at every α, furthest "
     "above its τ = 1 reference under skew, where the benign model is itself a little over-confident."),
    ("paper-cifar10-sens-beta",
     "Sensitivity at paper scale: benign learning rate β (CIFAR10–CNN, seeds 0–2)",
     "fedcal sweep --grid seed=0,1,2 --grid lr=0.025,0.05,0.1 --grid tau=0.2,1,5 --jobs 2 --plot-x lr "
     "--plot-hue tau --report docs/results/paper-cifar10-sens-beta " + PAPER_CIFAR,
     ["sweep_lr.png"],
     "β × 0.5 and × 2 around the paper-scale default (η = β·τ for the attackers; τ = 1 is each β's benign "
     "reference). 21 of its 27 runs were made on the lent H200 of the ratio and α sweeps (β = 0.05 are "
     "those runs), the last six — seed 2 of β = 0.025 and 0.1 — on 2 CPU cores (about 14 minutes each, two "
     "at a time): each run on one machine from start to end. The attack's direction holds at every β on "
     "every seed that trained to the end. The larger β trains the benign model further and leaves it more "
     "under-confident; there one τ = 5 seed stalled: its round-76 aggregate broke (accuracy 13.75 % from "
     "round 80 on, NLL exploded), every client's update from it was NaN and rejected in the last 24 rounds "
     "(the `replies rejected` column; the run's rejections.csv), and the table counts it and leaves it out "
     "of the means — a τ = 5 attacker at β = 0.1 takes steps of η = 0.5, the largest of these sweeps."),
]


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
#: other two cells by a later command, combined by docs/tools/inference_seeds.py
RESNET8_GRID_SEEDS = "inference-cifar10-resnet8-grid-3seeds"
RESNET8_GRID_MORE = "inference-cifar10-resnet8-grid-seeds1-2"
RESNET8_GRID_MORE_COMMAND = (f"fedcal inference --nf 10:3 --nf 25:5 --seeds 1-2 --report docs/results/{RESNET8_GRID_MORE} "
                             + RESNET8_KEYS)
RESNET8_GRID_SEEDS_COMMAND = (
    f"python docs/tools/inference_seeds.py --seeds 0-2 --dataset cifar10 --data-dir ../shared/data --out "
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
    key = ["seed", "aggregator"]
    cells = cells[cells["seed"].isin(p50["seed"])]
    # the 50-step worst case: every other attack of the 20-step table, with PGD-CW's row replaced
    cells50 = pd.concat([cells[cells["attack"] != "pgd_cw"], p50[p50["attack"] == "pgd_cw"]], ignore_index=True)
    per_seed = {"pgd20": cells[cells["attack"] == "pgd_cw"].set_index(key)["accuracy"],
                "pgd50": p50[p50["attack"] == "pgd_cw"].set_index(key)["accuracy"],
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


def _sibling(name: str):
    """The module ``name``.py beside this file (docs/tools is not a package), imported once."""
    import importlib
    import sys

    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module(name)


def _audit_sections() -> list[str]:
    """The literature-protocol sections (docs/tools/inference_audit.py), beside this file."""
    return _sibling("inference_audit").audit_sections()


def _inference_claims() -> str:
    """The robust-inference claim-by-claim rows (docs/tools/inference_audit.py), once their runs exist."""
    return _sibling("inference_audit").claims_table()


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
    claims' verdicts, pasted as docs/tools/include_tables.py pastes them)."""
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
    """The heterogeneity levels (docs/tools/inference_alpha.py), beside this file."""
    return _sibling("inference_alpha").alpha_section(DOCS / "results")


def _text_section() -> list[str]:
    """The text domain (docs/tools/inference_text.py), beside this file."""
    return _sibling("inference_text").text_section()


# section -> (section whose runs share config hashes with it, label of this one's machine, label of the other's)
SAME_RUNS = {"paper-cifar10-cnn-tau-grid": ("paper-cifar10-cnn-tau-3seeds", "H100", "2 CPU cores")}


def same_runs_note(name: str, other: str, here: str, there: str) -> str:
    """The cells of ``name`` whose run (same config hash) ``other`` also reports, made on another machine:
    both readings side by side, from the two tables' CSVs."""
    a = pd.read_csv(DOCS / "results" / name / "table.csv")
    b = pd.read_csv(DOCS / "results" / other / "table.csv")
    # each make carries its own run id (docs/tools/table_integrity.py): matched on the run directory's name
    name = lambda t: t.assign(name=t["run_id"].str.split("@").str[0])  # noqa: E731
    both = name(a).merge(name(b), on="name", suffixes=("_a", "_b"))
    if both.empty:
        return ""
    rows = pd.DataFrame({
        "run": both["name"],
        f"accuracy_% ({there})": both["accuracy_%_b"], f"accuracy_% ({here})": both["accuracy_%_a"],
        f"sece_% ({there})": both["sece_%_b"], f"sece_% ({here})": both["sece_%_a"],
        f"d_sece ({there})": both["d_sece_b"], f"d_sece ({here})": both["d_sece_a"]})
    for c in rows.columns[1:]:
        rows[c] = rows[c].map(lambda v, signed="sece" in c: f"{v:+.2f}" if signed else f"{v:.2f}")
    return (markdown(rows) + "\n\nThe same configuration on the two machines differs by about as much as "
            "one seed does from another (the three-seed table's std), in both accuracy and sECE, while every "
            "direction holds on both: 100 rounds of non-IID sampling amplify float rounding (CUDA kernels, "
            "another torch, another thread count) like a change of seed. Read single-seed magnitudes with "
            "that spread in mind.\n")


def pages() -> dict[Path, str]:
    """Every page this builder owns, as it would write it."""
    intro = (DOCS / "tools" / "inference_intro.md").read_text()
    parts = [HEADER.rstrip("\n") + "\n", literature_section()]
    archive = [ARCHIVE_HEADER.rstrip("\n") + "\n"]
    claims = _inference_claims()
    if claims:
        parts.append(claims)
    tables = analysis_tables()
    found = [(n, t, c, f, p, table(n)) for n, t, c, f, p in SECTIONS if (DOCS / "results" / n / "table.md").exists()]
    found += [(n, t, c, f, p, tables[n]) for n, t, c, f, p in ANALYSES if n in tables]
    for name, title, command, figures, prose, text in found:
        page = archive if name in SUPERSEDED else parts
        note = f"{replaced_note(name)}\n\n" if name in SUPERSEDED else ""
        page.append(f"## {title}\n\n{note}```bash\n{command}\n```\n\n{text}\n{prose}\n")
        if name in SAME_RUNS:
            page.append(same_runs_note(name, *SAME_RUNS[name]))
        page += [f"![{f}](results/{name}/{f})\n" for f in figures if (DOCS / "results" / name / f).exists()]
    snippets = _sibling("glance").snippets()
    verdicts = snippets.get(DOCS / "results" / "literature" / "verdicts-inference.md", "")
    return {DOCS / "inference.md": intro, DOCS / "inference-results.md": inference_results(verdicts),
            DOCS / "inference-archive.md": inference_archive(), DOCS / "results.md": "\n".join(parts),
            DOCS / "results-archive.md": "\n".join(archive),
            DOCS / "glance.md": _sibling("glance").page(), **snippets}


def main(argv: list[str]) -> int:
    """Write the pages, or with ``--check`` exit 1 naming every page that differs from what the
    committed tables make (a page edited by hand, or a builder change never written out)."""
    built = pages()
    if "--check" in argv:
        stale = [p.name for p, text in built.items() if p.read_text() != text]
        if stale:
            print(f"stale (run python docs/tools/build_results.py): {', '.join(stale)}")
        return 1 if stale else 0
    for path, text in built.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
