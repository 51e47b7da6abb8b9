"""The selection-network median and trimmed mean equal the sorting ones (fedcal.aggregate.select)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from fedcal import aggregate as agg
from fedcal.aggregate import select

D = select.MIN_NETWORK_NUMEL + 37  # large enough for the network path, not a multiple of a block


def sort_reference(x: torch.Tensor, first: int, last: int) -> torch.Tensor:
    """Independent reference: sort each column, average positions first..last−1 in float64."""
    return torch.sort(x.double(), dim=0).values[first:last].mean(dim=0)


@pytest.mark.parametrize("n", [3, 8, 17])
def test_network_sorts_every_zero_one_input(n):
    # 0–1 principle: a comparator network sorts every input iff it sorts every 0/1 input.
    pairs = select.oddeven_merge_network(n)
    for bits in itertools.product((0, 1), repeat=n):
        v = list(bits)
        for a, b in pairs:
            if v[a] > v[b]:
                v[a], v[b] = v[b], v[a]
        assert v == sorted(bits)


def test_pruned_network_is_smaller_and_still_selects():
    lo, hi = select.selection_network(50, 24, 26)
    assert len(lo) < len(select.oddeven_merge_network(50))
    rng = np.random.default_rng(0)
    for _ in range(200):
        v = rng.standard_normal(50)
        w = v.copy()
        for a, b in zip(lo, hi):
            if w[a] > w[b]:
                w[a], w[b] = w[b], w[a]
        s = np.sort(v)
        assert w[24] == s[24] and w[25] == s[25]


def _inputs(n: int, dtype: torch.dtype):
    g = torch.Generator().manual_seed(n)
    yield "gaussian", torch.randn(n, D, generator=g, dtype=dtype)
    yield "ties", torch.randint(-2, 3, (n, D), generator=g).to(dtype)
    x = torch.randn(n, D, generator=g, dtype=dtype)
    x[0, :64] = torch.finfo(dtype).max  # NaN-free extremes: the largest finite values ...
    x[-1, 32:96] = -torch.finfo(dtype).max
    x[:, 200] = 1e-30  # ... and a column of one repeated value
    x[: n // 2, 300] = 1e30  # a Byzantine half
    yield "extremes", x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [2, 3, 4, 5, 16, 17, 50, 51])
def test_network_equals_sort(n, dtype):
    for name, x in _inputs(n, dtype):
        assert select.network_applies(x)
        med = agg.coordinate_median(x)
        lo, hi = torch.sort(x, dim=0).values[[(n - 1) // 2, n // 2]]
        ref = (0.5 * lo.double() + 0.5 * hi.double()).to(dtype)  # true median, rounded once
        assert torch.equal(med, ref), name
        for f in sorted({1, n // 4, (n - 1) // 2}):
            if n <= 2 * f:
                continue
            got = agg.trimmed_mean(x, f)
            want = sort_reference(x, f, n - f)
            assert got.dtype == dtype
            # float64 sums of at most n values: within a few float64 ulps of the column's scale,
            # then rounded once to dtype
            scale = x.double().abs().amax(dim=0)
            assert bool(((got.double() - want).abs() <= 4 * torch.finfo(dtype).eps * scale).all()), (name, f)


def test_network_matches_sort_path_bit_for_bit_on_median(monkeypatch):
    x = torch.randn(17, D, generator=torch.Generator().manual_seed(3))
    fast = agg.coordinate_median(x)
    monkeypatch.setenv("FEDCAL_SORT_ONLY", "1")
    assert not select.network_applies(x)
    assert torch.equal(fast, agg.coordinate_median(x))


def test_infinities_and_nan_follow_the_sort_semantics(monkeypatch):
    x = torch.randn(6, D, generator=torch.Generator().manual_seed(4))
    x[0, :10] = float("inf")
    x[1, 5:15] = -float("inf")
    x[:3, 20] = float("inf")
    x[3:, 21] = -float("inf")
    fast_med, fast_tm = agg.true_median(x), agg.trimmed_mean_along(x, 1)
    monkeypatch.setenv("FEDCAL_SORT_ONLY", "1")
    slow_med, slow_tm = agg.true_median(x), agg.trimmed_mean_along(x, 1)
    torch.testing.assert_close(fast_med, slow_med, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(fast_tm, slow_tm, equal_nan=True, rtol=1e-6, atol=1e-6)
    # by hand: three +inf among six values put +inf inside the kept middle; three -inf likewise
    assert fast_med[20] == fast_tm[20] == float("inf")
    assert fast_med[21] == fast_tm[21] == -float("inf")
    monkeypatch.delenv("FEDCAL_SORT_ONLY")
    x[2, 7] = float("nan")  # NaN: the network declines, the sort decides (true_median has no check)
    assert select.order_statistic_mean(x, 0, 2, 4) is None


def test_other_axes_and_autograd_take_the_right_path():
    x = torch.randn(4, 9, D // 8, generator=torch.Generator().manual_seed(5))
    ref = torch.sort(x, dim=1).values[:, 2:7].double().mean(dim=1)
    got = agg.trimmed_mean_along(x, 2, dim=1)
    assert got.shape == (4, D // 8)
    assert torch.allclose(got.double(), ref, rtol=0, atol=1e-6)
    leaf = x.clone().requires_grad_(True)
    assert select.order_statistic_mean(leaf, 1, 2, 7) is None  # autograd keeps the sort
    agg.trimmed_mean_along(leaf, 2, dim=1).sum().backward()
    assert leaf.grad is not None


def test_small_inputs_and_bad_ranges():
    small = torch.randn(5, 10)
    assert not select.network_applies(small)
    with pytest.raises(ValueError, match="order statistics"):
        select.network_order_mean(torch.randn(5, D), 3, 9)


def test_the_kernel_leaves_torchs_thread_count_alone():
    """numba's OpenMP layer, started by the first kernel launch, sets the OpenMP thread count
    torch shares to NUMBA_NUM_THREADS: a one-thread sweep worker would train on every core after
    its first median. A fresh process (the layer starts once per process) with torch on one thread
    and numba allowed two must still have torch on one thread after a network median."""
    import os
    import subprocess
    import sys

    pytest.importorskip("numba")
    code = ("import torch; torch.set_num_threads(1)\n"
            "from fedcal.aggregate import select\n"
            f"x = torch.randn(10, {D})\n"
            "assert select.network_applies(x)\n"
            "select.network_order_mean(x, 4, 6)\n"
            "print(torch.get_num_threads())\n")
    env = {**os.environ, "NUMBA_NUM_THREADS": "2", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "1"
