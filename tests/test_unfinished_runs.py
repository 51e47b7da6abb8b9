"""Unfinished runs are never reported as final (issue 16, item 7).

A run is finished when its DONE marker holds its config hash. An interrupted cell (rounds up to
16 of 60, no DONE) and a crashed cell (round 0 only) must never appear as final in a sweep's
cells.csv, a τ table or `fedcal report`; per-round tables keep them, flagged finished = False;
every report names each run it left out and how far it got.
"""

import json
import logging

import pandas as pd
import pytest

from fedcal.app.sweep import SweepGrid
from fedcal.cli import main as cli_main
from fedcal.config import RunConfig
from fedcal.reports import final_metrics, write_report, write_results
from fedcal.results import (RunStore, UnfinishedRunError, config_hash, load_metrics, load_model, run_dir_for,
                            run_status)

METRICS = ("accuracy", "ece", "sece", "brier", "nll")


def log_rounds(store: RunStore, rounds, acc0: float, *, replies: bool = False) -> None:
    """Round r logs accuracy acc0 + r / 1000 (so the round a value came from is readable), the
    other metrics derived from it, and (``replies``) per-round reply counts like STRAT2's."""
    for r in rounds:
        acc = acc0 + r / 1000
        row = {"accuracy": acc, "ece": acc / 10, "sece": -acc / 10, "brier": 1 - acc, "nll": 2 - acc,
               "round_seconds": 0.5}
        if replies:
            row.update(replies_received=5.0, replies_accepted=4.0, replies_rejected=1.0)
        store.log_round(r, row)


@pytest.fixture
def sweep(tmp_path):
    """Three cells of a 60-round sweep: seed 0 finished, seed 1 interrupted after round 16,
    seed 2 crashed after its round-0 evaluation."""
    grid = SweepGrid({"dataset": "synthetic", "num-rounds": 60, "output-dir": str(tmp_path / "runs")},
                     {"seed": [0, 1, 2]})
    cfgs = grid.configs()
    stores = [RunStore(run_dir_for(c), c) for c in cfgs]
    for s in stores:
        s.start()
    log_rounds(stores[0], range(61), 0.5, replies=True)
    stores[0].finish()
    log_rounds(stores[1], range(17), 0.3)
    log_rounds(stores[2], [0], 0.1)
    return grid, cfgs, stores


def test_run_status_tells_finished_from_unfinished_and_how_far(sweep):
    _, _, (done, interrupted, crashed) = sweep
    assert run_status(done.dir).finished and run_status(done.dir).last_round == 60
    s = run_status(interrupted.dir)
    assert (s.finished, s.last_round, s.num_rounds, s.why) == (False, 16, 60, "no DONE marker")
    assert s.describe() == f"{interrupted.dir}: unfinished (no DONE marker; rounds logged up to 16 of 60)"
    assert run_status(crashed.dir).describe() == f"{crashed.dir}: unfinished (no DONE marker; rounds logged up to 0 of 60)"
    # a DONE of another config (the directory reused by hand) does not make a run finished
    (crashed.dir / "DONE").write_text(config_hash(crashed.cfg.replace(tau=2.0)))
    assert run_status(crashed.dir).why == "its DONE marker belongs to another config"
    assert not run_status(crashed.dir.parent / "never-started").finished


def test_sweep_cells_hold_finished_cells_only_and_rounds_flag_the_rest(sweep, tmp_path, caplog):
    grid, cfgs, (done, interrupted, crashed) = sweep
    with caplog.at_level(logging.WARNING, logger="fedcal.reports"):
        cells = write_results(cfgs, tmp_path / "rep", list(grid.axes))
    on_disk = pd.read_csv(tmp_path / "rep" / "cells.csv")
    assert on_disk["run_id"].tolist() == cells["run_id"].tolist() == [done.run_id]
    # the finished cell's final round (60), its metrics unchanged by the extra per-round counts
    row = on_disk.iloc[0]
    assert row["accuracy"] == pytest.approx(0.56) and row["brier"] == pytest.approx(0.44)
    assert row["ece"] == pytest.approx(0.056) and row["sece"] == pytest.approx(-0.056)
    assert row["nll"] == pytest.approx(1.44)
    assert {*METRICS, "round_seconds", "seed"} <= set(on_disk.columns)
    assert row["replies_accepted"] == 4.0  # extra per-round metrics: extra columns of the final round
    # every left-out cell is named once, with how far it got
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"left out of cells.csv: {interrupted.dir}: unfinished (no DONE marker; rounds logged up to 16 of 60)",
                     f"left out of cells.csv: {crashed.dir}: unfinished (no DONE marker; rounds logged up to 0 of 60)"]
    rounds = pd.read_csv(tmp_path / "rep" / "rounds.csv")
    per_run = rounds.groupby("run_id").agg(finished=("finished", "first"), flags=("finished", "nunique"),
                                           last=("round", "max"))
    assert per_run.loc[done.run_id].tolist() == [True, 1, 60]
    assert per_run.loc[interrupted.run_id].tolist() == [False, 1, 16]
    assert per_run.loc[crashed.run_id].tolist() == [False, 1, 0]


def test_final_metrics_never_reads_an_unfinished_run(sweep, caplog):
    _, _, (done, interrupted, crashed) = sweep
    with caplog.at_level(logging.WARNING, logger="fedcal.reports"):
        final = final_metrics([done.dir, interrupted.dir, crashed.dir])
        assert final_metrics([interrupted.dir, crashed.dir]).empty
    assert final["run_id"].tolist() == [done.run_id] and final["round"].tolist() == [60]
    assert sum(interrupted.dir.name in r.getMessage() for r in caplog.records) == 2


def test_sweep_command_shows_only_finished_cells(sweep, tmp_path, capsys, monkeypatch):
    """`fedcal sweep` whose unfinished cells fail again: its printed table and cells.csv hold the
    finished cell only, and each cell left out is named."""
    import fedcal.app.sweep as sw

    _, _, (done, interrupted, crashed) = sweep
    monkeypatch.setattr(sw, "_run_cell", lambda flower_cfg, *_: (str(run_dir_for(RunConfig.from_flower(flower_cfg))),
                                                               "RuntimeError: crashed again"))
    rep = tmp_path / "rep"
    assert cli_main(["sweep", "--grid", "seed=0,1,2", "--report", str(rep), "--no-progress", "dataset=synthetic",
                     "num-rounds=60", f'output-dir="{tmp_path / "runs"}"']) == 1
    io = capsys.readouterr()
    lines = io.out.split("\ntables:", 1)[0].splitlines()
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| ")]  # Markdown
    assert cells[0] == ["seed", "accuracy_%", "ece_%", "sece_%", "brier", "nll"]  # percent, as τ tables
    assert lines[-1].startswith("accuracy, ECE and sECE in percent")  # the units and sECE's sign, once
    assert [row[0] for row in cells[1:]] == ["0"]  # the table's one row: the finished cell
    assert pd.read_csv(rep / "cells.csv")["seed"].tolist() == [0]
    assert [line for line in io.err.splitlines() if line.startswith("fedcal: warning")] == [
        f"fedcal: warning: left out of cells.csv: {interrupted.dir}: unfinished (no DONE marker; rounds logged up "
        "to 16 of 60)",
        f"fedcal: warning: left out of cells.csv: {crashed.dir}: unfinished (no DONE marker; rounds logged up to 0 "
        "of 60)"]


def tau_runs(tmp_path):
    """Benign and τ=5 finished (evaluated every 4 rounds and at the last); τ=0.2 interrupted at round
    16 of 60 with better-looking numbers."""
    base = RunConfig(dataset="synthetic", num_rounds=60, eval_every=4, output_dir=str(tmp_path / "runs"))
    dirs = {}
    for tau, acc, finish, last in ((1.0, 0.5, True, 60), (5.0, 0.4, True, 60), (0.2, 0.9, False, 16)):
        cfg = base.replace(attack="none") if tau == 1.0 else base.replace(tau=tau)
        s = RunStore(run_dir_for(cfg), cfg)
        s.start()
        log_rounds(s, range(0, last + 1, 4) if last == 16 else [*range(0, 60, 4), 60], acc, replies=True)
        s.write_table("reliability.csv", pd.DataFrame({"lower": [0.0, 0.5], "upper": [0.5, 1.0], "count": [3, 7],
                                                       "confidence": [0.3, 0.8], "accuracy": [0.2, 0.9]}))
        if finish:
            s.finish()
        dirs[tau] = s.dir
    return dirs


def test_tau_report_leaves_an_interrupted_run_out_of_table_diagrams_and_trajectories(tmp_path, caplog):
    dirs = tau_runs(tmp_path)
    with caplog.at_level(logging.WARNING, logger="fedcal.reports"):
        table = write_report(list(dirs.values()), tmp_path / "rep")
    assert table["tau"].tolist() == [1.0, 5.0]
    assert pd.read_csv(tmp_path / "rep" / "table.csv")["tau"].tolist() == [1.0, 5.0]
    assert table["accuracy_%"].tolist() == pytest.approx([56.0, 46.0])  # round 60 of each finished run
    md_taus = [line.split("|")[1].strip() for line in (tmp_path / "rep" / "table.md").read_text().splitlines()
               if line.startswith("| ") and line.split("|")[1].strip()[:1].isdigit()]
    assert md_taus == ["1", "5"]
    traj = pd.read_csv(tmp_path / "rep" / "trajectories.csv")
    assert sorted(traj["tau"].unique()) == [1.0, 5.0] and set(traj["runs"]) == {1}
    rel = pd.read_csv(tmp_path / "rep" / "reliability.csv")
    assert sorted(rel["run"].unique()) == ["TSA τ=5", "benign (τ=1)"]
    assert [r.getMessage() for r in caplog.records] == [
        f"left out of the τ report: {dirs[0.2]}: unfinished (no DONE marker; rounds logged up to 16 of 60)"]


def test_fedcal_report_names_what_it_left_out(tmp_path, capsys):
    dirs = tau_runs(tmp_path)
    out = tmp_path / "rep"
    assert cli_main(["report", *map(str, dirs.values()), "--out", str(out)]) == 0
    io = capsys.readouterr()
    assert io.err.splitlines() == [
        f"fedcal: warning: left out of the report: {dirs[0.2]}: unfinished (no DONE marker; rounds logged up to 16 "
        "of 60)"]
    assert io.out.splitlines()[-1] == f"report: {out} (2 finished runs; 1 unfinished left out)"
    assert pd.read_csv(out / "table.csv")["tau"].tolist() == [1.0, 5.0]


def test_fedcal_report_fails_in_one_line_when_nothing_finished(sweep, tmp_path, capsys):
    _, _, (_, interrupted, crashed) = sweep
    out = tmp_path / "rep"
    assert cli_main(["report", str(interrupted.dir), str(crashed.dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"fedcal: warning: left out of the report: {interrupted.dir}: unfinished (no DONE marker; rounds logged up to "
        "16 of 60)",
        f"fedcal: warning: left out of the report: {crashed.dir}: unfinished (no DONE marker; rounds logged up to 0 "
        "of 60)",
        "fedcal: error: no finished run among the 2 run directories: nothing to report"]
    assert not (out / "table.csv").exists()


def test_inference_report_reads_finished_runs_only(tmp_path, capsys):
    """An inference run's accuracy.csv exists before its DONE: the report must not read it."""
    base = RunConfig(task="inference", dataset="synthetic", num_clients=9, clients_per_round=5, inf_f=2,
                     output_dir=str(tmp_path / "runs"))
    dirs = []
    for seed, acc, finish in ((0, 0.8, True), (1, 0.1, False)):
        cfg = base.replace(seed=seed)
        s = RunStore(run_dir_for(cfg), cfg)
        s.start()
        s.write_table("accuracy.csv", pd.DataFrame({
            "n": 9, "f": 2, "seed": seed, "f_adv": 2, "aggregator": ["Mean", "Mean"], "attack": ["none", "lma"],
            "accuracy": [acc, acc - 0.05]}))
        if finish:
            s.finish()
        dirs.append(s.dir)
    out = tmp_path / "rep"
    assert cli_main(["report", *map(str, dirs), "--out", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"fedcal: warning: left out of the report: {dirs[1]}: unfinished (no DONE marker; no round logged)"]
    cells = pd.read_csv(out / "cells.csv")
    assert cells["seed"].unique().tolist() == [0] and cells["accuracy"].tolist() == [0.8, 0.75]
    assert cli_main(["report", str(dirs[1]), "--out", str(tmp_path / "rep2")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == \
        "fedcal: error: no finished run among the 1 run directories: nothing to report"


def test_analyses_refuse_an_unfinished_run(sweep, tmp_path, capsys):
    _, _, (_, interrupted, _) = sweep
    with pytest.raises(UnfinishedRunError, match="unfinished"):
        load_model(interrupted.dir)
    assert cli_main(["posthoc", str(interrupted.dir), "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"fedcal: error: no final model: {interrupted.dir}: unfinished (no DONE marker; rounds logged "
                   "up to 16 of 60)"]


def test_load_metrics_flags_every_row(sweep):
    _, _, (done, interrupted, crashed) = sweep
    df = load_metrics([done.dir, interrupted.dir, crashed.dir])
    assert df.columns[-1] == "finished"
    assert df.groupby("run_id")["finished"].agg(set).to_dict() == {
        done.run_id: {True}, interrupted.run_id: {False}, crashed.run_id: {False}}
    assert json.loads((done.dir / "config.json").read_text())["config_hash"] == (done.dir / "DONE").read_text()


def test_real_interrupted_and_crashed_runs_are_never_final(tmp_path, monkeypatch, capsys):
    """End to end: three real 6-round runs (in-process engine); seed 1 is interrupted (Ctrl-C)
    after logging round 3, seed 2 crashes after logging round 0. The sweep tables and `fedcal
    report` show seed 0 only as final; rounds.csv keeps the others' rounds, flagged."""
    from fedcal.app.engine import simulate

    real = RunStore.log_round

    def dying(self, server_round, metrics):
        real(self, server_round, metrics)
        if self.cfg.seed == 1 and server_round == 3:
            raise KeyboardInterrupt
        if self.cfg.seed == 2 and server_round == 0:
            raise RuntimeError("the server crashed")

    monkeypatch.setattr(RunStore, "log_round", dying)
    grid = SweepGrid({"dataset": "synthetic", "num-clients": 4, "clients-per-round": 2, "num-rounds": 6,
                      "batch-size": 16, "local-steps": 2, "lr": 0.05, "engine": "inprocess",
                      "output-dir": str(tmp_path / "runs")}, {"seed": [0, 1, 2]})
    cfgs = grid.configs()
    for cfg in cfgs:
        try:
            simulate(cfg, progress=False)
        except BaseException:  # noqa: BLE001 — the interruption and the crash under test
            pass
    dirs = [run_dir_for(c) for c in cfgs]
    assert [run_status(d).describe() for d in dirs] == [
        f"{dirs[0]}: finished",
        f"{dirs[1]}: unfinished (no DONE marker; rounds logged up to 3 of 6)",
        f"{dirs[2]}: unfinished (no DONE marker; rounds logged up to 0 of 6)"]
    cells = write_results(cfgs, tmp_path / "rep", ["seed"])
    assert cells["seed"].tolist() == [0]
    rounds = pd.read_csv(tmp_path / "rep" / "rounds.csv")
    assert rounds.groupby("seed").agg(last=("round", "max"), finished=("finished", "all")).to_dict("index") == {
        0: {"last": 6, "finished": True}, 1: {"last": 3, "finished": False}, 2: {"last": 0, "finished": False}}
    capsys.readouterr()
    assert cli_main(["report", *map(str, dirs), "--out", str(tmp_path / "table")]) == 0
    assert pd.read_csv(tmp_path / "table" / "table.csv")["run_id"].tolist() == [dirs[0].name]
    assert len([line for line in capsys.readouterr().err.splitlines() if "left out of the report" in line]) == 2
