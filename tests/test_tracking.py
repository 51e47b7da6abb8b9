"""Experiment tracking (run-config key `tracker`): what a tracker shows equals metrics.csv."""

import importlib.util
import json

import pandas as pd
import pytest

from fedcal.config import ConfigError, RunConfig
from fedcal.results import RunStore, config_hash, load_metrics, run_dir_for
from fedcal import tracking

needs_tensorboard = pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None,
                                       reason="tensorboard not installed (pip install 'fedcal[track]')")
needs_mlflow = pytest.mark.skipif(importlib.util.find_spec("mlflow") is None,
                                  reason="mlflow not installed (pip install 'fedcal[track]')")


def tiny(tmp_path, **kw):
    base = dict(dataset="synthetic", model="mlp", num_clients=6, clients_per_round=3, num_rounds=3,
                attacker_ratio=0.34, attack="tsa", tau=5.0, lr=0.05, batch_size=16, local_steps=2,
                engine="inprocess", output_dir=str(tmp_path))
    base.update(kw)
    return RunConfig.from_flower(base)


def tensorboard_scalars(run_dir) -> pd.DataFrame:
    """Every scalar of the run's event files, read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / tracking.TENSORBOARD_DIR), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    rows = [(e.step, tag, e.value) for tag in acc.Tags()["scalars"] for e in acc.Scalars(tag)]
    return pd.DataFrame(rows, columns=["round", "metric", "value"])


def metrics_table(run_dir) -> pd.Series:
    df = load_metrics(run_dir)
    return df.set_index(["round", "metric"])["value"].sort_index()


def test_tracker_is_an_execution_key_that_changes_no_hash(tmp_path):
    cfg = tiny(tmp_path)
    assert config_hash(cfg.replace(tracker="tensorboard")) == config_hash(cfg)
    assert run_dir_for(cfg.replace(tracker="mlflow")) == run_dir_for(cfg)
    with pytest.raises(ConfigError, match="tracker"):
        cfg.replace(tracker="tensorbord")


@needs_tensorboard
@pytest.mark.parametrize("engine", ["inprocess", "batched", pytest.param("ray", marks=pytest.mark.slow)])
def test_tensorboard_events_equal_metrics_csv(tmp_path, engine):
    from fedcal.app.engine import simulate

    run_dir = simulate(tiny(tmp_path, tracker="tensorboard", engine=engine), progress=False)
    want = metrics_table(run_dir)
    got = tensorboard_scalars(run_dir).set_index(["round", "metric"])["value"].sort_index()
    assert list(got.index) == list(want.index)  # every round's every metric, nothing else
    # TensorBoard stores float32 scalars
    assert (got - want).abs().max() <= 1e-6 * max(1.0, want.abs().max())
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / tracking.TENSORBOARD_DIR))
    acc.Reload()
    text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    config = json.loads(text.strip("`\n"))
    assert config["tau"] == 5.0 and config["num-rounds"] == 3 and config["run-id"] == run_dir.name


@needs_tensorboard
def test_a_resumed_run_shows_each_round_once(tmp_path):
    """An attempt interrupted after logging round 3 past its round-2 checkpoint resumes from round
    2: TensorBoard shows the resumed attempt's round 3, not both."""
    cfg = tiny(tmp_path, tracker="tensorboard")
    store = RunStore(run_dir_for(cfg), cfg)
    with store.session(rounds=4) as checkpoint:
        assert checkpoint is None
        for r in (1, 2):
            store.log_round(r, {"accuracy": r / 10})
        store.save_checkpoint(2, {"x": 1})
        store.log_round(3, {"accuracy": 99.0})  # logged, then the attempt dies before the next checkpoint
    store = RunStore(run_dir_for(cfg), cfg)
    with store.session(rounds=4) as checkpoint:
        assert checkpoint.round == 2
        store.log_round(3, {"accuracy": 0.3})
        store.finish()
    got = tensorboard_scalars(store.dir).sort_values("round")
    assert got["round"].tolist() == [1, 2, 3]
    assert got["value"].tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert metrics_table(store.dir).tolist() == pytest.approx([0.1, 0.2, 0.3])


@needs_mlflow
def test_mlflow_history_equals_metrics_csv(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    from mlflow import MlflowClient

    from fedcal.app.engine import simulate

    run_dir = simulate(tiny(tmp_path, tracker="mlflow"), progress=False)
    want = metrics_table(run_dir)
    client = MlflowClient(tracking_uri=tracking.mlflow_uri(run_dir))
    run = client.get_run((run_dir / tracking.MLFLOW_RUN_FILE).read_text().strip())
    assert run.info.status == "FINISHED" and run.info.run_name == run_dir.name
    assert run.data.params["tau"] == "5.0" and run.data.params["config-hash"] == config_hash(tiny(tmp_path))
    rows = [(m.step, name, m.value) for name in run.data.metrics for m in client.get_metric_history(run.info.run_id, name)]
    got = pd.DataFrame(rows, columns=["round", "metric", "value"]).set_index(["round", "metric"])["value"].sort_index()
    assert list(got.index) == list(want.index)
    assert (got - want).abs().max() == 0  # MLflow keeps doubles


@needs_mlflow
def test_mlflow_keeps_one_store_per_output_folder_and_no_deprecation_warning(tmp_path, monkeypatch):
    """Two runs of one output folder (a sweep's cells) are two MLflow runs of one experiment in one
    store, <output-dir>/mlruns.db, not a database per run directory; a run started over replaces its
    MLflow run instead of adding one; MLflow's deprecation warnings (SQLAlchemy's, raised when the
    store is set up) never reach the console, where they cut through the progress bar."""
    import warnings

    from mlflow import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfgs = [tiny(tmp_path, tracker="mlflow", seed=s) for s in (0, 1)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for cfg in cfgs:
            store = RunStore(run_dir_for(cfg), cfg)
            with store.session(rounds=1):
                store.log_round(1, {"accuracy": 0.5 + cfg.seed / 10})
                store.finish()
    assert [str(w.message) for w in caught if issubclass(w.category, (DeprecationWarning, FutureWarning))] == []
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["mlruns.db"]
    assert not list(tmp_path.glob("*/*.db"))
    client = MlflowClient(tracking_uri="sqlite:///" + str(tmp_path / "mlruns.db"))
    runs = client.search_runs([client.get_experiment_by_name(tracking.MLFLOW_EXPERIMENT).experiment_id])
    assert sorted(r.info.run_name for r in runs) == sorted(run_dir_for(c).name for c in cfgs)
    assert {r.info.run_name: r.data.metrics["accuracy"] for r in runs} == {
        run_dir_for(cfgs[0]).name: 0.5, run_dir_for(cfgs[1]).name: 0.6}
    store = RunStore(run_dir_for(cfgs[0]), cfgs[0])  # started over: one MLflow run for it still
    with store.session(rounds=1, resume=False):
        store.log_round(1, {"accuracy": 0.9})
        store.finish()
    runs = client.search_runs([client.get_experiment_by_name(tracking.MLFLOW_EXPERIMENT).experiment_id])
    assert sorted(r.data.metrics["accuracy"] for r in runs) == [0.6, 0.9]


def test_a_missing_tracker_package_fails_at_the_start_naming_the_extra(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    cfg = tiny(tmp_path, tracker="tensorboard")
    store = RunStore(run_dir_for(cfg), cfg)
    with pytest.raises(ConfigError, match=r"fedcal\[track\]"):
        with store.session(rounds=3):
            pass
    assert not (store.dir / "metrics.csv").exists() or load_metrics(store.dir).empty


def test_a_failing_tracker_is_dropped_and_the_run_goes_on(tmp_path, monkeypatch, caplog):
    class Broken:
        def log_config(self, config):
            pass

        def log_metrics(self, step, metrics):
            raise OSError("disk full")

        def close(self):
            pass

    monkeypatch.setattr(tracking, "open_tracker", lambda *a, **k: Broken())
    cfg = tiny(tmp_path)
    store = RunStore(run_dir_for(cfg), cfg)
    with store.session(rounds=2):
        store.log_round(1, {"accuracy": 0.5})
        store.log_round(2, {"accuracy": 0.6})
        store.finish()
    assert metrics_table(store.dir).tolist() == [0.5, 0.6]
    assert "disk full" in caplog.text and "goes on without it" in caplog.text
