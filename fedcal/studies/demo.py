"""``fedcal demo``: the README's main job (digits, offline): a benign run and the TSA at τ = 0.2 and 5."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fedcal.config import RunConfig
from fedcal.studies.common import KEYS_EPILOG, add_run_options, config_overrides
from fedcal.studies.taus import tau_report

DEMO_PRESET = {
    "dataset": "digits", "model": "mlp", "num-clients": 10, "clients-per-round": 5,
    "attacker-ratio": 0.3, "num-rounds": 40, "lr": 0.05, "batch-size": 32, "local-steps": 5,
    "dirichlet-alpha": 1.0, "seed": 0,
}


def cmd_demo(args: argparse.Namespace) -> int:
    out = Path(args.output)
    preset = dict(DEMO_PRESET, **{"output-dir": str(out / "runs")})
    if args.rounds:
        preset["num-rounds"] = args.rounds
    preset.update(config_overrides(args))
    base = RunConfig.from_flower(preset)
    print(f"fedcal demo: scikit-learn digits, {base.num_clients} clients ({base.num_attackers} attackers), "
          f"{base.clients_per_round} per round, {base.num_rounds} rounds; a benign run and TSA at τ=0.2 and τ=5")
    title = "fedcal demo (digits–MLP): final global model per τ"
    return tau_report(args, base, [0.2, 1.0, 5.0], out, title)


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("demo", "the README's main job: digits, benign vs TSA τ=0.2 and τ=5", epilog=KEYS_EPILOG)
    add_run_options(p)
    p.add_argument("--output", default="fedcal-demo", help="output folder")
    p.add_argument("--rounds", type=int, default=0, help="override the number of rounds (0 = the preset's 40)")
    p.set_defaults(func=cmd_demo)
