import pandas as pd
import pytest

from fedcal.config import RunConfig
from fedcal.experiments import summarise, tau_configs, to_markdown
from fedcal.results import RunStore, load_metrics, run_dir_for


def test_store_appends_tidy_rows_and_marks_done(tmp_path):
    cfg = RunConfig(dataset="synthetic", output_dir=str(tmp_path))
    store = RunStore(run_dir_for(cfg), cfg)
    store.start()
    store.log_round(0, {"accuracy": 0.1, "sece": -0.2})
    store.log_round(1, {"accuracy": 0.5, "sece": 0.05})
    assert not store.is_done()  # an interrupted run: rounds kept, not marked finished
    df = load_metrics(store.dir)
    assert list(df.columns[:5]) == ["run_id", "round", "metric", "value", "config_hash"]
    assert len(df) == 4 and set(df["round"]) == {0, 1}
    assert (df["tau"] == 1.0).all()  # config columns joined
    store.finish()
    assert store.is_done()
    # a different config in the same directory is not "done"
    assert not RunStore(store.dir, cfg.replace(tau=2.0)).is_done()


def test_restart_clears_partial_results(tmp_path):
    cfg = RunConfig(dataset="synthetic", output_dir=str(tmp_path))
    store = RunStore(run_dir_for(cfg), cfg)
    store.start()
    store.log_round(0, {"accuracy": 0.1})
    store.start()
    assert load_metrics(store.dir).empty


def test_tau_configs_and_summary(tmp_path):
    base = RunConfig(dataset="synthetic", output_dir=str(tmp_path))
    cfgs = tau_configs(base, [5.0, 1.0, 0.2])
    assert [c.attack for c in cfgs] == ["tsa", "none", "tsa"]
    for c, acc in zip(cfgs, (0.8, 0.9, 0.85)):
        s = RunStore(run_dir_for(c), c)
        s.start()
        s.log_round(3, {"accuracy": acc, "ece": 0.1, "sece": -0.1, "brier": 0.2, "nll": 0.3})
    table = summarise([run_dir_for(c) for c in cfgs])
    assert table["tau"].tolist() == [0.2, 1.0, 5.0]
    assert table["accuracy_%"].tolist() == [85.0, 90.0, 80.0]
    assert table["d_accuracy"].tolist() == pytest.approx([-5.0, 0.0, -10.0])
    assert "| 0.2 | TSA | 85.00" in to_markdown(table)
    assert isinstance(table, pd.DataFrame)
