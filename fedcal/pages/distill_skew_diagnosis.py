"""What RFD-LoRA's clients and its consensus teach the student on the anchors, per round, from a
run's recorded uploads — the measured diagnosis of the label-skew collapse (docs/distill.md, "Label
skew: the diagnosis and a prior-corrected variant").

    python -m fedcal.pages distill_skew_diagnosis RUN_DIR [RUN_DIR ...] > diagnosis.md

Reads run directories only (``config.json``, ``uploads.npz``); no client trains, nothing is
written into them. The run's data — anchors, shards, backdoor clients, each client's poisoned
labels — are rebuilt by fedcal's own functions from the run's config
(:func:`fedcal.distill.run_data.distill_data`, :func:`~fedcal.distill.run_data.client_batch`), and
the consensus by the server's own :func:`fedcal.distill.student.build_consensus` with the live
server's generator (seeded by the seed and the round, so the MoM groups are the run's groups).

Two tables:

* **clients** (each run's last round): the label prior each client trained on (its private labels
  after poisoning), whether it is a backdoor client, the distribution of its argmax on the anchors,
  its accuracy there (the anchors' true labels are known here, never to the server), its mean
  predicted probability of the target class, and the AUC of its target-vs-rest logit margin against
  "the anchor is of the target class". The AUC separates the two possible causes of a constant
  argmax: AUC near 1 — the client ranks the anchors right and only its bias (its prior) is off, a
  per-client shift can repair it; AUC near 0.5 — the client learned nothing to rank by, and no
  server-side reweighting of its logits can recover what it does not know.
* **consensus** (every round): the anchors' true target share; how many clients label most anchors
  with the target and how many of those are backdoor clients (the bloc a median-type rule follows
  once it is a majority); how many of the round's MoM groups do; then, for the run's own consensus
  and the prior-corrected one (``dst-prior-correct``, with the class prior it aims at, the median
  of the clients' mean predictions) and the one corrected to the uniform prior
  (``dst-prior-target=uniform``), the agreement of its argmax with the anchors' true labels, its
  share of anchors labelled with the target, and its AUC.

The counting lives in :func:`client_rows` and :func:`consensus_row` (tensors in, numbers out; the
test checks them on a hand-made upload set) and the rest only loads a run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch


def target_margin(logits: torch.Tensor, target: int) -> torch.Tensor:
    """z_target − max_{c ≠ target} z_c per anchor: the score whose sign is "argmax is the target"
    and whose order ranks the anchors by how much more target-like the model finds them."""
    others = torch.cat([logits[:, :target], logits[:, target + 1:]], dim=1)
    return logits[:, target] - others.max(dim=1).values


def target_auc(logits: torch.Tensor, labels: torch.Tensor, target: int) -> float:
    """ROC AUC of :func:`target_margin` for "the anchor's true label is the target" (scikit-learn's
    ``roc_auc_score``; ties count one half). NaN when the anchors hold one side only."""
    from sklearn.metrics import roc_auc_score

    positive = (labels == target).numpy()
    if positive.all() or not positive.any():
        return float("nan")
    return float(roc_auc_score(positive, target_margin(logits.double(), target).numpy()))


def shares(pred: torch.Tensor, num_classes: int) -> list[float]:
    """The share of each class among the predictions ``pred``."""
    return (torch.bincount(pred, minlength=num_classes).double() / len(pred)).tolist()


def _fmt_shares(values) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def client_rows(uploads: torch.Tensor, clients, labels: torch.Tensor, priors: np.ndarray, backdoor,
                target: int) -> list[dict]:
    """One row per client of one round: ``uploads`` (n, A, C) logits on the anchors, ``clients`` the
    n partition ids, ``labels`` the anchors' true labels (A,), ``priors`` (n, C) each client's
    training label distribution, ``backdoor`` the backdoor client ids, ``target`` the backdoor's
    target class."""
    C = uploads.shape[-1]
    rows = []
    for k, (cid, z) in enumerate(zip(clients, uploads)):
        pred = z.argmax(-1)
        rows.append({"client": int(cid), "backdoor": "yes" if int(cid) in backdoor else "no",
                     "trained prior": _fmt_shares(priors[k]), "anchor argmax": _fmt_shares(shares(pred, C)),
                     "anchor accuracy": float((pred == labels).double().mean()),
                     "mean p(target)": float(torch.softmax(z.double(), -1)[:, target].mean()),
                     "AUC(target)": target_auc(z, labels, target)})
    return rows


def majority_target(logits: torch.Tensor, target: int) -> bool:
    """Whether a model labels more than half of the anchors with ``target``."""
    return bool((logits.argmax(-1) == target).double().mean() > 0.5)


def consensus_row(uploads: torch.Tensor, clients, labels: torch.Tensor, backdoor, target: int, *, clip: float,
                  method: str, num_groups: int | None, seed: int) -> dict:
    """One round's consensus diagnosis (see the module docstring) on ``uploads`` (n, A, C); ``seed``
    seeds the round's generator as the live server does (``seed * 100_003 + round``), so MoM's
    groups are the run's."""
    from fedcal.distill.consensus import clip_logits, random_groups, true_median
    from fedcal.distill.student import build_consensus

    n = uploads.shape[0]
    votes = [majority_target(z, target) for z in uploads]
    row = {"anchors' target share": float((labels == target).double().mean()),
           "clients mostly target": sum(votes),
           "of them backdoor": sum(v and int(c) in backdoor for v, c in zip(votes, clients)),
           "clients": n}
    if method == "mom":  # the groups build_consensus will draw from the same generator state
        groups = random_groups(n, num_groups, torch.Generator().manual_seed(seed))
        means = [clip_logits(uploads[g], clip).mean(0) for g in groups]
        row["MoM groups mostly target"] = f"{sum(majority_target(m, target) for m in means)} / {len(groups)}"
    else:
        row["MoM groups mostly target"] = "–"
    Z = clip_logits(uploads, clip)
    # the class prior prior_correct shifts every client to (its first lines: the true median of the
    # clients' mean predicted distributions on the anchors), shown because it is where it aims
    prior = true_median(torch.softmax(Z.double(), -1).mean(1), 0)
    row["corrected to p(target)"] = float(prior[target] / prior.sum())
    for tag, correct, aim in (("plain", False, "median"), ("prior-corrected", True, "median"),
                              ("uniform-corrected", True, "uniform")):
        cons = build_consensus(uploads, clip=clip, method=method, num_groups=num_groups,
                               generator=torch.Generator().manual_seed(seed), prior_correct=correct,
                               prior_target=aim)
        pred = cons.logits.argmax(-1)
        row[f"{tag}: accuracy"] = float((pred == labels).double().mean())
        row[f"{tag}: target share"] = float((pred == target).double().mean())
        row[f"{tag}: AUC"] = target_auc(cons.logits, labels, target)
    return row


def diagnose(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(clients of the last round, consensus of every round) of one RFD-LoRA run directory."""
    from fedcal.distill.replay import UPLOADS_FILE, load_uploads
    from fedcal.distill.run_data import DistillRunSpec, client_batch, distill_data
    from fedcal.results import load_config

    cfg = load_config(run_dir)
    spec = DistillRunSpec.from_config(cfg)
    data = distill_data(spec)
    uploads = load_uploads(run_dir)
    with np.load(run_dir / UPLOADS_FILE) as z:
        ids = {r: [int(c) for c in z[f"r{r}_clients"]] for r in uploads}
    labels = torch.as_tensor(data.train_labels[data.anchors]).long()
    target = cfg.dst_target
    run = f"{cfg.dst_partition} s{cfg.seed}"
    cons = []
    for r in sorted(uploads):
        if not uploads[r]:
            continue
        Z = torch.stack(uploads[r])
        groups = min(cfg.dst_groups, len(Z)) if cfg.dst_aggregator == "mom" else None
        row = consensus_row(Z, ids[r], labels, data.backdoor, target, clip=cfg.dst_clip, method=cfg.dst_aggregator,
                            num_groups=groups, seed=cfg.seed * 100_003 + r)
        cons.append({"run": run, "aggregator": cfg.dst_aggregator, "round": r, **row})
    last = max(r for r in uploads if uploads[r])
    priors = np.stack([np.bincount(client_batch(spec, c)[1].numpy(), minlength=data.num_classes) /
                       len(data.shards[c]) for c in ids[last]])
    clients = [{"run": run, "round": last, **row} for row in
               client_rows(torch.stack(uploads[last]), ids[last], labels, priors, data.backdoor, target)]
    return pd.DataFrame(clients), pd.DataFrame(cons)


def main(argv: list[str]) -> int:
    from fedcal.reports.markdown import markdown_table

    ap = argparse.ArgumentParser(prog="python -m fedcal.pages distill_skew_diagnosis", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="RFD-LoRA run directories")
    dirs = [d for d in ap.parse_args(argv).runs if (d / "uploads.npz").exists()]
    if not dirs:
        print("no RFD-LoRA run directory with uploads.npz given", file=sys.stderr)
        return 1
    parts = [diagnose(d) for d in dirs]
    clients = pd.concat([p[0] for p in parts], ignore_index=True)
    cons = pd.concat([p[1] for p in parts], ignore_index=True)
    num = "{:.3f}"
    sys.stdout.write(markdown_table(
        cons, "The consensus on the anchors, every round (plain: the run's own aggregator; prior-corrected: "
              "dst-prior-correct on the same uploads; uniform-corrected: with dst-prior-target=uniform)",
        {c: num for c in cons.columns if ":" in c or "share" in c or c.startswith("corrected")}))
    sys.stdout.write("\n")
    sys.stdout.write(markdown_table(
        clients, "The clients on the anchors, last round (trained prior and anchor argmax: class 0 / class 1 / …)",
        {"anchor accuracy": num, "mean p(target)": num, "AUC(target)": num}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
