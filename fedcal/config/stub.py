"""The static types of :class:`RunConfig`: ``fedcal/config/run_config.pyi``, generated from the settings.

:class:`RunConfig` is assembled from the groups at import (:func:`~fedcal.config.schema.group`), so
its class body declares no field and a type checker sees none: every ``cfg.x`` read would be
unchecked. The stub declares them: one class, ``RunConfigFields``, with every built-in field and
its Python type (``int``, ``float``, ``bool``, ``str``, from the setting's annotation), group by
group as ``fedcal run --help`` lists them, and every group's property with its return annotation
(``distill_ranks`` → ``tuple[int, ...]``). :class:`RunConfig` derives from it while type checking only
(``if TYPE_CHECKING`` in :mod:`fedcal.config.schema`, which also hides its ``__getattr__`` from the
checker), so a mistyped key or a value used as the wrong type is an error in an editor, and at run
time nothing changes.

``python -m fedcal.config --write-stub`` writes it; ``--check-stub`` fails in one line when the
committed stub is not the generated text (tests/test_config.py runs it), as for the pyproject block
(:mod:`fedcal.config.pyproject`). It holds fedcal's own keys (its built-in groups, which its own
components' keys join): a plug-in's keys are not, installed or not (its code declares its own types).
"""

from __future__ import annotations

from pathlib import Path

from fedcal.config.component_keys import builtin_groups
from fedcal.config.schema import RunConfig, fields_of, groups, setting_of

#: where the stub lives: beside :mod:`fedcal.config.schema`, as the module it names
STUB_PATH = Path(__file__).with_name("run_config.pyi")
HEADER = (
    "# Generated from fedcal/config/<group>.py and the components' own keys (fedcal/catalogue/) by\n"
    "# `python -m fedcal.config --write-stub`: do not edit by hand (a test checks it is current).\n"
    "# RunConfig derives from RunConfigFields while type checking only.\n"
    '"""The static types of RunConfig\'s built-in fields and of its groups\' properties (fedcal/config/stub.py)."""\n'
    "\n"
    "class RunConfigFields:\n")


def _return_type(name: str, prop: property) -> str:
    annotation = getattr(prop.fget, "__annotations__", {}).get("return")
    if annotation is None:
        raise TypeError(f"RunConfig property {name!r} needs a return annotation for the stub")
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))


def stub_text() -> str:
    """The stub: ``RunConfigFields`` with, per group in registration order, a comment naming the
    group and its fields (``name: type``) in :meth:`RunConfig.to_flower` order; then the properties
    the groups gave :class:`RunConfig`, in registration order."""
    lines = []
    for group_name, help_text in groups().items():
        if group_name not in builtin_groups():
            continue
        lines.append(f"    # {group_name}: {help_text}")
        lines += [f"    {name}: {setting_of(name).type}" for name in fields_of(group_name)]
    lines.append("    # the groups' properties")
    for name, prop in vars(RunConfig).items():
        if isinstance(prop, property):
            lines += ["    @property", f"    def {name}(self) -> {_return_type(name, prop)}: ..."]
    return HEADER + "\n".join(lines) + "\n"


def stale_stub(path: Path = STUB_PATH) -> str:
    """"" when ``path`` holds the generated stub, else why not, in one line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        text = None
    if text == stub_text():
        return ""
    what = "missing" if text is None else "not generated from the settings"
    return f"{path}: the RunConfig stub is {what}: run python -m fedcal.config --write-stub"
