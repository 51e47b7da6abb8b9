"""The studies: one module per ``fedcal`` command (or family of commands), each with its
arguments (``add_commands``), its grid builder and its run. :mod:`fedcal.cli` assembles them in
:data:`fedcal.cli.STUDIES` order (the order ``fedcal --help`` lists the commands)."""

