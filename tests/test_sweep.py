"""Sweeps: cells from a grid, skipping finished ones, resuming after an interruption."""

import json

import pandas as pd
import pytest

from fedcal.app.sweep import SweepGrid, run_sweep
from fedcal.cli import main as cli_main
from fedcal.config import ConfigError
from fedcal.reports import collect
from fedcal.results import RunNameConflict, run_dir_for

BASE = dict(dataset="synthetic", num_clients=4, clients_per_round=2, num_rounds=2, batch_size=16, local_steps=2,
            lr=0.05, engine="inprocess")


def test_grid_from_toml_and_flags(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text('[base]\ndataset = "synthetic"\n[grid]\ntau = [0.2, 5.0]\nseed = [0, 1]\n')
    g = SweepGrid.from_toml(f)
    g.add_axis("strategy=fedavg,median")
    cfgs = g.configs({"output-dir": str(tmp_path)})
    assert len(cfgs) == 8
    assert {(c.tau, c.seed, c.strategy) for c in cfgs} == {
        (t, s, st) for t in (0.2, 5.0) for s in (0, 1) for st in ("fedavg", "median")}
    g.add_axis("tau=0")  # every cell is validated before anything runs
    with pytest.raises(ConfigError, match="'tau'"):
        g.configs()


def test_sweep_skips_finished_cells_and_resumes(tmp_path):
    g = SweepGrid(dict(BASE, output_dir=str(tmp_path)), {"tau": [0.5, 2.0], "seed": [0, 1]})
    cfgs = g.configs()
    assert run_sweep(cfgs, jobs=2, progress=False) == {}
    stamps = {c: (run_dir_for(c) / "metrics.csv").stat().st_mtime_ns for c in cfgs}
    # An interruption: two cells lost their DONE marker mid-run (partial metrics stay).
    for c in cfgs[:2]:
        (run_dir_for(c) / "DONE").unlink()
    assert run_sweep(cfgs, jobs=1, progress=False) == {}
    for c in cfgs[2:]:  # finished cells untouched
        assert (run_dir_for(c) / "metrics.csv").stat().st_mtime_ns == stamps[c]
    for c in cfgs[:2]:
        assert (run_dir_for(c) / "DONE").exists()
    cells, rounds = collect(cfgs, ["tau", "seed"])
    assert len(cells) == 4 and {"accuracy", "sece", "tau", "seed"} <= set(cells.columns)
    assert set(rounds["round"]) == {0, 1, 2}


def test_a_failing_cell_does_not_stop_the_sweep(tmp_path, monkeypatch):
    import fedcal.app.sweep as sw

    real = sw._run_cell

    def flaky(cfg, *progress):
        if cfg["seed"] == 1:
            raise_in = dict(cfg, dataset="mnist", **{"data-dir": str(tmp_path / "nothing")})
            return real(raise_in, *progress)
        return real(cfg, *progress)

    monkeypatch.setattr(sw, "_run_cell", flaky)
    monkeypatch.setattr("torchvision.datasets.MNIST.__init__", lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    g = SweepGrid(dict(BASE, output_dir=str(tmp_path)), {"seed": [0, 1, 2]})
    failures = run_sweep(g.configs(), jobs=1, progress=False)
    assert len(failures) == 1
    assert sum((run_dir_for(c) / "DONE").exists() for c in g.configs()) == 2


def test_sweep_command(tmp_path, capsys):
    args = ["sweep", "--grid", "tau=0.5,2", "--report", str(tmp_path / "rep"), "--no-progress",
            *[f"{k.replace('_', '-')}={v!r}".replace("'", '"') for k, v in BASE.items()],
            f'output-dir="{tmp_path}"']
    assert cli_main(args) == 0
    cells = pd.read_csv(tmp_path / "rep" / "cells.csv")
    assert sorted(cells["tau"]) == [0.5, 2.0]


def test_a_sweep_says_which_cells_it_reuses_and_which_tables_it_overwrites(tmp_path, capsys):
    """A second sweep over a grid that grew by one cell runs that cell only and says so in one line;
    it names the tables of the first that it replaces; --force runs a finished cell again."""
    common = ["--report", str(tmp_path / "rep"), "--no-progress",
              *[f"{k.replace('_', '-')}={v!r}".replace("'", '"') for k, v in BASE.items()], f'output-dir="{tmp_path}"']
    assert cli_main(["sweep", "--grid", "tau=0.5,2", *common]) == 0
    first = capsys.readouterr().out
    assert "already finished" not in first and "overwriting" not in first
    assert cli_main(["sweep", "--grid", "tau=0.5,2,5", *common]) == 0
    out = capsys.readouterr().out
    assert "2 of 3 cells already finished, reused (use --force to re-run)" in out.splitlines()
    rep = tmp_path / "rep"
    assert f"overwriting the tables an earlier invocation wrote: {rep / 'cells.csv'}, {rep / 'rounds.csv'}" in out
    assert sorted(pd.read_csv(rep / "cells.csv")["tau"]) == [0.5, 2.0, 5.0]
    one = SweepGrid(dict(BASE, output_dir=str(tmp_path)), {"tau": [0.5]}).configs()[0]
    before = (run_dir_for(one) / "metrics.csv").stat().st_mtime_ns
    assert cli_main(["sweep", "--grid", "tau=0.5", "--force", *common]) == 0
    assert "already finished" not in capsys.readouterr().out
    assert (run_dir_for(one) / "metrics.csv").stat().st_mtime_ns != before and (run_dir_for(one) / "DONE").exists()


def test_a_sweep_refuses_a_run_name_shared_by_different_cells(tmp_path):
    g = SweepGrid(dict(BASE, output_dir=str(tmp_path), run_name="one"), {"tau": [0.5, 2.0]})
    with pytest.raises(RunNameConflict, match="cells of different configs share the run directory"):
        g.configs()
    same = SweepGrid(dict(BASE, output_dir=str(tmp_path), run_name="one"), {"engine": ["inprocess", "ray"]})
    assert len(same.configs()) == 1  # the same run twice (where it runs is not what it computes): one cell


def test_a_sweep_refuses_a_cell_whose_directory_holds_another_config_before_running(tmp_path, monkeypatch):
    import fedcal.app.sweep as sw

    g = SweepGrid(dict(BASE, output_dir=str(tmp_path)), {"tau": [0.5, 2.0]})
    cfgs = g.configs()
    squatter = cfgs[1].replace(seed=7)
    d = run_dir_for(cfgs[1])
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"config": squatter.to_flower()}))
    ran = []
    monkeypatch.setattr(sw, "_run_cell", lambda c, *progress: ran.append(c) or (None, None))
    with pytest.raises(RunNameConflict, match="seed=7 there, 0 here"):
        run_sweep(cfgs, jobs=1, progress=False)
    assert ran == [] and not run_dir_for(cfgs[0]).exists()
    assert json.loads((d / "config.json").read_text())["config"]["seed"] == 7
