"""The reports read run stores; what evaluates a model lives in the package that owns it.

fedcal/reports/ builds tables and figures from what runs stored. Attacking a model (PGD/CW), fitting a
calibrator, drawing a root set, re-partitioning the data, replaying a run or running a model forward
are computations of fedcal.robustness, fedcal.calibrate, fedcal.data, fedcal.reference,
fedcal.run_analysis and fedcal.inference; a report calls those and formats what they return.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPORTS = Path(__file__).resolve().parents[1] / "fedcal" / "reports"

#: modules a report never imports: the tensor library and the training / model-building code
COMPUTING_MODULES = ("torch", "fedcal.local_training", "fedcal.models", "fedcal.reference",
                     "fedcal.robustness.evaluate", "fedcal.robustness.attacks", "fedcal.data.partition")
#: calls a report never makes: fitting, forward passes, attacks, root sets, partitions, replays, optimiser steps,
#: tokenising a corpus
COMPUTING_CALLS = {"fit", "predict_logits", "evaluate_robustness", "adversarial_examples", "root_set", "client_data",
                   "client_partitions", "global_state", "update_cosine_curves", "theorem_frame", "local_train",
                   "backward", "step", "zero_grad", "no_grad", "set_num_threads", "split_calibration", "node_model",
                   "test_windows", "client_windows"}


def _computations(source: str, where: str) -> list[str]:
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in COMPUTING_CALLS:
                hits.append(f"{where}:{node.lineno} calls {name}")
            continue
        else:
            continue
        bad = [n for n in names if any(n == m or n.startswith(m + ".") for m in COMPUTING_MODULES)]
        hits += [f"{where}:{node.lineno} imports {n}" for n in bad]
    return hits


def test_no_report_evaluates_a_model():
    hits = [h for p in sorted(REPORTS.glob("*.py")) for h in _computations(p.read_text(), p.name)]
    assert not hits, "computation in fedcal/reports (move it to the package that owns it):\n" + "\n".join(hits)


def test_the_scan_finds_each_form_of_computation():
    """The scan catches the forms the old reports had: a calibrator fitted, a forward pass, torch
    imported (also inside a function), a root set drawn, the data re-partitioned, a replay."""
    for code in ("from fedcal.calibrate import TemperatureScaling\nt = TemperatureScaling().fit(z, y)",
                 "from fedcal.local_training import predict_logits",
                 "def f():\n    import torch\n    torch.set_num_threads(1)",
                 "x = root_set(ds, 10, 0)", "d = client_data('digits', '', 3, 'iid', 1.0, 0, 1)",
                 "from fedcal.reference import global_state", "from fedcal.robustness import evaluate_robustness\n"
                 "evaluate_robustness(m, ds, spec, 'cpu')"):
        assert _computations(code, "m.py"), code
    assert not _computations("import pandas as pd\nfrom fedcal.results import load_config\nt = pd.DataFrame()", "m.py")
