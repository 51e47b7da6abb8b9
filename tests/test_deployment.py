"""fedcal on Flower's Deployment Engine: a real SuperLink, three SuperNodes, `flwr run`.

Each test starts ``flower-superlink`` and one ``flower-supernode`` per client on 127.0.0.1
(free ports, tmp FLWR_HOMEs), submits a two-round TSA run on scikit-learn's digits with
``flwr run <repo> <connection> --stream`` and checks the run's ``metrics.csv`` and
``DONE``. The second test does it over TLS with SuperNode authentication, and checks that
SuperNodes without registered credentials are refused. See docs/deployment.md.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path

import pytest

from fedcal.results import load_metrics
from tests.deploy_harness import (
    METRIC_NAMES,
    ROOT,
    Deployment,
    Proc,
    flwr_cli,
    flwr_script,
    free_port,
    make_node_keys,
    make_tls,
    missing_scripts,
    run_config,
    superlink_cmd,
    supernode_cmd,
    tail,
    wait_for_log,
    wait_for_port,
    write_connection,
)

pytestmark = [
    pytest.mark.deployment,
    pytest.mark.skipif(bool(missing_scripts()), reason=f"Flower scripts missing: {missing_scripts()}"),
]

NUM_NODES = 3
RUN_TIMEOUT = 420  # generous: the run takes ~1-2 min on 2 busy CPU cores
NODE_TIMEOUT = 120


def _submit(dep: Deployment, conn: str, cli_home: Path, out: Path) -> Proc:
    """``flwr run <repo root> <conn> --stream --run-config ...`` as a background process."""
    return dep.start("flwr-run", [flwr_script("flwr"), "run", str(ROOT), conn, "--stream",
                                  "--run-config", run_config(out)], cli_home)


def _wait_run(dep: Deployment, run: Proc) -> None:
    try:
        rc = run.popen.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"`flwr run` did not finish in {RUN_TIMEOUT}s\n{dep.logs()}") from None
    assert rc == 0, f"`flwr run` failed (rc={rc})\n{dep.logs()}"


def _check_results(dep: Deployment, run_dir: Path, nodes: list[Proc]) -> None:
    context = dep.logs()
    assert (run_dir / "DONE").exists(), f"no DONE in {run_dir}\n{context}"
    df = load_metrics(run_dir)
    assert sorted(df["round"].unique()) == [0, 1, 2], f"{df}\n{context}"
    for rnd in (0, 1, 2):
        got = df[df["round"] == rnd].set_index("metric")["value"]
        for name in METRIC_NAMES:
            assert name in got.index, f"round {rnd} lacks {name}: {got.to_dict()}\n{context}"
            assert math.isfinite(float(got[name])), f"round {rnd} {name}={got[name]}\n{context}"
    assert set(df["num-clients"]) == {NUM_NODES} and set(df["dataset"]) == {"digits"}
    # Every SuperNode answered the identity query and trained in both rounds (3 of 3 sampled).
    for node in nodes:
        log = tail(node.log, 1 << 22)
        assert log.count("Receiving: query.identity message") == 1, node.tail()
        assert log.count("Receiving: train message") == 2, node.tail()


def _flwr_json(proc: subprocess.CompletedProcess) -> dict:
    out = proc.stdout
    start = out.find("{")
    assert proc.returncode == 0 and start >= 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(out[start:])


def test_insecure_deployment(tmp_path):
    dep = Deployment(tmp_path)
    port, out, cli_home = free_port(), tmp_path / "runs", tmp_path / "home-cli"
    write_connection(cli_home, "fedcal-insecure", port)
    try:
        link = dep.start("superlink", superlink_cmd(port), tmp_path / "home-superlink")
        nodes = [dep.start(f"supernode-{k}", supernode_cmd(port, free_port(), k, NUM_NODES),
                           tmp_path / f"home-node-{k}")
                 for k in range(NUM_NODES)]
        wait_for_port(port, link, NODE_TIMEOUT, dep)
        # The ServerApp itself waits until `num-clients` SuperNodes are connected.
        run = _submit(dep, "fedcal-insecure", cli_home, out)
        _wait_run(dep, run)
        _check_results(dep, out / "deploy", nodes)
    finally:
        dep.stop()


def test_tls_deployment_with_supernode_auth(tmp_path):
    from flwr.supercore.exit import ExitCode

    dep = Deployment(tmp_path)
    port, out, cli_home = free_port(), tmp_path / "runs", tmp_path / "home-cli"
    ca, cert, key = make_tls(tmp_path / "certs")
    keys = [make_node_keys(tmp_path / "keys", f"node-{k}") for k in range(NUM_NODES)]
    rogue_key, _ = make_node_keys(tmp_path / "keys", "unregistered")
    write_connection(cli_home, "fedcal-tls", port, root_ca=ca)
    try:
        link = dep.start("superlink", superlink_cmd(port, tls=(ca, cert, key), supernode_auth=True),
                         tmp_path / "home-superlink")
        wait_for_port(port, link, NODE_TIMEOUT, dep)

        # Authorise the three SuperNodes: register their public keys via the Control API.
        registered = []
        for _, public in keys:
            reg = flwr_cli(["supernode", "register", str(public), "fedcal-tls", "--format", "json"],
                           cli_home, tmp_path, timeout=NODE_TIMEOUT)
            registered.append(int(_flwr_json(reg)["node-id"]))

        nodes = [dep.start(f"supernode-{k}",
                           supernode_cmd(port, free_port(), k, NUM_NODES, root_ca=ca, private_key=private),
                           tmp_path / f"home-node-{k}")
                 for k, (private, _) in enumerate(keys)]
        # Two SuperNodes without valid credentials: an unregistered key, and no key at all.
        rogues = [
            dep.start("rogue-unregistered-key",
                      supernode_cmd(port, free_port(), 0, NUM_NODES, root_ca=ca, private_key=rogue_key),
                      tmp_path / "home-rogue-1"),
            dep.start("rogue-no-key", supernode_cmd(port, free_port(), 1, NUM_NODES, root_ca=ca),
                      tmp_path / "home-rogue-2"),
        ]
        for node in nodes:
            wait_for_log(node, "SuperNode ID:", NODE_TIMEOUT, dep)

        run = _submit(dep, "fedcal-tls", cli_home, out)

        # The SuperLink refuses both rogue SuperNodes; they exit with a connection error.
        deadline = time.monotonic() + NODE_TIMEOUT
        for rogue in rogues:
            try:
                rc = rogue.popen.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{rogue.name} was not refused\n{dep.logs()}") from None
            # flwr_exit logs the Flower exit code; the process status itself is 1.
            assert rc != 0, rogue.tail()
            assert f"Exit Code: {int(ExitCode.SUPERNODE_CONNECTION_ERROR)}" in tail(rogue.log), rogue.tail()
        assert "Failed to activate SuperNode" in tail(rogues[0].log), rogues[0].tail()
        assert "must be registered via the CLI" in tail(rogues[1].log), rogues[1].tail()

        _wait_run(dep, run)
        _check_results(dep, out / "deploy", nodes)

        # Only the three registered SuperNodes are known to the SuperLink, all online.
        listing = _flwr_json(flwr_cli(["supernode", "list", "fedcal-tls", "--format", "json"],
                                      cli_home, tmp_path, timeout=NODE_TIMEOUT))
        known = {int(n["node-id"]): n["status"] for n in listing["nodes"]}
        assert known == {n: "online" for n in registered}, f"{listing}\n{dep.logs()}"
    finally:
        dep.stop()
