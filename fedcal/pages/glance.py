"""docs/glance.md: every claim of the source papers fedcal checks, fedcal's value, the verdict and the committed
files it is read from, in one table per paper. Generated (fedcal/pages/build_results.py writes it with the other
pages; ``--check`` and tests/test_reports.py compare the committed page with what this module makes).

The rows are the claims tables' own (fedcal/pages/tsa_claims.py, fedcal/pages/inference_audit.py) and RFD-LoRA's
Table-1 verdicts (fedcal/pages/distill_literature.py on the committed runs), so a verdict is computed once, by
the rule its claims table states.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from fedcal.pages import RESULTS

#: the committed result files each TSA claim is read from (the tables of the section its row names)
TSA_FILES = {
    "direction": ["paper-mnist-mlp-tau-5seeds/table.csv", "paper-cifar10-cnn-tau-3seeds/table.csv"],
    "accuracy": ["paper-mnist-mlp-tau-5seeds/table.csv", "paper-cifar10-cnn-tau-3seeds/table.csv"],
    "monotone": ["paper-mnist-mlp-tau-5seeds/table.csv", "paper-cifar10-cnn-tau-grid/table.csv"],
    "benign-mnist": ["paper-mnist-mlp-tau-5seeds/table.csv"],
    "benign-cifar": ["paper-cifar10-cnn-tau-3seeds/table.csv", "paper-cifar10-probe-3seeds/cells.csv"],
    "extreme": ["paper-cifar10-extreme-tau/table.csv", "paper-mnist-extreme-tau/cells.csv"],
    "sens-ratio": ["paper-cifar10-sens-ratio/cells.csv"],
    "sens-alpha": ["paper-cifar10-sens-alpha/cells.csv"],
    "sens-beta": ["paper-cifar10-sens-beta/cells.csv"],
    "posthoc-top": ["paper-mnist-posthoc-ovr/posthoc.csv", "paper-cifar10-posthoc-ovr/posthoc.csv"],
    "posthoc-ovr": ["paper-mnist-posthoc-ovr/posthoc.csv", "paper-cifar10-posthoc-ovr/posthoc.csv"],
    "triage": ["paper-mnist-triage/triage.csv", "paper-cifar10-triage/triage.csv"],
    "cka": ["paper-mnist-similarity/similarity.csv", "paper-cifar10-similarity/similarity.csv"],
    "cosine": ["paper-mnist-stealth-protocols/stealth.csv", "paper-cifar10-stealth-protocols/stealth.csv"],
    "defenses": ["paper-defense-mnist/table.csv", "paper-defense-cifar10/table.csv"],
    "lm": ["lm-shakespeare/table.csv"],
    "detection-low": ["detect-mnist/runs.csv"],
    "detection-high": ["detect-mnist/runs.csv"],
}
#: RFD-LoRA's corpora: the committed reports its Table-1 verdicts read — one folder, or one per partition
#: (each converged corpus's label-skew half runs in a store and pages folder of its own: sentiment's at twice its
#: IID half's rounds, the tweets' at the same 12)
RFD_CORPORA = {"sentiment": {"iid": "distill-minilm-converged-sentiment",
                             "skew": "distill-minilm-converged-sentiment-skew12"},
               "tweets": {"iid": "distill-minilm-converged-tweets",
                          "skew": "distill-minilm-converged-tweets-skew12"},
               "genre": "distill-minilm-genre"}


def _files(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names if (RESULTS / n).exists()) or "—"


def tsa_rows() -> pd.DataFrame:
    from fedcal.pages import tsa_claims as claims
    lit = claims._literature()
    rows = [r for make in claims.ROWS for r in make()]
    order = {c: i for i, c in enumerate(lit.index)}
    rows.sort(key=lambda r: order[r[0]])
    return pd.DataFrame([{"claim": lit.loc[c, "name"], "the paper": lit.loc[c, "source"], "fedcal": fedcal,
                          "verdict": verdict, "rule": claims.RULE_OF[c], "read from": _files(_of(TSA_FILES[c], fedcal))}
                         for c, fedcal, seeds, verdict, reason, run in rows])


def _of(files: list[str], fedcal: str) -> list[str]:
    """The files of the row's dataset, where the row names one (``MNIST–MLP at paper scale: …``)."""
    for name, key in (("MNIST", "mnist"), ("CIFAR", "cifar")):
        if fedcal.startswith(name):
            return [f for f in files if key in f] or files
    return files


def inference_rows() -> pd.DataFrame | None:
    from fedcal.pages.inference_claims import claims_frame

    frame = claims_frame()
    if frame is None:
        return None
    return pd.DataFrame({"claim": frame["claim"], "the paper": frame["literature"], "fedcal": frame["fedcal"],
                         "verdict": frame["verdict"], "read from": frame["run"]})


def rfd_rows() -> pd.DataFrame | None:
    """RFD-LoRA's two Table-1 claims per corpus and partition (fedcal/pages/distill_literature.py's verdicts:
    ASR below FedIT's beyond twice the standard error of the difference; CA within 2 points of FedIT's)."""
    lit_path = RESULTS / "literature" / "rfd-lora.csv"
    if not lit_path.exists():
        return None
    from fedcal.pages import distill_literature as dl
    lit = pd.read_csv(lit_path)
    rows, loaded = [], {}
    for corpus, folders in RFD_CORPORA.items():
        for (partition, rho), claimed in lit.groupby(["partition", "rho"]):
            folder = folders if isinstance(folders, str) else folders[partition]
            path = RESULTS / folder / "runs.csv"
            if not path.exists():
                continue
            if folder not in loaded:  # a folder serves every (partition, ρ) claim it holds: read it once
                loaded[folder] = pd.read_csv(path)
            runs = loaded[folder]
            panel = "Table 1 (a)" if partition == "iid" else "Table 1 (b)"

            def paper(metric: str) -> str:
                value = claimed.set_index(["method", "metric"])["literature"]
                return f"{panel}: RFD-LoRA {value[('RFD-LoRA', metric)]} against FedIT {value[('FedIT', metric)]}"

            rfd, fedit = (dl.cell(runs, m, partition, float(rho), "ASR") for m in ("rfd", "fedit"))
            asr = dl.asr_verdict(rfd, fedit)
            rows.append({"claim": f"ASR below FedIT's ({corpus}, {partition}, ρ = {rho:g})",
                         "the paper": paper("ASR"),
                         "fedcal": f"RFD-LoRA {dl.fmt(rfd)} against FedIT {dl.fmt(fedit)}",
                         "verdict": "not run" if rfd.empty or fedit.empty else
                         {"holds": "matches", "contradicted": "contradicts"}.get(asr.split(" ")[0],
                                                                                 "direction only" if
                                                                                 rfd.mean() < fedit.mean()
                                                                                 else "contradicts"),
                         "read from": f"`{folder}/runs.csv`"})
            ca_r, ca_f = (dl.cell(runs, m, partition, float(rho), "CA") for m in ("rfd", "fedit"))
            gap = ca_f.mean() - ca_r.mean()
            chance = runs.loc[ca_r.index.union(ca_f.index), "chance_level"].astype(bool) \
                if "chance_level" in runs else pd.Series(dtype=bool)
            if len(chance) and chance.all():  # every model at chance: no result to compare (the chance rule)
                for r in rows[-1:]:
                    r["verdict"] = "not tested (every model at chance)"
            rows.append({"claim": f"clean accuracy within 2 points of FedIT's ({corpus}, {partition}, ρ = {rho:g})",
                         "the paper": paper("CA"),
                         "fedcal": f"RFD-LoRA {dl.fmt(ca_r)} against FedIT {dl.fmt(ca_f)}"
                                   + ("" if math.isnan(gap) else f" ({gap:+.1f} points)"),
                         "verdict": "not run" if ca_r.empty or ca_f.empty else
                         "not tested (every model at chance)" if len(chance) and chance.all() else
                         "matches" if gap <= 2 else "contradicts", "read from": f"`{folder}/runs.csv`"})
    return pd.DataFrame(rows) if rows else None


#: the verdict excerpts a system's results page pastes at its top (fedcal/pages/include_tables.py): file -> claims
SNIPPETS = {"verdicts-defense.md": ("tsa", ("robust aggregation",)),
            "verdicts-distill.md": ("rfd", None),
            "verdicts-inference.md": ("inference", None),
            "verdicts-lm.md": ("tsa", ("language model",)),
            "verdicts-detection.md": ("tsa", ("object detection, τ < 1", "object detection, τ > 1"))}


def snippets() -> dict[Path, str]:
    """The verdict excerpts of :data:`SNIPPETS`, written beside the literature CSVs."""
    from fedcal.reports import markdown_table

    out = {}
    for name, (paper, claims) in SNIPPETS.items():
        rows = {"tsa": tsa_rows, "rfd": rfd_rows, "inference": inference_rows}[paper]()
        if rows is None:
            continue
        if claims:
            rows = rows[rows["claim"].isin(claims)]
        out[RESULTS / "literature" / name] = markdown_table(rows.reset_index(drop=True))
    return out


def page() -> str:
    from fedcal.reports import markdown_table

    parts = ["# Results at a glance", "",
             "Every claim of the source papers (../shared/seeds) fedcal checks: the paper's section or table, "
             "fedcal's value, the verdict and the committed files it is read from. Generated by "
             "`fedcal/pages/glance.py` from the claims tables of [results.md](results.md) (the papers' own words, "
             "the rule behind each verdict, and the protocol difference of every claim that does not match are "
             "there); the commands behind each file are on the page of its system.", "",
             "## The Temperature Scaling Attack", "", markdown_table(tsa_rows()), ""]
    inf = inference_rows()
    if inf is not None:
        parts += ["## Robust federated inference", "",
                  "Rules: [results.md](results.md), *Robust federated inference, claim by claim*; tables in "
                  "[inference-results.md](inference-results.md).", "", markdown_table(inf), ""]
    from fedcal.pages import table_integrity as integrity
    parts += ["## Re-made runs", "",
              "A run id names a configuration; where a table reports a second make of one (other code, another "
              "machine, another evaluation), that copy's id carries `@<make>`, so no id names two numbers "
              "(`fedcal/pages/table_integrity.py`; tests/test_table_integrity.py scans every committed table):", "",
              markdown_table(pd.DataFrame([{"table": f"`{t}`", "make": f"`@{m}`", "why": why}
                                           for t, (m, why) in integrity.REMADE.items()])), ""]
    rfd = rfd_rows()
    if rfd is not None:
        parts += ["## RFD-LoRA", "",
                  "At the pretrained backbone all-MiniLM-L6-v2 on 2 CPU cores, not RoBERTa-Large on GLUE: the "
                  "paper's numbers are the claim, fedcal's the same comparison at this budget "
                  "([distill-results.md](distill-results.md)). ASR: holds when RFD-LoRA's mean is below FedIT's by "
                  "more than twice the standard error of the difference (direction only within it).", "",
                  markdown_table(rfd), ""]
    return "\n".join(parts)
