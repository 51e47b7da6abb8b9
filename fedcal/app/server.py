"""The one ServerApp of the Flower App (``[tool.flwr.app.components] serverapp``).

It parses Flower's run config once into a :class:`fedcal.config.RunConfig` and hands the grid
to the server side of the task the config names (``task``), through the task registry
(:mod:`fedcal.tasks`). It knows no task by name.
"""

from __future__ import annotations

from contextlib import nullcontext
from logging import ERROR, INFO, WARNING
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from fedcal.app.cluster import PlacementGrid
from fedcal.config import ConfigError, RunConfig
from fedcal.progress import log_reporter, phase, reporting, round_note
from fedcal.results import run_dir_for
from fedcal.tasks import ProgressFn, get_task, preflight

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point for ``flwr run`` and deployments: the config comes from Flower's run config.

    Progress goes to Flower's log, where ``flwr run`` (``--stream``, ``flwr log``) and a SuperLink's
    log show it: the rounds, and every long phase of a task (:mod:`fedcal.progress`), at most
    :data:`fedcal.progress.LOG_EVERY_S` seconds apart with the time left.

    A run that cannot go on for a reason fedcal names — a bad run config, a dataset that is not
    there, a missing extra, a federation of another size than ``num-clients`` (the nodes are waited
    for :data:`fedcal.tasks.nodes.NODE_WAIT_S` seconds) — ends with ONE error line in that log, and
    its run directory says ``failed: <reason>`` to ``fedcal runs`` (``flwr run`` exits 0 either way)."""
    from fedcal.extras import MissingExtraError
    from fedcal.results import RunFailed

    try:
        cfg = RunConfig.from_flower(context.run_config)
    except ConfigError as exc:  # no config, so no run directory to say it in
        log(ERROR, "fedcal: error: %s", _one_line(exc))
        return
    run_dir = announce_run_dir(cfg)
    try:
        _run(grid, cfg, run_dir)
    except (ConfigError, MissingExtraError, RunFailed) as exc:
        log(ERROR, "fedcal: run failed: %s (run directory %s; `fedcal runs %s` says so)", _one_line(exc), run_dir,
            run_dir)
        record_failure(run_dir, cfg, exc)
        return
    log(INFO, "run directory: %s", run_dir)


def _one_line(exc: BaseException) -> str:
    """``exc``'s message on one line (a wrapped library error may carry its own newlines)."""
    return " ".join(str(exc).split())


def _run(grid: Grid, cfg: RunConfig, run_dir: Path) -> None:
    preflight(cfg)  # a missing extra or dataset: one line, before any round
    task = get_task(cfg.task)
    rounds = task.rounds(cfg)
    reporter = log_reporter(lambda line: log(INFO, "%s", line), prefix=f"{run_dir.name}: ")
    with reporting(reporter), (phase("rounds", rounds, "rounds") if rounds else nullcontext(None)) as bar:
        progress = None if bar is None else (
            lambda server_round, metrics: bar.update(1, round_note(metrics)) if server_round > 0 else None)
        # replies computed in Ray actors (`flwr run` on a simulation SuperLink) say where: placement.csv
        task.run(PlacementGrid(grid, run_dir), cfg, progress)


def record_failure(run_dir: Path, cfg: RunConfig, exc: BaseException) -> None:
    """Make ``run_dir`` say ``failed: <reason>`` (its ``run.log``'s last line, what ``fedcal runs``
    reads) when the task did not already: a failure before the task opened its run store (a
    dataset or extra missing at preflight) leaves no run directory otherwise. An existing run's
    files (a checkpoint to resume from) are kept; a directory another process writes is left alone."""
    from fedcal.results import RunFailed, RunStore
    from fedcal.results.files import CONFIG_FILE, RUN_LOG, failure_reason

    reason = failure_reason(exc)
    runlog = run_dir / RUN_LOG
    if runlog.exists() and runlog.read_text().rstrip().endswith(f"failed: {reason}"):
        return  # the task's run store said it already
    store = RunStore(run_dir, cfg)
    try:
        if (run_dir / CONFIG_FILE).exists():
            store.acquire()
        else:
            store.start()
        store.log_event(f"failed: {reason}")
    except (ConfigError, RunFailed, OSError) as why:  # another config's run, or another writer: not ours to mark
        log(WARNING, "fedcal: %s not marked failed (%s)", run_dir, why)
    finally:
        store.release()


def announce_run_dir(cfg: RunConfig) -> Path:
    """Log where the run directory is (absolute) as the run starts, and return it.

    A relative ``output-dir`` resolves against the ServerApp process's working directory. Under
    ``flwr run .`` that is the local SuperLink's, which ``flwr run`` starts in the directory it
    is first called from and keeps running (with another app or directory, later runs land in
    the first one's folder); on a deployed SuperLink it is wherever the SuperLink was started.
    So a relative ``output-dir`` is logged as a warning naming that directory and the fix.
    """
    run_dir = run_dir_for(cfg).absolute()
    if Path(cfg.output_dir).is_absolute():
        log(INFO, "run directory: %s", run_dir)
    else:
        log(WARNING, "run directory: %s (output-dir %r is relative to this ServerApp's working directory %s: under "
            "`flwr run` that of the local SuperLink, i.e. where the first `flwr run` started it; pass an absolute "
            "output-dir to choose, e.g. --run-config \"output-dir='$PWD/runs'\")",
            run_dir, cfg.output_dir, Path.cwd())
    return run_dir


def server_app_for(cfg: RunConfig, progress: ProgressFn | None = None, sink: list | None = None) -> ServerApp:
    """A ServerApp bound to an already-validated config (the engines' entry): it runs the
    config's task, calls ``progress`` after each round, and appends the task's return value
    to ``sink`` when given."""
    task = get_task(cfg.task)
    bound = ServerApp()

    @bound.main()
    def _main(grid: Grid, context: Context) -> None:
        result = task.run(grid, cfg, progress)
        if sink is not None:
            sink.append(result)

    return bound
