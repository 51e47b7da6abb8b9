"""Research tooling of the fedcal command (issue 34 §5): config files, did-you-mean, device strings,
--quiet/--log-level, no third-party warning noise."""

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedcal import cli
from fedcal.studies.common import config_overrides
from fedcal.config import ConfigError, RunConfig
from fedcal.local_training import resolve_device

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------- did you mean
def test_an_unknown_key_names_the_closest_keys_not_all_of_them():
    with pytest.raises(ConfigError) as err:
        RunConfig.from_flower({"num-client": 5})
    text = str(err.value)
    assert "did you mean 'num-clients'" in text
    assert "dst-ranks" not in text and len(text) < 200  # not the ~200 keys
    with pytest.raises(ConfigError, match="'attacker-ratio'"):
        RunConfig.from_flower({"atacker-ratio": 0.1})
    with pytest.raises(ConfigError) as err:  # nothing close: a pointer to the list, not the list
        RunConfig.from_flower({"zzzzzz": 1})
    assert "did you mean" not in str(err.value) and "fedcal run --help" in str(err.value)


# ---------------------------------------------------------------------- devices
@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1", "cuda:0", "mps", "auto"])
def test_any_torch_device_string_is_a_valid_config(device):
    assert RunConfig.from_flower({"device": device}).device == device


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cuda:-1", "cpu:0:1", ""])
def test_a_string_torch_cannot_parse_is_refused_naming_the_key(device):
    with pytest.raises(ConfigError, match="'device'"):
        RunConfig.from_flower({"device": device})


def test_a_device_ray_cannot_show_a_client_is_refused():
    with pytest.raises(ConfigError, match="CUDA_VISIBLE_DEVICES"):
        RunConfig.from_flower({"device": "cuda:1", "client-gpus": 0.5})
    RunConfig.from_flower({"device": "cuda:1", "client-gpus": 0.5, "engine": "inprocess"})  # no Ray: allowed
    RunConfig.from_flower({"device": "cuda:1", "client-gpus": 2.0})  # two GPUs each: cuda:0, cuda:1


def test_a_device_this_machine_lacks_fails_with_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ConfigError, match=r"sees 2 CUDA device\(s\), cuda:0..cuda:1"):
        resolve_device("cuda:2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    for name in ("cuda", "cuda:0"):
        with pytest.raises(ConfigError, match="no CUDA device is available"):
            resolve_device(name)
    assert resolve_device("auto") == torch.device("cpu")


def test_fedcal_run_stops_before_any_engine_on_a_missing_device(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc = cli.main(["run", "device=cuda:3", "dataset=synthetic", f"output-dir={tmp_path}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "'device'" in err and "'cuda:3'" in err
    assert not any(tmp_path.iterdir())  # nothing started


# ---------------------------------------------------------------------- config files
def _args(argv):
    return cli.build_parser().parse_args(argv)


def test_an_overrides_file_is_read_and_key_value_arguments_win(tmp_path):
    f = tmp_path / "over.toml"
    f.write_text('# a flwr run --run-config file\ntau = 5\ndataset = "digits"\nnum-rounds = 7\ncoupled = false\n')
    over = config_overrides(_args(["run", "-c", str(f), "num-rounds=3"]))
    assert over == {"tau": 5, "dataset": "digits", "num-rounds": 3, "coupled": False}
    assert config_overrides(_args(["run", "num-rounds=3", "-c", str(f)]))["num-rounds"] == 3  # order of options aside
    cfg = RunConfig.from_flower(over)
    assert (cfg.tau, cfg.dataset, cfg.num_rounds, cfg.coupled) == (5.0, "digits", 3, False)
    # a string -c still works beside a file
    assert config_overrides(_args(["sweep", "-c", str(f), "-c", "seed=4 tau=2"]))["tau"] == 2


def test_flowers_own_parser_reads_the_same_file_the_same_way(tmp_path):
    from flwr.common.config import parse_config_args

    f = tmp_path / "over.toml"
    f.write_text('tau = 0.2\nattack = "tsa"\nnum-clients = 20\neval-every = 2\n')
    assert parse_config_args([str(f)]) == config_overrides(_args(["run", "-c", str(f)]))


@pytest.mark.parametrize("text, why", [("[grid]\ntau = [1, 2]\n", "table or list"),
                                       ("tau = [1, 2]\n", "table or list"),
                                       ("tau = \n", "not a TOML file")])
def test_a_bad_overrides_file_fails_with_one_line_naming_it(tmp_path, capsys, text, why):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    assert cli.main(["run", "-c", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and why in err and "bad.toml" in err
    assert cli.main(["run", "-c", str(tmp_path / "missing.toml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_an_unknown_key_in_a_file_gets_the_did_you_mean(tmp_path, capsys):
    f = tmp_path / "over.toml"
    f.write_text("num-round = 3\n")
    assert cli.main(["run", "-c", str(f)]) == 2
    assert "did you mean 'num-rounds'" in capsys.readouterr().err


# ---------------------------------------------------------------------- logging options
@pytest.mark.parametrize("argv, level, progress_off", [
    (["runs", "x"], "WARNING", None),
    (["--quiet", "runs", "x"], "ERROR", None),
    (["run", "--quiet"], "ERROR", True),
    (["--log-level", "INFO", "run"], "INFO", False),
    (["run", "--log-level", "debug"], "DEBUG", False),
])
def test_quiet_and_log_level_set_fedcals_level_before_or_after_the_command(argv, level, progress_off):
    args = _args(argv)
    logger, handler = logging.getLogger("fedcal.test-levels"), logging.Handler()
    cli._apply_logging_options(args, logger, handler)
    assert logging.getLevelName(logger.level) == level == logging.getLevelName(handler.level)
    if progress_off is not None:
        assert args.no_progress is progress_off
        assert args.verbose is (level == "DEBUG")  # debug also shows Flower's and Ray's logs


def test_log_level_filters_fedcals_warnings(tmp_path, capsys):
    """`fedcal report` on an unfinished run warns that it left the run out, then fails (no
    finished run): --quiet keeps the error line and drops the warning."""
    from fedcal.results import RunStore, run_dir_for

    cfg = RunConfig.from_flower({"dataset": "synthetic", "output-dir": str(tmp_path)})
    store = RunStore(run_dir_for(cfg), cfg)
    store.start(rounds=3)
    store.log_round(0, {"accuracy": 0.1})
    store.release()
    assert cli.main(["report", str(store.dir), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "fedcal: warning: left out of" in err and "fedcal: error" in err
    assert cli.main(["--quiet", "report", str(store.dir), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "fedcal: warning" not in err and "fedcal: error" in err
    assert cli.main(["report", str(store.dir), "--out", str(tmp_path / "r"), "--log-level", "error"]) == 2
    assert "fedcal: warning" not in capsys.readouterr().err


# ---------------------------------------------------------------------- third-party warnings
def test_the_client_app_opts_into_rays_accelerator_behaviour_before_flower_starts_ray():
    """Flower's simulation process loads the ClientApp before ray.init: the variable Ray's
    FutureWarning asks for is set by then (and a user's own value is kept)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"}
    code = "import os, fedcal.app.client; print(os.environ.get('RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO'))"
    out = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "0"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**env, "PYTHONPATH": str(ROOT), "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1"}).stdout
    assert out.strip() == "1"


@pytest.mark.slow
def test_ray_init_after_the_client_app_prints_no_future_warning():
    code = ("import warnings; warnings.simplefilter('error', FutureWarning)\n"
            "import fedcal.app.client, ray\n"
            "ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False); ray.shutdown()\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"}
    subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT, check=True,
                   timeout=300)


def _no_noise(argv, tmp_path, monkeypatch):
    """Run one fedcal command with pandas' PerformanceWarning and every FutureWarning as errors."""
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        rc = cli.main(argv)
    noise = [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in seen
             if issubclass(w.category, (pd.errors.PerformanceWarning, FutureWarning))]
    return rc, noise


def test_demo_report_and_sweep_print_no_performance_or_future_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    rc, noise = _no_noise(["demo", "--rounds", "2", "engine=inprocess", "--no-progress", "--output", "demo"],
                          tmp_path, monkeypatch)
    assert rc == 0 and noise == []
    runs = sorted(str(p) for p in (tmp_path / "demo" / "runs").iterdir())
    rc, noise = _no_noise(["report", *runs, "--out", "report"], tmp_path, monkeypatch)
    assert rc == 0 and noise == []
    rc, noise = _no_noise(["sweep", "--grid", "tau=0.5,2", "num-rounds=2", "dataset=digits", "engine=inprocess",
                           "output-dir=sweep/runs", "--report", "sweep", "--no-progress", "--plot-x", "tau"],
                          tmp_path, monkeypatch)
    assert rc == 0 and noise == []


@pytest.mark.slow
@pytest.mark.skipif(__import__("shutil").which("flwr") is None, reason="flwr CLI not on PATH")
@pytest.mark.skipif(__import__("importlib").util.find_spec("tensorboard") is None, reason="tensorboard not installed")
def test_flwr_run_log_has_no_future_warning_and_streams_to_tensorboard(tmp_path):
    """`flwr run .`: Ray starts in Flower's simulation process after it loaded fedcal's ClientApp, so
    no FutureWarning in the streamed log; the run's rounds reach TensorBoard through the run store."""
    from tests.test_flwr_run import _flwr_run
    from tests.test_tracking import metrics_table, tensorboard_scalars

    logs = {}
    run_dir = _flwr_run(tmp_path, "dataset='digits' num-clients=4 clients-per-round=2 num-rounds=2 tracker='tensorboard'",
                        4, _capture=logs)
    assert "FutureWarning" not in logs["streamed"]
    got = tensorboard_scalars(run_dir).set_index(["round", "metric"])["value"].sort_index()
    want = metrics_table(run_dir)
    assert list(got.index) == list(want.index)
