"""Progress per phase (issue 30, item 4): every long phase of a run says how far it is and how long
it has left, through tqdm in ``fedcal`` commands and through Flower's log under ``flwr run``."""

from __future__ import annotations

import logging

import pytest

import fedcal.progress as progress
from fedcal.progress import clock_text, estimate_left, log_reporter, phase, reporting, round_note, steps


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_log_lines_carry_the_count_the_elapsed_time_and_the_time_left_by_hand():
    clock, lines = Clock(), []
    with reporting(log_reporter(lines.append, prefix="run-a: ", every=20, clock=clock)):
        with phase("client training", 10, "clients") as bar:
            for _ in range(10):
                clock.t += 5  # a client every 5 s
                bar.update(1)
        with phase("short", 3, "steps") as bar:  # done in 3 s: never logged
            for _ in range(3):
                clock.t += 1
                bar.update(1)
    # first line after 20 s (4 clients: 20 s · 6/4 = 30 s left), then 20 s later (8: 40 · 2/8 = 10 s)
    assert lines == ["run-a: client training: 4/10 clients, 0:20 elapsed, about 0:30 left",
                     "run-a: client training: 8/10 clients, 0:40 elapsed, about 0:10 left",
                     "run-a: client training: 10/10 clients done, 0:50 elapsed"]


def test_a_phase_never_stays_silent_longer_than_the_interval_and_notes_show():
    clock, lines = Clock(), []
    with reporting(log_reporter(lines.append, every=20, clock=clock)):
        with phase("DeepSet training", None, "epochs") as bar:  # no total: a count, no estimate
            for epoch in range(7):
                clock.t += 9
                bar.update(1, f"loss {1 / (epoch + 1):.2f}")
    assert lines == ["DeepSet training: 3 epochs, 0:27 elapsed; loss 0.33",
                     "DeepSet training: 6 epochs, 0:54 elapsed; loss 0.17",
                     "DeepSet training: 7 epochs done, 1:03 elapsed; loss 0.14"]


def test_reporting_nests_and_restores_and_no_reporter_costs_nothing():
    outer, inner = [], []
    with reporting(log_reporter(outer.append, every=0)):
        with reporting(log_reporter(inner.append, every=0)):
            with phase("a", 1) as bar:
                bar.update()
        with phase("b", 1) as bar:
            bar.update()
    assert [line.split(":")[0] for line in inner] == ["a", "a"]
    assert [line.split(":")[0] for line in outer] == ["b", "b"]
    with phase("nobody listens", 2) as bar:
        bar.update(2)
    assert progress._reporter is None
    assert list(steps(iter("xyz"), "letters", 3)) == ["x", "y", "z"]


def test_time_helpers_by_hand():
    assert clock_text(59.6) == "1:00" and clock_text(3723) == "1:02:03" and clock_text(-3) == "0:00"
    assert estimate_left(30.0, 3, 12) == 90.0 and estimate_left(30.0, 0, 12) is None
    assert estimate_left(5.0, 2, None) is None
    assert round_note({"accuracy": 0.9123, "sece": -0.013, "round_seconds": 1.0}) == "accuracy 91.2%, sECE -1.30%"
    assert round_note({"ca": 0.84, "asr": 0.125}) == "CA 84.0%, ASR 12.5%" and round_note({}) == ""


def test_tqdm_reporter_counts_each_phase():
    from tqdm.auto import tqdm

    bars = []
    real_init = tqdm.__init__

    def spy(self, *a, **k):
        real_init(self, *a, **k)
        bars.append(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tqdm, "__init__", spy)
        mp.setattr(progress, "stderr_is_terminal", lambda: True)  # bars are for terminals
        with reporting(progress.tqdm_reporter("run: ")):
            with phase("attacks", 4, "attack batches") as bar:
                for _ in range(4):
                    bar.update(1, "lma")
    assert [(b.desc, b.total, b.n, b.unit) for b in bars] == [("run: attacks", 4, 4, "attack batches")]


CFG = dict(task="inference", dataset="digits", num_clients=5, clients_per_round=5, dirichlet_alpha=0.5, lr=0.1,
           batch_size=32, seed=0, inf_f=1, inf_local_epochs=1, agg_epochs=3, agg_adv_epochs=1, agg_lr=3e-3,
           agg_hidden=16, inf_query_batch=150, inf_pgd_steps=2, inf_amp_curve="4", inf_attacks="none,lma",
           inf_curve_queries=150, inf_test_queries=150, copur_steps=0, engine="inprocess")


TRAIN = {"dataset": "digits", "num-clients": 4, "clients-per-round": 2, "num-rounds": 3, "local-steps": 1,
         "engine": "inprocess"}


def test_flwr_run_logs_the_rounds_with_their_estimate(tmp_path, monkeypatch, caplog):
    """The ServerApp as `flwr run` starts it (Flower's run config, no fedcal command around it) writes
    its rounds to Flower's log."""
    from fedcal.app.client import app as client_app
    from fedcal.app.inprocess import run_inprocess
    from fedcal.app.server import app as server_app
    from fedcal.config import RunConfig
    from fedcal.results import run_dir_for

    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)
    cfg = RunConfig.from_flower({**TRAIN, "output-dir": str(tmp_path)})
    with caplog.at_level(logging.INFO, logger="flwr"):
        run_inprocess(server_app, client_app, num_supernodes=4, run_config=cfg.to_flower(), seed=0)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(run_dir_for(cfg).name)]
    assert [line.split(", ")[0] for line in lines] == [f"{run_dir_for(cfg).name}: rounds: {k}/3 rounds"
                                                       for k in (1, 2, 3)] + [f"{run_dir_for(cfg).name}: rounds: "
                                                                              "3/3 rounds done"]
    assert "about" in lines[0] and "accuracy" in lines[0]


@pytest.mark.slow
def test_flwr_run_logs_every_phase_of_an_inference_run_with_its_estimate(tmp_path, monkeypatch, caplog):
    """The ServerApp as `flwr run` starts it (Flower's run config, no fedcal command around it): its
    phases reach Flower's log."""
    from fedcal.app.client import app as client_app
    from fedcal.app.inprocess import run_inprocess
    from fedcal.app.server import app as server_app
    from fedcal.config import RunConfig

    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)  # every step a line: the test sees each phase
    cfg = RunConfig.from_flower(dict(CFG, output_dir=str(tmp_path)))
    with caplog.at_level(logging.INFO, logger="flwr"):
        run_inprocess(server_app, client_app, num_supernodes=5, run_config=cfg.to_flower(), seed=0)
    lines = [r.getMessage() for r in caplog.records if ": " in r.getMessage() and " elapsed" in r.getMessage()]
    phases = list(dict.fromkeys(line.split(": ")[1] for line in lines))
    assert phases == ["client training", "queries (server split)", "queries (test split)", "DeepSet training",
                      "DeepSet adversarial training", "autoencoder training (manifold projection, CoPur)",
                      "attacks", "accuracy-vs-f curve, f_adv = 0", "accuracy-vs-f curve, f_adv = 1",
                      "accuracy-vs-f curve, f_adv = 2",
                      "amplification curve, a = 4"]
    first = next(line for line in lines if "client training" in line)
    assert first.startswith("digits-mlp-inference-n5-f1-s0-") and "1/5 clients" in first and "left" in first
    assert any("5/5 clients done" in line for line in lines)


def test_a_sweep_worker_logs_its_rounds(tmp_path):
    """A sweep's worker runs its cell with progress off and keeps the caller's reporter: its rounds
    (and any long phase) as lines on stderr."""
    from fedcal.app.engine import simulate
    from fedcal.config import RunConfig

    lines = []
    train = RunConfig.from_flower({**TRAIN, "output-dir": str(tmp_path)})
    with reporting(log_reporter(lines.append, every=0)):
        simulate(train, progress=False)
    assert [line.split(", ")[0] for line in lines] == ["rounds: 1/3 rounds", "rounds: 2/3 rounds",
                                                       "rounds: 3/3 rounds", "rounds: 3/3 rounds done"]
    assert "accuracy" in lines[0]


@pytest.mark.slow
def test_fedcal_commands_show_a_bar_per_phase(tmp_path, monkeypatch):
    from fedcal.app.engine import simulate
    from fedcal.config import RunConfig

    seen = []

    def reporter(name, total, unit):
        seen.append(name)
        return progress._LogHandle(lambda line: None, "", name, total, unit, 1e9, Clock())

    monkeypatch.setattr("fedcal.app.engine.tqdm_reporter", lambda prefix: reporter)
    cfg = RunConfig.from_flower(dict(CFG, output_dir=str(tmp_path), inf_f_curve=False, inf_amp_curve=""))
    simulate(cfg, progress=True)
    assert seen[:3] == ["client training", "queries (server split)", "queries (test split)"] and "attacks" in seen


def test_in_a_log_file_a_run_under_a_grid_bar_leaves_no_escape_codes(tmp_path, capsys):
    """stderr not a terminal (a log file; pytest's capture is one): a sweep's cells bar is drawn, but
    the cell's own round bar would sit under it, positioned with cursor-movement escape codes that
    stay in the log as ^[[A; so the cell reports in lines instead, and the log holds no escape code."""
    from fedcal.app.sweep import SweepGrid, run_sweep

    assert not progress.stderr_is_terminal()
    configs = SweepGrid({**{k.replace("-", "_"): v for k, v in TRAIN.items()}, "num_rounds": 1,
                         "output_dir": str(tmp_path)}, {"seed": [0, 1]}).configs()
    assert run_sweep(configs, jobs=1, progress=True) == {}
    err = capsys.readouterr().err
    assert "cells: 100%" in err and "\x1b" not in err


def test_on_a_terminal_phases_get_bars_and_elsewhere_lines_above_the_bar(monkeypatch, capsys):
    from tqdm.auto import tqdm

    monkeypatch.setattr(progress, "stderr_is_terminal", lambda: False)
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)
    with tqdm(total=2, desc="run") as outer:  # a run's round bar is open: a phase bar would be nested
        with reporting(progress.tqdm_reporter("run: ")):
            with phase("attacks", 2, "batches") as bar:
                bar.update(1)
                bar.update(1)
        outer.update(2)
    err = capsys.readouterr().err
    assert "run: attacks: 1/2 batches" in err and "run: attacks: 2/2 batches done" in err and "\x1b" not in err
    monkeypatch.setattr(progress, "stderr_is_terminal", lambda: True)
    assert isinstance(progress.tqdm_reporter("run: "), progress._TqdmReporter)


def test_a_resumed_run_says_so_above_the_bars_as_information(tmp_path, caplog):
    """The resume line goes where the progress goes (above the bars, through tqdm.write, in a fedcal
    command), not as a warning printed through the bar; with no reporter installed it stays a
    warning line, so a run without bars still says it resumed."""
    from fedcal.config import RunConfig
    from fedcal.results import RunStore, run_dir_for

    cfg = RunConfig.from_flower({**TRAIN, "output-dir": str(tmp_path)})
    store = RunStore(run_dir_for(cfg), cfg)
    with pytest.raises(KeyboardInterrupt), store.session(rounds=3):
        store.log_round(1, {"accuracy": 0.5})
        store.save_checkpoint(1, {})
        raise KeyboardInterrupt
    lines = []
    with caplog.at_level(logging.WARNING, logger="fedcal"), reporting(log_reporter(lines.append)):
        with RunStore(run_dir_for(cfg), cfg).session(rounds=3) as checkpoint:
            assert checkpoint.round == 1
    assert lines == [f"{store.dir}: resumed from round 1 (--restart starts over)"]
    assert not [r for r in caplog.records if "resumed" in r.getMessage()]
    with caplog.at_level(logging.WARNING, logger="fedcal"):
        progress.notice("no bar here", logging.getLogger("fedcal.results"))
    assert [r.getMessage() for r in caplog.records] == ["no bar here"]
