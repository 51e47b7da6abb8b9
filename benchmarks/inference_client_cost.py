"""What one inference client's training costs at the robust-inference authors' recipe, and what a whole
collection (n clients × epochs, × seeds) would cost: docs/inference.md, "Stored probits".

Times ``--steps`` SGD steps of client 0 of the config (its own data, batch ``batch-size``, crop-flip when
``inf-augment`` asks; :func:`fedcal.inference.federated.train_client`'s steps, the first ``--steps`` of
them) after ``--warmup`` untimed ones, counts the step's floating-point operations with
``torch.utils.flop_counter`` (forward + backward), times the probits of 1,000 test images, and
extrapolates with the split's real client sizes: steps = Σ_clients ⌈n_i / B⌉ × ``inf-local-epochs``.
One torch thread unless ``--threads``. Example (the authors' recipe, ``key=value`` run-config keys):

    nice -n 19 python benchmarks/inference_client_cost.py --steps 20 dataset=cifar10 model=resnet8-wide \\
        num-clients=17 dirichlet-alpha=0.5 lr=0.01 weight-decay=1e-4 batch-size=32 inf-local-epochs=20 \\
        inf-augment=crop-flip inf-lr-schedule=cosine data-dir=../shared/data
"""
from __future__ import annotations

import argparse
import math
import time

import torch


class _Enough(Exception):
    """Raised after the last timed step: the rest of the client's schedule is the same work."""


def main() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from fedcal.config import RunConfig, parse_override
    from fedcal.data import load_dataset
    from fedcal.inference.collect import client_probits
    from fedcal.inference.federated import InferenceClientSpec, client_indices, train_client
    from fedcal.models import build_model

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="timed SGD steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    ap.add_argument("--seeds", type=int, default=5, help="seeds the extrapolation counts")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("overrides", nargs="*", metavar="key=value")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    overrides = dict(parse_override(o) for o in args.overrides)
    n = int(overrides.get("num-clients", 17))
    cfg = RunConfig.from_flower({"task": "inference", "clients-per-round": min(5, n), "inf-f": min(4, (n - 1) // 2),
                                 **overrides})
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    sizes = [len(i) for i in client_indices(ds.y_train.numpy(), cfg.num_clients, cfg.dirichlet_alpha,
                                            cfg.inf_server_frac, cfg.seed)]
    per_epoch = sum(math.ceil(s / min(cfg.batch_size, s)) for s in sizes)

    model = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=0)
    xb, yb = ds.x_train[:cfg.batch_size], ds.y_train[:cfg.batch_size]
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
    flops = counter.get_total_flops()

    marks: list[float] = []
    stop = args.warmup + args.steps

    def clock(k: int, _model) -> None:
        if k == args.warmup or k == stop:
            marks.append(time.perf_counter())
        if k == stop:
            raise _Enough  # enough: the rest of the client's schedule is the same work

    one = InferenceClientSpec.from_config(cfg.replace(inf_local_epochs=max(1, math.ceil(stop / max(1, per_epoch)) + 1)))
    try:
        train_client(one, ds, 0, on_step=clock)
    except _Enough:
        pass
    step_s = (marks[1] - marks[0]) / args.steps
    t0 = time.perf_counter()
    client_probits(model, ds.x_test[:1000])
    query_s = (time.perf_counter() - t0) / 1000
    queries = len(ds.y_test) + round(cfg.inf_server_frac * len(ds.y_train))
    total_steps = per_epoch * cfg.inf_local_epochs
    seed_s = total_steps * step_s + cfg.num_clients * queries * query_s
    print(f"{cfg.model} on {cfg.dataset}, batch {cfg.batch_size}, augment {cfg.inf_augment}, {args.threads} thread(s): "
          f"{flops / 1e9:.1f} GFLOP per step (forward + backward, torch flop counter)")
    print(f"measured: {step_s:.3f} s per step over {args.steps} steps ({flops / step_s / 1e9:.1f} GFLOP/s); "
          f"probits {query_s * 1e3:.2f} ms per image")
    print(f"one setting: {cfg.num_clients} clients, {sizes and min(sizes)}..{max(sizes)} images each, "
          f"{per_epoch} steps per epoch in all, x {cfg.inf_local_epochs} epochs = {total_steps} steps "
          f"+ {cfg.num_clients} x {queries} probits")
    print(f"extrapolated: {seed_s / 60:.0f} CPU-min per seed, {args.seeds * seed_s / 3600:.1f} CPU-hours "
          f"for {args.seeds} seeds (training {total_steps * step_s / 60:.0f} min + probits "
          f"{cfg.num_clients * queries * query_s / 60:.1f} min per seed)")


if __name__ == "__main__":
    main()
