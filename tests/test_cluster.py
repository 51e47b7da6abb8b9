"""fedcal on a real multi-node Ray cluster started on 127.0.0.1 (issue 33, docs/cluster.md).

Each cluster is Ray's own test cluster (``ray.cluster_utils.Cluster``: a head with no CPUs and two
worker nodes of one CPU each, every node its own raylet) or ``ray start`` subprocesses. Ray writes
the address of a cluster it starts into ``ray_current_cluster`` under its temp dir, which every
``ray.init()`` on the machine would then attach to: each test points ``RAY_TMPDIR`` at a folder of
its own, so no other process on this machine finds these clusters, and stops what it started.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from fedcal.app.cluster import CLUSTER_FILE, NODE_FILE, PLACEMENT_FILE, ClusterSpec, placement_table
from fedcal.app.ray_attach import attach_address, attach_target
from fedcal.app.sweep import SweepGrid, run_sweep
from fedcal.cli import main as cli_main
from fedcal.reports import collect
from fedcal.results import is_finished, run_dir_for, run_status

ray = pytest.importorskip("ray")

BASE = dict(dataset="synthetic", num_clients=4, clients_per_round=2, num_rounds=2, batch_size=16, local_steps=2,
            lr=0.05, engine="inprocess")
METRICS = ["accuracy", "ece", "sece", "brier", "nll"]


@pytest.fixture
def ray_tmp(monkeypatch):
    """A private Ray temp dir (short: Ray's socket paths must fit 107 bytes), and no RAY_ADDRESS."""
    tmp = tempfile.mkdtemp(prefix="fcr", dir="/tmp")
    monkeypatch.setenv("RAY_TMPDIR", tmp)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                      os.environ.get("PYTHONPATH", "")]))
    yield Path(tmp)
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def cluster(ray_tmp):
    """A head with no CPUs (the driver's node) and two worker nodes of one CPU each."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    workers = [c.add_node(num_cpus=1) for _ in range(2)]
    c.wait_for_nodes()
    c.workers = workers
    yield c
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


def _grid(out: Path, seeds=(0, 1), taus=(0.5, 2.0)):
    return SweepGrid(dict(BASE, output_dir=str(out)), {"tau": list(taus), "seed": list(seeds)}).configs()


def _cells(configs) -> pd.DataFrame:
    cells, _ = collect(configs, ["tau", "seed"])
    return cells.sort_values(["tau", "seed"]).reset_index(drop=True)


@pytest.mark.slow
def test_sweep_on_a_cluster_ships_runs_back_and_equals_local_processes(tmp_path, cluster):
    """Four cells as Ray tasks on two nodes, with no shared filesystem assumed (every run directory
    shipped back to the driver): every cell finishes, on both nodes, with the metrics the same
    sweep computes in local worker processes."""
    local = _grid(tmp_path / "local")
    assert run_sweep(local, jobs=2, progress=False) == {}
    remote = _grid(tmp_path / "remote")
    assert run_sweep(remote, progress=False, cluster=ClusterSpec(cluster.address, store="ship")) == {}
    dirs = [run_dir_for(c.replace(output_dir=str(Path(c.output_dir).absolute()))) for c in remote]
    assert all(is_finished(d) for d in dirs)
    placed = placement_table(dirs)
    assert len(placed) == 4
    worker_ids = {n.node_id for n in cluster.workers}
    assert {p["ray_node_id"] for p in placed} == worker_ids  # both worker nodes ran cells (the head has no CPU)
    for d in dirs:  # config.json names the driver's folder, as if the run had been made there
        assert json.loads((d / "config.json").read_text())["config"]["output-dir"] == str(d.parent)
        assert not list(d.glob("*.tmp")) and not (d / "checkpoint.pt").exists()
    a, b = _cells(local), _cells(remote)
    pd.testing.assert_frame_equal(a[["tau", "seed", *METRICS]], b[["tau", "seed", *METRICS]], rtol=1e-6)
    # a re-run skips every finished cell: nothing is sent to the cluster
    stamps = {d: (d / "metrics.csv").stat().st_mtime_ns for d in dirs}
    assert run_sweep(remote, progress=False, cluster=ClusterSpec(cluster.address, store="ship")) == {}
    assert stamps == {d: (d / "metrics.csv").stat().st_mtime_ns for d in dirs}


def test_cli_sweep_with_cluster_writes_in_place_on_a_shared_store(tmp_path, cluster, capsys):
    """`fedcal sweep --cluster`: the workers see the driver's output folder (one machine), so they
    write the runs in place — no run directory is shipped, nothing is written twice."""
    import fedcal.app.cluster as cl

    shipped = []
    real = cl._install
    cl._install = lambda run_dir, files: (shipped.append(run_dir), real(run_dir, files))
    try:
        code = cli_main(["sweep", "--grid", "tau=0.5,2", "--grid", "seed=0,1", "--no-progress",
                         "--cluster", cluster.address, "--report", str(tmp_path / "rep"),
                         *[f"{k.replace('_', '-')}={v}" for k, v in BASE.items()],
                         f"output-dir={tmp_path / 'runs'}"])
    finally:
        cl._install = real
    assert code == 0 and shipped == []
    cells = pd.read_csv(tmp_path / "rep" / "cells.csv")
    assert len(cells) == 4
    placed = placement_table(sorted((tmp_path / "runs").iterdir()))
    assert {p["ray_node_id"] for p in placed} == {n.node_id for n in cluster.workers}
    assert not list((tmp_path / "runs").glob(".fedcal-cluster-*"))  # the driver's marker is gone


@pytest.mark.slow
def test_a_node_dying_mid_sweep_loses_no_finished_cell(tmp_path, cluster, capsys):
    """A worker node removed while it runs a cell, after another cell finished: the finished cells
    stay finished and untouched, no unfinished cell is reported, and Ray's retry (on the surviving
    node) runs the lost cell again (from its last checkpoint, if it had one) and completes the grid."""
    import psutil

    configs = _grid(tmp_path / "runs", seeds=(0, 1, 2), taus=(0.5, 2.0))
    configs = [c.replace(num_rounds=6, checkpoint_every=2) for c in configs]
    dirs = [run_dir_for(c.replace(output_dir=str(Path(c.output_dir).absolute()))) for c in configs]
    victim = cluster.workers[0]
    seen: dict[Path, int] = {}

    raylet = psutil.Process(victim.all_processes["raylet"][0].process.pid)

    def running_on_victim() -> bool:
        """An unfinished cell whose current attempt's pid (run.log) is a worker of the victim's raylet."""
        workers = {p.pid for p in raylet.children(recursive=True)}
        for d in dirs:
            log = d / "run.log"
            if is_finished(d) or not log.exists():
                continue
            last = [line for line in log.read_text().splitlines() if " started" in line or " resumed" in line]
            if last and int(last[-1].rsplit("pid ", 1)[1].split()[0]) in workers:
                return True
        return False

    def kill_when_one_is_done():
        deadline = time.time() + 120
        while time.time() < deadline:
            done = [d for d in dirs if is_finished(d)]
            if done and running_on_victim():
                for d in done:
                    seen[d] = (d / "metrics.csv").stat().st_mtime_ns
                cluster.remove_node(victim, allow_graceful=False)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_one_is_done)
    killer.start()
    failures = run_sweep(configs, progress=False, cluster=ClusterSpec(cluster.address, max_retries=3))
    killer.join()
    assert seen, "no cell finished before the deadline: the node was never removed"
    assert failures == {}
    assert all(is_finished(d) for d in dirs)
    for d, stamp in seen.items():  # finished before the node died: not re-run, not rewritten
        assert (d / "metrics.csv").stat().st_mtime_ns == stamp
    survivor = cluster.workers[1].node_id
    # the retried cells' last attempt ran on the survivor
    assert all(run_status(d).finished for d in dirs)
    # the cell the dead node was running was run again by Ray's retry: its run.log has two attempts
    attempts = {d: [line for line in (d / "run.log").read_text().splitlines() if " started" in line or " resumed" in line]
                for d in dirs}
    retried = {d: lines for d, lines in attempts.items() if len(lines) > 1}
    assert retried, attempts
    last = {p["run"]: p["ray_node_id"] for p in placement_table(dirs)}
    assert {last[d.name] for d in retried} == {survivor}
    for d, lines in retried.items():
        print(f"{d.name}:\n  " + "\n  ".join((d / "run.log").read_text().splitlines()))
    cells = _cells(configs)
    assert len(cells) == 6 and cells[METRICS].notna().all().all()


@pytest.mark.slow
def test_a_ray_simulation_attached_to_the_cluster_spreads_clients_and_equals_one_node(tmp_path, cluster):
    """engine=ray attached by ``ray-address``: its clients' replies came from both worker nodes
    (placement.csv, cluster.json) and its metrics equal the in-process engine's (which
    tests/test_reference.py holds equal to a single-node Ray run) for the same seed."""
    from fedcal.app.engine import simulate
    from fedcal.config import RunConfig
    from fedcal.reports import final_metrics

    base = RunConfig.from_flower({k.replace("_", "-"): v for k, v in BASE.items()}).replace(
        output_dir=str(tmp_path), clients_per_round=4, num_rounds=3)
    ref = simulate(base.replace(run_name="one-node"), progress=False)
    on = simulate(base.replace(engine="ray", run_name="cluster", ray_address=cluster.address), progress=False)
    placed = pd.read_csv(on / PLACEMENT_FILE)
    train = placed[placed["message_type"] == "train"]
    assert len(train) == 3 * 4 and set(train["partition_id"]) == {0, 1, 2, 3}
    assert set(train["ray_node_id"]) == {n.node_id for n in cluster.workers}
    nodes = json.loads((on / CLUSTER_FILE).read_text())
    assert {n["node_id"] for n in nodes} >= {n.node_id for n in cluster.workers}
    a, b = final_metrics(ref).iloc[0], final_metrics(on).iloc[0]
    for m in METRICS:
        assert b[m] == pytest.approx(a[m], rel=1e-5, abs=1e-7), m


def _ray_cli() -> str:
    return str(Path(sys.executable).with_name("ray"))


@pytest.mark.slow
def test_attach_after_ray_start_without_ray_address(tmp_path, ray_tmp):
    """A cluster started by `ray start` (a head and one more node, subprocesses): with no
    RAY_ADDRESS and no ray-address, fedcal finds the address `ray start` recorded, attaches without
    start-up settings (Ray refuses them when attaching) and runs its clients there."""
    from fedcal.app.engine import backend_config, simulate
    from fedcal.config import RunConfig

    env = dict(os.environ)
    head = subprocess.run([_ray_cli(), "start", "--head", "--port=0", "--num-cpus=1", "--disable-usage-stats",
                           "--include-dashboard=false", "--node-ip-address=127.0.0.1"],
                          env=env, capture_output=True, text=True, timeout=120)
    try:
        assert head.returncode == 0, head.stderr
        address = (ray_tmp / "ray" / "ray_current_cluster").read_text().strip()
        more = subprocess.run([_ray_cli(), "start", f"--address={address}", "--num-cpus=1",
                               "--disable-usage-stats", "--node-ip-address=127.0.0.1"],
                              env=env, capture_output=True, text=True, timeout=120)
        assert more.returncode == 0, more.stderr
        assert attach_address() == address
        cfg = RunConfig.from_flower({k.replace("_", "-"): v for k, v in BASE.items()}).replace(
            output_dir=str(tmp_path), engine="ray", clients_per_round=4, num_rounds=1)
        assert backend_config(cfg)["init_args"].get("address") == address
        assert "_system_config" not in backend_config(cfg)["init_args"]
        run_dir = simulate(cfg, progress=False)
        assert is_finished(run_dir)
        nodes = json.loads((run_dir / CLUSTER_FILE).read_text())
        assert len([n for n in nodes if n["alive"]]) == 2
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _stop_ray_start(ray_tmp)


def _stop_ray_start(ray_tmp: Path) -> None:
    """Stop the processes `ray start` started under this test's temp dir, by pid (never `ray stop`,
    which stops every Ray instance of the machine's user)."""
    import psutil

    mine = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(str(ray_tmp) in part for part in p.info["cmdline"] or []):
                mine.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for p in mine:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(mine, timeout=15)
    for p in alive:
        p.kill()


def test_attach_address_order(monkeypatch, ray_tmp):
    """ray-address, then RAY_ADDRESS, then the address `ray start` recorded, else None (start Ray);
    each with the words that say why (the line a run prints when it attaches)."""
    assert attach_address() is None and attach_target() is None and attach_target("auto") is None
    (ray_tmp / "ray").mkdir()
    (ray_tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:7777")
    recorded = ("127.0.0.1:7777", "a cluster `ray start` left running on this machine, recorded in "
                f"{ray_tmp / 'ray' / 'ray_current_cluster'}")
    assert attach_address() == "127.0.0.1:7777" and attach_target() == recorded == attach_target("auto")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:8888")
    assert attach_address() == "127.0.0.1:8888"
    assert attach_target() == ("127.0.0.1:8888", "environment variable RAY_ADDRESS")
    assert attach_address("10.0.0.1:6379") == "10.0.0.1:6379"
    assert attach_target("10.0.0.1:6379") == ("10.0.0.1:6379", "run-config key ray-address")


_OUT = ["--no-progress", "dataset=synthetic", "num-clients=4", "clients-per-round=2", "num-rounds=1"]


def _one_error_line(capsys) -> str:
    """The one line a refused command printed on stderr (it must be one: no traceback)."""
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fedcal: error: "), lines
    return lines[0]


@pytest.mark.parametrize("args, says", [
    (["sweep", "--cluster", "auto", "--cell-gpus", "-1"], "--cell-gpus must be a finite number >= 0, got -1.0"),
    (["sweep", "--cluster", "auto", "--cell-gpus", "nan"], "--cell-gpus must be a finite number >= 0, got nan"),
    (["sweep", "--cluster", "auto", "--cell-cpus", "nan"], "--cell-cpus must be a finite number > 0, got nan"),
    (["sweep", "--cluster", "auto", "--cell-cpus", "inf"], "--cell-cpus must be a finite number > 0, got inf"),
    (["sweep", "--cluster", "auto", "--cell-cpus", "0"], "--cell-cpus must be a finite number > 0, got 0.0"),
    (["sweep", "--cluster", "auto", "--cell-retries", "-5"], "--cell-retries must be >= 0"),
    (["sweep", "--cluster", "not an address"], "--cluster 'not an address' is not a Ray cluster address"),
    (["sweep", "--cluster", "auto"], "--cluster auto: no running Ray cluster found"),
    (["run", "engine=ray", "ray-address='not an address'"], "run-config key 'ray-address' must be host:port"),
    (["run", "engine=ray", "ray-address=auto"], "run-config key ray-address=auto: no running Ray cluster found"),
])
def test_cluster_options_fail_in_one_line(tmp_path, ray_tmp, capsys, args, says):
    """Every cluster option a command cannot use fails before anything runs, in one line naming it:
    no NaN or infinite resources, no negative retries, no address that is not one, no `auto` when no
    cluster runs (each was accepted, or a traceback, or a wait for a cluster that never came)."""
    code = cli_main([*args, *_OUT, f"output-dir={tmp_path}", *(["--report", str(tmp_path / "rep")]
                                                               if args[0] == "sweep" else [])])
    assert code == 2
    assert says in _one_error_line(capsys)
    assert not (tmp_path / "rep").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bounded(fn, limit: float = 120.0):
    """``fn()``'s return value; fails the test if it is still running after ``limit`` seconds (Ray
    alone retried an unreachable head for about 12 minutes)."""
    out: list = []
    worker = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        pytest.fail(f"still waiting for the cluster after {limit:g} s")
    return out[0]


@pytest.mark.parametrize("command", ["run", "sweep"])
@pytest.mark.parametrize("listening", [False, True], ids=["nothing-listens", "not-a-ray-head"])
def test_an_unreachable_cluster_fails_within_the_deadline_naming_it(tmp_path, ray_tmp, monkeypatch, capsys, command,
                                                                    listening):
    """An address where no Ray head answers — nothing listening, or a port that accepts connections
    but is no Ray head — fails in one line naming the address, why it was chosen and what failed,
    after fedcal's deadline (here 2 s), before any run starts."""
    import fedcal.app.ray_attach as attach

    monkeypatch.setattr(attach, "CONNECT_TIMEOUT_S", 2.0)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    if listening:
        server.listen(8)
    address = f"127.0.0.1:{server.getsockname()[1] if listening else _free_port()}"
    args = ["run", "engine=ray", f"ray-address={address}"] if command == "run" else \
        ["sweep", "--cluster", address, "--report", str(tmp_path / "rep")]
    try:
        code = _bounded(lambda: cli_main([*args, *_OUT, f"output-dir={tmp_path}"]))
    finally:
        server.close()
    line = _one_error_line(capsys)
    why = "run-config key ray-address" if command == "run" else "--cluster"
    if listening:
        assert line.startswith(f"fedcal: error: the Ray cluster at {address} ({why}) accepts connections but did not "
                               "answer as a Ray head within 2 s"), line
    else:
        assert line.startswith(f"fedcal: error: cannot reach the Ray cluster at {address} ({why}): Connection "
                               "refused"), line
    assert code == 2 and not list(tmp_path.glob("*/run.log"))


@pytest.fixture(scope="module")
def one_cpu_head():
    """A `ray start` head with one CPU and no GPU (no worker node), in its own temp dir; reused by
    this module's tests and stopped by pid. Yields (its address, its RAY_TMPDIR)."""
    tmp = Path(tempfile.mkdtemp(prefix="fch", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(tmp), PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                                 os.environ.get("PYTHONPATH", "")]))
    try:
        head = subprocess.run([_ray_cli(), "start", "--head", "--port=0", "--num-cpus=1", "--num-gpus=0",
                               "--disable-usage-stats", "--include-dashboard=false", "--node-ip-address=127.0.0.1"],
                              env=env, capture_output=True, text=True, timeout=180)
        assert head.returncode == 0, head.stderr
        yield (tmp / "ray" / "ray_current_cluster").read_text().strip(), tmp
    finally:
        _stop_ray_start(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("args, unit", [
    (["run", "engine=ray", "client-cpus=2"], "one client (client-cpus=2, client-gpus=0)"),
    (["run", "engine=ray", "client-gpus=1"], "one client (client-cpus=1, client-gpus=1)"),
    (["sweep", "--cell-cpus", "4"], "one cell (--cell-cpus 4, --cell-gpus 0)"),
    (["sweep", "--cell-gpus", "1"], "one cell (--cell-cpus 1, --cell-gpus 1)"),
])
def test_a_cluster_too_small_for_one_client_is_refused_in_one_line(tmp_path, one_cpu_head, monkeypatch, capsys,
                                                                   args, unit):
    """On a one-CPU head, a client or cell asking for more than any node has is refused in one line
    naming the cluster and what it has, before anything is submitted (Flower's actor pool failed
    with a traceback and the run hung; a sweep's tasks waited forever)."""
    import ray

    address, _ = one_cpu_head
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    where = ["--cluster", address, "--report", str(tmp_path / "rep")] if args[0] == "sweep" else \
        [f"ray-address={address}"]
    why = "--cluster" if args[0] == "sweep" else "run-config key ray-address"
    code = _bounded(lambda: cli_main([*args, *where, *_OUT, f"output-dir={tmp_path}"]))
    assert code == 2
    assert _one_error_line(capsys) == (f"fedcal: error: the Ray cluster at {address} ({why}) cannot host {unit}: no "
                                       "node has that much (alive nodes: 1 CPU/0 GPU); lower the request or add a "
                                       "node with more")
    assert not ray.is_initialized() and not list(tmp_path.glob("*/run.log"))


def test_a_run_says_which_cluster_it_attached_to_and_why(tmp_path, one_cpu_head, monkeypatch, capsys):
    """With a cluster `ray start` left running and neither ray-address nor RAY_ADDRESS, a plain
    `fedcal run` (engine=ray) attaches to it — as Ray would — and says so in one line, naming the
    cluster and the file that pointed there (it joined without a word); its clients run there."""
    address, ray_tmp = one_cpu_head
    monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    code = _bounded(lambda: cli_main(["run", *_OUT, "dataset=digits", f"output-dir={tmp_path}", "run-name=attached"]),
                    300)
    err = capsys.readouterr().err
    assert code == 0, err
    said = [line for line in err.splitlines() if "attached" in line]
    assert said == [f"fedcal: warning: engine=ray: attached to the Ray cluster at {address} (a cluster `ray start` "
                    f"left running on this machine, recorded in {ray_tmp / 'ray' / 'ray_current_cluster'})"], err
    nodes = json.loads((tmp_path / "attached" / CLUSTER_FILE).read_text())
    assert [(n["cpus"], n["alive"]) for n in nodes] == [(1.0, True)]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr") is None, reason="flwr CLI not on PATH")
def test_flwr_run_against_a_simulation_superlink_on_a_ray_head(tmp_path, cluster, monkeypatch):
    """Flower's own route (docs/cluster.md): `flower-superlink --simulation` started on the Ray
    head's machine with RAY_ADDRESS, a remote SuperLink in $FLWR_HOME/config.toml, `flwr run .
    <connection> --federation-config` (num-supernodes, CPUs per client: Flower 1.42's form); the
    simulation attaches to the cluster and its clients' replies come from both worker nodes."""
    from tests.deploy_harness import (Deployment, flwr_cli, free_port, superlink_cmd, tail,
                                      wait_for_port)

    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    port = free_port()
    dep = Deployment(tmp_path)
    out = tmp_path / "runs"
    try:
        link = dep.start("superlink", [*superlink_cmd(port), "--simulation"], tmp_path / "home-superlink")
        wait_for_port(port, link, 90, dep)
        home = tmp_path / "home-cli"
        home.mkdir()
        (home / "config.toml").write_text(
            '[superlink]\ndefault = "ray-head"\n\n[superlink.ray-head]\n'
            f'address = "127.0.0.1:{port}"\ninsecure = true\n')
        cfg = " ".join(f"{k.replace('_', '-')}={v!r}" if isinstance(v, str) else f"{k.replace('_', '-')}={v}"
                       for k, v in dict(BASE, clients_per_round=4).items() if k != "engine")
        done = flwr_cli(["run", ".", "ray-head", "--stream", "--run-config",
                         f"{cfg} output-dir='{out}' run-name='flwr-route'",
                         "--federation-config", "num-supernodes=4 client-resources-num-cpus=1"],
                        home, Path(__file__).resolve().parents[1], timeout=400)
        context = f"rc={done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}\n{dep.logs()}"
        run_dir = out / "flwr-route"
        assert (run_dir / "DONE").exists(), context
        placed = pd.read_csv(run_dir / PLACEMENT_FILE)
        train = placed[placed["message_type"] == "train"]
        assert len(train) == 2 * 4, context
        assert set(train["ray_node_id"]) == {n.node_id for n in cluster.workers}, context
    finally:
        dep.stop()
