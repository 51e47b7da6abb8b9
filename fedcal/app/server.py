"""The one ServerApp of the Flower App (``[tool.flwr.app.components] serverapp``).

It parses Flower's run config once into a :class:`fedcal.config.RunConfig` and hands the grid
to the server side of the task the config names (``task``), through the task registry
(:mod:`fedcal.tasks`). It knows no task by name.
"""

from __future__ import annotations

from contextlib import nullcontext
from logging import INFO, WARNING
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from fedcal.app.cluster import PlacementGrid
from fedcal.config import RunConfig
from fedcal.extras import require_extras
from fedcal.progress import log_reporter, phase, reporting, round_note
from fedcal.results import run_dir_for
from fedcal.tasks import ProgressFn, get_task, preflight

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point for ``flwr run`` and deployments: the config comes from Flower's run config.

    Progress goes to Flower's log, where ``flwr run`` (``--stream``, ``flwr log``) and a SuperLink's
    log show it: the rounds, and every long phase of a task (:mod:`fedcal.progress`), at most
    :data:`fedcal.progress.LOG_EVERY_S` seconds apart with the time left."""
    cfg = RunConfig.from_flower(context.run_config)
    preflight(cfg)
    run_dir = announce_run_dir(cfg)
    task = get_task(cfg.task)
    require_extras(*task.extras)  # a missing extra: one line naming it in the SuperLink's log, before any round
    rounds = task.rounds(cfg)
    reporter = log_reporter(lambda line: log(INFO, "%s", line), prefix=f"{run_dir.name}: ")
    with reporting(reporter), (phase("rounds", rounds, "rounds") if rounds else nullcontext(None)) as bar:
        progress = None if bar is None else (
            lambda server_round, metrics: bar.update(1, round_note(metrics)) if server_round > 0 else None)
        # replies computed in Ray actors (`flwr run` on a simulation SuperLink) say where: placement.csv
        task.run(PlacementGrid(grid, run_dir), cfg, progress)
    log(INFO, "run directory: %s", run_dir)


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
