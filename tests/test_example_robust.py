"""The quickstart-robust example: a Flower app that knows nothing of fedcal but its strategies,
with colluding sybils and a NaN reply, run through Flower's Simulation Engine."""

import sys
import tomllib
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quickstart-robust"


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    sys.path.insert(0, str(EXAMPLE))
    try:
        from quickstart_robust import client_app, server_app, task
        yield client_app, server_app, task
    finally:
        sys.path.remove(str(EXAMPLE))


def test_example_runs_each_strategy(example, tmp_path, monkeypatch):
    from flwr.app import Context
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    client_app, server_app, task = example
    defaults = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    monkeypatch.chdir(tmp_path)
    accuracy: dict[str, float] = {}
    x_test, y_test = task.make_data(1000, seed=99)

    # What `flwr run . --run-config "strategy=..."` does: the example's own main() with a fused
    # run config. All strategies share one simulation to pay Ray's start-up once.
    driver = ServerApp()

    @driver.main()
    def _main(grid: Grid, context: Context) -> None:
        for name in ("fedavg", "foolsgold", "multikrum", "fltrust"):
            context.run_config = {**defaults, "strategy": name}
            server_app.main(grid, context)
            net = task.Net()
            net.load_state_dict(torch.load("final_model.pt"))
            assert all(torch.isfinite(p).all() for p in net.parameters()), name
            accuracy[name] = task.test(net, x_test, y_test)

    run_simulation(server_app=driver, client_app=client_app.app, num_supernodes=10,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    assert set(accuracy) == {"fedavg", "foolsgold", "multikrum", "fltrust"}
    # The NaN reply never reaches the model; the sybils drag plain FedAvg down, while the
    # robust rules keep (nearly) clean accuracy.
    for name in ("foolsgold", "multikrum", "fltrust"):
        assert accuracy[name] > 0.9, accuracy
        assert accuracy[name] > accuracy["fedavg"] + 0.1, accuracy
