"""The four source papers (../shared/seeds beside the checkout) as plain text, to check that a claims table
quotes them word for word.

The papers are Markdown with LaTeX math; :func:`plain` reads both the paper and a quote the same way (math
symbols as Unicode, emphasis marks and ``$`` dropped, white space collapsed), so a quote in a table is the
paper's own words as a reader sees them rendered: ``for τ > 1, sECE becomes increasingly negative``.
"""

from __future__ import annotations

import functools
import re

from fedcal.pages import ROOT

SEEDS = ROOT.parent / "shared" / "seeds"
#: a short name per paper -> its text file (SEEDS/README.md names them)
PAPERS = {"tsa": "000_2011f3a3f0c339d8.txt", "temperature": "001_aa3ed517fb66627f.txt",
          "inference": "002_d9216d78463d7947.txt", "rfd-lora": "003_b3a743978aa28556.txt"}
#: the paper's full title, for a table's source column
TITLES = {"tsa": "Temperature Scaling Attack (TSA paper)",
          "temperature": "Exploring the Impact of Temperature Scaling in Softmax (arXiv 2502.20604)",
          "inference": "Robust Federated Inference", "rfd-lora": "RFD-LoRA"}
_SYMBOLS = {r"\%": "%", r"\{": "{", r"\}": "}", r"\gamma": "γ", r"\tau": "τ", r"\approx": "≈", r"\geq": "≥", r"\leq": "≤", r"\sim": "~", r"\times": "×",
            r"\eta": "η", r"\beta": "β", r"\alpha": "α", r"\rho": "ρ", r"\pm": "±", r"\downarrow": "↓",
            r"\lambda": "λ", r"\sigma": "σ", r"\epsilon": "ε"}


def plain(text: str) -> str:
    """``text`` as read: LaTeX symbols in Unicode, no ``$``, ``*`` or ``<b>`` marks, one space between words
    and none inside brackets or before punctuation."""
    for k, v in _SYMBOLS.items():
        text = text.replace(k, v)
    text = re.sub(r"</?b>|[$*]", "", text)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"([(\[]) ", r"\1", text)
    text = re.sub(r" ([)\],.;:])", r"\1", text)
    return text.strip()


@functools.lru_cache(maxsize=None)
def paper(name: str) -> str | None:
    """The plain text of a paper, or None when the seeds are not beside the checkout."""
    path = SEEDS / PAPERS[name]
    return plain(path.read_text()) if path.exists() else None


def quoted(name: str, quote: str) -> bool:
    """Whether ``quote`` is the paper's own words (a passage of its plain text)."""
    text = paper(name)
    if text is None:
        raise FileNotFoundError(f"{SEEDS / PAPERS[name]}: the source papers are not beside the checkout")
    return plain(quote) in text
