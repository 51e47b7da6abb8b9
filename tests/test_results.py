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


def test_report_writes_the_tables_behind_its_figures(tmp_path):
    """reliability.png and trajectories.png come with the tables they are drawn from:
    trajectories are the per-round mean ± std over seeds, checked here by hand."""
    from fedcal.experiments import write_report

    dirs = []
    for seed, accs in ((0, (0.5, 0.7)), (1, (0.7, 0.9))):
        for cfg in tau_configs(RunConfig(dataset="synthetic", seed=seed, output_dir=str(tmp_path / "runs")), [1.0, 5.0]):
            s = RunStore(run_dir_for(cfg), cfg)
            s.start()
            for rnd, acc in zip((10, 20), accs):
                shift = 0.1 if cfg.tau == 5.0 else 0.0
                s.log_round(rnd, {"accuracy": acc + shift, "ece": 0.1, "sece": -shift, "brier": 0.2, "nll": 0.3})
            s.write_table("reliability.csv", pd.DataFrame({"lower": [0.0, 0.5], "upper": [0.5, 1.0], "count": [3, 7],
                                                           "confidence": [0.3, 0.8], "accuracy": [0.2, 0.9]}))
            s.finish()
            dirs.append(run_dir_for(cfg))
    write_report(dirs, tmp_path / "report")
    traj = pd.read_csv(tmp_path / "report" / "trajectories.csv")
    acc5 = traj[(traj["tau"] == 5.0) & (traj["metric"] == "accuracy")].set_index("round")
    assert acc5["mean"].to_dict() == pytest.approx({10: 0.7, 20: 0.9})  # (0.6 + 0.8) / 2, (0.8 + 1.0) / 2
    assert acc5["std"].to_dict() == pytest.approx({10: 0.1414213, 20: 0.1414213})  # sample std of a 0.2 gap
    assert set(acc5["runs"]) == {2}
    assert set(traj["metric"]) == {"accuracy", "sece"}
    rel = pd.read_csv(tmp_path / "report" / "reliability.csv")
    assert sorted(rel["run"].unique()) == ["TSA τ=5", "benign (τ=1)"]  # seed 0's diagrams only
    assert len(rel) == 4
    assert (tmp_path / "report" / "reliability.png").exists() and (tmp_path / "report" / "trajectories.png").exists()
