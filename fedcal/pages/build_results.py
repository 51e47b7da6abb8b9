"""Assemble docs/results.md (current TSA tables), docs/results-archive.md (superseded ones) and robust federated
inference's inference.md (guide), inference-results.md and inference-archive.md from the generated tables
(docs/results/*/table.md).

    python -m fedcal.pages build_results [--check]

The prose states directions only; every number on the page comes from a generated table.
"""

import argparse
import sys
from pathlib import Path

import pandas as pd

from fedcal.pages import DOCS, glance, tsa_claims
from fedcal.pages.inference_pages import _inference_claims, inference_archive, inference_results
from fedcal.pages.results_analyses import ANALYSES
from fedcal.pages.results_sections import (ARCHIVE_HEADER, HEADER, SECTIONS, SUPERSEDED, analysis_tables, anchor,
                                          markdown, table)

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
    """The comparison with the TSA literature, claim by claim (fedcal/pages/tsa_claims.py)."""
    return LITERATURE_INTRO + "\n" + tsa_claims.claims_table()


# section -> (section whose runs share config hashes with it, label of this one's machine, label of the other's)
SAME_RUNS = {"paper-cifar10-cnn-tau-grid": ("paper-cifar10-cnn-tau-3seeds", "H100", "2 CPU cores")}


def same_runs_note(name: str, other: str, here: str, there: str) -> str:
    """The cells of ``name`` whose run (same config hash) ``other`` also reports, made on another machine:
    both readings side by side, from the two tables' CSVs."""
    a = pd.read_csv(DOCS / "results" / name / "table.csv")
    b = pd.read_csv(DOCS / "results" / other / "table.csv")
    # each make carries its own run id (fedcal/pages/table_integrity.py): matched on the run directory's name
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
    snippets = glance.snippets()
    verdicts = snippets.get(DOCS / "results" / "literature" / "verdicts-inference.md", "")
    return {DOCS / "inference.md": intro, DOCS / "inference-results.md": inference_results(verdicts),
            DOCS / "inference-archive.md": inference_archive(), DOCS / "results.md": "\n".join(parts),
            DOCS / "results-archive.md": "\n".join(archive),
            DOCS / "glance.md": glance.page(), **snippets}


def main(argv: list[str]) -> int:
    """Write the pages, or with ``--check`` exit 1 naming every page that differs from what the
    committed tables make (a page edited by hand, or a builder change never written out)."""
    ap = argparse.ArgumentParser(prog="python -m fedcal.pages build_results", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 naming every page that differs; write nothing")
    check = ap.parse_args(argv).check
    built = pages()
    if check:
        stale = [p.name for p, text in built.items() if p.read_text() != text]
        if stale:
            print(f"stale (run python -m fedcal.pages build_results): {', '.join(stale)}")
        return 1 if stale else 0
    for path, text in built.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
