"""A run's checkpoint and run folder are untrusted input (the hostile-input matrix of
tests/test_bad_inputs.py, for the files a run leaves on disk).

A checkpoint may be edited or crafted: the config hash it must carry is readable from the run's
config.json, so it proves nothing. Each row of :data:`HOSTILE` tampers with the round-4
checkpoint of a train run that crashed in round 5 (in this process, as in test_lifecycle.py) and
re-runs the config: the run must say once that it cannot resume from the checkpoint, start over,
write nothing outside its folder, and end byte-identical to the uninterrupted run. The distill
task's own state check (the same mechanism, RunStore.resumable) runs with -m slow.

Beside them: a finished run whose metrics.csv lost its last bytes fails ``fedcal runs --check``
(damaged) as the reports leave it out, and a report reads a run whose folder was renamed.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedcal.app.engine import simulate
from fedcal.cli import main as cli_main
from fedcal.config import RunConfig
from fedcal.reports.runs import finished_only
from fedcal.results import CHECKPOINT_FILE, METRICS_FILE, run_dir_for, run_events, run_state
from tests.test_lifecycle import crash_in_round

pytestmark = pytest.mark.usefixtures("one_thread_and_tmp_cache")

# a train run of a few seconds (test_lifecycle.py's): 8 rounds, a checkpoint every 2, FoolsGold
# (a rule that keeps state between rounds, so its state is in the checkpoint too)
TRAIN = dict(dataset="synthetic", model="mlp", num_clients=4, clients_per_round=3, num_rounds=8, attacker_ratio=0.25,
             attack="tsa", tau=5.0, lr=0.05, batch_size=16, local_steps=2, engine="inprocess", checkpoint_every=2,
             strategy="foolsgold")
UNUSABLE = re.compile(r"cannot resume from its checkpoint \((.*)\); starting the run over")
RESULTS = ("metrics.csv", "model.pt", "reliability.csv", "rejections.csv", "aggregation.csv")


def _cfg(out: Path) -> RunConfig:
    return RunConfig(**{**TRAIN, "output_dir": str(out)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory, one_thread_and_tmp_cache):
    """(the uninterrupted run's folder, the folder of the same run crashed in round 5 with its
    round-4 checkpoint) — each test copies the latter."""
    base = tmp_path_factory.mktemp("runs")
    ref = simulate(_cfg(base / "ref"), progress=False)
    cfg = _cfg(base / "crashed")
    crash_in_round(cfg, 5)
    crashed = run_dir_for(cfg)
    assert torch.load(crashed / CHECKPOINT_FILE, weights_only=True)["round"] == 4
    return ref, crashed


def _crashed_copy(runs, tmp_path: Path) -> tuple[RunConfig, Path]:
    cfg = _cfg(tmp_path / "out")
    shutil.copytree(runs[1], run_dir_for(cfg))
    return cfg, run_dir_for(cfg)


# ---------------------------------------------------------------------------------- the hostile checkpoints
def _set(*path, value):
    """A tampering: the checkpoint's entry at ``path`` (keys into nested dicts) set to ``value``."""
    def tamper(saved, run_dir):
        inner = saved
        for key in path[:-1]:
            inner = inner[key]
        inner[path[-1]] = value(inner.get(path[-1])) if callable(value) else value
    return tamper


def _drop(*path):
    def tamper(saved, run_dir):
        inner = saved
        for key in path[:-1]:
            inner = inner[key]
        del inner[path[-1]]
    return tamper


def _arrays(change):
    """A tampering of the checkpointed global model: ``change(state dict)`` in place."""
    def tamper(saved, run_dir):
        change(saved["state"]["arrays"])
    return tamper


def _first_weight(arrays):
    return next(k for k, v in arrays.items() if v.is_floating_point())


def _nan(arrays):
    arrays[_first_weight(arrays)][0] = float("nan")


def _reshaped(arrays):
    k = _first_weight(arrays)
    arrays[k] = torch.zeros(3, 3)


HOSTILE = {
    # the round: past the run's end, before its start, of another type
    "round past the last": _set("round", value=10**6),
    "round one past the last": _set("round", value=8),
    "negative round": _set("round", value=-5),
    "round a float": _set("round", value=4.0),
    "round a string": _set("round", value="4"),
    # the files: only the run's own, with sizes and bytes
    "file entries not a dict": _set("files", value=[]),
    "append size a string": _set("files", "metrics.csv", "size", value="10"),
    "append size negative": _set("files", "metrics.csv", "size", value=-1),
    "table data a string": _set("files", "rejections.csv", "data", value="round\n"),
    "file kind unknown": _set("files", "rejections.csv", "kind", value="symlink"),
    "metrics.csv not recorded": _drop("files", "metrics.csv"),
    "a file that is not the run's": _set("files", "notes.txt", value={"kind": "table", "data": b"x"}),
    # the task's state
    "state not a dict": _set("state", value=[1, 2]),
    "state lacks the rng": _drop("state", "rng"),
    "state lacks the rows": _drop("state", "rows"),
    "model arrays NaN": _arrays(_nan),
    "model array of another shape": _arrays(_reshaped),
    "model array missing": _arrays(lambda a: a.pop(_first_weight(a))),
    "model array extra": _arrays(lambda a: a.update(extra=torch.zeros(2))),
    "rng state garbage": _set("state", "rng", value={"torch": torch.zeros(3), "numpy": 1, "python": "x"}),
    "rng torch state garbage": _set("state", "rng", "torch", value=torch.zeros(3, dtype=torch.uint8)),
    "rows of other rounds": _set("state", "rows", value=lambda rows: rows[:-1]),
    "aggregated past the round": _set("state", "aggregated", value=99),
    "rule state garbage": _set("state", "strategy", value={"history": 5}),
    "rule state not a dict": _set("state", "strategy", value="x"),
    # the file itself
    "not a checkpoint": lambda saved, run_dir: saved.clear(),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_checkpoint_starts_the_run_over_with_one_warning(runs, tmp_path, name, caplog):
    """Every row: one warning naming why, the run started over, and its results equal the
    uninterrupted run's byte for byte (nothing of the tampered checkpoint got into them)."""
    ref, _ = runs
    cfg, run_dir = _crashed_copy(runs, tmp_path)
    saved = torch.load(run_dir / CHECKPOINT_FILE, weights_only=True)
    HOSTILE[name](saved, run_dir)
    torch.save(saved, run_dir / CHECKPOINT_FILE)
    with caplog.at_level(logging.WARNING):
        simulate(cfg, progress=False)
    said = UNUSABLE.findall(caplog.text)
    assert len(said) == 1 and "resumed" not in caplog.text, caplog.text
    events = [e for _, e in run_events(run_dir)]
    refused = max(i for i, e in enumerate(events) if e.startswith("checkpoint unusable"))
    assert events[refused + 1].startswith("started") and events[-1] == "finished"
    for name_ in RESULTS:
        assert (run_dir / name_).read_bytes() == (ref / name_).read_bytes(), name_
    assert not (run_dir / "notes.txt").exists()


def test_a_checkpoint_that_is_a_directory_starts_the_run_over(runs, tmp_path, caplog):
    ref, _ = runs
    cfg, run_dir = _crashed_copy(runs, tmp_path)
    (run_dir / CHECKPOINT_FILE).unlink()
    (run_dir / CHECKPOINT_FILE).mkdir()
    (run_dir / CHECKPOINT_FILE / "data.pkl").write_bytes(b"x")
    with caplog.at_level(logging.WARNING):
        simulate(cfg, progress=False)
    assert UNUSABLE.findall(caplog.text) == [f"{CHECKPOINT_FILE} is not a regular file"]
    assert (run_dir / METRICS_FILE).read_bytes() == (ref / METRICS_FILE).read_bytes()
    assert not (run_dir / CHECKPOINT_FILE).exists()


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_a_checkpoint_never_writes_or_truncates_files_outside_its_run(runs, tmp_path, where, caplog):
    """File names from a checkpoint are never joined to the run folder: a relative name climbing
    out of it and an absolute path, as an appended file (which a resume truncates) or a table
    (which it rewrites), refuse the checkpoint, and the files they name are untouched."""
    ref, _ = runs
    cfg, run_dir = _crashed_copy(runs, tmp_path)
    victim, planted = tmp_path / "victim.txt", tmp_path / "planted.txt"
    victim.write_text("precious data\n")
    name = (lambda p: str(p)) if where == "absolute" else (lambda p: "../../" + p.name)
    assert (run_dir / name(victim)).resolve() == victim.resolve()  # the names do reach the files
    saved = torch.load(run_dir / CHECKPOINT_FILE, weights_only=True)
    saved["files"][name(victim)] = {"kind": "append", "size": 0}
    saved["files"][name(planted)] = {"kind": "table", "data": b"written by a checkpoint\n"}
    torch.save(saved, run_dir / CHECKPOINT_FILE)
    with caplog.at_level(logging.WARNING):
        simulate(cfg, progress=False)
    assert victim.read_text() == "precious data\n"
    assert not planted.exists()
    said = UNUSABLE.findall(caplog.text)
    assert len(said) == 1 and "not one of the run's" in said[0], caplog.text
    assert (run_dir / METRICS_FILE).read_bytes() == (ref / METRICS_FILE).read_bytes()


def test_an_untampered_checkpoint_still_resumes(runs, tmp_path, caplog):
    """The checks refuse nothing a run writes itself: the crashed copy resumes from round 4."""
    ref, _ = runs
    cfg, run_dir = _crashed_copy(runs, tmp_path)
    with caplog.at_level(logging.WARNING):
        simulate(cfg, progress=False)
    assert not UNUSABLE.findall(caplog.text)
    assert [e.split(",")[0] for _, e in run_events(run_dir) if e.startswith("resumed")] == ["resumed from round 4"]
    for name in RESULTS:
        assert (run_dir / name).read_bytes() == (ref / name).read_bytes(), name


# ---------------------------------------------------------------------------------- finished runs on disk
def test_a_torn_finished_run_fails_runs_check_as_the_reports_leave_it_out(runs, tmp_path, capsys):
    """A DONE run whose metrics.csv lost its last bytes: ``fedcal runs --check`` fails it, and the
    reports leave it out, for the same reason."""
    ref, _ = runs
    torn = tmp_path / "torn" / ref.name
    shutil.copytree(ref, torn)
    data = (torn / METRICS_FILE).read_bytes()
    (torn / METRICS_FILE).write_bytes(data[:-7])
    assert cli_main(["runs", "--check", str(ref)]) == 0
    capsys.readouterr()
    assert cli_main(["runs", "--check", str(torn)]) == 1
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{torn}: damaged (") and "metrics.csv is torn" in line, line
    assert run_state(torn).status == "damaged"
    assert finished_only([torn]) == []
    assert cli_main(["runs", str(torn)]) == 0  # without --check it only says so


def test_a_report_reads_a_run_whose_folder_was_renamed(runs, tmp_path):
    """The run id is the run's (config.json, metrics.csv), not its folder's name: a copied or
    renamed folder reports as the original does."""
    ref, _ = runs
    renamed = tmp_path / "runs" / "my-copy"
    shutil.copytree(ref, renamed)
    assert cli_main(["report", str(renamed), "--out", str(tmp_path / "a")]) == 0
    assert cli_main(["report", str(ref), "--out", str(tmp_path / "b")]) == 0
    for name in ("table.csv", "reliability.csv", "trajectories.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert pd.read_csv(tmp_path / "a" / "table.csv")["run_id"].tolist() == [ref.name]


# ---------------------------------------------------------------------------------- distill: its own state
@pytest.mark.slow  # two distill runs (minutes on a busy CPU)
def test_a_distill_checkpoint_with_a_non_finite_student_starts_over(tmp_path, caplog):
    """The distill task checks its own state (the student, its optimiser, the clients' states)
    through the same mechanism: a NaN in the checkpointed student is one warning, the run starts
    over and finishes with every round logged once."""
    pytest.importorskip("peft")
    from tests.test_lifecycle import DISTILL

    cfg = RunConfig.from_flower({**DISTILL, "dst-method": "rfd", "dst-rounds": 4, "output-dir": str(tmp_path)})
    crash_in_round(cfg, 3)
    run_dir = run_dir_for(cfg)
    saved = torch.load(run_dir / CHECKPOINT_FILE, weights_only=True)
    assert saved["round"] == 2
    student = saved["state"]["model"]
    student[next(k for k, v in student.items() if v.is_floating_point())].fill_(float("nan"))
    torch.save(saved, run_dir / CHECKPOINT_FILE)
    with caplog.at_level(logging.WARNING):
        simulate(cfg, progress=False)
    said = UNUSABLE.findall(caplog.text)
    assert len(said) == 1 and re.search(r"not finite|NaN", said[0]), caplog.text
    assert "resumed" not in caplog.text
    rounds = pd.read_csv(run_dir / METRICS_FILE).drop_duplicates(["round", "metric"], keep=False)
    assert len(rounds) == len(pd.read_csv(run_dir / METRICS_FILE))  # every (round, metric) once
    assert sorted(set(rounds["round"])) == list(range(5)) and (run_dir / "DONE").exists()
