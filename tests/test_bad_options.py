"""The study commands' bad-option matrix: every option of every grid and analysis command given a
value a user types by mistake (an empty range, a negative count, nan, a doubled comma, a folder for
a file, a key no run reads) fails before anything runs, in one line naming the option and the
value, with exit status 2 — and ``--force`` re-runs every cell of a grid command.

``tests/test_bad_inputs.py`` throws bad client replies at the strategies and
``tests/test_report_inputs.py`` bad run folders at the reports; this module throws bad command
lines at the commands, in-process through :func:`fedcal.cli.main`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import fedcal.cli as cli
from fedcal.config import RunConfig, describe, setting_of
from fedcal.results import RunStore, run_dir_for


def run_cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    """(exit status, stderr lines) of ``fedcal argv``: an argparse error exits (SystemExit), a
    ConfigError returns its status."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err.splitlines()


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fail the test if a command gets as far as running a cell or a simulation."""
    import fedcal.app.engine as engine
    import fedcal.app.sweep as sweep

    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: pytest.fail("a grid started running"))
    monkeypatch.setattr(engine, "simulate", lambda *a, **k: pytest.fail("a run started"))


# (argv, words the one line must hold: the option and the bad value)
GRID_OPTIONS = [
    # --taus: τ > 0 and finite, no empty item
    *[(["taus", "--taus", v], ["--taus", v]) for v in ("0", "-1", "abc", "nan", "inf", "1,,2", "1,", "")],
    *[([cmd, "--taus", v], ["--taus", v]) for cmd in ("defense", "robustness", "lm", "detect")
      for v in ("0", "-1", "x")],
    # --seeds: non-negative integers and non-empty ranges a-b
    *[([cmd, "--seeds", v], ["--seeds", v]) for cmd in ("defense", "byzantine", "inference", "robustness", "distill",
                                                        "lm", "detect") for v in ("2-0", "0-", "-1", "a", "0,,1")],
    (["defense", "--seeds", "0-99999999"], ["--seeds", "0-99999999"]),
    (["defense", "--seeds", "1-2-3"], ["--seeds", "1-2-3"]),
    # --jobs: a count >= 0
    *[([cmd, "--jobs", v], ["--jobs", v]) for cmd in ("sweep", "taus", "defense", "byzantine", "robustness", "distill",
                                                      "lm", "detect") for v in ("-3", "abc")],
    # --ratios / --rhos: shares in [0, 1]
    *[(["byzantine", "--ratios", v], ["--ratios", v]) for v in ("nan", "abc", "1.5", "-0.1", "0.1,,0.2")],
    *[(["distill", "--rhos", v], ["--rhos", v]) for v in ("2", "abc", "nan")],
    *[(["distill", "--groups", v], ["--groups", v]) for v in ("0", "1,,3", "x")],
    # posthoc: sizes >= 2 as integers, known calibrators, a seed >= 0
    *[(["posthoc", "RUN", "--n-cal", v], ["--n-cal", v]) for v in ("0", "-5", "abc", "1e9", "10,,50", "1")],
    (["posthoc", "RUN", "--methods", "bogus"], ["--methods", "bogus"]),
    (["posthoc", "RUN", "--methods", "temperature,bogus"], ["--methods", "bogus"]),
    (["posthoc", "RUN", "--seed", "-1"], ["--seed", "-1"]),
    # the Ray-task sizes without --cluster: the cells would run here, the sizes ignored
    *[([cmd, opt, v], [opt, v]) for cmd in ("sweep", "defense", "taus", "byzantine") for opt, v in
      (("--cell-cpus", "4"), ("--cell-gpus", "1"), ("--cell-retries", "5"))],
    (["sweep", "--cell-cpus", "nan"], ["--cell-cpus", "nan"]),
    # name lists: no empty item, no empty grid
    *[([cmd, "--strategies", v], ["--strategies", v]) for cmd in ("defense", "byzantine")
      for v in ("", "fedavg,,median")],
    (["taus", "--strategies", "fedavg,"], ["--strategies", "fedavg,"]),
    *[(["distill", opt, v], [opt, v]) for opt in ("--methods", "--partitions") for v in ("", "rfd,,iid")],
    (["distill", "--aggregators", "mom,"], ["--aggregators", "mom,"]),
    (["byzantine", "--attacks", "alie,,ipm"], ["--attacks", "alie,,ipm"]),
    *[(["robustness", opt, v], [opt, v]) for opt in ("--settings", "--coupling") for v in ("", "fixed,")],
    (["posthoc", "RUN", "--methods", ""], ["--methods"]),
    # values a command checks itself, each named by its option
    (["robustness", "--attack-seed", "-1"], ["--attack-seed", "-1"]),
    (["robustness", "--steps", "0"], ["--steps", "0"]), (["robustness", "--n-test", "-5"], ["--n-test", "-5"]),
    (["robustness", "--severity", "9"], ["--severity", "9"]), (["robustness", "--eps", "nan"], ["--eps", "nan"]),
    (["robustness", "--step", "-1"], ["--step", "-1"]),
    (["robustness", "--attacks", "deepfool"], ["--attacks", "deepfool"]),
    (["robustness", "--corruptions", "fog"], ["--corruptions", "fog"]),
    (["robustness", "--device", "tpu"], ["--device", "tpu"]),
    *[(["inference", "--nf", v], ["--nf", v]) for v in ("17:-1", "x", "17")],
    (["inference-theorem", "RUN", "--queries", "-1"], ["--queries", "-1"]),
    # the stored-probits collection: a model the data cannot feed, an unknown schedule, a file that is no collection
    (["inference-collect", "num-clients=3", "model=cnn"], ["'model'", "CNN needs C×H×W inputs", "digits"]),
    (["inference-collect", "num-clients=3", "inf-lr-schedule=step"], ["'inf-lr-schedule'", "step"]),
    (["inference-collect", "num-clients=3", "--probits", "."], [".", "not a probit collection"]),
    (["inference-collect", "num-clients=3", "inf-client-output=logits"], ["'inf-client-output'", "'logits'"]),
    (["stealth", "RUN", "--steps", "0"], ["--steps", "0"]), (["stealth", "RUN", "--others", "0"], ["--others", "0"]),
    (["stealth", "RUN", "--round", "-1"], ["--round", "-1"]),
    (["stealth", "RUN", "--reference", "bogus"], ["--reference", "bogus"]),
    (["distill", "--methods", "bogus"], ["dst-method", "bogus"]),
    (["defense", "--strategies", "bogus"], ["strategy", "bogus"]),
    (["taus", "--strategies", "bogus"], ["strategy", "bogus"]),
    (["byzantine", "--attacks", "bogus"], ["attack", "bogus"]),
    # the line-search attacks need a rule the attackers can evaluate from the round's updates
    (["run", "attack=opt-alie", "strategy=fltrust"], ["'attack'", "opt-alie", "not fltrust"]),
    # attack specs: each parameter named, typed and in its key's range; one run listed once
    (["byzantine", "--attacks", "ipm:eps=-1"], ["ipm:eps=-1", "'ipm-epsilon'", "-1"]),
    (["byzantine", "--attacks", "ipm:eps=abc"], ["ipm:eps=abc", "a finite number", "'abc'"]),
    (["byzantine", "--attacks", "ipm:eps=inf"], ["ipm:eps=inf", "a finite number"]),
    (["byzantine", "--attacks", "alie:z=0"], ["alie:z=0", "the paper's z", "write alie"]),
    (["byzantine", "--attacks", "alie:zz=1"], ["alie:zz=1", "no parameter of alie", "alie:z="]),
    (["byzantine", "--attacks", "alie:z=1:z=2"], ["alie:z=1:z=2", "alie-z given twice"]),
    (["byzantine", "--attacks", "minmax:diagonal"], ["minmax:diagonal", "'minmax-direction'", "diagonal"]),
    (["byzantine", "--attacks", "signflip:eps=1"], ["signflip:eps=1", "takes none"]),
    (["byzantine", "--attacks", "mimic:target=1.5"], ["mimic:target=1.5", "an integer"]),
    (["byzantine", "--attacks", "ipm,ipm:eps=0.1"], ["'ipm'", "'ipm:eps=0.1'", "the same run"]),
    (["byzantine", "--attacks", "ipm,ipm"], ["--attacks", "listed twice"]),
    (["byzantine", "--attacks", "none"], ["--attacks", "'none'", "benign run is always added"]),
    (["byzantine", "--strategies", "bogus+krum"], ["'pre-aggregation'", "bogus"]),
    (["byzantine", "--strategies", "kurm"], ["--strategies", "'kurm'", "krum"]),
    # the settings: each option where it applies, each key they set left to them
    (["byzantine", "--setting", "bogus"], ["--setting", "bogus"]),
    (["byzantine", "--setting", "cross-silo", "--ratios", "0.1"], ["--ratios", "cross-silo"]),
    (["byzantine", "--honest", "10"], ["--honest", "cross-silo"]),
    (["byzantine", "--byzantine", "2"], ["--byzantine", "cross-silo"]),
    *[(["byzantine", "--setting", "cross-silo", "--byzantine", v], ["--byzantine", v]) for v in ("0", "-1", "x", "1,,2")],
    *[(["byzantine", "--setting", "cross-silo", "--honest", v], ["--honest", v]) for v in ("0", "x")],
    *[(["byzantine", "--alphas", v], ["--alphas", v]) for v in ("0", "-1", "nan", "x", "1,,0.5", "inf,iid")],
    (["byzantine", "--setting", "cross-silo", "num-clients=20"], ["'num-clients'", "--honest and --byzantine"]),
    (["byzantine", "--setting", "cross-silo", "clients-per-round=5"], ["'clients-per-round'", "--byzantine"]),
    (["byzantine", "attacker-ratio=0.3"], ["'attacker-ratio'", "--ratios"]),
    (["byzantine", "--alphas", "inf,0.5", "dirichlet-alpha=0.5"], ["'dirichlet-alpha'", "--alphas"]),
    (["byzantine", "--alphas", "inf", "partition=iid"], ["'partition'", "--alphas"]),
    # a key a spec or the table's f sets is not also an override (it would be replaced without a word)
    (["byzantine", "--attacks", "ipm:eps=10", "ipm-epsilon=0.5"], ["'ipm-epsilon'", "'ipm:eps=10'"]),
    (["byzantine", "--strategies", "krum", "krum-m=3"], ["'krum-m'", "strategy spec 'krum'"]),
    (["byzantine", "--strategies", "trimmed_mean", "trim-f=2"], ["'trim-f'", "the f of each table"]),
    # Krum needs n >= f + 3 clients a round: 2 honest + 1 Byzantine are too few, named with the spec
    (["byzantine", "--setting", "cross-silo", "--honest", "2", "--byzantine", "1", "--strategies", "krum"],
     ["krum under", "'krum-f'", "f = 1 Byzantine of 3"]),
    # --grid axes with an empty value
    (["sweep", "--grid", "tau=1,,2"], ["--grid", "tau=1,,2"]),
    (["sweep", "--grid", "tau=1,"], ["--grid", "tau=1,"]),
    (["defense", "--grid", "tsa-blend=0.5,,1"], ["--grid", "tsa-blend=0.5,,1"]),
]


@pytest.mark.parametrize("argv,words", GRID_OPTIONS, ids=[" ".join(a) for a, _ in GRID_OPTIONS])
def test_a_bad_option_value_fails_in_one_line_before_anything_runs(argv, words, nothing_runs, tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)  # whatever a command would write lands here
    keys = [] if argv[0] in ("posthoc", "stealth", "inference-theorem") else ["dataset=digits"]
    code, err = run_cli([*argv, *keys], capsys)
    assert code == 2 and len(err) == 1, err
    for word in words:
        assert word in err[0], (word, err)
    assert "Traceback" not in err[0]


def test_the_list_options_parse_what_they_say():
    """The good values of the shared list types, by hand: ranges expand inclusively, spaces around
    commas are dropped, "" is no value where it means the config's."""
    from fedcal.studies.common import (groups_type, jobs_type, n_cals_type, names_type, ratios_type, seeds_type,
                                       taus_type)

    assert seeds_type("0-2, 5") == [0, 1, 2, 5] and seeds_type("3") == [3] and seeds_type("2-2") == [2]
    assert taus_type("0.2, 1,5") == [0.2, 1.0, 5.0] and ratios_type("0,1") == [0.0, 1.0]
    assert n_cals_type("2,450") == [2, 450] and groups_type("") == [] and jobs_type("0") == 0
    assert names_type("strategies")("fedavg, nnm+trimmed_mean") == ["fedavg", "nnm+trimmed_mean"]
    assert names_type("strategies", empty=True)("") == []


# run-config keys a command line sets that the runs would ignore or that cannot train
UNREAD_OR_USELESS = [
    (["run", "calguard-cusum=true"], ["'calguard-cusum'", "strategy names calguard", "strategy = fedavg"]),
    (["run", "krum-f=2", "strategy=median"], ["'krum-f'", "strategy names multikrum", "strategy = median"]),
    (["run", "clip-c=0.5"], ["'clip-c'", "pre-aggregation names clip", 'pre-aggregation = ""']),
    (["run", "alie-z=1.5", "attack=ipm"], ["'alie-z'", "attack names alie", "attack = ipm"]),
    (["run", "tsa-blend=0.5", "attack=none"], ["'tsa-blend'", "attack names tsa"]),
    (["run", "mimic-target=2", "attack=ipm"], ["'mimic-target'", "attack names mimic", "attack = ipm"]),
    (["sweep", "--grid", "calguard-kappa=3,4"], ["'calguard-kappa'", "strategy = fedavg"]),
    (["defense", "--strategies", "fedavg,median", "calguard-cusum=true"], ["'calguard-cusum'", "fedavg, median"]),
    (["taus", "--strategies", "fedavg,fltrust", "calguard-window=3"], ["'calguard-window'", "fedavg, fltrust"]),
    (["byzantine", "--strategies", "fedavg", "--attacks", "ipm", "fang-b=3"], ["'fang-b'", "attack names fang-trmean"]),
    (["run", "pre-aggregation=clip", "clip-c=1e-300"], ["'clip-c'", "1e-300", ">= 1e-06", "nothing would train"]),
    (["run", "pre-aggregation=cclip", "cclip-tau=1e-300"], ["'cclip-tau'", "1e-300", "nothing would train"]),
    (["run", "pre-aggregation=cclip", "cclip-iterations=100000000"], ["'cclip-iterations'", "100000000", "[1, 100]"]),
    (["run", "pre-aggregation=nnm,,clip"], ["'pre-aggregation'", "nnm,,clip", "empty step"]),
    (["run", "pre-aggregation=clip,"], ["'pre-aggregation'", "empty step"]),
]


@pytest.mark.parametrize("argv,words", UNREAD_OR_USELESS, ids=[" ".join(a) for a, _ in UNREAD_OR_USELESS])
def test_a_key_no_run_reads_or_that_trains_nothing_fails_in_one_line(argv, words, nothing_runs, tmp_path, capsys,
                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err = run_cli([*argv, "dataset=digits", "--no-progress"], capsys)
    assert code == 2 and len(err) == 1, err
    for word in words:
        assert word in err[0], (word, err)


def test_a_key_read_by_some_cell_of_a_grid_passes():
    """A grid that varies the strategy may set CalGuard's keys: the CalGuard cells read them (and
    the same for a defense grid with CalGuard among its strategies)."""
    from fedcal.app.sweep import SweepGrid
    from fedcal.studies.common import refuse_unread_keys
    from fedcal.studies.defense import defense_configs

    grid = SweepGrid({"dataset": "digits"}, {"strategy": ["fedavg", "calguard"]})
    overrides = {"calguard-cusum": True, "calguard-kappa": 3.0}
    refuse_unread_keys({**grid.base, **overrides, **grid.axes}, grid.configs(overrides))
    base = RunConfig.from_flower({"dataset": "digits", **overrides})
    refuse_unread_keys(overrides, defense_configs(base, ["fedavg", "calguard"], [0.2], [0]))
    # set to its default, a key changes nothing: no reason to refuse it
    refuse_unread_keys({"calguard-cusum": False}, [RunConfig()])


def test_every_only_with_condition_names_a_key_and_its_values():
    """Each ``only_with`` declaration names an existing key and values that key can take, and its
    key is read at a value of the condition and not at another value."""
    declared = [info.key for info in describe() if setting_of(info.key).only_with]
    assert {"calguard-cusum", "krum-f", "clip-c", "cclip-iterations", "alie-z", "tsa-blend"} <= set(declared)
    for key in declared:
        s = setting_of(key)
        field, values = s.only_with
        options = setting_of(field).options
        allowed = options if options is not None else ("nnm", "clip", "arc", "cclip")  # pre-aggregation's steps
        assert values and set(values) <= set(allowed), key
        assert s.read_by(RunConfig(**{field: values[0]}))
        other = next(v for v in (*allowed, "") if v not in values)
        assert not s.read_by(RunConfig(**{field: other}))


# --------------------------------------------------------------------------- files given as options
def test_a_folder_or_a_broken_file_as_run_config_or_grid_fails_in_one_line(nothing_runs, tmp_path, capsys,
                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    broken = tmp_path / "broken.toml"
    broken.write_text("[grid]\ntau = [\n")
    empty_axis = tmp_path / "empty.toml"
    empty_axis.write_text("[base]\ndataset = 'digits'\n[grid]\ntau = []\nseed = [0, 1]\n")
    not_a_table = tmp_path / "flat.toml"
    not_a_table.write_text("grid = 5\n")
    cases = [(["run", "-c", str(folder)], [str(folder), "a directory"]),
             (["sweep", str(folder)], [str(folder), "a directory"]),
             (["sweep", str(broken)], [str(broken), "not a TOML file"]),
             (["sweep", str(empty_axis)], [str(empty_axis), "'tau'", "no value"]),
             (["sweep", str(not_a_table)], [str(not_a_table), "grid must be a table"])]
    for argv, words in cases:
        code, err = run_cli(argv, capsys)
        assert code == 2 and len(err) == 1, (argv, err)
        for word in words:
            assert word in err[0], (word, err)


# --------------------------------------------------------------------------- posthoc
def finished_train_run(root: Path, **overrides) -> Path:
    """A finished digits train run with a final model (untrained: posthoc needs its logits only)."""
    from fedcal.models import build_model

    cfg = RunConfig.from_flower({"dataset": "digits", "num-clients": 5, "num-rounds": 1, "output-dir": str(root),
                                 **overrides})
    store = RunStore(run_dir_for(cfg), cfg)
    store.start()
    for r in (0, 1):
        store.log_round(r, {"accuracy": 0.5, "ece": 0.1, "sece": 0.1, "brier": 0.5, "nll": 1.0})
    store.save_model(build_model("mlp", (64,), 10, seed=0).state_dict())
    store.finish()
    return store.dir


def test_posthoc_defaults_fit_a_small_test_set_and_a_size_too_big_is_one_line(tmp_path, capsys):
    """digits holds 450 test samples: the default sizes are those of 10, 50, 100, 250, 500 below
    450 (500 would leave nothing to score); a size given at or above 450 fails naming it."""
    from fedcal.data import load_dataset

    n = len(load_dataset("digits").y_test)
    assert n == 450
    run = finished_train_run(tmp_path / "runs")
    out = tmp_path / "p"
    code, err = run_cli(["posthoc", str(run), "--methods", "temperature", "--out", str(out)], capsys)
    assert code == 0, err
    import pandas as pd

    assert sorted(set(pd.read_csv(out / "posthoc.csv")["n_cal"])) == [10, 50, 100, 250]
    for sizes in ("450", "10,1000000000"):
        code, err = run_cli(["posthoc", str(run), "--n-cal", sizes, "--out", str(out)], capsys)
        big = sizes.split(",")[-1]
        assert code == 2 and len(err) == 1, err
        assert f"--n-cal {big}" in err[0] and "450 test samples" in err[0] and str(run) in err[0], err


@pytest.mark.parametrize("command", [["posthoc"], ["triage", "--benign", "{run}"], ["similarity", "--benign", "{run}"],
                                     ["stealth"]])
def test_an_analysis_of_a_distill_run_says_which_runs_it_takes(command, tmp_path, capsys, monkeypatch):
    """An analysis of image classifiers given a distill run (whose dataset key is the unused image
    default, mnist) names the run and the tasks it takes, and never fetches MNIST."""
    import fedcal.data.datasets as datasets

    monkeypatch.setattr(datasets, "_torchvision", lambda *a: pytest.fail("tried to download a dataset"))
    from tests.test_report_inputs import finished_distill_run

    store = finished_distill_run(tmp_path)
    argv = [a.format(run=store.dir) for a in command]
    code, err = run_cli([argv[0], str(store.dir), *argv[1:], "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and len(err) == 1, err
    assert "image-classifier runs (task = train)" in err[0] and f"{store.dir} (task distill)" in err[0], err


# --------------------------------------------------------------------------- --force
TINY = ["dataset=synthetic", "num-clients=3", "clients-per-round=3", "num-rounds=1", "engine=inprocess"]


def started(run_dir: Path) -> int:
    return (run_dir / "run.log").read_text().count(" started")


def test_sweep_force_runs_every_finished_cell_again(tmp_path, capsys):
    argv = ["sweep", "--grid", "seed=0,1", *TINY, f"output-dir={tmp_path / 'runs'}", "--report", str(tmp_path / "r"),
            "--no-progress"]
    assert cli.main(argv) == 0
    dirs = sorted((tmp_path / "runs").iterdir())
    assert len(dirs) == 2 and [started(d) for d in dirs] == [1, 1]
    assert cli.main(argv) == 0  # finished: skipped
    assert [started(d) for d in dirs] == [1, 1]
    assert cli.main([*argv, "--force"]) == 0
    assert [started(d) for d in dirs] == [2, 2]
    assert all((d / "DONE").exists() for d in dirs)


def test_defense_force_runs_every_finished_cell_again(tmp_path, capsys):
    argv = ["defense", "--strategies", "fedavg", "--taus", "2", "--seeds", "0", "--no-posthoc", *TINY,
            "--report", str(tmp_path / "d"), "--no-progress"]
    assert cli.main(argv) == 0
    dirs = sorted((tmp_path / "d" / "runs").iterdir())
    assert len(dirs) == 2  # TSA at τ = 2 and the benign reference
    assert cli.main(argv) == 0
    assert [started(d) for d in dirs] == [1, 1]
    assert cli.main([*argv, "--force"]) == 0
    assert [started(d) for d in dirs] == [2, 2]


def test_taus_force_in_parallel_runs_each_cell_once_more_not_twice(tmp_path, monkeypatch):
    """`taus --jobs 2 --force` runs the cells as a sweep, then writes the table from them: each
    cell runs again once (the table's pass must not force them a second time)."""
    import pandas as pd

    import fedcal.app.engine as engine
    import fedcal.app.sweep as sweep
    from fedcal.studies.taus import tau_configs

    swept, simulated = [], []
    monkeypatch.setattr(sweep, "run_sweep", lambda configs, *a, force=False, **k:
                        swept.extend((c.tau, force) for c in configs) or {})
    monkeypatch.setattr(engine, "simulate", lambda cfg, **k: simulated.append((cfg.tau, k["force"])))

    def table(base, taus, out, run_fn, title, strategies=None):  # the report's pass over the cells
        for cfg in tau_configs(base, taus, strategies):
            run_fn(cfg)
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "table.md").write_text("")
        return pd.DataFrame({"strategy": ["fedavg"]})

    monkeypatch.setattr("fedcal.studies.taus.run_tau_comparison", table)
    assert cli.main(["taus", "--taus", "1,2", "--jobs", "2", "--force", *TINY, f"output-dir={tmp_path}",
                     "--report", str(tmp_path / "t"), "--no-progress"]) == 0
    assert sorted(swept) == [(1.0, True), (2.0, True)]
    assert sorted(simulated) == [(1.0, False), (2.0, False)]
