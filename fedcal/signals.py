"""SIGTERM as an exception, so that a terminated process ends like an interrupted one.

Python turns SIGINT into ``KeyboardInterrupt`` but lets SIGTERM kill the process on the spot:
a run's ``run.log`` would then not say that it was stopped, its lock would only go with the
process, and a sweep's pool workers (which do not get the signal) would keep starting cells.
:func:`sigterm_raises` makes SIGTERM raise :class:`Terminated` in the main thread instead, so
``finally`` blocks and :meth:`fedcal.results.RunStore.session` run: the run logs
``failed: terminated`` and releases its lock, a sweep stops its workers.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

#: exit status of a command ended by SIGTERM (the shell's 128 + 15)
EXIT_TERMINATED = 143


class Terminated(BaseException):
    """The process received SIGTERM (a BaseException, like ``KeyboardInterrupt``: ``except
    Exception`` blocks that keep a sweep going past one failed cell do not swallow it)."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(f"signal {signum}")
        self.signum = signum


def _raise(signum, frame) -> None:  # noqa: ARG001 — the signal module's handler signature
    raise Terminated(signum)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread; the previous
    handler is put back afterwards. Outside the main thread (where Python cannot install
    handlers) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def die_with_parent(signum: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send this process ``signum`` when its parent dies (Linux's
    ``PR_SET_PDEATHSIG``), so a worker never outlives the command that started it, even one
    killed with SIGKILL. Returns whether it could (False elsewhere than Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
