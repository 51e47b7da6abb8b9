"""What RFD-LoRA's clients and its consensus say on the anchors, per round, from a run's recorded
uploads — the measured diagnosis of the label-skew collapse (docs/distill.md).

    python docs/tools/distill_skew_diagnosis.py RUN_DIR [RUN_DIR ...] > out.md

For every finished RFD-LoRA run (``uploads.npz``) and its last round: each client's partition
pattern (its share of the target class in its private data), whether it is a backdoor client, its
accuracy on the anchors (their true labels are known here, never to the server) and its predicted
share of the target class on them; then the consensus of the run's own server setting and the one
with fedcal's label-prior correction (``dst-prior-correct``) on the same uploads: accuracy and
target share on the anchors. The anchors' true target share is the reference. A consensus whose
target share is far above the anchors' predicts the target for texts of the other class: the
student distils exactly that.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch


def diagnose(run_dir: Path) -> pd.DataFrame:
    from fedcal.distill.replay import load_uploads
    from fedcal.distill.run_data import DistillRunSpec, distill_data
    from fedcal.distill.student import build_consensus
    from fedcal.results import load_config

    cfg = load_config(run_dir)
    data = distill_data(DistillRunSpec.from_config(cfg))
    uploads = load_uploads(run_dir)
    last = max(uploads)
    with np.load(run_dir / "uploads.npz") as z:
        clients = [int(c) for c in z[f"r{last}_clients"]]
    labels = torch.as_tensor(data.train_labels[data.anchors])
    target = cfg.dst_target
    rows = []

    def describe(name, logits, share, malicious=""):
        pred = logits.argmax(-1)
        rows.append({"run": run_dir.name, "round": last, "who": name, "private target share": share,
                     "backdoor": malicious, "anchor accuracy": float((pred == labels).double().mean()),
                     "predicted target share": float((pred == target).double().mean())})

    rows.append({"run": run_dir.name, "round": last, "who": "anchors (true labels)", "private target share": "",
                 "backdoor": "", "anchor accuracy": 1.0,
                 "predicted target share": float((labels == target).double().mean())})
    for cid, z in zip(clients, uploads[last]):
        share = float(np.mean(data.train_labels[data.shards[cid]] == target))
        describe(f"client {cid}", z, round(share, 2), "yes" if cid in data.backdoor else "no")
    for correct in (False, True):
        gen = torch.Generator().manual_seed(cfg.seed * 100_003 + last)  # the live server's groups
        groups = min(cfg.dst_groups, len(uploads[last]))
        cons = build_consensus(uploads[last], clip=cfg.dst_clip, method=cfg.dst_aggregator,
                               num_groups=groups if cfg.dst_aggregator == "mom" else None, generator=gen,
                               prior_correct=correct)
        describe(f"consensus ({cfg.dst_aggregator}{', prior-corrected' if correct else ''})", cons.logits, "")
    return pd.DataFrame(rows)


def main(argv: list[str]) -> int:
    from fedcal.reports.markdown import markdown_table

    frames = [diagnose(Path(d)) for d in argv if (Path(d) / "uploads.npz").exists()]
    if not frames:
        print("no RFD-LoRA run directory with uploads.npz given", file=sys.stderr)
        return 1
    table = pd.concat(frames, ignore_index=True)
    sys.stdout.write(markdown_table(table, "RFD-LoRA on the anchors, last round: clients and consensus",
                                    {"anchor accuracy": "{:.3f}", "predicted target share": "{:.3f}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
