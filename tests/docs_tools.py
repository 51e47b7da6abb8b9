"""The builders under docs/tools/ as modules for the tests: they are scripts outside the package,
loaded by file path (each call loads a fresh module)."""

import importlib.util
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "docs" / "tools"


def docs_tool(name: str) -> ModuleType:
    """docs/tools/<name>.py, loaded as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
