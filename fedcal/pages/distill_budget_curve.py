"""The budget curve on a text corpus: clean accuracy of a centralised LoRA and of FedIT against rounds ×
local epochs × private texts per client, beside the backbone's centralised capacity.

For each number of private texts per client n (``--per-client``) the training split is subsampled to
the N texts that leave n private texts to each of the K clients after the anchor share
(N = ⌈n·K / (1 − dst-anchor-frac)⌉, the anchors kept aside as in every distill run), and:

* **FedIT** runs once per local-epoch count E (``--local-epochs``) for ⌈``--epochs`` / E⌉ rounds, IID, no
  backdoor client (ρ = 0), rank 8, evaluated after every round: one ``fedcal distill`` cell each
  (the run store: a finished cell is read, not run again), so a run gives its whole curve over rounds;
* **centralised LoRA** trains the same rank-8 adapter (the clients' learning rate, warm-up, batch and
  top layers) on the union of those K private shards for ``--epochs`` epochs, evaluated after each
  (kept in ``<runs>/central-n<n>-s<seed>.csv``, read back when present).

Both read the same test texts. Every row of ``runs.csv`` is one evaluation: method, n, E, rounds,
epochs of the private data seen (rounds × E; the centralised run's epoch), the client optimiser steps
spent, CA, and the wall seconds up to it; ``table.md`` has CA per epochs seen, and names the smallest
budget at which FedIT and the centralised LoRA are both within ``--within`` points of ``--capacity``.

    python -m fedcal.pages distill_budget_curve --out docs/results/distill-minilm-budget-curve \\
        --per-client 150,300 --local-epochs 1,2 --epochs 6 output-dir=runs/distill-minilm-budget-curve \\
        data-dir=../shared/data dst-corpus=sentiment dst-test-size=500 dst-lora-layers=2 num-clients=6
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch


def _central(cfg, epochs: int, path: Path, run: bool = True) -> pd.DataFrame:
    """CA after each epoch of a rank-8 LoRA client on the union of ``cfg``'s private shards (the
    epochs done so far are in ``path`` after each epoch; a finished file is read back, and without
    ``run`` whatever the file holds)."""
    done = pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=["epochs_seen", "steps", "ca", "seconds"])
    if len(done) >= epochs or not run:
        return done
    from fedcal.distill.clients import local_train, lora_model
    from fedcal.distill.run_data import DistillRunSpec, _encode_batch, base_classifier, distill_data, inputs_of
    from fedcal.distill.student import clean_accuracy, predict
    from fedcal.text import backbone_tokenizer

    spec = DistillRunSpec.from_config(cfg)
    t0 = time.perf_counter()
    data = distill_data(spec)
    idx = np.concatenate(data.shards)  # ρ = 0: every shard as its client trains on it
    batch = _encode_batch(spec, data.backbone, data.num_classes, backbone_tokenizer(data.backbone),
                          [data.train_texts[i] for i in idx])
    x, mask = inputs_of(batch), batch["attention_mask"]
    y = torch.as_tensor(data.train_labels[idx], dtype=torch.long)
    base = base_classifier(data.backbone, data.num_classes, "cpu", data.lora_layers)
    model = lora_model(base, 8, alpha=cfg.dst_alpha, target_modules=cfg.lora_targets, allowed_ranks=None, seed=cfg.seed)
    rows, steps = [], 0
    for e in range(epochs):
        local_train(model, x, mask, y, epochs=1, batch_size=cfg.batch_size, lr=cfg.dst_client_lr,
                    weight_decay=cfg.dst_weight_decay, warmup_frac=cfg.dst_warmup if e == 0 else 0.0,
                    generator=torch.Generator().manual_seed(cfg.seed * 100 + e))
        steps += math.ceil(len(y) / cfg.batch_size)
        pred = predict(model, inputs_of(data.test_batch), data.test_batch["attention_mask"])
        ca = 100 * clean_accuracy(pred, torch.as_tensor(data.test_labels))
        rows.append({"epochs_seen": e + 1, "steps": steps, "ca": round(ca, 2),
                     "seconds": round(time.perf_counter() - t0, 1)})
        print(f"  central n={len(y) // cfg.num_clients}/client epoch {e + 1}: CA {ca:.1f} %", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(path, index=False)
    return pd.DataFrame(rows)


def _fedit_rows(cfg, run_dir: Path, per_client: float) -> list[dict]:
    from fedcal.results import load_metrics, load_timings

    if not (run_dir / "metrics.csv").is_file():
        return []
    m = load_metrics(run_dir)
    ca = m[m["metric"] == "ca"].set_index("round")["value"]
    secs = load_timings(run_dir)
    secs = secs[secs["metric"] == "round_seconds"].set_index("round")["value"].sort_index().cumsum()
    per_round = cfg.num_clients * math.ceil(per_client / cfg.batch_size) * cfg.dst_local_epochs
    return [{"method": "fedit", "per_client": round(per_client), "local_epochs": cfg.dst_local_epochs, "rounds": int(r),
             "epochs_seen": int(r) * cfg.dst_local_epochs, "steps": int(r) * per_round, "ca": round(100 * v, 2),
             "seconds": round(float(secs.get(r, float("nan"))), 1)}
            for r, v in ca.sort_index().items() if r > 0]


def budget_table(runs: pd.DataFrame, capacity: float, within: float) -> str:
    """Markdown: CA (%) per method × n × E (rows) and epochs seen (columns), and the smallest budget
    (fewest client steps) at which FedIT and the centralised LoRA at the same n both reach
    capacity − within."""
    from fedcal.reports.markdown import markdown_table

    runs = runs.assign(setting=[f"{'FedIT' if m == 'fedit' else 'centralised LoRA'}, n = {n}"
                                + (f", E = {e}" if m == "fedit" else "")
                                for m, n, e in zip(runs["method"], runs["per_client"], runs["local_epochs"])])
    wide = runs.pivot_table(index="setting", columns="epochs_seen", values="ca", sort=False)
    wide.columns = [f"{c} ep." for c in wide.columns]
    shown = wide.reset_index().astype(object).fillna("–")
    goal = capacity - within
    lines = [f"**CA (%) against epochs of the private data seen** (FedIT: rounds × local epochs E; n private texts "
             f"per client); capacity {capacity:.1f} %, goal ≥ {goal:.1f} %\n", markdown_table(shown), ""]
    hits = []
    for n, group in runs.groupby("per_client"):
        central = group[(group["method"] == "central") & (group["ca"] >= goal)]
        for e, fed in group[group["method"] == "fedit"].groupby("local_epochs"):
            ok = fed[fed["ca"] >= goal].sort_values("steps")
            if len(ok) and len(central):
                r = ok.iloc[0]
                hits.append((int(r["steps"]), int(n), int(e), int(r["rounds"]), float(r["ca"]),
                             int(central.iloc[0]["epochs_seen"]), float(central.iloc[0]["ca"])))
    if hits:
        steps, n, e, rounds, ca, c_ep, c_ca = min(hits)
        lines.append(f"Smallest budget with both within {within:g} points of capacity: **n = {n} private texts per "
                     f"client, E = {e}, {rounds} rounds** ({steps} client steps; FedIT CA {ca:.2f} %); the "
                     f"centralised LoRA on the same texts reaches the goal after {c_ep} epoch(s) ({c_ca:.2f} %).")
    else:
        lines.append(f"No budget of this grid brings both FedIT and the centralised LoRA within {within:g} points "
                     "of capacity.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from fedcal.app.sweep import run_sweep
    from fedcal.config import RunConfig, parse_override
    from fedcal.results import run_dir_for

    p = argparse.ArgumentParser(prog="python -m fedcal.pages distill_budget_curve", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for runs.csv and table.md")
    p.add_argument("--per-client", default="150,300", help="private texts per client, comma-separated")
    p.add_argument("--local-epochs", default="1,2", help="FedIT's local epochs E, comma-separated")
    p.add_argument("--epochs", type=int, default=6, help="epochs of the private data seen (rounds × E) at most")
    p.add_argument("--capacity", type=float, default=77.6, help="the backbone's centralised capacity (%%)")
    p.add_argument("--within", type=float, default=3.0, help="points below capacity that count as reached")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--no-run", action="store_true",
                   help="run nothing: tabulate the rounds and epochs already recorded (an unfinished run's too)")
    p.add_argument("overrides", nargs="*", help="run-config key=value (as for fedcal run)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    over = dict(parse_override(o) for o in args.overrides)
    over.setdefault("engine", "inprocess")
    base = RunConfig.from_flower({**over, "task": "distill", "dst-method": "fedit", "dst-ranks": "8",
                                  "dst-backdoor-ratio": 0.0, "dst-partition": "iid", "dst-eval-every": 1})
    rows = []
    for n in (int(v) for v in args.per_client.split(",")):
        size = math.ceil(n * base.num_clients / (1 - base.dst_anchor_frac))
        cfg = base.replace(dst_train_size=size)
        # FedIT first: of the two curves it is the one that needs the budget (the centralised LoRA
        # reaches capacity sooner), so an interrupted grid has measured the informative one
        for e in (int(v) for v in args.local_epochs.split(",")):
            c = cfg.replace(dst_local_epochs=e, dst_rounds=math.ceil(args.epochs / e))
            if not args.no_run:
                failures = run_sweep([c], jobs=1, progress=False)
                if failures:
                    print(f"fedcal: error: {failures}")
                    return 1
            private = size - round(base.dst_anchor_frac * size)  # what anchor_split leaves private
            rows += _fedit_rows(c, run_dir_for(c), private / base.num_clients)
        central = _central(cfg, args.epochs, Path(base.output_dir) / f"central-n{n}-s{base.seed}.csv", not args.no_run)
        rows += [{"method": "central", "per_client": n, "local_epochs": 0, "rounds": 0, **r}
                 for r in central.to_dict("records")]
    runs = pd.DataFrame(rows)
    if runs.empty:
        print("fedcal: error: nothing recorded yet under " + base.output_dir)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(out / "runs.csv", index=False)
    (out / "table.md").write_text(budget_table(runs, args.capacity, args.within))
    print((out / "table.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
