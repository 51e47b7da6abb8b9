"""The house rules of the layout (docs/design.md), checked on the source itself.

* the core (every module of ``fedcal/`` outside the Flower shell and the command) never
  imports flwr, nor the shell, not even inside a function;
* importing every core module leaves flwr unloaded;
* no import cycle anywhere in ``fedcal/``, counting imports inside functions, and the shell's
  packages import only downwards (app → tasks → strategies → core);
* the task registry, the strategy registry and the config agree on names;
* core code receives typed specs, never the whole ``RunConfig``;
* no task name is branched on outside the task's own modules, and no LoRA method's outside its object;
* no function of ``fedcal/`` is longer than ``MAX_FUNCTION_LINES`` (long seams are split into
  named steps).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fedcal"
SHELL = ("fedcal.app", "fedcal.tasks", "fedcal.strategies")  # the Flower shell: may import flwr
# the command and its studies: drive the shell, import no flwr themselves; and the builders of docs/'s
# pages, which drive the shell (federated_vs_central) and Flower's own strategies beside fedcal's
# (flower_vs_fedcal)
COMMAND = ("fedcal.cli", "fedcal.__main__", "fedcal.studies", "fedcal.pages")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _in(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


CORE = sorted(m for m in MODULES if not _in(m, SHELL + COMMAND))


def _imports(module: str) -> set[str]:
    """Every module ``module`` imports (at any depth of its code), resolved to absolute names;
    ``from pkg import sub`` counts as importing ``pkg.sub`` when ``sub`` is a module."""
    path = MODULES[module]
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            out.update(subs or [target])
    return out


def test_the_module_list_is_real():
    assert {"fedcal.config", "fedcal.app.server", "fedcal.tasks.train", "fedcal.aggregate"} <= set(MODULES)
    assert "fedcal.app.server" not in CORE and "fedcal.metrics" in CORE


@pytest.mark.parametrize("module", CORE)
def test_core_never_imports_flwr_or_the_shell(module):
    bad = sorted(i for i in _imports(module) if i == "flwr" or i.startswith("flwr.") or _in(i, SHELL))
    assert not bad, f"{module} (core) imports {bad}: algorithms stay flwr-free; the shell calls the core"


def test_importing_the_core_loads_no_flwr():
    code = ("import importlib, sys\n"
            f"for m in {CORE!r}: importlib.import_module(m)\n"
            "print(sorted(k for k in sys.modules if k == 'flwr' or k.startswith('flwr.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent)
    assert out.stdout.strip() == "[]", out.stdout


# The shell's own floors: a package may import the ones below it, never one above.
SHELL_FLOORS = ("fedcal.strategies", "fedcal.tasks", "fedcal.app")


@pytest.mark.parametrize("lower", SHELL_FLOORS[:-1])
def test_the_shell_imports_only_downwards(lower):
    above = SHELL_FLOORS[SHELL_FLOORS.index(lower) + 1:]
    for module in (m for m in MODULES if _in(m, (lower,))):
        bad = sorted(i for i in _imports(module) if _in(i, above))
        assert not bad, f"{module} imports {bad}, which sit above it (app → tasks → strategies → core)"


def test_no_import_cycle_in_the_package():
    graph = {m: {i for i in _imports(m) if i in MODULES and i != m} for m in MODULES}
    # a package's __init__ re-exporting its own submodules is not a cycle of the code's layers
    graph = {m: {i for i in deps if not (MODULES[m].name == "__init__.py" and i.startswith(m + "."))}
             for m, deps in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                raise AssertionError("import cycle: " + " → ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_task_registry_matches_the_config():
    from fedcal.config import task_names
    from fedcal.tasks import all_tasks, get_task

    assert [t.name for t in all_tasks()] == list(task_names())
    with pytest.raises(ValueError, match="unknown value 'serve'; choose one of train, inference"):
        get_task("serve")
    types = [t for task in all_tasks() for t in task.handlers]
    assert len(types) == len(set(types)), "two tasks claim one message type"


def test_registering_a_clashing_task_is_refused():
    from fedcal.config import Task, all_tasks, get_task, register_task

    train = get_task("train")
    with pytest.raises(ValueError, match="both handle"):
        register_task(Task("extra", train.target, handlers={"train": train.handlers["train"]}))
    assert "extra" not in [t.name for t in all_tasks()]  # nothing half-registered
    with pytest.raises(ValueError, match="registered twice"):
        register_task(Task("train", train.target, summary="x"))
    with pytest.raises(ValueError, match="'package.module:function'"):
        Task("extra", "run_train")  # the Flower side is named, not imported
    with pytest.raises(ValueError, match="must start with train, evaluate or query"):
        Task("extra", train.target, handlers={"probits": "fedcal.tasks.inference:probits"})


def test_the_client_app_answers_every_task():
    """The one ClientApp registers the handshake and every task's message types."""
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from fedcal.app.client import build_client_app

    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 1
    app = build_client_app()
    ctx = Context(run_id=1, node_id=7, node_config={"partition-id": 2, "num-partitions": 3}, state=RecordDict(),
                  run_config={})
    reply = app(Message(content=RecordDict(), message_type="query.identity", dst_node_id=7), ctx)
    assert int(reply.content["identity"]["partition-id"]) == 2
    # an inference query before train.local is an error reply naming the cause, not a crash
    content = RecordDict({"config": ConfigRecord({"task": "inference", "num-clients": 3, "clients-per-round": 3, "inf-f": 1})})
    with pytest.raises(RuntimeError, match="train.local"):
        app(Message(content=content, message_type="query.probits", dst_node_id=7), ctx)


# ---------------------------------------------------------------------- a task is a plug-in
# Where a task may be named in a branch: the task's own modules — fedcal/tasks/, its own core package
# (fedcal/<task>/: a replay of a distill run checks that both sides are distill runs) and the modules
# named after it in config/, studies/ and reports/. Nowhere else.
TASK_BRANCH = (r"""\btask\b\s*(==|!=|not\s+in|in)\s*[\(\[{"']"""
               r"""|["'](\w+)["']\s*(==|!=)\s*[\w.]*\btask\b""")
# Where the whole RunConfig may be imported: the config itself, the Flower shell (app, tasks,
# strategies), the commands (studies), the run store and its readers (results, reports, pages), which
# name, hash and group runs by their whole configuration. Everywhere else (the core) a module takes
# a typed spec (fedcal.config.ConfigSpec, built by the task with Spec.from_config(cfg)) or keywords.
RUNCONFIG_PACKAGES = ("config", "tasks", "app", "studies", "strategies", "results", "reports", "pages")
RUNCONFIG_IN = {
    # a replay is a whole run: it compares run identities (the config hash of the recorded run's
    # client side against the replayed config's) and writes a run directory of its own config, which
    # the run store takes whole; the computation itself reads fedcal.distill.run_data.DistillRunSpec
    "fedcal/distill/replay.py",
}


def _task_branches(path: Path) -> list[str]:
    import re

    pattern = re.compile(TASK_BRANCH)
    return [f"{path.relative_to(PACKAGE.parent)}:{i}: {line.strip()}"
            for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]


def test_no_task_name_is_branched_on_outside_the_tasks_own_modules():
    """The run store, the engines, the config machinery, the command and the studies know no task by
    name: what differs per task is a fact of its one declaration, its fedcal.config.Task."""
    from fedcal.config import task_names

    files = [p for p in sorted(PACKAGE.rglob("*.py")) if p.relative_to(PACKAGE).parts[0] != "tasks"]
    hits = []
    for path in files:
        own = {path.stem} & set(task_names()) if path.parent.name in ("config", "studies", "reports") else set()
        allowed = own | ({path.relative_to(PACKAGE).parts[0]} & set(task_names()))  # its core package
        for hit in _task_branches(path):
            if not any(f'"{t}"' in hit or f"'{t}'" in hit for t in allowed):
                hits.append(hit)
    assert not hits, "a task named outside its own modules:\n" + "\n".join(hits)


def test_exceptions_to_the_layout_rules_are_still_needed():
    """An exception listed above whose module no longer breaks the rule is stale: remove it."""
    for rel in RUNCONFIG_IN:
        assert _names_runconfig(PACKAGE.parent / rel), rel


def _names_runconfig(path: Path) -> list[int]:
    """Lines of ``path`` that import or name ``RunConfig`` (imports inside functions and type
    annotations included)."""
    lines = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.alias) and node.name.split(".")[-1] == "RunConfig" \
                or isinstance(node, ast.Name) and node.id == "RunConfig" \
                or isinstance(node, ast.Attribute) and node.attr == "RunConfig" \
                or isinstance(node, ast.Constant) and isinstance(node.value, str) and "RunConfig" in node.value \
                and "\n" not in node.value and " " not in node.value.strip():  # a string annotation
            lines.add(node.lineno)
    return sorted(lines)


def test_core_code_receives_specs_not_the_whole_run_config():
    """No module outside the config, the shell, the commands and the run store names ``RunConfig``:
    core code receives a typed spec of the keys it reads (or keywords), built by its task."""
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE.parent))
        if path.relative_to(PACKAGE).parts[0] in RUNCONFIG_PACKAGES or rel in RUNCONFIG_IN:
            continue
        hits += [f"{rel}:{line}" for line in _names_runconfig(path)]
    assert not hits, "core modules naming RunConfig (take a ConfigSpec instead):\n" + "\n".join(hits)


def test_the_runconfig_scan_finds_its_forms(tmp_path):
    """The scan above catches an import (also inside a function), an annotation and a string
    annotation, and leaves a docstring mentioning the name alone."""
    for code in ("from fedcal.config import RunConfig", "def f():\n    from fedcal.config import RunConfig",
                 "import fedcal.config\ndef f(c: fedcal.config.RunConfig): pass", "def f(c: 'RunConfig'): pass"):
        (tmp_path / "m.py").write_text(code)
        assert _names_runconfig(tmp_path / "m.py"), code
    (tmp_path / "m.py").write_text('"""Takes a spec, not the whole RunConfig."""')
    assert not _names_runconfig(tmp_path / "m.py")


def test_the_task_branch_grep_finds_a_branch():
    """The pattern the test above greps for catches the forms it is meant to."""
    import re

    pattern = re.compile(TASK_BRANCH)
    for line in ('if cfg.task == "train":', "if task in ('train', 'inference'):", 'if c.task != "distill":',
                 'x = 1 if "lm" == cfg.task else 2', 'if cfg.task not in ("lm",):'):
        assert pattern.search(line), line
    assert not pattern.search("task = get_task(cfg.task)")


def test_the_client_app_process_imports_neither_pandas_nor_matplotlib():
    """A ClientApp process (every simulated client, every SuperNode) pays for what it imports:
    the reports and the run store's readers load only where a command asks for them."""
    code = ("import sys, fedcal.app.client; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pandas', 'matplotlib') "
            "or m.startswith('fedcal.reports')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent)
    assert out.stdout.strip() == "[]", out.stdout


# ---------------------------------------------------------------------- short seams
#: the longest a function of fedcal/ may be, from its ``def`` line to its last line (docstring
#: included: a docstring that needs more room says the function does too much)
MAX_FUNCTION_LINES = 80
#: functions allowed to be longer, each with why (none now: add one only with a reason)
LONG_FUNCTIONS: dict[str, str] = {}


def _long_functions(source: str, limit: int, where: str = "") -> list[str]:
    """Every function or method (nested ones too) of ``source`` longer than ``limit`` lines."""
    return [f"{where}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > limit]


def test_no_function_is_a_long_seam():
    """A function over MAX_FUNCTION_LINES reads as one block: split it into named steps."""
    hits = []
    for name, path in MODULES.items():
        for hit in _long_functions(path.read_text(), MAX_FUNCTION_LINES, str(path.relative_to(PACKAGE.parent))):
            if f"{name}.{hit.split()[1]}" not in LONG_FUNCTIONS:
                hits.append(hit)
    assert not hits, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(hits)
    stale = [f for f in LONG_FUNCTIONS if f.rsplit(".", 1)[0] not in MODULES]
    assert not stale, f"allow-list entries naming no module: {stale}"


def test_the_long_function_check_counts_lines_as_written():
    """The check above counts a function from its ``def`` line to its last line, nested ones too,
    and lets a function of exactly the limit pass."""
    body = "\n".join(f"    x{i} = {i}" for i in range(3))
    assert _long_functions(f"def f():\n{body}\n", 4) == []  # 4 lines: at the limit
    assert _long_functions(f"def f():\n{body}\n    return x0\n", 4) == [":1 f (5 lines)"]
    nested = "def outer():\n    def inner():\n" + "\n".join(f"        y{i} = {i}" for i in range(5)) + "\n    return 1\n"
    assert _long_functions(nested, 5) == [":1 outer (8 lines)", ":2 inner (6 lines)"]
    assert _long_functions("class A:\n    def m(self):\n        a = 1\n        b = 2\n        return a\n", 3) == [
        ":2 m (4 lines)"]


#: the longest a module of fedcal/ may be: a module over it holds more than one role
MAX_MODULE_LINES = 500


def test_no_module_is_over_the_line_limit():
    """A module past MAX_MODULE_LINES is split by role (the config package's schema lost its task
    declaration to config/task.py this way)."""
    long = {str(p.relative_to(PACKAGE.parent)): n for p in MODULES.values()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
