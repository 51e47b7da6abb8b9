"""The quickstart-robust example: a Flower app that knows nothing of fedcal but its strategies,
with colluding sybils and a NaN reply. Every strategy its name check accepts runs (in-process,
the example's own ServerApp and ClientApp); `flwr run` of the example is the slow test."""

import json
import math
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quickstart-robust"
DEFAULTS = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]


@pytest.fixture(scope="module")
def example():
    sys.path.insert(0, str(EXAMPLE))
    try:
        from quickstart_robust import client_app, server_app, task
        yield client_app, server_app, task
    finally:
        sys.path.remove(str(EXAMPLE))


def test_every_strategy_the_example_accepts_runs(example, tmp_path, caplog):
    """`flwr run . --run-config "strategy='<name>'"` for every name the example's own check
    accepts (CalGuard included, which used to pass the check and then fail in its constructor):
    the example's ServerApp and ClientApp on ten in-process SuperNodes. Each run writes its model
    and result.json under output-dir; the NaN reply is dropped every round and named by its
    partition; the sybils drag plain FedAvg down while the sybil-aware rules keep clean accuracy."""
    from fedcal.app.inprocess import run_inprocess

    client_app, server_app, task = example
    accepted = sorted(server_app.CHOICES)
    assert {"fedavg", "calguard", "krum", "bulyan"} <= set(accepted)
    accuracy = {}
    for name in accepted:
        caplog.clear()
        with caplog.at_level("INFO", logger="flwr"):
            run_inprocess(server_app.app, client_app.app, 10, seed=0,
                          run_config={**DEFAULTS, "strategy": name, "output-dir": str(tmp_path)})
        result = json.loads((tmp_path / name / "result.json").read_text())
        net = task.Net()
        net.load_state_dict(torch.load(tmp_path / name / "final_model.pt"))
        assert all(torch.isfinite(p).all() for p in net.parameters()), name
        accuracy[name] = result["accuracy"]
        assert math.isfinite(accuracy[name]), name
        nan_partition = DEFAULTS["nan-partition"]
        assert len(result["rejected"]) == DEFAULTS["num-server-rounds"], (name, result["rejected"])
        for reasons in result["rejected"].values():
            assert any(r.startswith(f"partition {nan_partition}:") and "NaN" in r for r in reasons), (name, reasons)
        # the strategy's own warning names the client by its partition, not only its node id
        assert f"(partition {nan_partition}): array" in caplog.text, name
    for name in ("foolsgold", "multikrum", "krum", "fltrust"):
        assert accuracy[name] > 0.9, accuracy
        assert accuracy[name] > accuracy["fedavg"] + 0.1, accuracy


def test_an_unknown_strategy_fails_with_the_accepted_names(example):
    _, server_app, _ = example
    with pytest.raises(ValueError, match="unknown strategy 'krun'; choose from .*'krum'"):
        server_app.make_strategy("krun", DEFAULTS)


def test_outputs_go_under_the_app_or_output_dir_never_the_working_directory(example, tmp_path, monkeypatch):
    _, server_app, _ = example
    monkeypatch.chdir(tmp_path)
    assert server_app.output_dir({"output-dir": ""}) == EXAMPLE / "outputs"
    assert server_app.output_dir({"output-dir": "mine"}) == EXAMPLE / "mine"
    assert server_app.output_dir({"output-dir": str(tmp_path / "abs")}) == tmp_path / "abs"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr") is None, reason="flwr CLI not on PATH")
def test_flwr_run_of_the_example_with_calguard(tmp_path):
    """The README's command with strategy='calguard', through a local SuperLink and Ray, started
    from another directory: the outputs land in output-dir, the log names partitions."""
    from tests.test_flwr_run import OFFLINE_ENV, _stop_local_superlink
    from tests.deploy_harness import free_port, tail

    flwr_home = tmp_path / "flwr-home"
    log_file = flwr_home / "local-superlink" / "superlink.log"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, FLWR_HOME=str(flwr_home), **OFFLINE_ENV, OMP_NUM_THREADS="1",
               FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(free_port()), FLWR_LOCAL_CONTROL_API_PORT=str(free_port()))
    out = tmp_path / "outputs"
    cmd = ["flwr", "run", str(EXAMPLE), "--stream", "--run-config", f"strategy='calguard' output-dir='{out}'",
           "--federation-config", "num-supernodes=10"]
    try:
        proc = subprocess.run(cmd, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=400)
    finally:
        _stop_local_superlink(tmp_path, log_file)
    context = f"rc={proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}\n{tail(log_file)}"
    assert proc.returncode == 0, context
    result = json.loads((out / "calguard" / "result.json").read_text())
    assert result["accuracy"] > 0.5, context
    assert "(partition 9): array" in proc.stdout + proc.stderr, context
    assert not list(elsewhere.iterdir()), "nothing is written to the SuperLink's working directory"
