"""fedcal: confidence calibration as an attack surface in federated learning.

The Temperature Scaling Attack, calibration metrics and defenses, and robust federated
inference, as Flower apps. The command is ``fedcal`` (:mod:`fedcal.cli`), also ``python -m fedcal``.
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
