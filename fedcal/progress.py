"""Progress of a run's long phases, with a time estimate (flwr-free).

A run is a sequence of phases — the rounds of a federation; for robust inference the clients'
local training, the probit queries, the DeepSet's epochs and the attacks; the pretraining of a
small backbone or language model — each with a number of steps. Code that runs a phase says so::

    with phase("DeepSet training", total=epochs, unit="epochs") as p:
        for _ in range(epochs):
            ...
            p.update()

and whoever started the run decides where that goes, by installing a reporter
(:func:`reporting`): the ``fedcal`` commands show a tqdm bar per phase (:func:`tqdm_reporter`),
the ServerApp under ``flwr run`` or on a SuperLink writes lines to Flower's log
(:func:`log_reporter`, given Flower's ``log``: this module never imports flwr). With no reporter
installed a phase costs one attribute lookup per step.

The log reporter is rate-limited so that short phases stay quiet and a long one is never silent
for more than :data:`LOG_EVERY_S` seconds: a line at most every ``LOG_EVERY_S`` seconds while the
phase runs (the first after ``LOG_EVERY_S`` seconds), and a closing line for a phase that printed
any. Each line says the phase, ``done/total unit``, the elapsed time and the estimate of the time
left: elapsed × (total − done) / done, the mean pace so far (tqdm's own estimate, smoothing aside).

The reporter is process-wide (a module global, not a context variable): Flower's simulation runs
the ServerApp in a thread of its own, which a context variable set by the caller would not reach.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar

T = TypeVar("T")

#: the longest a long phase stays silent in the log (seconds)
LOG_EVERY_S = 20.0


class Handle(Protocol):
    """What a reporter returns for one phase: told of every step, then closed."""

    def update(self, n: int, note: str) -> None: ...

    def close(self) -> None: ...


Reporter = Callable[[str, "int | None", str], Handle]  # (phase, total, unit) -> handle

_lock = threading.Lock()
_reporter: Reporter | None = None


class Phase:
    """One running phase (see :func:`phase`): :meth:`update` after each step."""

    def __init__(self, handle: Handle | None):
        self._handle = handle

    def update(self, n: int = 1, note: str = "") -> None:
        """``n`` more steps done; ``note`` (e.g. a metric of the last step) is shown beside the count."""
        if self._handle is not None:
            self._handle.update(n, note)


@contextmanager
def phase(name: str, total: int | None = None, unit: str = "steps") -> Iterator[Phase]:
    """Report the phase ``name`` of ``total`` steps (None: unknown; ``unit`` their plural name, as
    a line shows it: ``5/17 clients``) to the installed reporter."""
    reporter = _reporter
    handle = reporter(name, total, unit) if reporter is not None else None
    try:
        yield Phase(handle)
    finally:
        if handle is not None:
            handle.close()


def steps(iterable: Iterable[T], name: str, total: int | None, unit: str = "steps") -> Iterator[T]:
    """``iterable``'s items, each a step of the phase ``name`` (:func:`phase`): a training loop's
    ``for batch in steps(batches, "backbone pretraining", n):``."""
    with phase(name, total, unit) as bar:
        for item in iterable:
            yield item
            bar.update(1)


@contextmanager
def reporting(reporter: Reporter | None) -> Iterator[None]:
    """Install ``reporter`` for the phases run inside the block (the previous one is restored)."""
    global _reporter
    with _lock:
        previous, _reporter = _reporter, reporter
    try:
        yield
    finally:
        with _lock:
            _reporter = previous


def clock_text(seconds: float) -> str:
    """``1:05`` / ``1:02:03``: a duration as a reader takes it in."""
    s = int(round(max(seconds, 0.0)))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def estimate_left(elapsed: float, done: int, total: int | None) -> float | None:
    """Seconds left at the mean pace so far: elapsed · (total − done) / done (None before the first
    step or without a total)."""
    if not total or done <= 0:
        return None
    return elapsed * max(total - done, 0) / done


class _LogHandle:
    def __init__(self, write: Callable[[str], None], prefix: str, name: str, total: int | None, unit: str,
                 every: float, clock: Callable[[], float]):
        self.write, self.name, self.total, self.unit, self.every, self.clock = write, name, total, unit, every, clock
        self.prefix = prefix
        self.start = self.last = clock()
        self.done, self.note, self.printed = 0, "", False

    def _line(self, closing: bool) -> str:
        elapsed = self.clock() - self.start
        count = f"{self.done}/{self.total}" if self.total else str(self.done)
        left = estimate_left(elapsed, self.done, self.total)
        when = f"{clock_text(elapsed)} elapsed"
        if not closing and left is not None:
            when += f", about {clock_text(left)} left"
        note = f"; {self.note}" if self.note else ""
        return f"{self.prefix}{self.name}: {count} {self.unit}{' done' if closing else ''}, {when}{note}"

    def update(self, n: int, note: str) -> None:
        self.done += n
        self.note = note or self.note
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            self.printed = True
            self.write(self._line(False))

    def close(self) -> None:
        if self.printed:
            self.write(self._line(True))


class _LogReporter:
    def __init__(self, write: Callable[[str], None], prefix: str, every: float | None, clock: Callable[[], float]):
        self.write, self.prefix, self.every, self.clock = write, prefix, every, clock

    def __call__(self, name: str, total: int | None, unit: str) -> _LogHandle:
        return _LogHandle(self.write, self.prefix, name, total, unit,
                          LOG_EVERY_S if self.every is None else self.every, self.clock)


def log_reporter(write: Callable[[str], None], prefix: str = "", every: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> Reporter:
    """A reporter writing lines such as ``inference: client training: 5/17 clients, 0:42 elapsed,
    about 1:41 left`` with ``write`` (e.g. ``lambda line: log(INFO, "%s", line)``), at most every
    ``every`` seconds per phase (default :data:`LOG_EVERY_S`) and a closing line for a phase that
    wrote any. :func:`notice` lines go through ``write`` too."""
    return _LogReporter(write, prefix, every, clock)


class _TqdmHandle:
    def __init__(self, bar):
        self.bar = bar

    def update(self, n: int, note: str) -> None:
        if note:
            self.bar.set_postfix_str(note, refresh=False)
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal, where tqdm redraws its bars in place. Elsewhere (stderr
    redirected to a file, a CI or batch job's log) a bar under another one is drawn with
    cursor-movement escape codes that stay in the log as ``^[[A``."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


def bar_fits() -> bool:
    """Whether a new tqdm bar can be drawn cleanly: always on a terminal; elsewhere only when no
    other bar is open (a second one is positioned with escape codes)."""
    if stderr_is_terminal():
        return True
    from tqdm import tqdm

    return len(tqdm._instances) == 0


def write_above_bars(line: str) -> None:
    """Write ``line`` on stderr above any open tqdm bar (which is redrawn below it)."""
    from tqdm.auto import tqdm

    tqdm.write(line, file=sys.stderr)


class _TqdmReporter:
    def __init__(self, prefix: str):
        self.prefix = prefix

    def __call__(self, name: str, total: int | None, unit: str) -> _TqdmHandle:
        from tqdm.auto import tqdm

        return _TqdmHandle(tqdm(total=total, desc=f"{self.prefix}{name}", unit=unit, leave=False))

    @staticmethod
    def write(line: str) -> None:
        write_above_bars(line)


def tqdm_reporter(prefix: str = "") -> Reporter:
    """A reporter showing one tqdm bar per phase (its count, rate and time left), removed when the
    phase ends, when such a bar fits (:func:`bar_fits`: a phase's bar sits under its run's, so on a
    terminal); else the phases as rate-limited lines (:func:`log_reporter`) written above the open
    bar, so a log file holds no escape codes."""
    if not bar_fits():
        return log_reporter(write_above_bars, prefix)
    return _TqdmReporter(prefix)


def notice(text: str, logger: logging.Logger) -> None:
    """Say ``text``, one line of information (a run resumed from its checkpoint), where the installed
    reporter writes: above the progress bars in a ``fedcal`` command (never through one), in
    Flower's log under ``flwr run``, on a sweep worker's stderr. With no reporter installed it is
    a warning of ``logger`` (the ``fedcal`` command prints those as one line)."""
    write = getattr(_reporter, "write", None)
    if write is None:
        logger.warning("%s", text)
    else:
        write(text)


#: the metrics a round's progress line shows, per task (the first present of each pair is shown)
_ROUND_METRICS = (("accuracy", "accuracy {:.1%}"), ("sece", "sECE {:+.2%}"), ("ca", "CA {:.1%}"),
                  ("asr", "ASR {:.1%}"), ("map50", "mAP@0.5 {:.3f}"))


def round_note(metrics: dict) -> str:
    """What a round's progress line says of its metrics: ``accuracy 91.2%, sECE +1.30%`` (an
    evaluated round of the train task), ``CA 84.0%, ASR 12.5%`` (distill), ``mAP@0.5 0.412`` (detect);
    "" for a round that evaluated nothing."""
    return ", ".join(fmt.format(float(metrics[k])) for k, fmt in _ROUND_METRICS if k in metrics)
