"""Pre-aggregation pipelines: (n, d) → (n', d) steps run before a rule, composed into one rule."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ._checks import _check_finite, _check_updates

PreStep = Callable[[torch.Tensor], torch.Tensor]


def _step_name(step) -> str:
    func = getattr(step, "func", step)  # functools.partial → the function it wraps
    return getattr(func, "__name__", type(step).__name__)


def pre_aggregate(updates: torch.Tensor, steps: Sequence[PreStep]) -> torch.Tensor:
    """Apply the pre-aggregation ``steps`` in order, each an (n, d) → (n', d) function of the
    updates alone (bind its hyper-parameters first, e.g. ``functools.partial(nnm, f=2)``).

    The input is validated once as the rules validate theirs (2-D, n ≥ 1, finite); every step's
    output is checked to be a 2-D tensor with the same d, at least one row and only finite
    values, so a faulty step fails here, naming itself, instead of inside the rule after it."""
    x = _check_updates(updates)
    d = x.shape[1]
    for step in steps:
        y = step(x)
        name = _step_name(step)
        if not isinstance(y, torch.Tensor) or y.ndim != 2 or y.shape[1] != d or y.shape[0] == 0:
            shape = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
            raise ValueError(f"pre-aggregation step {name} must return an (n', {d}) tensor with n' ≥ 1, got {shape}")
        _check_finite(y, f"the output of pre-aggregation step {name}")
        x = y
    return x


def compose(steps: Sequence[PreStep], rule: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The rule ``rule`` applied after the pre-aggregation ``steps``:
    ``compose(steps, rule)(updates, **kw) = rule(pre_aggregate(updates, steps), **kw)``.

    Keyword arguments go to the rule. Per-client ``weights`` (data sizes) only make sense while
    the rows are still the clients': a step that changes the number of rows (bucketing) makes
    them meaningless, and that is refused with a ValueError rather than silently re-paired.

    >>> from functools import partial
    >>> from fedcal.aggregate import nnm, trimmed_mean
    >>> rule = compose([partial(nnm, f=1)], partial(trimmed_mean, f=1))
    >>> rule(torch.tensor([[0.0], [1.0], [2.0], [10.0]]))
    tensor([1.])
    """
    steps = tuple(steps)
    names = [_step_name(s) for s in steps]

    def composed(updates: torch.Tensor, **kwargs) -> torch.Tensor:
        updates = _check_updates(updates)
        n = updates.shape[0]
        x = pre_aggregate(updates, steps)
        if kwargs.get("weights") is not None and x.shape[0] != n:
            raise ValueError(f"weights: pre-aggregation ({' → '.join(names)}) turned the {n} client updates "
                             f"into {x.shape[0]} rows, so per-client weights no longer apply; pass weights=None")
        return rule(x, **kwargs)

    composed.__name__ = " → ".join(names + [_step_name(rule)])
    composed.__doc__ = f"{composed.__name__}: :func:`fedcal.aggregate.compose` of {names} and {_step_name(rule)}."
    return composed
