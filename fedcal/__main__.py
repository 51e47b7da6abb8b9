"""``python -m fedcal``: the ``fedcal`` command."""

import sys

from fedcal.cli import main

if __name__ == "__main__":
    sys.exit(main())
