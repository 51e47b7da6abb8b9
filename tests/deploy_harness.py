"""Helpers to run fedcal on Flower's Deployment Engine in tests.

Starts a real ``flower-superlink`` and ``flower-supernode`` processes on 127.0.0.1 (free
ports, tmp FLWR_HOMEs, logs in tmp), writes the ``flwr`` CLI's SuperLink connection,
creates TLS certificates and SuperNode authentication keys, and stops every process it
started (and whatever those spawned: SuperExec, flwr-serverapp, flwr-clientapp) by pid.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
METRIC_NAMES = ("accuracy", "ece", "sece", "brier", "nll")


def _bin_dir() -> Path:
    return Path(sys.executable).parent


def flwr_script(name: str) -> str | None:
    """Absolute path of a Flower console script of this interpreter (or on PATH)."""
    local = _bin_dir() / name
    if local.exists():
        return str(local)
    return shutil.which(name)


def missing_scripts() -> list[str]:
    names = ("flwr", "flower-superlink", "flower-supernode", "flower-superexec",
             "flwr-serverapp", "flwr-clientapp")
    return [n for n in names if flwr_script(n) is None]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def flwr_env(home: Path) -> dict[str, str]:
    """Environment of a Flower process: its own FLWR_HOME, no telemetry/update check."""
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        FLWR_HOME=str(home),
        FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_UPDATE_CHECK="1",
        # SuperExec starts flwr-serverapp/flwr-clientapp by name: use this interpreter's.
        PATH=f"{_bin_dir()}{os.pathsep}{env.get('PATH', '')}",
        # Keep the tiny runs light on shared CPUs.
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def tail(path: Path, n: int = 4000) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"<{path} missing>"
    return text[-n:]


# --------------------------------------------------------------------------- processes
def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process, from /proc."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[19])


def _descendants(root: int) -> list[tuple[int, int]]:
    """(pid, start time) of every live descendant of ``root`` (Linux /proc; else [])."""
    if not Path("/proc").is_dir():
        return []
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _proc_stat(int(entry.name))):
            children.setdefault(st[0], []).append((int(entry.name), st[1]))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def _alive(pid: int, start: int) -> bool:
    st = _proc_stat(pid)
    return st is not None and st[1] == start  # same process, not a reused pid


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    def tail(self, n: int = 4000) -> str:
        return f"----- {self.name} (rc={self.popen.poll()}) {self.log} -----\n{tail(self.log, n)}"


@dataclass
class Deployment:
    """Processes of one test deployment; ``stop()`` ends them all by pid."""

    tmp: Path
    procs: list[Proc] = field(default_factory=list)

    def start(self, name: str, cmd: Sequence[str], home: Path, cwd: Path | None = None) -> Proc:
        log = self.tmp / f"{name}.log"
        with open(log, "wb") as f:
            popen = subprocess.Popen(list(cmd), stdout=f, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=flwr_env(home),
                                     cwd=str(cwd or self.tmp))
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def logs(self, procs: Iterable[Proc] | None = None, n: int = 3000) -> str:
        return "\n".join(p.tail(n) for p in (self.procs if procs is None else procs))

    def stop(self, procs: Iterable[Proc] | None = None) -> None:
        """SIGTERM every started process (or those of ``procs``), then its leftover children;
        SIGKILL stragglers."""
        chosen = self.procs if procs is None else list(procs)
        running = [p for p in chosen if p.popen.poll() is None]
        kids = {p.popen.pid: _descendants(p.popen.pid) for p in running}
        for p in reversed(running):  # SuperNodes before the SuperLink
            p.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in running:
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait(timeout=10)
        leftovers = [k for p in running for k in kids[p.popen.pid] if _alive(*k)]
        for pid, _ in leftovers:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while any(_alive(*k) for k in leftovers) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid, start in leftovers:
            if _alive(pid, start):
                _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_for_port(port: int, proc: Proc, timeout: float, dep: Deployment) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise AssertionError(f"{proc.name} exited early\n{dep.logs()}")
        try:
            with socket.create_connection((HOST, port), timeout=1):
                return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{proc.name} not listening on {port} after {timeout:.0f}s\n{dep.logs()}")


def wait_for_log(proc: Proc, text: str, timeout: float, dep: Deployment) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in tail(proc.log, 1 << 20):
            return
        if proc.popen.poll() is not None:
            raise AssertionError(f"{proc.name} exited before logging {text!r}\n{dep.logs()}")
        time.sleep(0.3)
    raise AssertionError(f"{proc.name} did not log {text!r} within {timeout:.0f}s\n{dep.logs()}")


# --------------------------------------------------------------------------- commands
def superlink_cmd(port: int, tls: tuple[Path, Path, Path] | None = None,
                  supernode_auth: bool = False) -> list[str]:
    """``flower-superlink`` serving the Fleet, Control and Runtime HTTP APIs on one port."""
    cmd = [flwr_script("flower-superlink"), "--host", HOST, "--port", str(port),
           # fedcal and its dependencies are installed here; no `uv sync` (offline).
           "--disable-runtime-dependency-installation"]
    if tls is None:
        cmd.append("--insecure")
    else:
        ca, cert, key = tls
        cmd += ["--ssl-ca-certfile", str(ca), "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    if supernode_auth:
        cmd.append("--enable-supernode-auth")
    return cmd


def supernode_cmd(superlink_port: int, runtime_port: int, partition_id: int, num_partitions: int,
                  root_ca: Path | None = None, private_key: Path | None = None,
                  max_retries: int | None = None) -> list[str]:
    cmd = [flwr_script("flower-supernode"), "--superlink", f"{HOST}:{superlink_port}",
           "--host", HOST, "--port", str(runtime_port),
           "--node-config", f"partition-id={partition_id} num-partitions={num_partitions}"]
    cmd += ["--insecure"] if root_ca is None else ["--root-certificates", str(root_ca)]
    if private_key is not None:
        cmd += ["--auth-supernode-private-key", str(private_key)]
    if max_retries is not None:
        cmd += ["--max-retries", str(max_retries)]
    return cmd


def write_connection(cli_home: Path, name: str, port: int, root_ca: Path | None = None) -> None:
    """``$FLWR_HOME/config.toml`` with one SuperLink connection, made the default."""
    cli_home.mkdir(parents=True, exist_ok=True)
    trust = "insecure = true" if root_ca is None else f"root-certificates = {json.dumps(str(root_ca))}"
    (cli_home / "config.toml").write_text(
        f'[superlink]\ndefault = "{name}"\n\n[superlink.{name}]\naddress = "{HOST}:{port}"\n{trust}\n')


def run_config(out_dir: Path, run_name: str = "deploy") -> str:
    return (f"dataset='digits' num-clients=3 clients-per-round=3 num-rounds=2 lr=0.05 "
            f"device='cpu' output-dir='{out_dir}' run-name='{run_name}'")


def flwr_cli(args: Sequence[str], cli_home: Path, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([flwr_script("flwr"), *args], check=False, cwd=str(cwd), env=flwr_env(cli_home),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def listening_addresses(port: int) -> set[str]:
    """Local IPv4/IPv6 addresses with a TCP socket LISTENing on ``port`` (Linux /proc/net)."""
    found: set[str] = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr_hex, port_hex = local.split(":")
            if state != "0A" or int(port_hex, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(addr_hex)
            # /proc/net prints the address as native-endian 32-bit words.
            words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.add(socket.inet_ntop(family, words))
    return found


# --------------------------------------------------------------------------- Fleet-only gateway
class FleetGateway:
    """A TLS reverse proxy that serves only the Fleet API of a SuperLink.

    Flower 1.41 (and 1.42) serves the Fleet, Control and Runtime APIs of a SuperLink over HTTP(S) on one
    port, and its Control API has no account authentication without Flower Enterprise: whoever
    reaches that port (holding only the public CA certificate) can register SuperNode keys,
    list runs and submit runs. docs/deployment.md §4 therefore binds the SuperLink to
    127.0.0.1 and publishes only ``/v1/fleet/`` through a reverse proxy (nginx there). This is
    the same rule in ~60 lines for the tests: it terminates TLS with the SuperLink's
    certificate, forwards ``POST /v1/fleet/...`` to the SuperLink over TLS (verifying it
    against the CA) and answers everything else with 403, without contacting the SuperLink.
    It runs in a thread of the test process; ``stop()`` ends it.
    """

    ALLOWED_PREFIX = "/v1/fleet/"
    HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer",
                            "transfer-encoding", "upgrade", "host", "content-length"})

    def __init__(self, listen_port: int, upstream_port: int, tls: tuple[Path, Path, Path]):
        import http.client
        import ssl
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        ca, cert, key = tls
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(str(cert), str(key))
        upstream_ctx = ssl.create_default_context(cafile=str(ca))
        gateway = self
        self.forwarded: list[str] = []
        self.refused: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.command != "POST" or not self.path.startswith(gateway.ALLOWED_PREFIX):
                    gateway.refused.append(f"{self.command} {self.path}")
                    self._answer(403, [("Content-Type", "text/plain")],
                                 b"only the Fleet API (/v1/fleet/) is served on this address\n")
                    return
                gateway.forwarded.append(self.path)
                conn = http.client.HTTPSConnection(HOST, upstream_port, context=upstream_ctx,
                                                   timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in gateway.HOP_BY_HOP}
                    conn.request("POST", self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    kept = [(k, v) for k, v in resp.getheaders() if k.lower() not in gateway.HOP_BY_HOP]
                    self._answer(resp.status, kept, data)
                finally:
                    conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self):
                sock, addr = super().get_request()
                # Handshake in the handler's thread: a stalled client must not block accept().
                return server_ctx.wrap_socket(sock, server_side=True,
                                              do_handshake_on_connect=False), addr

            def handle_error(self, request, client_address) -> None:
                pass  # e.g. a plaintext or distrusting client aborting the TLS handshake

        self.server = Server((HOST, listen_port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


# --------------------------------------------------------------------------- credentials
def make_tls(directory: Path, dns_names: Sequence[str] = ()) -> tuple[Path, Path, Path]:
    """A self-signed CA and a server certificate for 127.0.0.1 (and ``dns_names``): (ca, cert, key).

    The certificate does not name ``localhost`` unless asked: a client that connects to
    ``localhost`` then meets a server name its certificate does not cover.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    valid_from, valid_to = now - datetime.timedelta(days=1), now + datetime.timedelta(days=2)

    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedcal test CA")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(valid_from).not_valid_after(valid_to)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP384R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedcal test SuperLink")]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from).not_valid_after(valid_to)
        .add_extension(x509.SubjectAlternativeName([
            *(x509.DNSName(n) for n in dns_names), x509.IPAddress(ipaddress.ip_address(HOST))]),
            critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    ca_path, cert_path, key_path = directory / "ca.crt", directory / "server.pem", directory / "server.key"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return ca_path, cert_path, key_path


def make_node_keys(directory: Path, name: str) -> tuple[Path, Path]:
    """An EC P-384 key pair in OpenSSH format (as ``ssh-keygen -t ecdsa -b 384``)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    private, public = directory / name, directory / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
    private.chmod(0o600)
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                     serialization.PublicFormat.OpenSSH) + b"\n")
    return private, public
