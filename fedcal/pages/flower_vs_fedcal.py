"""What one bad reply does to Flower's built-in robust strategies and to fedcal's counterparts.

    python -m fedcal.pages flower_vs_fedcal docs/results/flower-vs-fedcal/bad_replies.md

Seven clients, one round, from a zero model: six honest replies move every weight to 1, the
seventh is bad in one way. Each strategy is built with its defaults (``fraction_evaluate=0``) and
driven through the same in-process grid (``tests/strategy_harness.py``); the table says what
became of the round: the model every honest client agrees on (``1``), a NaN model, or the
exception that ended ``strategy.start`` (and with it the ServerApp).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp import strategy as flower

from fedcal import strategies
from fedcal.pages import ROOT
from fedcal.reports import markdown_table

PAIRS = ["FedAvg", "FedMedian", "FedTrimmedAvg", "MultiKrum", "Krum", "Bulyan"]
BAD = {  # what the seventh client sends instead of an honest reply
    "NaN values": lambda: _reply(torch.full((3,), float("nan"))),
    "a missing array": lambda: RecordDict({"arrays": ArrayRecord({"v": torch.ones(3)}),
                                           "metrics": MetricRecord({"num-examples": 5})}),
    "a wrong shape": lambda: _reply(torch.ones(4)),
    "no num-examples": lambda: RecordDict({"arrays": ArrayRecord({"w": torch.ones(3)}),
                                           "metrics": MetricRecord({"loss": 1.0})}),
    "an error reply": lambda: None,
}


def _reply(w: torch.Tensor) -> RecordDict:
    return RecordDict({"arrays": ArrayRecord({"w": w}), "metrics": MetricRecord({"num-examples": 5})})


def outcome(strategy, bad: str) -> str:
    def respond(node, content):
        return BAD[bad]() if node == 7 else _reply(torch.ones(3))

    if str(ROOT) not in sys.path:  # the checkout's in-process grid (tests/strategy_harness.py)
        sys.path.insert(0, str(ROOT))
    from tests.strategy_harness import FakeGrid

    try:
        result = strategy.start(grid=FakeGrid(list(range(1, 8)), respond),
                                initial_arrays=ArrayRecord({"w": torch.zeros(3)}), num_rounds=1)
    except Exception as exc:  # noqa: BLE001 — the point is to name what ends the run
        return f"run ends ({type(exc).__name__})"
    w = np.array(result.arrays["w"].numpy())
    if np.isnan(w).any():
        return "model is NaN"
    if np.allclose(w, 1.0):
        dropped = getattr(strategy, "last_rejected", {})
        return "dropped, reason logged" if 7 in dropped else "model = 1"
    return f"model = {np.round(w, 3).tolist()}"


def main(out: str) -> None:
    logging.disable(logging.WARNING)  # the strategies' own logs are not the point here
    rows = []
    for name in PAIRS:
        ours = getattr(strategies, name)
        for side, cls in (("Flower", flower.__dict__[name]), ("fedcal", ours)):
            row = {"strategy": f"{side} {name}"}
            for bad in BAD:
                row[bad] = outcome(cls(fraction_evaluate=0.0), bad)
            rows.append(row)
    import pandas as pd

    text = markdown_table(pd.DataFrame(rows))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m fedcal.pages flower_vs_fedcal", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", default="docs/results/flower-vs-fedcal/bad_replies.md", help="the table's file")
    main(ap.parse_args().out)
