"""Run the README's result-making commands as a user would and record what they give and how long
they take: ``docs/results/readme/<name>.md`` holds the command, the wall time, the machine and its
load, and the tables of ``fedcal report`` on what the command made (chance-level models flagged).

    python -m fedcal.pages readme_runs                 # every command below (about an hour on 2 cores)
    python -m fedcal.pages readme_runs flwr-inference  # one of them

Each command runs from scratch in a temporary folder (its runs, and the caches of pretrained
backbones, are new), so the time includes everything a first-time user waits for. ``flwr run``
commands get their own FLWR_HOME and ports, and the local SuperLink they start is stopped, by pid,
afterwards. The README's sentences about these commands quote these files.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fedcal.pages import RESULTS, ROOT

OUT = RESULTS / "readme"

# name → (the command as the README writes it, with {out} for its output folder, a sentence on what it is)
COMMANDS = {
    "demo": ("fedcal demo --output {out}", "the main job"),
    "defense": ("fedcal defense --strategies fedavg,calguard --taus 0.2,5 --seeds 0 --report {out} dataset=digits "
                "num-clients=10 num-rounds=20 lr=0.05 root-size=50", "CalGuard against FedAvg"),
    "distill-smoke": ("fedcal distill --methods rfd,flora,flexlora --rhos 0,0.3 --partitions iid --seeds 0 "
                      "--report {out} dst-corpus=synthetic num-clients=4 dst-rounds=3 dst-bb-hidden=32 dst-bb-layers=1 "
                      "dst-bb-intermediate=64 dst-bb-vocab=200 dst-bb-steps=50 dst-max-length=24",
                      "the RFD-LoRA smoke grid"),
    "distill-run": ("fedcal run task=distill engine=inprocess dst-corpus=synthetic num-clients=4 dst-rounds=5 "
                    "dst-local-epochs=10 dst-client-lr=0.01 dst-bb-hidden=32 dst-bb-layers=1 dst-bb-intermediate=64 "
                    "dst-bb-vocab=200 dst-bb-steps=50 dst-max-length=24 output-dir={out}/runs",
                    "one RFD-LoRA run that trains its clients above chance"),
    "flwr-train": ("flwr run . --stream --run-config \"dataset='digits' num-clients=10 clients-per-round=5 num-rounds=20 "
                   "tau=5.0 output-dir='{out}/runs'\" --federation-config num-supernodes=10",
                   "TSA through a local SuperLink"),
    "flwr-inference": ("flwr run . --stream --run-config \"task='inference' dataset='digits' num-clients=7 inf-f=2 lr=0.1 "
                       "inf-local-epochs=30 inf-f-curve=false inf-amp-curve='' output-dir='{out}/runs'\" "
                       "--federation-config num-supernodes=7", "robust federated inference through a local SuperLink"),
}


def _runs(out: Path) -> list[Path]:
    """The run directories a command made under ``out``."""
    return sorted(p.parent for p in out.rglob("config.json") if (p.parent / "metrics.csv").exists())


def run(name: str) -> Path:
    if str(ROOT) not in sys.path:  # the checkout's test harnesses: a local SuperLink's ports and its stop
        sys.path.insert(0, str(ROOT))
    from tests.deploy_harness import free_port
    from tests.test_flwr_run import _stop_local_superlink

    command, what = COMMANDS[name]
    tmp = Path(tempfile.mkdtemp(prefix=f"readme-{name}-"))
    out = tmp / "out"
    env = dict(os.environ, FEDCAL_CACHE_DIR=str(tmp / "cache"), FLWR_HOME=str(tmp / "flwr-home"),
               FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
               FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(free_port()), FLWR_LOCAL_CONTROL_API_PORT=str(free_port()))
    # fedcal's bars are for a terminal; the measurement keeps the output it captures small
    argv = shlex.split(command.format(out=out)) + (["--no-progress"] if command.startswith("fedcal ") else [])
    load0, t0 = os.getloadavg()[0], time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    finally:
        if argv[0] == "flwr":
            _stop_local_superlink(tmp, tmp / "flwr-home" / "local-superlink" / "superlink.log")
    wall, load1 = time.monotonic() - t0, os.getloadavg()[0]
    report = subprocess.run(["fedcal", "report", *map(str, _runs(out)), "--out", str(tmp / "report")], cwd=ROOT,
                            env=env, capture_output=True, text=True)
    tables = sorted((tmp / "report").glob("*.md"))
    minutes, seconds = divmod(int(round(wall)), 60)
    lines = [f"# {name}: {what}", "", "```bash", command.format(out="<out>"), "```", "",
             f"- wall time: {minutes} min {seconds:02d} s (exit code {proc.returncode})",
             f"- machine: {os.cpu_count()} CPU cores, shared: load average {load0:.1f} when it started, "
             f"{load1:.1f} when it ended",
             f"- runs made: {len(_runs(out))}; `fedcal report` on them exited {report.returncode}", ""]
    for t in tables:
        if t.name in ("tables.md", "continuations.md"):
            continue
        lines += [f"`{t.name}`:", "", t.read_text().rstrip(), ""]
    if report.returncode or proc.returncode:
        lines += ["```", (proc.stderr[-2000:] + report.stderr[-2000:]).strip(), "```", ""]
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.md"
    path.write_text("\n".join(lines))
    return path


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m fedcal.pages readme_runs", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"among {', '.join(COMMANDS)} (default: all)")
    args = ap.parse_args()
    if unknown := [n for n in args.names if n not in COMMANDS]:
        ap.error(f"unknown command(s) {', '.join(unknown)}; choose from {', '.join(COMMANDS)}")
    for name in args.names or COMMANDS:
        print(run(name), flush=True)
