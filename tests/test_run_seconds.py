"""fedcal/pages/run_seconds.py: seconds per run, and grouped by run-config keys and the machine."""

from __future__ import annotations

import json
from pathlib import Path

from fedcal.config import RunConfig
from fedcal.results import RunStore, run_dir_for
from fedcal.pages import run_seconds


def _run(tmp_path, seed: int, seconds: list[float], cuda: list[str]) -> Path:
    cfg = RunConfig.from_flower({"task": "distill", "dst-corpus": "synthetic", "dst-rounds": len(seconds) - 1,
                                 "seed": seed, "output-dir": str(tmp_path)})
    store = RunStore(run_dir_for(cfg), cfg)
    store.start()
    for r, s in enumerate(seconds):
        store.log_round(r, {"ca": 0.5})
        store.log_timings(r, {"round_seconds": s})
    store.finish()
    meta = json.loads((store.dir / "config.json").read_text())  # the machine as another one recorded it
    meta["provenance"]["machine"] = {"cpus": 16 if cuda else 2, "torch_threads": 1, "cuda": cuda}
    (store.dir / "config.json").write_text(json.dumps(meta))
    return store.dir


def _main(argv, capsys) -> str:
    main = run_seconds.main
    assert main([str(a) for a in argv]) == 0
    return capsys.readouterr().out


def test_rows_per_run_and_grouped_by_machine(tmp_path, capsys):
    cpu = [_run(tmp_path, s, [2.0, 10.0, 20.0], []) for s in (0, 1)]
    gpu = _run(tmp_path, 2, [1.0, 1.5, 1.5], ["NVIDIA H200"])
    rows = _main(cpu + [gpu], capsys).strip().splitlines()
    assert len(rows) == 2 + 3 and rows[2].endswith("| 2 | 2 | 30 | 32 |")  # rounds, round 0, 1+, total
    grouped = _main(["--by", "machine,dst-rounds", *cpu, gpu], capsys)
    lines = {ln.split(" | ")[0].strip("| "): ln for ln in grouped.strip().splitlines()[2:]}
    assert set(lines) == {"CPU: 2 cores, 1 torch thread(s)", "GPU: NVIDIA H200"}  # no total across machines
    assert "| 2 | 2 | 32 | 32 | 32 | 32 |" in lines["CPU: 2 cores, 1 torch thread(s)"]
    assert "| 2 | 1 | 4 | 4 | 4 | 4 |" in lines["GPU: NVIDIA H200"]
    total = _main(["--by", "dst-rounds", *cpu, gpu], capsys).strip().splitlines()[-1]
    assert total.startswith("| all | 3 | 32 |")

