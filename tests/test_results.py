import json
from pathlib import Path

import pandas as pd
import pytest

import fedcal.results as results
from fedcal.config import ConfigError, RunConfig, Task, field_names, fields_of, key_of
from fedcal.reports import summarise, to_markdown
from fedcal.studies.taus import tau_configs
from fedcal.results import (RunStore, collection_hash, config_hash, default_run_name, hashed_keys, load_config,
                            load_metrics, run_dir_for)

ROOT = Path(__file__).resolve().parents[1]


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
    base = RunConfig(dataset="synthetic", output_dir=str(tmp_path), num_rounds=3, eval_every=3)
    cfgs = tau_configs(base, [5.0, 1.0, 0.2])
    assert [c.attack for c in cfgs] == ["tsa", "none", "tsa"]
    for c, acc in zip(cfgs, (0.8, 0.9, 0.85)):
        s = RunStore(run_dir_for(c), c)
        s.start()
        for rnd, a in ((0, 0.1), (3, acc)):  # the whole schedule: rounds 0 and 3 (the reports check it)
            s.log_round(rnd, {"accuracy": a, "ece": 0.1, "sece": -0.1, "brier": 0.2, "nll": 0.3})
        s.finish()
    table = summarise([run_dir_for(c) for c in cfgs])
    assert table["tau"].tolist() == [0.2, 1.0, 5.0]
    assert table["accuracy_%"].tolist() == [85.0, 90.0, 80.0]
    assert table["d_accuracy"].tolist() == pytest.approx([-5.0, 0.0, -10.0])
    assert "| 0.2 | TSA τ=0.2 | 85.00" in to_markdown(table)
    assert isinstance(table, pd.DataFrame)


def test_a_stalled_run_is_marked_in_the_tau_table(tmp_path):
    """A run whose last round accepted none of its replies ends with a model kept from an earlier round: the
    per-run τ table marks it, and over seeds it is no result of its setting — left out of the mean, the seed
    count is the seeds averaged, and the seed is named with its reason; an earlier all-rejected round the run
    recovered from marks nothing."""
    from fedcal.reports import write_report
    from fedcal.reports.runs import run_stalled

    dirs = []
    for seed in (0, 1):
        for cfg in tau_configs(RunConfig(dataset="synthetic", seed=seed, output_dir=str(tmp_path / "runs"),
                                         num_rounds=2, eval_every=2), [1.0, 5.0]):
            s = RunStore(run_dir_for(cfg), cfg)
            s.start()
            broken = seed == 1 and cfg.tau == 5.0
            for rnd, acc, got in ((0, 0.3, 0), (1, None, 0 if not broken else 5), (2, 0.6, 0 if broken else 5)):
                row = {"accuracy": acc, "ece": 0.1, "sece": -0.1, "brier": 0.2, "nll": 0.3} if acc else {}
                if rnd:
                    row.update(replies_received=5, replies_accepted=got, replies_rejected=5 - got)
                s.log_round(rnd, row)
            s.finish()
            dirs.append(run_dir_for(cfg))
    assert [run_stalled(d) for d in dirs] == [False, False, False, True]
    table = summarise(dirs)
    assert table.loc[table["stalled"], "seed"].tolist() == [1] and table["stalled"].sum() == 1
    assert "60.00 (stalled)" in to_markdown(table[table["seed"] == 1])
    write_report(dirs, tmp_path / "report")
    md = (tmp_path / "report" / "table.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| 5 |"))
    assert "| 60.00 |" in row and row.endswith("| 1 | seed 1: stalled: its last round accepted no reply |")
    assert "stalled: the run's last round accepted none" in md
    assert md.count("seed 1: stalled") == 1  # the benign row is not marked


def test_report_writes_the_tables_behind_its_figures(tmp_path):
    """reliability.png and trajectories.png come with the tables they are drawn from:
    trajectories are the per-round mean ± std over seeds, checked here by hand."""
    from fedcal.reports import write_report

    dirs = []
    for seed, accs in ((0, (0.5, 0.7)), (1, (0.7, 0.9))):
        for cfg in tau_configs(RunConfig(dataset="synthetic", seed=seed, output_dir=str(tmp_path / "runs"), num_rounds=20,
                                         eval_every=10), [1.0, 5.0]):
            s = RunStore(run_dir_for(cfg), cfg)
            s.start()
            for rnd, acc in zip((0, 10, 20), (0.3, *accs)):  # the whole schedule (the reports check it)
                shift = 0.1 if cfg.tau == 5.0 else 0.0
                s.log_round(rnd, {"accuracy": acc + shift, "ece": 0.1, "sece": -shift, "brier": 0.2, "nll": 0.3})
            s.write_table("reliability.csv", pd.DataFrame({"lower": [0.0, 0.5], "upper": [0.5, 1.0], "count": [3, 7],
                                                           "confidence": [0.3, 0.8], "accuracy": [0.2, 0.9]}))
            s.finish()
            dirs.append(run_dir_for(cfg))
    write_report(dirs, tmp_path / "report")
    traj = pd.read_csv(tmp_path / "report" / "trajectories.csv")
    acc5 = traj[(traj["tau"] == 5.0) & (traj["metric"] == "accuracy")].set_index("round")
    assert acc5["mean"].to_dict() == pytest.approx({0: 0.4, 10: 0.7, 20: 0.9})  # (0.6 + 0.8) / 2, (0.8 + 1.0) / 2
    assert acc5["std"].to_dict() == pytest.approx({0: 0.0, 10: 0.1414213, 20: 0.1414213})  # sample std of a 0.2 gap
    assert set(acc5["runs"]) == {2}
    assert set(traj["metric"]) == {"accuracy", "sece"}
    rel = pd.read_csv(tmp_path / "report" / "reliability.csv")
    assert sorted(rel["run"].unique()) == ["TSA τ=5", "benign (τ=1)"]  # seed 0's diagrams only
    assert set(rel["seed"]) == {0}  # ... and the table says which seed they are
    assert len(rel) == 4
    assert (tmp_path / "report" / "reliability.png").exists() and (tmp_path / "report" / "trajectories.png").exists()


# ---------------------------------------------------------------------- run identity
# Hashes and run names computed by the code before the config was grouped and run identity moved
# here (commit 0eb716a): they name committed results and must never change.
PINNED = [
    ({}, "1877bc25fa2e", "65f1a93610a8", "mnist-mlp-fedavg-tsa1-s0-1877bc25"),
    ({"dataset": "cifar10", "model": "cnn", "lr": 0.05, "eval-every": 10, "tau": 5.0},
     "d7632c453b10", "ddcb1ac30866", "cifar10-cnn-fedavg-tsa5-s0-d7632c45"),
    ({"dataset": "cifar10", "model": "cnn", "lr": 0.05, "eval-every": 10, "tau": 0.2},
     "df5919966321", "ddcb1ac30866", "cifar10-cnn-fedavg-tsa0.2-s0-df591996"),
    ({"strategy": "multikrum", "krum-f": 1, "krum-m": 3, "tau": 5.0, "seed": 1},
     "64e71be26796", "fdb27fa43f2f", "mnist-mlp-multikrum-tsa5-s1-64e71be2"),
    ({"strategy": "trimmed_mean", "tau": 0.5, "coupled": False, "dataset": "digits"},
     "c34bd5effd4f", "a424abe60c1f", "digits-mlp-trimmed_mean-tsa0.5u-s0-c34bd5ef"),
    ({"attack": "labelflip", "strategy": "median", "seed": 2},
     "798f463bbfea", "cd3fb6477de2", "mnist-mlp-median-labelflip-s2-798f463b"),
    ({"task": "inference", "num-clients": 17, "dataset": "cifar10", "model": "cnn"},
     "fe09ffab66ee", "11eba305c370", "cifar10-cnn-inference-n17-f4-s0-fe09ffab"),
    ({"task": "inference"}, "e3fa35c2866e", "65f1a93610a8", "mnist-mlp-inference-n50-f4-s0-e3fa35c2"),
]


@pytest.mark.parametrize("overrides,chash,collection,name", PINNED)
def test_hashes_and_run_names_are_pinned(overrides, chash, collection, name, tmp_path):
    cfg = RunConfig.from_flower(overrides)
    assert (config_hash(cfg), collection_hash(cfg), default_run_name(cfg)) == (chash, collection, name)
    legacy = RunConfig.from_flower({**overrides, "task": "tsa"}) if cfg.task == "train" else cfg
    assert config_hash(legacy) == chash  # an old config.json (task = "tsa") keeps its identity
    assert run_dir_for(cfg.replace(output_dir=str(tmp_path), device="cpu")) == tmp_path / name


# The key sets the hashes were defined by before the fields were grouped, written out.
OLD_NON_SEMANTIC = {"output_dir", "run_name", "device", "data_dir", "eval_batch_size", "client_cpus", "client_gpus",
                    "engine", "inf_timeout", "inf_query_batch"}
# execution keys added later: where and how a run executes, in no hash
NON_SEMANTIC = OLD_NON_SEMANTIC | {"checkpoint_every", "tracker", "ray_address", "inf_probits_dir"}
OLD_INFERENCE_ONLY = {"task", "inf_f", "inf_server_frac", "inf_local_epochs", "inf_attacks", "inf_amplification",
                      "inf_pgd_steps", "inf_f_curve", "inf_amp_curve", "agg_hidden", "agg_epochs", "agg_lr",
                      "agg_adv_epochs", "agg_attack_steps", "agg_restarts", "inf_test_queries", "inf_curve_queries",
                      "agg_latent", "copur_steps", "inf_augment",
                      "inf_client_output", "inf_pgd_start", "inf_pgd_loss", "inf_pgd_grad",
                      "agg_adv_attack", "inf_eval_queries", "inf_aggregators", "inf_lr_schedule",
                      "agg_adv_subsets", "inf_probits"}  # added later, hashed only when set


def test_hashed_keys_by_group_equal_the_old_key_sets():
    # the keys of groups added later (distill, lm, detect) are in no train or inference hash
    every = set(field_names()) - set(fields_of("distill", "lm", "detect"))
    assert set(results.identity._non_semantic()) == NON_SEMANTIC
    assert hashed_keys("train") == every - NON_SEMANTIC - OLD_INFERENCE_ONLY
    assert hashed_keys("inference") == every - NON_SEMANTIC


def test_a_new_task_hashes_common_keys_its_group_and_task(monkeypatch):
    """A later task's hash covers the common group (task included) and its own groups only, so
    adding it leaves train and inference hashes alone."""
    from fedcal import catalogue

    catalogue.components("task")  # the catalogue loaded, then a stand-in new task put in it
    monkeypatch.setitem(catalogue._REGISTRY["task"], "distill",
                        Task("distill", "fedcal.tasks.distill:run_distill", groups=("defense",)))  # a stand-in new task
    keys = hashed_keys("distill")
    assert "task" in keys and "krum_f" in keys and "seed" in keys
    assert not keys & {"tau", "inf_f", "device", "data_dir"}
    assert hashed_keys("train") == set(field_names()) - NON_SEMANTIC \
        - OLD_INFERENCE_ONLY - set(fields_of("distill", "lm", "detect"))


def _committed_cells():
    known = {key_of(n) for n in field_names()}
    for path in sorted(ROOT.glob("docs/results/*/cells.csv")):
        frame = pd.read_csv(path, keep_default_na=False)
        if "run_id" not in frame.columns:
            continue
        for _, row in frame.iterrows():
            yield path, row["run_id"], {k: row[k].item() if hasattr(row[k], "item") else row[k]
                                        for k in frame.columns if k in known}


def test_committed_sweep_cells_keep_their_run_names():
    """Every committed sweep cell (config columns + run_id) maps to the run name it was stored under
    (a re-made copy's id carries ``@<make>`` after that name: fedcal/pages/table_integrity.py)."""
    cells = list(_committed_cells())
    assert len(cells) >= 78
    for path, run_id, raw in cells:
        cfg = RunConfig.from_flower(raw)
        assert (cfg.run_name or default_run_name(cfg)) == run_id.split("@")[0], path


def test_legacy_run_directory_loads_with_its_identity(tmp_path):
    """A run directory written before the task rename (config.json says task = "tsa") loads as
    a train run and is still recognised as finished."""
    cfg = RunConfig(dataset="synthetic", output_dir=str(tmp_path))
    store = RunStore(run_dir_for(cfg), cfg)
    store.start()
    store.finish()
    cfg_file = store.dir / "config.json"
    cfg_file.write_text(cfg_file.read_text().replace('"task": "train"', '"task": "tsa"'))
    assert '"task": "tsa"' in cfg_file.read_text()
    loaded = load_config(store.dir)
    assert loaded == cfg and RunStore(store.dir, loaded).is_done()


def test_dead_readers_are_gone():
    assert not hasattr(results, "final_table") and not hasattr(results, "remove_run")
    for name in ("config_hash", "collection_hash", "default_run_name"):
        assert not hasattr(RunConfig, name)  # run identity lives in fedcal.results only


# ---------------------------------------------------------------------- one run directory, one config
def _snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_reusing_a_run_name_for_another_config_is_refused(tmp_path):
    """RunStore.start in a directory holding a run of a different config raises one line naming
    the directory and the differing keys, and leaves every file as it was."""
    cfg = RunConfig(dataset="synthetic", output_dir=str(tmp_path), run_name="mine")
    store = RunStore(run_dir_for(cfg), cfg)
    store.start()
    store.log_round(0, {"accuracy": 0.5})
    store.finish()
    before = _snapshot(store.dir)
    other = cfg.replace(tau=2.0, seed=3)
    with pytest.raises(results.RunNameConflict) as err:
        RunStore(run_dir_for(other), other).start()
    assert str(err.value) == (f"run directory {str(store.dir)!r} already holds a run of a different config "
                              "(seed=0 there, 3 here; tau=1.0 there, 2.0 here): it is not overwritten; choose "
                              "another 'run-name' or remove the directory")
    assert isinstance(err.value, ConfigError) and "\n" not in str(err.value)
    assert _snapshot(store.dir) == before
    # another task in the same directory is refused too
    inf = cfg.replace(task="inference", num_clients=9, inf_f=2)
    with pytest.raises(results.RunNameConflict, match="task='train' there, 'inference' here"):
        RunStore(run_dir_for(inf), inf).start()
    # where it runs is not what it computes: the same run, restarted as before
    same = cfg.replace(engine="inprocess", eval_batch_size=7)
    RunStore(run_dir_for(same), same).start()
    assert load_metrics(store.dir).empty and not (store.dir / "DONE").exists()


def test_a_legacy_or_unreadable_config_json(tmp_path):
    cfg = RunConfig(dataset="synthetic", output_dir=str(tmp_path), run_name="old")
    store = RunStore(run_dir_for(cfg), cfg)
    store.start()
    cfg_file = store.dir / "config.json"
    cfg_file.write_text(cfg_file.read_text().replace('"task": "train"', '"task": "tsa"'))
    results.check_run_dir(store.dir, cfg)  # the same config under its legacy task name: no conflict
    cfg_file.write_text("{not json")
    with pytest.raises(results.RunNameConflict, match="has an unreadable config.json"):
        store.start()
    assert cfg_file.read_text() == "{not json"
    # a config.json whose config no longer parses is compared by its stored hash
    cfg_file.write_text(json.dumps({"config_hash": results.config_hash(cfg), "config": {"retired-key": 1}}))
    results.check_run_dir(store.dir, cfg)
    with pytest.raises(results.RunNameConflict, match=r"config hash [0-9a-f]{12} there, [0-9a-f]{12} here"):
        results.check_run_dir(store.dir, cfg.replace(tau=3.0))


def test_a_reused_run_name_is_refused_by_the_engine_even_when_forced(tmp_path):
    from fedcal.app.engine import simulate

    base = RunConfig.from_flower(dict(dataset="synthetic", num_clients=4, clients_per_round=2, num_rounds=2,
                                      batch_size=16, local_steps=2, lr=0.05, engine="inprocess",
                                      output_dir=str(tmp_path), run_name="mine"))
    run_dir = simulate(base, progress=False)
    before = _snapshot(run_dir)
    with pytest.raises(results.RunNameConflict, match="tau=1.0 there, 2.0 here"):
        simulate(base.replace(tau=2.0), progress=False, force=True)
    assert _snapshot(run_dir) == before
    assert simulate(base, progress=False) == run_dir and _snapshot(run_dir) == before  # same config: skipped


# The `fedcal defense` commands of docs/defense.md behind committed tables: strategies, τ, --grid axes
# (seeds 0-2, dataset=mnist data-dir=../shared/data output-dir=runs/defense-mnist).
DEFENSE_TABLES = {
    "defense-mnist-ratio": (["fedavg", "calguard"], [0.2, 5], ["attacker-ratio=0.1,0.4"]),
    "defense-mnist-alpha": (["fedavg", "calguard"], [0.2, 5], ["dirichlet-alpha=0.1"]),
    "defense-mnist-blend": (["fedavg", "calguard"], [5], ["tsa-blend=0.25,0.5"]),
    "defense-mnist-stepfrac": (["fedavg", "calguard"], [5], ["tsa-step-frac=0.2,0.6"]),
    "defense-mnist-mildtau": (["fedavg", "calguard"], [1.5, 3], []),
}


@pytest.mark.parametrize("table", sorted(DEFENSE_TABLES))
def test_committed_defense_tables_keep_their_run_names(table):
    """The grid of a committed defense table's command names exactly the run directories of its
    runs.csv (the table holds only the shown config columns, so its command rebuilds the rest)."""
    from fedcal.app.sweep import SweepGrid
    from fedcal.studies.defense import defense_configs

    strategies, taus, axes = DEFENSE_TABLES[table]
    base = RunConfig.from_flower({"dataset": "mnist", "data-dir": "../shared/data", "output-dir": "runs/defense-mnist"})
    grid = SweepGrid()
    for axis in axes:
        grid.add_axis(axis)
    rebuilt = {run_dir_for(c).name for c in defense_configs(base, strategies, taus, [0, 1, 2], grid.axes)}
    # a re-made copy's id carries its make after "@" (fedcal/pages/table_integrity.py); the directory is the name
    committed = {Path(p).name.split("@")[0] for p in pd.read_csv(ROOT / "docs" / "results" / table / "runs.csv")["run_dir"]}
    assert committed == rebuilt
