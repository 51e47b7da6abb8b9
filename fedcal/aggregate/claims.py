"""Claimed data sizes under a robust rule (flwr-free).

A reply's data size (Flower's ``num-examples``) is what its client *says*: nothing on the server
can check it. FedAvg weighs replies by it, as McMahan et al. and Flower do; a robust rule must not,
or one Byzantine client claiming 1e30 examples owns the weighted geometric median, the weighted
mean of Krum's selection or of CalGuard's kept replies — a minority that buys a majority. The
robust strategies therefore either ignore the claims (the literature's unweighted rules) or weigh
by :func:`cap_at_median` of them.
"""

from __future__ import annotations

import torch


def cap_at_median(sizes: torch.Tensor) -> torch.Tensor:
    """Claimed data sizes, each capped at the round's median claim: w_k = min(s_k, s_med), where
    s_med is the median of the n claims (for even n the lower of the two middle values: the
    smaller cap). Returned in float64.

    Why the median: a minority of f < n/2 clients cannot move it outside the honest claims (at
    least one honest claim lies at or above it and at least one at or below), so a liar's weight
    is at most what a median honest client weighs, whatever it claims; claims up to the median —
    half the replies or more — keep their exact data-size weighting. Capping is done on the claims
    themselves (before any rescaling of them into float32's range), so a 1e308 claim cannot push the
    honest weights to zero.

    >>> cap_at_median(torch.tensor([10.0, 20.0, 30.0, 1e30]))
    tensor([10., 20., 20., 20.], dtype=torch.float64)
    """
    sizes = torch.as_tensor(sizes, dtype=torch.float64)
    if sizes.ndim != 1:
        raise ValueError(f"sizes must be a 1-D tensor of claimed data sizes, got shape {tuple(sizes.shape)}")
    if not sizes.numel():
        return sizes
    return torch.minimum(sizes, torch.median(sizes))
