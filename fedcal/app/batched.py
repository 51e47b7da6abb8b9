"""Engine ``batched``: the train task's runs of one round protocol trained as one ``torch.func``
computation (:mod:`fedcal.tasks.train_batched` computes them; this is the engines' entry to it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fedcal.app.quiet import quiet_flower
from fedcal.config import RunConfig
from fedcal.results import RunFailed
from fedcal.tasks import train_batched
from fedcal.tasks.train_batched import batched_unsupported, group_key

__all__ = ["batched_unsupported", "group_key", "run_batched", "simulate_batched"]


def run_batched(configs: Sequence[RunConfig], on_done: Callable[[RunConfig, str | None], None] | None = None
                ) -> dict[str, str]:
    """:func:`fedcal.tasks.train_batched.run_batched` with Flower's log quieted (the strategies log
    Flower's notices); {run dir: error} of the runs that failed."""
    with quiet_flower(False):
        return train_batched.run_batched(configs, on_done)


def simulate_batched(cfg: RunConfig) -> None:
    """``fedcal run engine=batched`` of one config (an unsupported one raises, naming why)."""
    why = batched_unsupported(cfg)
    if why:
        raise RunFailed(f"engine=batched cannot run this config: {why}; use engine=inprocess")
    failures = run_batched([cfg])
    if failures:
        raise RunFailed(next(iter(failures.values())))
