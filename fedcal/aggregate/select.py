"""Order-statistic means by selection networks: the coordinate-wise median and trimmed mean
without sorting every coordinate's n values.

``torch.sort`` / ``torch.kthvalue`` / ``torch.topk`` along the client axis of an (n, d)
update matrix copy every coordinate's n values out of their strided column and sort or
quick-select them one column at a time: ≈ 150 (sort) and ≈ 80 (kthvalue, topk, even on
cache-sized transposed blocks) times the cost of reading the matrix once at n = 50,
d = 1.1·10⁷ (``benchmarks/aggregation.py``). No library offers a fused "k-th value along a
strided axis" kernel for CPU, so this module writes one with numba:

* the columns are taken a cache-sized block at a time (≤ 512 KiB: it stays in a core's L2);
* a sorting network (Batcher's odd–even merge sort for n, pruned to the comparators whose
  outputs reach the two cut points x_(first) and x_(last−1)) is applied to the whole block,
  one comparator = a branch-free min/max over up to 2048 contiguous values, which the
  compiler vectorises;
* one more pass over the block's n values sums those strictly between the cut points, plus
  the copies of each cut point that the sorted order keeps (ties), in float64.

A network is data-independent, so every column costs the same (no quick-select worst case),
ties and ±inf need no special case, and the result is exact: the order statistics are the
sorted values themselves, and their float64 mean of float32 inputs is rounded once.

numba is the ``[fast]`` extra. Without it :func:`network_applies` is False and the callers
(:mod:`.median`, :mod:`.trimmed_mean`) take their torch sort, which gives the same results
(``tests/test_extras.py`` compares the two); only the speed differs.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import torch

from fedcal.extras import available, require

#: Largest n the network path takes; a network has O(n log² n) comparators, so beyond this a
#: sort (O(n log n) per column) is cheaper. Robust aggregation's n (clients per round) is far below.
MAX_NETWORK_N = 256
#: Below this many values the sort is already fast; the network path is for update-sized inputs.
MIN_NETWORK_NUMEL = 1 << 16
_BLOCK_BYTES = 1 << 19  # one block of columns (n × block values) stays inside a core's L2


def oddeven_merge_network(n: int) -> list[tuple[int, int]]:
    """Comparators (i, j), i < j, of Batcher's odd–even merge sort for n inputs (the network for
    the next power of two with every comparator touching an index ≥ n removed: those indices
    hold +inf padding, which no comparator moves)."""
    size = 1
    while size < n:
        size *= 2
    pairs = []
    p = 1
    while p < size:
        k = p
        while k >= 1:
            for j in range(k % p, size - k, 2 * k):
                for i in range(min(k, size - j - k)):
                    a, b = i + j, i + j + k
                    if a // (2 * p) == b // (2 * p) and b < n:
                        pairs.append((a, b))
            k //= 2
        p *= 2
    return pairs


@functools.lru_cache(maxsize=64)
def selection_network(n: int, first: int, last: int) -> tuple[np.ndarray, np.ndarray]:
    """The odd–even merge network for n pruned to what the order statistics at positions
    ``first`` and ``last`` − 1 depend on (walking the network backwards, a comparator is kept
    when it writes a needed position, and then both its inputs are needed). Returns the
    comparators as two int64 index arrays."""
    needed = {first, last - 1}
    kept = []
    for a, b in reversed(oddeven_merge_network(n)):
        if a in needed or b in needed:
            kept.append((a, b))
            needed.update((a, b))
    kept.reverse()
    lo = np.array([a for a, _ in kept], dtype=np.int64)
    hi = np.array([b for _, b in kept], dtype=np.int64)
    return lo, hi


@functools.lru_cache(maxsize=1)
def _kernel():
    # Imported and compiled on first use (≈ 2 s, then cached on disk next to this module).
    numba = require("numba", "fast")

    @numba.njit(parallel=True, cache=True)
    def order_mean(x, lo, hi, first, last, block):  # pragma: no cover - compiled
        # Per column: L = x_(first), H = x_(last−1) by the network; the kept values are those
        # strictly between L and H, plus (#{v ≤ L} − first) copies of L and (last − #{v < H})
        # copies of H (ties at the cut points), summed in float64.
        n, d = x.shape
        out = np.empty(d, dtype=np.float64)
        count = last - first
        for bi in numba.prange((d + block - 1) // block):
            start = bi * block
            width = min(d, start + block) - start
            buf = np.empty((n, block), dtype=x.dtype)
            for r in range(n):
                for c in range(width):
                    buf[r, c] = x[r, start + c]
            for p in range(lo.shape[0]):
                i = lo[p]
                j = hi[p]
                for c in range(width):
                    a = buf[i, c]
                    b = buf[j, c]
                    buf[i, c] = min(a, b)
                    buf[j, c] = max(a, b)
            if count <= 2:  # a median: the network put both order statistics in place
                for c in range(width):
                    low = np.float64(buf[first, c])
                    high = np.float64(buf[last - 1, c])
                    out[start + c] = low if low == high else (low + high) / count
                continue
            acc = np.zeros(block, dtype=np.float64)
            n_le = np.zeros(block, dtype=np.int32)
            n_lt = np.zeros(block, dtype=np.int32)
            for r in range(n):
                for c in range(width):
                    v = buf[r, c]
                    low = buf[first, c]
                    high = buf[last - 1, c]
                    acc[c] += v if (v > low) & (v < high) else 0.0
                    n_le[c] += v <= low
                    n_lt[c] += v < high
            for c in range(width):
                low = buf[first, c]
                high = buf[last - 1, c]
                if low == high:
                    out[start + c] = low
                else:
                    out[start + c] = (acc[c] + low * (n_le[c] - first) + high * (last - n_lt[c])) / count
        return out

    return numba, order_mean


def network_applies(x: torch.Tensor) -> bool:
    """Whether :func:`order_statistic_mean` takes the network path for ``x`` (moved to (n, …)):
    a CPU float32/float64 tensor without autograd, 2 ≤ n ≤ MAX_NETWORK_N, at least
    MIN_NETWORK_NUMEL values, not disabled by ``FEDCAL_SORT_ONLY=1``, numba installed (``[fast]``)."""
    return (x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and not x.requires_grad
            and 2 <= x.shape[0] <= MAX_NETWORK_N and x.numel() >= MIN_NETWORK_NUMEL
            and os.environ.get("FEDCAL_SORT_ONLY", "") != "1" and available("numba"))


def network_order_mean(x: torch.Tensor, first: int, last: int) -> torch.Tensor:
    """Mean of the order statistics first..last−1 (0-based, ascending) along axis 0 of the
    NaN-free ``x`` of shape (n, …), by the selection network; float64, shape x.shape[1:]."""
    n = x.shape[0]
    if not 0 <= first < last <= n:
        raise ValueError(f"order statistics {first}..{last - 1} are not within 0..{n - 1}")
    numba, kernel = _kernel()
    lo, hi = selection_network(n, first, last)
    flat = x.detach().reshape(n, -1).contiguous().numpy()
    # Threads follow torch's setting (a sweep worker or a Ray actor with one thread stays on one).
    threads = torch.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    block = max(128, min(2048, _BLOCK_BYTES // (n * flat.itemsize)))
    try:
        out = kernel(flat, lo, hi, first, last, block)
    finally:
        # numba's OpenMP threading layer, started by the kernel's first launch, sets the process's
        # OpenMP thread count to NUMBA_NUM_THREADS (every core), which torch shares: a one-thread
        # sweep worker would then train on every core beside its siblings — measured 6× slower
        # local training in a 2-job MNIST sweep on 2 cores. Give torch its own setting back.
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
    return torch.from_numpy(out).reshape(x.shape[1:])


def order_statistic_mean(x: torch.Tensor, dim: int, first: int, last: int,
                         nan_free: bool = False) -> torch.Tensor | None:
    """Mean of the order statistics first..last−1 along ``dim`` in ``x``'s dtype by the network,
    or None where the caller's sort must do it: the network does not apply
    (:func:`network_applies`), ``x`` holds NaN (a sort's NaN placement is the reference
    semantics), or a float64 sum overflowed (the caller's overflow-free fallback handles it)."""
    moved = x.movedim(dim, 0) if x.ndim else x
    if x.ndim < 2 or not network_applies(moved):
        return None
    if not nan_free and bool(torch.isnan(x).any()):
        return None
    out = network_order_mean(moved, first, last)
    if x.dtype == torch.float64 and not bool(torch.isfinite(out).all()):
        return None
    return out.to(x.dtype)
