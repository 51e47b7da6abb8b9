"""The one ServerApp of the Flower App (``[tool.flwr.app.components] serverapp``).

It parses Flower's run config once into a :class:`fedcal.config.RunConfig` and hands the grid
to the server side of the task the config names (``task``), through the task registry
(:mod:`fedcal.tasks`). It knows no task by name.
"""

from __future__ import annotations

from contextlib import nullcontext
from logging import INFO

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from fedcal.config import RunConfig
from fedcal.progress import log_reporter, phase, reporting, round_note
from fedcal.results import run_dir_for
from fedcal.tasks import ProgressFn, get_task

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point for ``flwr run`` and deployments: the config comes from Flower's run config.

    Progress goes to Flower's log, where ``flwr run`` (``--stream``, ``flwr log``) and a SuperLink's
    log show it: the rounds, and every long phase of a task (:mod:`fedcal.progress`), at most
    :data:`fedcal.progress.LOG_EVERY_S` seconds apart with the time left."""
    cfg = RunConfig.from_flower(context.run_config)
    task = get_task(cfg.task)
    rounds = task.rounds(cfg)
    reporter = log_reporter(lambda line: log(INFO, "%s", line), prefix=f"{run_dir_for(cfg).name}: ")
    with reporting(reporter), (phase("rounds", rounds, "rounds") if rounds else nullcontext(None)) as bar:
        progress = None if bar is None else (
            lambda server_round, metrics: bar.update(1, round_note(metrics)) if server_round > 0 else None)
        task.run(grid, cfg, progress)


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
