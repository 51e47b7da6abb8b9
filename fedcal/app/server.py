"""The one ServerApp of the Flower App (``[tool.flwr.app.components] serverapp``).

It parses Flower's run config once into a :class:`fedcal.config.RunConfig` and hands the grid
to the server side of the task the config names (``task``), through the task registry
(:mod:`fedcal.tasks`). It knows no task by name.
"""

from __future__ import annotations

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedcal.config import RunConfig
from fedcal.tasks import ProgressFn, get_task

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point for ``flwr run`` and deployments: the config comes from Flower's run config."""
    cfg = RunConfig.from_flower(context.run_config)
    get_task(cfg.task).run(grid, cfg, None)


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
