"""The fedcal command's surface: help, version, python -m fedcal, argument order, Ctrl-C."""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

import fedcal
import fedcal.cli as cli
from fedcal.config import RunConfig, describe, groups

GROUPS = groups()

ROOT = Path(__file__).resolve().parents[1]


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_help_is_plain_text(capsys):
    out = _help(capsys)
    assert "``" not in out and ":func:" not in out and ":meth:" not in out
    for command in _subparsers(cli.build_parser()):
        assert command in out
        sub = _help(capsys, command)
        assert "``" not in sub and ":func:" not in sub, command


def test_every_argument_has_help_and_its_default_shown(capsys):
    subs = _subparsers(cli.build_parser())
    assert set(subs) == {"run", "taus", "sweep", "report", "posthoc", "triage", "similarity", "stealth", "inference",
                         "inference-collect",
                         "inference-theorem", "robustness", "distill", "defense", "demo", "lm", "detect",
                         "runs", "byzantine", "data"}
    for name, parser in subs.items():
        text = _help(capsys, name)
        for action in parser._actions:
            assert action.help, (name, action.dest)
            if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
                assert f"(default: {action.default!r})" in " ".join(text.split()) \
                    or f"(default: {action.default})" in " ".join(text.split()), (name, action.dest)
    assert "(default: '0.2,0.5,1,2,5')" in " ".join(_help(capsys, "taus").split())


def test_run_help_lists_every_key_with_default_and_range_by_group(capsys):
    text = _help(capsys, "run")
    assert "krum-f = 1  [int; >= 0]" in text
    assert "attacker-ratio = 0.25  [float; in [0, 1]]" in text
    assert "tau = 1.0  [float; a finite number > 0]" in text
    assert "coupled = true  [bool]" in text
    for key in RunConfig().to_flower():
        assert f"  {key} = " in text, key
    # grouped: each group's header comes before its keys, in GROUPS order
    starts = [text.index(f"\n{g}: ") for g in GROUPS]
    assert starts == sorted(starts)
    for info in describe():
        g = list(GROUPS).index(info.group)
        end = starts[g + 1] if g + 1 < len(starts) else len(text)
        assert starts[g] < text.index(f"  {info.key} = ") < end, info.key


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"fedcal {fedcal.__version__}"
    assert fedcal.__version__ == "0.1.0"  # pyproject.toml's


def test_python_m_fedcal():
    env_path = str(ROOT)
    for argv, expect in ((["--help"], "usage: fedcal"), (["--version"], "fedcal ")):
        done = subprocess.run([sys.executable, "-m", "fedcal", *argv], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(expect)


@pytest.mark.parametrize("argv", [
    ["taus", "tau=5", "--report", "R", "seed=1"],
    ["taus", "--report", "R", "tau=5", "seed=1"],
    ["taus", "tau=5", "seed=1", "--report", "R"],
])
def test_options_before_or_after_the_overrides(argv, monkeypatch):
    seen = {}

    def fake_report(args, base, taus, out, title, strategies=None):
        seen.update(base=base, taus=taus, out=out)
        return 0

    monkeypatch.setattr("fedcal.studies.taus.tau_report", fake_report)
    assert cli.main(argv) == 0
    assert (seen["base"].tau, seen["base"].seed, seen["out"]) == (5.0, 1, Path("R"))
    assert seen["base"].output_dir == str(Path("R") / "runs")


def test_interleaved_overrides_and_option_values_keep_apart():
    args = cli.build_parser().parse_args(["sweep", "grid.toml", "--grid", "tau=1,2", "seed=1", "--jobs", "2",
                                          "-c", "lr=0.1 batch-size=3", "dataset=digits"])
    assert args.overrides == ["grid.toml", "seed=1", "dataset=digits"]
    assert args.grid == ["tau=1,2"] and args.jobs == 2 and args.run_config == ["lr=0.1 batch-size=3"]
    args = cli.build_parser().parse_args(["report", "a", "--out", "o", "b"])
    assert args.run_dirs == ["a", "b"] and args.out == "o"


def test_unknown_option_still_fails(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["taus", "tau=5", "--bogus"])
    assert done.value.code == 2
    assert "--bogus" in capsys.readouterr().err


def test_keyboard_interrupt_ends_with_one_line_and_130(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("fedcal.studies.run.cmd_run", interrupted)
    assert cli.main(["run", "dataset=digits"]) == 130
    out = capsys.readouterr()
    assert out.err == "fedcal: interrupted\n" and out.out == ""


def test_a_reused_run_name_fails_in_one_line_before_anything_runs(tmp_path, monkeypatch, capsys):
    """`fedcal run run-name=x` with a config other than the one x holds: exit 2, one line, the
    earlier run untouched, nothing simulated (with or without --force)."""
    from fedcal.results import RunStore, run_dir_for

    earlier = RunConfig(dataset="synthetic", output_dir=str(tmp_path), run_name="x", tau=5.0)
    store = RunStore(run_dir_for(earlier), earlier)
    store.start()
    store.log_round(0, {"accuracy": 0.5})
    store.finish()
    files = {p.name: p.read_bytes() for p in store.dir.iterdir()}
    ran = []
    # the engine's first step after the check: building the task's ServerApp
    monkeypatch.setattr("fedcal.app.server.server_app_for", lambda cfg, *a, **kw: ran.append(cfg))
    for force in ([], ["--force"]):
        argv = ["run", "dataset=synthetic", "run-name=x", "tau=0.2", f'output-dir="{tmp_path}"', *force]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err == (f"fedcal: error: run directory {str(store.dir)!r} already holds a run of a different config "
                       "(tau=5.0 there, 0.2 here): it is not overwritten; choose another 'run-name' or remove the "
                       "directory\n")
    assert ran == [] and {p.name: p.read_bytes() for p in store.dir.iterdir()} == files
