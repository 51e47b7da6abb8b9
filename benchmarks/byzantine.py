"""Time of the Byzantine attacks and pre-aggregation steps for n clients × d parameters, against
baselines measured in the same run on the same inputs:

* ByzFL's implementations (``pip install byzfl``; skipped when not installed — it is not a
  fedcal dependency): NNM, Bucketing, Clipping, ARC, ALittleIsEnough, InnerProductManipulation;
* for the searches, the same search checking every candidate on the (n, d) rows, as the
  reference code does: Min-Max's γ (the largest honest-to-attack squared distance recomputed for
  every γ) and Fang's Krum λ (fedcal's Krum re-run on the stacked rows for every λ), against
  fedcal's expansion of the distances once (each candidate then costs O(n), resp. O(n²)).

``÷base`` is fedcal's time over its baseline's. Before timing, each pair is checked to compute
the same thing (ByzFL's: to float tolerance, bucketing on the same permutation; the searches:
the same γ / λ); a mismatch stops the benchmark.

    python benchmarks/byzantine.py                      # n ∈ {10, 25}, d ∈ {1e5, 5e5}
    python benchmarks/byzantine.py --n 25 --d 100000    # a subset
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from functools import partial

import torch

from fedcal import aggregate as agg
from fedcal import attacks
from fedcal.attacks.minmax import largest_gamma, min_max_gamma, perturbation


def best_of(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _byzfl():
    try:
        import byzfl
    except ImportError:
        return None
    return byzfl


def min_max_gamma_direct(honest: torch.Tensor, direction: str = "unit", tol: float = 1e-5) -> float:
    """Min-Max's γ by the same search, each candidate's distances computed on the (n, d) rows."""
    mean, p = honest.mean(dim=0), perturbation(honest, direction)
    bound = float(agg.pairwise_sq_distances(honest).max())
    return largest_gamma(lambda g: float(((mean - g * p) - honest).double().pow(2).sum(1).max()) <= bound, tol=tol)


def fang_krum_direct(honest: torch.Tensor, f: int) -> torch.Tensor:
    """Fang's Krum attack with fedcal's Krum re-run on the stacked (n_h + f, d) rows for every λ."""
    from fedcal.attacks.fang import LAMBDA_THRESHOLD, fang_krum_lambda_max

    s = torch.sign(honest.mean(dim=0))
    lam = fang_krum_lambda_max(honest, f)
    while lam >= LAMBDA_THRESHOLD:
        bad = (-lam * s.double()).to(honest.dtype)
        rows = torch.cat([honest, bad.expand(f, -1)])
        if int(agg.multikrum_select(rows, f, m=1)[0]) >= honest.shape[0]:
            break
        lam *= 0.5
    return (-lam * s.double()).to(honest.dtype).expand(f, -1).clone()


NOTES: list[str] = []


def nnm_check(x: torch.Tensor, f: int):
    """fedcal's NNM equals ByzFL's, except on rows where ByzFL's float32 ``torch.cdist`` orders a
    near-tie of the (n − f)-th and (n − f + 1)-th neighbour wrongly: there fedcal's row must be
    the mean of the exact (float64) nearest neighbours. Such rows are counted in a note."""
    def check(ours: torch.Tensor, theirs: torch.Tensor) -> None:
        differ = ((ours - theirs).abs().amax(dim=1) > 1e-5).nonzero().flatten().tolist()
        x64 = x.double()
        for i in differ:
            exact = torch.argsort(((x64 - x64[i]) ** 2).sum(dim=1), stable=True)[: x.shape[0] - f]
            torch.testing.assert_close(ours[i].double(), x64[exact].mean(dim=0), rtol=1e-5, atol=1e-6)
        if differ:
            NOTES.append(f"n = {x.shape[0]}, d = {x.shape[1]:.0e}: ByzFL's NNM (float32 cdist) took another "
                         f"neighbour than the exact one on {len(differ)} of {x.shape[0]} rows; fedcal's rows "
                         f"equal the exact (float64) neighbour means")
    return check


def same_gamma(a: float, b: float) -> None:
    # the two searches visit the same candidates; rounding may only flip one within the tolerance
    assert abs(a - b) <= 2e-5, f"Min-Max's γ differs: {a} (expanded) vs {b} (on the rows)"


def pairs(n: int, x: torch.Tensor, f: int) -> list[tuple[str, object, object, object]]:
    """(name, fedcal, baseline or None, check(fedcal_out, base_out)) for one input."""
    close = lambda a, b: torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)  # noqa: E731
    byzfl = _byzfl()
    rows: list[tuple[str, object, object, object]] = []

    def add(name, ours, theirs, check=close):
        rows.append((name, ours, theirs, check))

    def seeded(fn):  # bucketing: ByzFL draws from the global generator, fedcal from its own
        def run():
            torch.manual_seed(0)
            return fn()
        return run

    if byzfl is not None:
        add("nnm", partial(agg.nnm, x, f), partial(byzfl.NNM(f), x), nnm_check(x, f))
        add("bucketing (s=2)", partial(agg.bucketing, x, 2, generator=torch.Generator().manual_seed(0)),
            seeded(partial(byzfl.Bucketing(2), x)))
        add("static_clip", partial(agg.static_clip, x, 1.0), lambda: byzfl.Clipping(1.0)(x.clone()))
        add("arc", partial(agg.arc, x, f), lambda: byzfl.ARC(f)(x.clone()))
        add("alie", lambda: attacks.alie(x, f, z=1.0)[0], partial(byzfl.ALittleIsEnough(tau=-1.0), x))
        add("ipm", lambda: attacks.ipm(x, f, epsilon=0.5)[0], partial(byzfl.InnerProductManipulation(tau=0.5), x))
    else:
        for name, fn in (("nnm", partial(agg.nnm, x, f)), ("static_clip", partial(agg.static_clip, x, 1.0)),
                         ("arc", partial(agg.arc, x, f)), ("alie", lambda: attacks.alie(x, f, z=1.0))):
            add(name, fn, None)
    add("centered_clip (L=3)", partial(agg.centered_clip, x, 1.0, 3), None)
    add("min_max γ", partial(min_max_gamma, x), partial(min_max_gamma_direct, x), same_gamma)
    add("fang_krum", partial(attacks.fang_krum, x, f), partial(fang_krum_direct, x, f), close)
    add("fang_trimmed_mean", partial(attacks.fang_trimmed_mean, x, f, generator=torch.Generator().manual_seed(0)), None)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[10, 25])
    ap.add_argument("--d", type=float, nargs="+", default=[1e5, 5e5])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    byzfl = _byzfl()
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, cpu ({os.cpu_count()} cores, load average "
          f"{load} at start); best of {args.repeat}, seconds "
          f"(÷base = fedcal's time / its baseline's: ByzFL's, or the search checking candidates on the rows)"
          f"{'' if byzfl else '; byzfl not installed'}")
    header = f"{'n':>4} {'d':>10} {'step':<22}{'fedcal':>10}{'baseline':>10}{'÷base':>8}"
    print(header)
    print("-" * len(header))
    for d in (int(v) for v in args.d):
        for n in args.n:
            x = torch.randn(n, d, generator=torch.Generator().manual_seed(n)) * 0.01 + 0.001
            f = max(1, n // 5)
            for name, ours, theirs, check in pairs(n, x, f):
                if theirs is not None:
                    check(ours(), theirs())  # the same computation, else stop
                t_ours = best_of(ours, args.repeat)
                if theirs is None:
                    print(f"{n:>4} {d:>10.2e} {name:<22}{t_ours:>10.4f}")
                    continue
                t_base = best_of(theirs, args.repeat)
                print(f"{n:>4} {d:>10.2e} {name:<22}{t_ours:>10.4f}{t_base:>10.4f}{t_ours / t_base:>8.2f}")
            del x
            gc.collect()
    for note in NOTES:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
