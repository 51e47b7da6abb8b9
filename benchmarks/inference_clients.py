"""How good the robust-inference clients are, before any aggregator or attack: the measurement behind
the choice of the clients' training (docs/inference.md, "Choices and limits"; issue 18 asks for the
plain mean of 17 clients above 55 % clean on CIFAR-10, as the literature's ResNet-8 clients reach).

The n clients of an inference run config are trained exactly as ``train.local`` trains them
(:func:`fedcal.inference.federated.train_client`: the same split, seeds, batches and augmentation);
at each epoch count of ``--epochs`` every client's probits on the first ``--queries`` test images are
taken, and one line is printed: the clients' own accuracies (mean, min, max), the accuracy of the
plain mean of their probits (the ``mean`` aggregator's clean accuracy, no adversary) and the training
time so far. A checkpoint at e epochs is what a run with ``inf-local-epochs=e`` would train (the
seeded batch schedule of a longer run starts with the shorter one's). One torch thread per process
unless ``--threads``. Example (the run config's keys as ``key=value``):

    python benchmarks/inference_clients.py --epochs 10,20,30 dataset=cifar10 model=resnet8 num-clients=17 \\
        lr=0.05 momentum=0.9 weight-decay=5e-4 inf-augment=crop-flip data-dir=../shared/data
"""

from __future__ import annotations

import argparse
import math
import time

import torch


def main() -> None:
    from fedcal.config import RunConfig, parse_override
    from fedcal.data import load_dataset
    from fedcal.inference.federated import InferenceClientSpec, client_indices, train_client

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", default="10,20,30", help="comma-separated epoch counts to score (ascending)")
    ap.add_argument("--queries", type=int, default=10_000, help="first test images scored")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("overrides", nargs="*", metavar="key=value")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    checkpoints = sorted({int(e) for e in args.epochs.split(",")})
    overrides = dict(parse_override(o) for o in args.overrides)
    cfg = RunConfig.from_flower({"task": "inference", **overrides, "inf-local-epochs": checkpoints[-1]})
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    x, y = ds.x_test[:args.queries], ds.y_test[:args.queries]
    sizes = [len(i) for i in client_indices(ds.y_train.numpy(), cfg.num_clients, cfg.dirichlet_alpha,
                                            cfg.inf_server_frac, cfg.seed)]
    probits = {e: torch.zeros(len(x), cfg.num_clients, ds.num_classes) for e in checkpoints}
    seconds = {e: 0.0 for e in checkpoints}
    for cid in range(cfg.num_clients):
        per_epoch = math.ceil(sizes[cid] / min(cfg.batch_size, sizes[cid]))
        at = {e * per_epoch: e for e in checkpoints}
        clock = [time.perf_counter()]

        def score(step: int, model: torch.nn.Module, cid=cid, at=at, clock=clock) -> None:
            if step not in at:
                return
            e = at[step]
            seconds[e] += time.perf_counter() - clock[0]
            model.eval()
            with torch.no_grad():
                probits[e][:, cid] = torch.cat([model(xb).softmax(1) for xb in x.split(1000)])
            model.train()
            clock[0] = time.perf_counter()

        train_client(InferenceClientSpec.from_config(cfg), ds, cid, on_step=score)
    print(f"{cfg.num_clients} {cfg.model} clients on {cfg.dataset} (alpha {cfg.dirichlet_alpha:g}, lr {cfg.lr:g}, "
          f"momentum {cfg.momentum:g}, weight decay {cfg.weight_decay:g}, augment {cfg.inf_augment}); "
          f"{len(x)} test queries")
    print("epochs  client acc mean [min, max]  mean-of-probits acc  train s (cumulative, all clients)")
    total = 0.0
    for e in checkpoints:
        total += seconds[e]
        own = (probits[e].argmax(-1) == y[:, None]).float().mean(0) * 100
        mean = float((probits[e].mean(1).argmax(-1) == y).float().mean()) * 100
        print(f"{e:6d}  {own.mean():6.2f} [{own.min():.2f}, {own.max():.2f}]        {mean:6.2f}           "
              f"{total:8.0f}")


if __name__ == "__main__":
    main()
