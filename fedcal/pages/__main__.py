"""``python -m fedcal.pages <builder> [arguments]``: run one page builder (its own arguments follow its
name; ``python -m fedcal.pages <builder> --help`` where it takes any); no builder lists them."""

from __future__ import annotations

import runpy
import sys

#: the modules of fedcal.pages that write a page or a table when run
BUILDERS = ("attacker_data_share", "build_results", "closed_loop", "detector_replay", "distill_budget_curve",
            "distill_capacity", "distill_literature", "distill_skew_diagnosis", "federated_vs_central", "flower_vs_fedcal",
            "include_tables", "inference_alpha", "inference_seeds", "inference_timings", "interval_table",
            "readme_runs", "run_seconds", "table_integrity")


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m fedcal.pages BUILDER [ARGUMENTS]\nbuilders: " + ", ".join(BUILDERS))
        return 0
    name = argv[0].removesuffix(".py")
    if name not in BUILDERS:
        print(f"fedcal.pages: unknown builder {argv[0]!r}; choose from {', '.join(BUILDERS)}", file=sys.stderr)
        return 2
    sys.argv = [f"python -m fedcal.pages {name}", *argv[1:]]
    try:
        runpy.run_module(f"fedcal.pages.{name}", run_name="__main__", alter_sys=True)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
