"""The section of docs/inference-results.md on the text domain (the literature's AG-News/DistilBERT
analogue), read from docs/results/inference-text-sentiment*; build_results.py appends it. Every number
comes from those files or from the image tables' CSVs; the prose states what the numbers say, computed
from them, so a re-run cannot leave a stale sentence. Left out while its results do not exist.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from fedcal.reports import without_chance, worst_case

from fedcal.pages import DOCS
RES = DOCS / "results"
TEXT = RES / "inference-text-sentiment"
CLIENTS = RES / "inference-text-sentiment-clients"
#: the image table with the same aggregator and attack settings (α = 0.5, 25 adversarial epochs, 20 PGD steps)
IMAGE = RES / "inference-cifar10-resnet8"

TEXT_KEYS = ("dataset=rt-sentiment model=linear dirichlet-alpha=0.5 lr=0.05 inf-local-epochs=20 engine=inprocess "
             "output-dir=runs/inference-text agg-adv-epochs=25 inf-pgd-steps=20 inf-f-curve=false 'inf-amp-curve=\"\"'")
TEXT_COMMAND = "fedcal inference --nf 17:4 --seeds 0-2 --report docs/results/inference-text-sentiment " + TEXT_KEYS
CLIENTS_COMMAND = ("for lr in 0.01 0.05 0.2; do python benchmarks/inference_clients.py --epochs 5,10,20,50 "
                   "dataset=rt-sentiment model=linear num-clients=17 dirichlet-alpha=0.5 lr=$lr "
                   "> docs/results/inference-text-sentiment-clients/lr$lr.txt; done")
CENTRAL_COMMAND = (
    "python -c \"\nfrom sklearn.linear_model import LogisticRegression\nfrom fedcal.data import load_dataset\n"
    "from fedcal.reports.chance import labels_chance\nds = load_dataset('rt-sentiment')\n"
    "clf = LogisticRegression(max_iter=2000).fit(ds.x_train.numpy(), ds.y_train.numpy())\n"
    "print(f'centralised linear probe on all {len(ds.y_train)} training embeddings: test accuracy "
    "{100 * clf.score(ds.x_test.numpy(), ds.y_test.numpy()):.2f} %')\n"
    "print(labels_chance(ds.y_test.numpy(), ds.num_classes).describe())\n"
    "\" > docs/results/inference-text-sentiment-clients/centralised.txt")
LIT = RES / "inference-text-sentiment-literature"
LIT_COMMAND = (
    "fedcal inference --nf 17:4 --seeds 0 --report docs/results/inference-text-sentiment-literature "
    "dataset=rt-sentiment model=linear dirichlet-alpha=0.5 lr=0.05 inf-local-epochs=20 engine=inprocess "
    "output-dir=runs/inference-text agg-adv-epochs=25 inf-client-output=logits inf-pgd-steps=50 "
    "inf-pgd-start=uniform inf-pgd-loss=prob inf-pgd-grad=bpda inf-amplification=1 "
    "inf-attacks=none,logit_flip,sia_blackbox,sia_blackbox_colluding,sia_whitebox,lma,cpa,pgd_cw,sia_whitebox_raise "
    "inf-f-curve=false 'inf-amp-curve=\"\"'")
ROBUST_AVERAGES = ("median", "geometric_median", "trimmed_mean")
POSITIONAL = ("copur", "manifold_projection")


def _summary(folder: Path) -> dict:
    """Per aggregator: mean clean and worst-case accuracy over seeds, the worst attacks; the seeds."""
    cells = pd.read_csv(folder / "cells.csv")
    worst = worst_case(without_chance(cells), by=("seed", "aggregator"))
    return {"worst": worst.groupby("aggregator")["accuracy"].mean().sort_values(ascending=False),
            "clean": cells[cells["attack"] == "none"].groupby("aggregator")["accuracy"].mean(),
            "attacks": worst.groupby("aggregator")["worst_attack"].agg(lambda a: ", ".join(sorted(set(a)))),
            "seeds": sorted(cells["seed"].unique()),
            "at_chance": sorted(set(cells["aggregator"]) - set(without_chance(cells)["aggregator"]))}


def _margin(s: dict) -> tuple[float, str]:
    """DeepSet-TM's worst case minus the best robust average's, and which average that is."""
    best = max(ROBUST_AVERAGES, key=lambda a: s["worst"].get(a, float("-inf")))
    return 100 * (s["worst"]["deepset_tm"] - s["worst"][best]), best


def _binary_note(t: dict) -> str:
    """What two classes do to the attacks, as far as the text cells show it."""
    cells = pd.read_csv(TEXT / "cells.csv").pivot_table(index=["seed", "aggregator"], columns="attack",
                                                        values="accuracy")
    text = ("With two classes a one-hot row can only name one of the two classes: LMA and CPA send the class the "
            "honest answers do not predict, SIA white-box the class that is not the true label — the same row where "
            "the honest answer is right, but where it is wrong LMA and CPA push toward the truth and SIA white-box "
            "does not, which is why SIA white-box is the stronger.")
    if {"lma", "cpa"} <= set(cells.columns) and bool((cells["lma"] == cells["cpa"]).all()):
        text += " LMA and CPA give the same accuracy in every cell here (their rows coincide)."
    if {"pgd_cw", "sia_whitebox"} <= set(cells.columns):
        weaker = (cells["pgd_cw"] > cells["sia_whitebox"]).groupby("aggregator").all()
        text += (f" PGD-CW (20 steps) is weaker than SIA white-box for {int(weaker.sum())} of the {len(weaker)} "
                 "aggregators in every seed")
        med = cells.groupby("aggregator")["pgd_cw"].mean()
        aggs = cells.index.get_level_values("aggregator")
        if {"median", "geometric_median"} <= set(aggs) and med.idxmax() == "median":
            others = [c for c in cells.columns if c != "pgd_cw"]
            same = bool((cells.xs("median", level="aggregator")[others]
                         == cells.xs("geometric_median", level="aggregator")[others]).all().all())
            text += (f"; it moves the coordinate-wise median least ({100 * med['median']:.2f} % against the "
                     f"geometric median's {100 * med['geometric_median']:.2f} %"
                     + (", although every other cell of the two is the same: on a segment the two medians are one "
                        "point" if same else "") + "), since the median's exact gradient reaches only the middle "
                     "row — the masking the authors' BPDA gradient (`inf-pgd-grad=bpda`) removes")
        text += "."
    return text


def _block(kind: str, path: Path) -> str:
    """``path`` pasted between the markers fedcal/pages/include_tables.py refreshes (its own format), so the
    page keeps the numbers of the file the command above it wrote."""
    rel = path.resolve().relative_to(DOCS.parent) if path.resolve().is_relative_to(DOCS.parent) else path
    body = path.read_text()
    body += "" if body.endswith("\n") else "\n"
    if kind == "output":
        body = "```\n" + body + "```\n"
    return f"<!-- {kind}: {rel} -->\n{body}<!-- /{kind} -->"


def _table(name: str) -> str:
    return _block("table", TEXT / name)


def text_section() -> list[str]:
    if not (TEXT / "cells.csv").exists():
        return []
    t = _summary(TEXT)
    seeds = t["seeds"]
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}–{seeds[-1]}"
    clients = pd.read_csv(TEXT / "clients.csv")
    set_aggs = [a for a in t["worst"].index if a not in POSITIONAL]
    chance_line = (CLIENTS / "centralised.txt").read_text() if (CLIENTS / "centralised.txt").exists() else ""
    found = re.search(r"chance ([0-9.]+) %", chance_line)
    chance = float(found.group(1)) if found else 50.0
    below = int((100 * t["worst"] < chance).sum())
    lines = [
        f"## Text: Rotten Tomatoes sentiment, frozen all-MiniLM-L6-v2 with linear clients (n = 17, f = 4, "
        f"α = 0.5, {seed_text})", "",
        "The literature's second domain is text (AG-News, DistilBERT clients; fedcal measures its analogue). "
        "fedcal's: `dataset=rt-sentiment` (Rotten Tomatoes critics' snippets, rotten / fresh, "
        "`fedcal.text.corpora.sentiment_corpus`: 10,202 training and 2,550 test snippets) turns every snippet into "
        "all-MiniLM-L6-v2's mean-pooled sentence embedding (384 numbers, at most 64 tokens; "
        "`fedcal.text.embed`), computed once per machine and cached on disk under the SHA-256 of the encoder's "
        "files, the pooling, the length limit and the texts, each coordinate standardised with the training "
        "split's statistics; every client trains its own linear classifier (`model=linear`) on its Dirichlet "
        "share of the embeddings. The encoder is frozen and shared, so the embedding is a property of the text "
        "and the rest of the task — the server's split, the queries, every aggregator and every attack on the "
        "probits — runs unchanged, as on images (the queries are (B, 384) embeddings, the answers (B, 17, 2) "
        "probits).", "",
        "How the clients train was measured first (SGD, no momentum; the 17 clients' own test accuracy and the "
        "plain mean of their probits on the 2,550 test snippets), and the ceiling of a linear probe on these "
        "embeddings (one classifier on all the training data):", "",
        "```bash", CLIENTS_COMMAND, CENTRAL_COMMAND, "```", ""]
    for lr in ("0.01", "0.05", "0.2"):
        path = CLIENTS / f"lr{lr}.txt"
        if path.exists():
            lines += [_block("output", path), ""]
    if (CLIENTS / "centralised.txt").exists():
        lines += [_block("output", CLIENTS / "centralised.txt"), ""]
    lines += [
        "The learning rate and the epochs barely matter; the run below uses lr 0.05 and 20 epochs. The table, "
        "with the aggregator and attack settings of the ResNet-8 table above (25 adversarial epochs, PGD-CW "
        "20 steps, SPEC §7's α = 0.5), without the curves against f and against the amplification: PGD-CW through every aggregator is by far "
        "the costliest attack on the shared 2-core machine, and the f-curve repeats it at every f_adv = 1..8 "
        "(a first attempt with the curves was stopped for that; these runs reused its clients' probits and "
        "trained aggregators):", "",
        "```bash", TEXT_COMMAND, "```", "",
        "Accuracy (%) on the 2,550 test snippets:", "",
        _table("table_n17_f4.md"), "",
        f"The 17 clients' own test accuracies ({seed_text}) range over {100 * clients['accuracy'].min():.1f}–"
        f"{100 * clients['accuracy'].max():.1f}% (mean {100 * clients['accuracy'].mean():.1f}%). Chance here is "
        "the majority class (fresh), not 1/2 — the chance reference above (`centralised.txt`): a clean "
        "accuracy at or below its flag threshold is marked in the table and its aggregator is left out of "
        "the rankings below"
        + (f" ({', '.join(t['at_chance'])})" if t["at_chance"] else " (none is)")
        + "." + (f" Under its worst attack {below} of the {len(t['worst'])} aggregators fall below the majority "
                 f"rate ({chance:.2f} %): there the adversaries make the aggregate worse than a constant answer."
                 if below else ""), "",
        "Ranking by worst-case accuracy: " + ", ".join(f"{a} {100 * v:.2f}" for a, v in t["worst"].items())
        + ". The attack achieving the worst case, per aggregator: "
        + "; ".join(f"{a}: {t['attacks'][a]}" for a in t["worst"].index) + ".", ""]
    if (TEXT / "ablation_n17_f4.md").exists():
        lines += ["The robust elements of DeepSet-TM on text:", "", _table("ablation_n17_f4.md"), ""]
    lines += _against_images(t, seeds, set_aggs, below)
    lines += literature_protocol()
    lines += _literature_difference(chance)
    return lines


def _against_images(t: dict, seeds, set_aggs: list[str], below: int) -> list[str]:
    """The text table against the image table (CIFAR-10, ResNet-8 clients), when the image table exists."""
    if not (IMAGE / "cells.csv").exists():
        return []
    img = _summary(IMAGE)
    spread = worst_case(without_chance(pd.read_csv(TEXT / "cells.csv")),
                        by=("seed", "aggregator")).groupby("aggregator")["accuracy"].std()
    mt, bt = _margin(t)
    mi, bi = _margin(img)
    retained = lambda s, a: 100 * s["worst"][a] / s["clean"][a]  # noqa: E731
    return [
        "**Against the image table** (CIFAR-10, ResNet-8 clients, the same aggregator and attack settings, "
        f"{len(img['seeds'])} seeds): the best set aggregator by worst case is "
        + " and ".join(a for a in set_aggs if abs(t["worst"][a] - t["worst"][set_aggs[0]]) < 1e-12)
        + (" (tied)" if sum(bool(abs(t["worst"][a] - t["worst"][set_aggs[0]]) < 1e-12) for a in set_aggs) > 1
           else "")
        + " on text and "
        f"{[a for a in img['worst'].index if a not in POSITIONAL][0]} on images; DeepSet-TM's margin over the "
        f"best robust average is {mt:+.2f} points on text (over {bt}"
        + (f"; the seeds' std of the two worst cases is {100 * spread[bt]:.2f} and {100 * spread['deepset_tm']:.2f}"
           if len(seeds) > 1 else "")
        + f") and {mi:+.2f} on images (over {bi}). "
        "Kept under the worst attack, as a share of the clean accuracy: DeepSet-TM "
        f"{retained(t, 'deepset_tm'):.0f} % on text, {retained(img, 'deepset_tm'):.0f} % on images; the plain "
        f"mean {retained(t, 'mean'):.0f} % and {retained(img, 'mean'):.0f} % — but against chance the picture "
        f"turns: {below} of the {len(t['worst'])} worst cases on text lie below the majority rate, "
        f"{int((img['worst'] < 0.1).sum())} of the {len(img['worst'])} on images below 1/10. "
        + (f"The worst attack on text is SIA white-box for {sum('sia_whitebox' in t['attacks'][a] for a in set_aggs)}"
           f" of the {len(set_aggs)} set aggregators (on images for "
           f"{sum('sia_whitebox' in img['attacks'][a] for a in img['worst'].index if a not in POSITIONAL)}). ")
        + _binary_note(t), ""]


def _literature_difference(chance: float) -> list[str]:
    """Why no AG-News value is compared, and what differs from the literature's text protocol."""
    return [
        "**Against the literature.** No AG-News value is in this repository to compare with: SPEC §7 lists "
        "none, the paper's text beyond its abstract was not readable from this machine, and the authors' "
        "code (github.com/sacs-epfl/robust-federated-inference, whose `FL/args.py` offers `AG_News` and "
        "`DistilBert`) publishes no results. So this table says where fedcal's aggregators stand on text, "
        "not whether they match the literature's text numbers. What differs from the literature's text "
        "protocol:", "",
        f"- **task**: binary sentiment (Rotten Tomatoes, chance = the majority class, {chance:.2f} %) against "
        "AG-News's four balanced news topics (chance 1/4). With C = 2 the "
        "simplex is a segment: a row is one number, so the attacks have far less room than on 4 or 10 classes, "
        "and every trimmed or median aggregator decides by a one-dimensional vote;",
        "- **clients**: a frozen all-MiniLM-L6-v2, the same for all, with a linear head trained per client, "
        "against a DistilBERT fine-tuned per client. The clients differ only in their heads, so "
        "their errors are more alike than fine-tuned encoders' would be, and each head sees few snippets of one "
        "class mostly (α = 0.5, binary);",
        "- **aggregators and attacks**: fedcal's protocol (PGD-CW 20 steps from the adversary's own row on the "
        "log-probability margin, exact gradients through trimming; adversarial training 25 epochs), as in the "
        "image tables above, not the authors' code's (the point-by-point table above)"
        + ("; their attack protocol on the same clients is the subsection above, their adversarial training's "
           "volume is not run." if (LIT / "cells.csv").exists() else "."), ""]


def literature_protocol() -> list[str]:
    """The same text clients under the robust-inference authors' attack protocol (seed 0), when run."""
    if not (LIT / "cells.csv").exists():
        return []
    lit = _summary(LIT)
    set_aggs = [a for a in lit["worst"].index if a not in POSITIONAL and not a.endswith("_logit")]
    cells = pd.read_csv(LIT / "cells.csv").pivot_table(index=["seed", "aggregator"], columns="attack", values="accuracy")
    attack_cols = [c for c in cells.columns if c != "none"]
    at_worst = cells["pgd_cw"] <= cells[attack_cols].min(axis=1) + 1e-12  # PGD-CW reaches the worst case (ties too)
    pgd_worst = [a for a in set_aggs if bool(at_worst.xs(a, level="aggregator").all())]
    tie_sia = [a for a in pgd_worst if bool((cells["pgd_cw"] == cells["sia_whitebox"]).xs(a, level="aggregator").all())]
    margin, over = _margin(lit)
    return [
        "### The text clients at the literature's attack protocol (seed 0)", "",
        "The same clients answering with their logits, attacked as the authors' code attacks (the point-by-point "
        "table above: PGD-CW 50 steps from a uniform start on the probability margin with BPDA through trimming "
        "and medians, logit flipping at a = 1, SIA white-box as their code sends it, `sia_whitebox_raise`, beside "
        "fedcal's one-hot `sia_whitebox`); the aggregators' adversarial training stays fedcal's:", "",
        "```bash", LIT_COMMAND, "```", "",
        _block("table", LIT / "table_n17_f4.md"), "",
        f"PGD-CW reaches the worst case of {len(pgd_worst)} of the {len(set_aggs)} set aggregators here"
        + (f", for {len(tie_sia)} of them at exactly SIA white-box's accuracy: with two classes the strongest row "
           "an adversary can send is the one-hot of the wrong class, which SIA white-box sends outright and 50 "
           "BPDA steps find" if tie_sia else "")
        + ". The worst attack per aggregator as the report names it (the first of tied attacks): "
        + "; ".join(f"{a}: {lit['attacks'][a]}" for a in lit["worst"].index)
        + f". The best set aggregator by worst case is {set_aggs[0]}; DeepSet-TM's margin over the best robust "
        f"average is {margin:+.2f} points (over {over}). The purifiers reading logits fall furthest under PGD-CW "
        f"(copur_logit {100 * lit['worst']['copur_logit']:.2f} %, manifold_projection_logit "
        f"{100 * lit['worst']['manifold_projection_logit']:.2f} %).", ""]


def text_claim() -> list[tuple]:
    """The claims-table row of the text domain (fedcal/pages/inference_audit.py), once its runs exist."""
    if not (TEXT / "cells.csv").exists():
        return []
    t = _summary(TEXT)
    best = [a for a in t["worst"].index if a not in POSITIONAL][0]
    margin, over = _margin(t)
    seeds = t["seeds"]
    cells = pd.read_csv(TEXT / "cells.csv")
    spread = worst_case(without_chance(cells), by=("seed", "aggregator")).groupby("aggregator")["accuracy"].std()
    tie = (len(seeds) > 1 and best != "deepset_tm"
           and 100 * (t["worst"][best] - t["worst"]["deepset_tm"]) < 100 * max(spread[best], spread["deepset_tm"]))
    return [("the text-domain table (AG-News, DistilBERT clients)", "DeepSet-TM best",
             f"{best} best; DeepSet-TM {100 * t['worst']['deepset_tm']:.2f} % worst case, {margin:+.2f} points over "
             f"{over}", f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}–{seeds[-1]}",
             "matches" if best == "deepset_tm" else
             f"tie: {best} ahead by less than one seed-to-seed std" if tie else "contradicts",
             "binary Rotten Tomatoes sentiment against 4-class AG-News; a frozen all-MiniLM-L6-v2 with a linear head "
             "per client against fine-tuned DistilBERT; fedcal's attack protocol; no AG-News value to compare "
             "levels with", "inference-results.md, *Text: Rotten Tomatoes sentiment*")]


__all__ = ["text_claim", "text_section"]
