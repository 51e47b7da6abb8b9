"""fedcal on Flower's Deployment Engine: a real SuperLink, three SuperNodes, `flwr run`.

``test_insecure_deployment`` starts ``flower-superlink`` and one ``flower-supernode`` per
client on 127.0.0.1 (free ports, tmp FLWR_HOMEs), submits a two-round TSA run on
scikit-learn's digits with ``flwr run <repo> <connection> --stream`` and checks the run's
``metrics.csv`` and ``DONE``.

The other tests share ONE secured SuperLink, set up as docs/deployment.md §4 documents it
(module fixture ``secured``): TLS, ``--enable-supernode-auth``, bound to 127.0.0.1 (its
Fleet, Control and Runtime APIs share that port), and a gateway that publishes only the Fleet
API (``/v1/fleet/``) on a second port. The operator uses the loopback port; SuperNodes and
everyone else get only the gateway's address and the public CA certificate. On one machine an
"outsider" is told apart by what it holds and where it connects: the tests give it the
gateway's address and the CA, and check that the SuperLink's own port listens on 127.0.0.1
only (what keeps other machines off it; a firewall must do the same on a real network).
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from fedcal.results import load_metrics
from tests.deploy_harness import (
    HOST,
    METRIC_NAMES,
    ROOT,
    Deployment,
    FleetGateway,
    Proc,
    flwr_cli,
    flwr_script,
    free_port,
    listening_addresses,
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
# What a plaintext SuperNode logs when the TLS port drops its connection without an answer.
PLAINTEXT_DROPPED = ("Server disconnected without sending a response", "Connection reset by peer")


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


# --------------------------------------------------------------------------- secured SuperLink
@dataclass
class Secured:
    """One TLS SuperLink with SuperNode authentication, as docs/deployment.md §4 sets it up."""

    tmp: Path
    dep: Deployment
    link: Proc
    gateway: FleetGateway
    link_port: int       # the SuperLink's single port (Fleet + Control + Runtime), loopback only
    public_port: int     # the gateway: Fleet API only; what SuperNodes (and outsiders) are given
    ca: Path
    operator_home: Path  # `flwr` connection "fedcal-operator" -> 127.0.0.1:link_port

    def operator(self, *args: str) -> subprocess.CompletedProcess:
        return flwr_cli(args, self.operator_home, self.tmp, timeout=NODE_TIMEOUT)

    def node_ids(self) -> set[int]:
        listing = _flwr_json(self.operator("supernode", "list", "fedcal-operator", "--format", "json"))
        return {int(n["node-id"]) for n in listing["nodes"]}

    def run_ids(self) -> set[int]:
        listing = _flwr_json(self.operator("ls", "fedcal-operator", "--format", "json"))
        return {int(r["run-id"]) for r in listing["runs"]}


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Secured:
    tmp = tmp_path_factory.mktemp("secured")
    dep = Deployment(tmp)
    link_port, public_port = free_port(), free_port()
    ca, cert, key = make_tls(tmp / "certs")
    operator_home = tmp / "home-operator"
    write_connection(operator_home, "fedcal-operator", link_port, root_ca=ca)
    link = dep.start("superlink", superlink_cmd(link_port, tls=(ca, cert, key), supernode_auth=True),
                     tmp / "home-superlink")
    gateway = None
    try:
        wait_for_port(link_port, link, NODE_TIMEOUT, dep)
        gateway = FleetGateway(public_port, link_port, (ca, cert, key))
        yield Secured(tmp, dep, link, gateway, link_port, public_port, ca, operator_home)
    finally:
        if gateway is not None:
            gateway.stop()
        dep.stop()


def _wait_refused(dep: Deployment, procs: list[Proc]) -> None:
    """Each of ``procs`` (SuperNodes) gives up with a non-zero status within NODE_TIMEOUT."""
    deadline = time.monotonic() + NODE_TIMEOUT
    for proc in procs:
        try:
            rc = proc.popen.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{proc.name} was not refused\n{dep.logs(procs)}") from None
        assert rc != 0, proc.tail()
        assert "SuperNode ID:" not in tail(proc.log, 1 << 20), proc.tail()


def test_outsider_holding_only_the_ca_is_refused(secured):
    """Issue 16 item 1: a party given the published address and the CA certificate cannot
    register a key, list runs, submit a run, or connect a SuperNode; nothing it tried reaches
    the SuperLink's state."""
    from flwr.supercore.exit import ExitCode

    s, dep = secured, secured.dep
    nodes_before, runs_before = s.node_ids(), s.run_ids()

    # The control plane listens on loopback only: no other machine can connect to it.
    assert listening_addresses(s.link_port) == {HOST}, listening_addresses(s.link_port)

    outsider_home = s.tmp / "home-outsider"
    write_connection(outsider_home, "outsider", s.public_port, root_ca=s.ca)
    own_key, own_pub = make_node_keys(s.tmp / "keys-outsider", "outsider")

    def outsider(*args: str) -> subprocess.CompletedProcess:
        return flwr_cli(args, outsider_home, s.tmp, timeout=NODE_TIMEOUT)

    refused_before = len(s.gateway.refused)
    attempts = {
        "supernode register": outsider("supernode", "register", str(own_pub), "outsider", "--format", "json"),
        "ls": outsider("ls", "outsider", "--format", "json"),
        "supernode list": outsider("supernode", "list", "outsider", "--format", "json"),
        "run": outsider("run", str(ROOT), "outsider", "--format", "json",
                        "--run-config", run_config(s.tmp / "outsider-runs", "outsider")),
    }
    for what, proc in attempts.items():
        # With --format json, `flwr` reports a failure in its JSON (its exit status is 0).
        start = proc.stdout.find("{")
        answer = json.loads(proc.stdout[start:]) if start >= 0 else {}
        assert answer.get("success") is False and "403 Forbidden" in answer.get("error-message", ""), \
            f"outsider `flwr {what}` was not refused:\nrc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    # Each was refused by the gateway (403 on a Control path), not by a typo in the test.
    refused = s.gateway.refused[refused_before:]
    assert len(refused) >= len(attempts) and all("/v1/control/" in r for r in refused), refused

    # Its SuperNodes, through the only address it has: with its own (unregistrable) key, and
    # with none. The SuperLink refuses both (SuperNode authentication).
    rogues = [
        dep.start("outsider-own-key", supernode_cmd(s.public_port, free_port(), 0, NUM_NODES,
                                                    root_ca=s.ca, private_key=own_key),
                  s.tmp / "home-outsider-node-1"),
        dep.start("outsider-no-key", supernode_cmd(s.public_port, free_port(), 1, NUM_NODES, root_ca=s.ca),
                  s.tmp / "home-outsider-node-2"),
    ]
    try:
        _wait_refused(dep, rogues)
        for rogue in rogues:
            assert f"Exit Code: {int(ExitCode.SUPERNODE_CONNECTION_ERROR)}" in tail(rogue.log), rogue.tail()
        assert "Failed to activate SuperNode" in tail(rogues[0].log), rogues[0].tail()
        assert "must be registered via the CLI" in tail(rogues[1].log), rogues[1].tail()
    finally:
        dep.stop(rogues)

    # Nothing it tried took effect: no new node, no new run, no outsider output.
    assert s.node_ids() == nodes_before and s.run_ids() == runs_before
    assert not (s.tmp / "outsider-runs").exists()

    # Control: the very same request made where the Control API listens succeeds. What
    # refuses the outsider is that it cannot reach that port, so the operator must keep it so.
    direct_home = s.tmp / "home-direct"
    write_connection(direct_home, "direct", s.link_port, root_ca=s.ca)
    direct = flwr_cli(["ls", "direct", "--format", "json"], direct_home, s.tmp, timeout=NODE_TIMEOUT)
    assert direct.returncode == 0, f"{direct.stdout}\n{direct.stderr}"


def test_tls_superlink_refuses_plaintext_wrong_ca_and_wrong_name(secured):
    """Issue 16 item 2: a SuperNode connecting in plaintext (``--insecure``), one trusting a
    different CA, and one reaching the SuperLink under a name its certificate does not cover
    (``localhost``; the certificate names 127.0.0.1) never get a node id."""
    from flwr.supercore.exit import ExitCode

    s, dep = secured, secured.dep
    other_ca, _, _ = make_tls(s.tmp / "other-ca")
    key, pub = make_node_keys(s.tmp / "keys-tls", "tls-probe")
    # Registered, so that only TLS can be what refuses these SuperNodes.
    reg = s.operator("supernode", "register", str(pub), "fedcal-operator", "--format", "json")
    probe_id = int(_flwr_json(reg)["node-id"])
    nodes_before = s.node_ids()

    def node(name: str, address: str, root_ca: Path | None) -> Proc:
        # Flower itself refuses to send a key over plaintext, so the plaintext node has none.
        cmd = supernode_cmd(s.link_port, free_port(), 0, NUM_NODES, root_ca=root_ca,
                            private_key=None if root_ca is None else key, max_retries=1)
        cmd[cmd.index("--superlink") + 1] = address
        return dep.start(name, cmd, s.tmp / f"home-{name}")

    procs = [
        node("plaintext", f"{HOST}:{s.link_port}", None),
        node("wrong-ca", f"{HOST}:{s.link_port}", other_ca),
        node("wrong-name", f"localhost:{s.link_port}", s.ca),
    ]
    try:
        _wait_refused(dep, procs)
        for proc in procs:
            assert f"Exit Code: {int(ExitCode.SUPERNODE_CONNECTION_ERROR)}" in tail(proc.log), proc.tail()
        # Plaintext: the TLS port drops the connection before any HTTP answer (so not even the
        # SuperNode-authentication refusal, which is an HTTP answer, is reached). Which words the
        # client logs depends on timing: the server closing after reading the plaintext request
        # ("disconnected"), or resetting it while the request is still being written ("reset").
        plain = tail(procs[0].log)
        assert any(m in plain for m in PLAINTEXT_DROPPED), procs[0].tail()
        assert "must be registered via the CLI" not in tail(procs[0].log), procs[0].tail()
        assert "CERTIFICATE_VERIFY_FAILED" in tail(procs[1].log), procs[1].tail()
        assert "CERTIFICATE_VERIFY_FAILED" in tail(procs[2].log) and "mismatch" in tail(procs[2].log), \
            procs[2].tail()
    finally:
        dep.stop(procs)
    # None of them activated the registered key: it stays offline/registered only.
    listing = _flwr_json(s.operator("supernode", "list", "fedcal-operator", "--format", "json"))
    status = {int(n["node-id"]): n["status"] for n in listing["nodes"]}
    assert s.node_ids() == nodes_before and status[probe_id] != "online", listing
    s.operator("supernode", "unregister", str(probe_id), "fedcal-operator")


def test_tls_deployment_with_supernode_auth(secured):
    """The documented secured deployment runs fedcal: the operator registers three keys and
    submits over the loopback Control API; the SuperNodes connect through the Fleet-only
    gateway."""
    s, dep = secured, secured.dep
    out = s.tmp / "runs"
    keys = [make_node_keys(s.tmp / "keys", f"node-{k}") for k in range(NUM_NODES)]
    registered = []
    for _, public in keys:
        reg = s.operator("supernode", "register", str(public), "fedcal-operator", "--format", "json")
        registered.append(int(_flwr_json(reg)["node-id"]))

    nodes = [dep.start(f"supernode-{k}",
                       supernode_cmd(s.public_port, free_port(), k, NUM_NODES, root_ca=s.ca, private_key=private),
                       s.tmp / f"home-node-{k}")
             for k, (private, _) in enumerate(keys)]
    try:
        for node in nodes:
            wait_for_log(node, "SuperNode ID:", NODE_TIMEOUT, dep)
        run = _submit(dep, "fedcal-operator", s.operator_home, out)
        _wait_run(dep, run)
        _check_results(dep, out / "deploy", nodes)
        listing = _flwr_json(s.operator("supernode", "list", "fedcal-operator", "--format", "json"))
        status = {int(n["node-id"]): n["status"] for n in listing["nodes"]}
        assert all(status.get(n) == "online" for n in registered), f"{listing}\n{dep.logs()}"
        assert s.gateway.forwarded, "SuperNodes did not go through the gateway"
    finally:
        dep.stop(nodes)
