"""Flower's log, quieted for fedcal's engines (its own module: the engine and the batched engine
both use it, and the engine dispatches to the batched engine)."""

from __future__ import annotations

import contextlib
import logging


@contextlib.contextmanager
def quiet_flower(verbose: bool):
    """Flower logs every round at INFO; keep warnings/errors unless asked for more."""
    logger = logging.getLogger("flwr")
    old = logger.level
    drop = DropDeprecation()
    if not verbose:
        logger.setLevel(logging.WARNING)
        logger.addFilter(drop)
    try:
        yield
    finally:
        logger.setLevel(old)
        logger.removeFilter(drop)


class DropDeprecation(logging.Filter):
    # run_simulation (deprecated; fedcal.app.flower_private says why it is still used) is the
    # pinned Flower's in-process entry to its Simulation Engine; its
    # deprecation banner, and the notice that fedcal evaluates centrally (fraction_evaluate=0),
    # are noise for fedcal users.
    NOISE = ("DEPRECATED FEATURE", "Federated evaluation will be skipped")

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(n in msg for n in self.NOISE)
