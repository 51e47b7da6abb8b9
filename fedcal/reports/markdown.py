"""The one Markdown table writer of the package (and of ``fedcal/pages/build_results.py``).

Every table a report writes goes through :func:`markdown_table`; what differs between tables
(which columns, how each cell is formatted, whether there is a bold title) is a parameter,
never a second writer. No optional dependency (such as ``tabulate``) is needed.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Union

import pandas as pd

#: said once under every table (and on every figure) that shows sECE: which sign is which
#: (fedcal.metrics: sECE = Σ_b (n_b / N)(accuracy_b − confidence_b))
SECE_SIGN = "sECE = Σ bins (n_b/N)·(accuracy − confidence): > 0 under-confident, < 0 over-confident"
#: the units of every printed and Markdown table; the CSV files keep fractions (docs/results.md)
UNITS_NOTE = "accuracy, ECE and sECE in percent"

# A cell format: a ``str.format`` pattern such as ``"{:.2f}"``, or a function of the value.
CellFormat = Union[str, Callable[[Any], str]]


def _formatter(fmt: CellFormat) -> Callable[[Any], str]:
    return fmt.format if isinstance(fmt, str) else fmt


def markdown_table(frame: pd.DataFrame, title: str = "", formats: Mapping[str, CellFormat] | None = None,
                   default: CellFormat = str) -> str:
    """``frame`` as a GitHub Markdown table, one line per row, ending with a newline.

    ``title`` (if given) comes first as a bold line and a blank line. ``formats`` maps a column
    to its cell format (a ``str.format`` pattern or a function of the value); every other
    column uses ``default`` (``str`` unless given). Columns are written in the frame's order
    under their ``str`` names; rows are read with :meth:`pandas.DataFrame.iterrows`, so a row of
    numbers only arrives as floats (the formats of such frames handle integral floats).
    """
    formats = formats or {}
    cols = list(frame.columns)
    cell = {c: _formatter(formats.get(c, default)) for c in cols}
    lines = [f"**{title}**", ""] if title else []
    lines += ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(cell[c](row[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"
