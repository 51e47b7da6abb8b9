"""The studies: one module per ``fedcal`` command (or family of commands), each with its
arguments (``add_commands``), its grid builder and its run. :mod:`fedcal.cli` assembles them in
:data:`STUDIES` order (the order ``fedcal --help`` lists the commands)."""

STUDIES = ("run", "taus", "sweep", "report", "runs", "analyses", "inference", "robustness", "distill", "lm", "defense", "detect", "demo")
