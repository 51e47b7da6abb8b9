"""fedcal: confidence calibration as an attack surface in federated learning.

The Temperature Scaling Attack, calibration metrics and defenses, robust federated inference,
temperature training as a robustness knob (:mod:`fedcal.robustness`) and robust federated
distillation of LoRA clients (:mod:`fedcal.distill`, :mod:`fedcal.text`), as Flower apps. The command is ``fedcal`` (:mod:`fedcal.cli`), also ``python -m fedcal``.
This module imports nothing heavy: importing a submodule does not pull in torch or flwr.
"""

from importlib.metadata import PackageNotFoundError, version

# The version of a source tree that is not installed (keep equal to pyproject.toml's).
_SOURCE_VERSION = "0.1.0"

try:
    __version__ = version("fedcal")
except PackageNotFoundError:  # run from a checkout without `pip install`
    __version__ = _SOURCE_VERSION

__all__ = ["__version__"]
