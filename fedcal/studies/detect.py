"""``fedcal detect``: the detection case study (task = detect), τ x seed."""

from __future__ import annotations

import argparse
from typing import Any

from fedcal.studies.common import KEYS_EPILOG
from fedcal.studies.taus import add_case_study_options, case_study


# ------------------------------------------------------------------ fedcal detect (task = detect, SPEC §10)
#: SPEC §10's federation size for detection (10 clients); `fedcal detect` sets it unless given
DETECT_PRESET = {"num-clients": 10}


def cmd_detect(args: argparse.Namespace) -> int:
    from fedcal.reports.detect import detect_report

    return case_study(args, "detect", DETECT_PRESET,
                       lambda base: f"{base.det_model} on "
                       + ("KITTI" if base.det_data == "kitti" else f"{base.det_digits} scenes"), detect_report,
                       "tables: {out}/table.md, {out}/runs.csv, {out}/kept.csv\nplots: {out}/boxes_kept.png, "
                       "{out}/no_object_reliability.png, {out}/examples.png, {out}/curves.png")


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("detect", "TSA on federated object detection: mAP, no-object calibration, boxes kept vs threshold",
            description="Every τ × seed is one Flower run (task = detect, engine = inprocess unless given; τ = 1 is "
                        "the benign run): 10 non-IID clients train a detector (det-model: grid by default, detr, or "
                        "a Hub DETR) on MNIST scenes, attacker-ratio of them with the TSA on the class logits. "
                        "Resumable. Writes table.md, runs.csv, kept.csv, boxes_kept.png, no_object_reliability.png, "
                        "examples.png and curves.png (docs/detection.md).", epilog=KEYS_EPILOG)
    add_case_study_options(p, "0.2,1,5", "fedcal-detect")
    p.set_defaults(func=cmd_detect)
