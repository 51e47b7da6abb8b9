"""One adversarial-training epoch of the DeepSet at the robust-inference authors' volume, measured on a CPU
from stored probits: docs/inference.md, "Stored probits".

The authors (``scripts_submission/train_DeepSet.sh``, ``aggregator_training_fl.py``) train the DeepSet
(hidden 224, Adam 5e-5, batch 256) for 10 epochs on 300 client subsets of every server sample, each
batch first attacked by 50 sign steps of a colluding PGD on the CW probability margin (step 0.1). An
epoch is ⌈N_server × 300 / 256⌉ such batches. This script times ``--batches`` of them, each one Adam step
of :func:`fedcal.inference.deepset.train_deepset`'s adversarial phase, twice in one run: with the attack
as written before (``_literature_inputs``: every pass embeds all n rows) and batched
(``_literature_inputs_batched``: the honest rows' embeddings once, each pass embeds only the ≤ f
corrupted rows) — checks that both produce the same attacked batch, and prints the seconds per batch,
their ratio, and the epoch and 10-epoch cost extrapolated. Input: ``--probits FILE.npz`` (``fedcal
inference-collect``), or, without it, synthetic probits of the same shape (N × n × C Dirichlet rows:
the cost depends on the shape only). One torch thread unless ``--threads``.

    nice -n 19 python benchmarks/inference_adv_volume.py --batches 4
"""
from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F


def main() -> None:
    from fedcal.inference.deepset import DeepSet, _literature_inputs, _literature_inputs_batched

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probits", help="a stored collection (fedcal inference-collect); default synthetic")
    ap.add_argument("--server", type=int, default=5000, help="synthetic: server samples N (CIFAR-10: 10 %% of 50,000)")
    ap.add_argument("--clients", type=int, default=17, help="synthetic: clients n")
    ap.add_argument("--classes", type=int, default=10, help="synthetic: classes C")
    ap.add_argument("--f", type=int, default=4)
    ap.add_argument("--subsets", type=int, default=300)
    ap.add_argument("--steps", type=int, default=50, help="PGD steps per batch")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batches", type=int, default=4, help="timed batches per variant")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.probits:
        from fedcal.inference.collect import load_collection

        data, _ = load_collection(args.probits)
        probits, labels = data.server_probits, data.server_labels
        source = args.probits
    else:
        gen = torch.Generator().manual_seed(0)
        conc = torch.full((args.classes,), 0.3)
        probits = torch.distributions.Dirichlet(conc).sample((args.server, args.clients))
        labels = torch.randint(0, args.classes, (args.server,), generator=gen)
        source = "synthetic Dirichlet(0.3) probits"
    N, n, C = probits.shape
    model = DeepSet(C, hidden=args.hidden, seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=5e-5)

    def step(attack, idx, gen) -> tuple[float, torch.Tensor]:
        t0 = time.perf_counter()
        x = attack(model, probits[idx], labels[idx], args.f, args.steps, 0.1, gen)
        loss = F.cross_entropy(model.logits(x), labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return time.perf_counter() - t0, x

    # the same batches, the same draws, the same starting weights for both variants
    batches = [torch.randint(0, N, (args.batch,), generator=torch.Generator().manual_seed(b))
               for b in range(args.batches)]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    seconds, first = {}, {}
    for name, attack in (("before (every pass embeds all n rows)", _literature_inputs),
                         ("batched (honest rows embedded once)", _literature_inputs_batched)):
        model.load_state_dict(state)
        opt = torch.optim.Adam(model.parameters(), lr=5e-5)
        times = []
        for b, idx in enumerate(batches):
            s, x = step(attack, idx, torch.Generator().manual_seed(1000 + b))
            times.append(s)
            first.setdefault(name, x)
        seconds[name] = sum(times) / len(times)
    (a, ta), (b, tb) = seconds.items()
    xa, xb = first.values()
    per_epoch = math.ceil(N * args.subsets / args.batch)
    print(f"{source}: N = {N}, n = {n}, C = {C}, f = {args.f}; DeepSet hidden {args.hidden}, batch {args.batch}, "
          f"{args.steps} PGD steps, {args.threads} thread(s); {args.batches} batches timed per variant")
    print(f"same attacked batch: max |difference| = {(xa - xb).abs().max().item():.2e}")
    for name, s in seconds.items():
        print(f"{name}: {s:.3f} s per batch -> {per_epoch} batches = {per_epoch * s / 3600:.2f} CPU-hours per epoch, "
              f"{args.epochs * per_epoch * s / 3600:.1f} for {args.epochs} epochs")
    print(f"ratio before / batched: {ta / tb:.2f}")


if __name__ == "__main__":
    main()
