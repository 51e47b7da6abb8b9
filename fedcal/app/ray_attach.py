"""Attaching to a Ray cluster (``engine=ray`` runs and ``--cluster`` sweeps): which cluster and
why (:func:`attach_target`), a deadline for its head to answer (:func:`probe`, :func:`connect`)
and the refusal of a cluster no node of which can host the unit asked for (:func:`require_fit`),
each failure one :class:`ClusterError` line naming the address. Split from
:mod:`fedcal.app.cluster` (placement and sweep cells), which re-exports these names."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from fedcal.config import ConfigError

# ---------------------------------------------------------------------- attaching (engine=ray)
#: seconds a cluster's head has to answer (its GCS port accepting a connection, then Ray's own
#: handshake) before fedcal gives up on it, naming the address; Ray alone retries for ~12 minutes
CONNECT_TIMEOUT_S = 10.0



class ClusterError(ConfigError):
    """A Ray cluster that cannot be used: not found, not answering, or too small for what is asked
    of it. One line naming the address (and why fedcal chose it) and what failed."""


def attach_target(explicit: str = "") -> tuple[str, str] | None:
    """The Ray cluster a simulation attaches to and why, or None (Ray is started for the run).

    In Ray's own order (``ray.init()``'s): ``explicit`` (the ``ray-address`` key), then
    ``$RAY_ADDRESS``, then the address the last ``ray start`` on this machine recorded in Ray's
    temp dir (``ray_current_cluster``: read through Ray's ``find_bootstrap_address``, so fedcal
    finds what ``ray.init()`` would attach to). ``explicit="auto"`` means the latter two, and
    None when neither names one. Returns ``(address, why)``, ``why`` naming the source in words;
    the address may still be ``auto`` (``RAY_ADDRESS=auto``): :func:`resolve_address` resolves
    and checks it."""
    if explicit and explicit != "auto":
        return explicit, "run-config key ray-address"
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], "environment variable RAY_ADDRESS"
    found = _recorded()
    return (found, _recorded_why()) if found else None


def attach_address(explicit: str = "") -> str | None:
    """The address of :func:`attach_target` (None: Ray is started for the run)."""
    target = attach_target(explicit)
    return target[0] if target else None


def _address_file() -> Path:
    """Where ``ray start`` records the address of the cluster it started (Ray's temp dir:
    ``$RAY_TMPDIR``, else /tmp/ray)."""
    try:
        from ray._common.utils import get_ray_address_file
    except ImportError:  # pragma: no cover — an older Ray
        from ray._private.utils import get_ray_address_file
    return Path(get_ray_address_file(None))


def _recorded() -> str | None:
    """The address the last ``ray start`` on this machine recorded, or None."""
    try:  # Ray's private helper; its fallback is the file it reads
        from ray._private.services import find_bootstrap_address

        return find_bootstrap_address(None) or None
    except ImportError:  # pragma: no cover — a Ray without the helper
        path = _address_file()
        return (path.read_text().strip() or None) if path.exists() else None


def _recorded_why() -> str:
    return f"a cluster `ray start` left running on this machine, recorded in {_address_file()}"


def resolve_address(address: str, why: str) -> tuple[str, str]:
    """``address`` (chosen for ``why``: an option, a key, a variable) as ``(host:port, why)``:
    ``auto`` becomes the cluster ``ray start`` recorded on this machine, or a
    :class:`ClusterError` saying none runs; an address that is not ``host:port`` is refused."""
    from fedcal.config.execution import ray_address_parts

    if address == "auto":
        found, asked = _recorded(), f"{why}{'' if why.endswith('=') else ' '}auto"
        if not found:
            raise ClusterError(f"{asked}: no running Ray cluster found (no `ray start` on this machine recorded one "
                               f"in {_address_file()}, RAY_ADDRESS is not set); start one (docs/cluster.md) or give "
                               "its head's host:port")
        address, why = found, f"{asked}: {_recorded_why()}"
    if ray_address_parts(address) is None:
        raise ClusterError(f"{why}: {address!r} is not a Ray cluster address; give host:port of its head "
                           "(or ray://host:port), or auto")
    return address, why


def probe(address: str, why: str, timeout: float | None = None) -> None:
    """Check, within ``timeout`` seconds (default :data:`CONNECT_TIMEOUT_S`; Ray's GCS client adds
    its own 5 s to connect), that a Ray head answers at ``address``: its port accepts
    a TCP connection, then Ray's GCS client gets the cluster's id from it. Raises
    :class:`ClusterError` naming the address, why it was chosen and what failed; Ray's own
    ``ray.init`` would retry an unreachable head for about 12 minutes."""
    from fedcal.config.execution import ray_address_parts

    parts = ray_address_parts(address)
    if parts is None:
        raise ClusterError(f"Ray cluster address {address!r} ({why}) is not host:port")
    host, port = parts
    timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
    start = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc) or type(exc).__name__)
        raise ClusterError(f"cannot reach the Ray cluster at {address} ({why}): {reason} (fedcal waits {timeout:g} s "
                           f"for a head to answer; is it running? `ray status --address {address}` checks)") from None
    if address.startswith("ray://"):
        return  # a Ray Client server, not a GCS: Ray's client connects with its own deadline
    try:
        from ray._raylet import InnerGcsClient  # Ray's GCS client, with Ray's own timeout
    except ImportError:  # pragma: no cover — another Ray: the TCP check alone
        return
    left = max(1.0, timeout - (time.monotonic() - start))
    try:
        InnerGcsClient.standalone(f"{host}:{port}", None, int(left * 1000))
    except Exception as exc:  # noqa: BLE001 — Ray's RpcError and kin; what matters is the line
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterError(f"the Ray cluster at {address} ({why}) accepts connections but did not answer as a Ray "
                           f"head within {timeout:g} s ({said}); is it the head's GCS port (ray start --head --port, "
                           "6379 by default)?") from None


def fitting(nodes: list[dict[str, Any]], cpus: float, gpus: float) -> int:
    """How many units needing ``cpus`` CPUs and ``gpus`` GPUs each the alive ``nodes`` (as
    :func:`cluster_nodes` lists them) can host at once, each unit on one node: Flower's count of
    the actors a Ray cluster fits (``pool_size_from_resources``), computed before Flower tries."""
    total = 0
    for n in nodes:
        if not n["alive"]:
            continue
        count = int(n["cpus"] // cpus) if cpus > 0 else 1 << 30
        if gpus > 0:
            count = min(count, int(n["gpus"] // gpus))
        total += count
    return total


def require_fit(nodes: list[dict[str, Any]], cpus: float, gpus: float, unit: str, where: str) -> None:
    """Refuse, in one line, a request no node of the cluster can ever satisfy: a ``unit`` needing
    ``cpus``/``gpus`` (e.g. ``"one client (client-cpus=4, client-gpus=0)"``) when no alive node
    has that much; ``where`` names the cluster (or says Ray was started here)."""
    if fitting(nodes, cpus, gpus) > 0:
        return
    alive = [n for n in nodes if n["alive"]]
    has = ", ".join(f"{n['cpus']:g} CPU/{n['gpus']:g} GPU" for n in alive) or "none"
    raise ClusterError(f"{where} cannot host {unit}: no node has that much (alive nodes: {has}); lower the request "
                       "or add a node with more")


def connect(address: str | None, why: str, init_args: dict[str, Any], timeout: float | None = None) -> None:
    """Start Ray here (``address`` None) or attach to the cluster at ``address`` (chosen for
    ``why``, checked first by :func:`probe`), with ``init_args`` for ``ray.init``; a failure to
    attach is one :class:`ClusterError` line naming the address."""
    import ray

    if address is not None:
        probe(address, why, timeout)
    try:
        ray.init(**({"address": address} if address is not None else {}), **init_args)
    except (OSError, RuntimeError, ValueError) as exc:  # ConnectionError is an OSError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if address is None:
            raise ClusterError(f"could not start Ray on this machine: {first}") from None
        raise ClusterError(f"cannot attach to the Ray cluster at {address} ({why}): {first}") from None


def cluster_nodes() -> list[dict[str, Any]]:
    """The connected cluster's nodes: id, host, address, alive, CPUs and GPUs (from ``ray.nodes()``)."""
    import ray

    return [{"node_id": n["NodeID"], "hostname": n.get("NodeManagerHostname", ""),
             "address": n.get("NodeManagerAddress", ""), "alive": bool(n.get("Alive")),
             "cpus": n.get("Resources", {}).get("CPU", 0.0), "gpus": n.get("Resources", {}).get("GPU", 0.0)}
            for n in ray.nodes()]
