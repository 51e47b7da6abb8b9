"""docs/results.md's sections of generated tables, the archive's superseded ones and the table helpers
the results pages share (:mod:`fedcal.pages.build_results` assembles the pages)."""

from pathlib import Path

import pandas as pd

from fedcal.pages import DOCS
from fedcal.reports import markdown_table


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
[distill-results.md](distill-results.md) (superseded tables, all-MiniLM-L6-v2 at the first budget and the small encoder: [distill-archive.md](distill-archive.md)).

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


