"""The inference clients' probits as a stored artefact (flwr-free): train the n clients of one
(seed, α, n) and keep what the server needs of them — each client's probits on the server's
aggregator-training split and on the test queries — in one float16 compressed ``.npz``, so that
everything after the clients (the DeepSet and its adversarial training, the attacks, the tables)
runs on a CPU from the file.

The clients are exactly those of an inference run with the same config
(:func:`~fedcal.inference.federated.train_client`: the same split, seeds, batches, augmentation and
schedule), and their answers are what ``query.probits`` sends: ``softmax(model.eval()(x))`` in
float32, here rounded to float16 (relative error ≤ 2⁻¹¹, absolute ≤ 4.9·10⁻⁴ on a probability).

The file is rewritten (atomically) after every client with a ``done`` flag per client, so an
interrupted collection resumes at the first client not done; the manifest (JSON, inside the file
and beside it as ``<file>.json``) names the config, its :func:`~fedcal.results.identity.collection_hash`
and a SHA-256 of the dataset's arrays, and a file whose manifest disagrees with the config or the
data is refused, never appended to.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from fedcal.config import ConfigError, ConfigSpec
from fedcal.data import Dataset

from .evaluate import ProbitData
from .federated import InferenceClientSpec, server_split, train_client

__all__ = ["COLLECTION_FORMAT", "CollectionSpec", "collect_clients", "load_collection", "data_digest",
           "client_probits", "default_collection_path", "stored_collection"]

#: the format's version, in every manifest
COLLECTION_FORMAT = 1
#: the arrays of a collection file besides its manifest
_ARRAYS = ("server_probits", "test_probits", "server_labels", "test_labels", "server_index", "done", "train_loss",
           "train_seconds")


@dataclass(frozen=True)
class CollectionSpec(ConfigSpec):
    """What a collection reads of an inference run config: its clients (:class:`InferenceClientSpec`),
    the test queries, the folder of stored collections, and — given by the caller, from
    :func:`fedcal.results.identity.collection_hash` of the live clients — the collection hash that names it."""

    GIVEN = ("collection_hash",)

    client: InferenceClientSpec
    inf_test_queries: int
    inf_probits_dir: str
    collection_hash: str


def data_digest(ds: Dataset) -> str:
    """SHA-256 (16 hex) of a dataset's name and train/test arrays: which data the probits answer."""
    h = hashlib.sha256(ds.name.encode())
    for t in (ds.x_train, ds.y_train, ds.x_test, ds.y_test):
        a = np.ascontiguousarray(t.numpy())
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.data)
    return h.hexdigest()[:16]


def default_collection_path(spec: CollectionSpec, root: str | os.PathLike[str] | None = None) -> Path:
    """``<root>/<dataset>-<model>-n<n>-a<α>-s<seed>-<collection hash>.npz`` (root: ``inf-probits-dir``)."""
    c = spec.client
    return Path(spec.inf_probits_dir if root is None else root) / (
        f"{c.dataset}-{c.model}-n{c.num_clients}-a{c.dirichlet_alpha:g}-s{c.seed}-{spec.collection_hash}.npz")


@torch.no_grad()
def client_probits(model: torch.nn.Module, x: torch.Tensor, batch: int = 1000,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """(N, C) float32 probits of ``model`` on ``x``, as a client answers ``query.probits``."""
    model = model.to(device).eval()
    return torch.cat([model(xb.to(device)).float().softmax(dim=1).cpu() for xb in x.split(batch)])


def _manifest(spec: CollectionSpec, ds: Dataset) -> dict:
    config = {**dataclasses.asdict(spec.client), "inf_test_queries": spec.inf_test_queries}
    return {"format": COLLECTION_FORMAT, "config": config, "collection_hash": spec.collection_hash,
            "data": data_digest(ds)}


def stored_collection(spec: CollectionSpec, ds: Dataset) -> ProbitData:
    """The probits an ``inf-probits=stored`` run reads: the finished collection of its live clients in
    ``inf-probits-dir`` (:func:`default_collection_path`), its manifest checked against ``spec`` and
    ``ds``; a missing, unfinished or mismatched file raises :class:`~fedcal.config.ConfigError` naming
    ``inf-probits`` and what to run."""
    path = default_collection_path(spec)
    if not path.exists():
        raise ConfigError(f"run-config key 'inf-probits': no stored collection {path}; run `fedcal inference-collect` "
                          "with the same keys first")
    data, manifest = load_collection(path)
    if manifest != _manifest(spec, ds):
        raise ConfigError(f"run-config key 'inf-probits': {path} was collected for other keys or data")
    return data


def _write(path: Path, arrays: dict[str, np.ndarray], manifest: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:  # a file object: savez would append .npz to a bare name
        np.savez_compressed(fh, **arrays, manifest=np.array(json.dumps(manifest, sort_keys=True)))
    tmp.replace(path)  # atomic: an interrupted write leaves the previous file
    side = path.with_name(path.name + ".json")
    side.write_text(json.dumps({**manifest, "done": arrays["done"].tolist(),
                                "train_seconds": arrays["train_seconds"].tolist()}, indent=1, sort_keys=True))


def _read(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        manifest = json.loads(str(arrays.pop("manifest")))
    except Exception as exc:  # noqa: BLE001 — a damaged or foreign file, named in one line
        raise ConfigError(f"{path}: not a probit collection ({type(exc).__name__}: {exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != COLLECTION_FORMAT:
        raise ConfigError(f"{path}: not a probit collection of format {COLLECTION_FORMAT}")
    problem = _damage(arrays)
    if problem:
        raise ConfigError(f"{path}: a damaged probit collection ({problem})")
    return arrays, manifest


def _damage(a: dict[str, np.ndarray]) -> str | None:
    """What is wrong with a collection's arrays (a file is untrusted input), or None: every array
    present with its dtype and consistent shapes, every finished client's probits finite,
    non-negative and summing to 1 within float16's rounding (10 entries of ≤ 2⁻¹¹ each: 5·10⁻³)."""
    missing = [k for k in _ARRAYS if k not in a]
    if missing:
        return f"arrays {missing} missing"
    sp, tp, done = a["server_probits"], a["test_probits"], a["done"]
    if sp.dtype != np.float16 or tp.dtype != np.float16 or done.dtype != bool or sp.ndim != 3 or tp.ndim != 3:
        return "probits not float16 (N, n, C) arrays"
    n = len(done)
    if sp.shape[1:] != (n, tp.shape[2]) or tp.shape[1] != n or a["server_labels"].shape != (sp.shape[0],) \
            or a["server_index"].shape != (sp.shape[0],) or a["test_labels"].shape != (tp.shape[0],) \
            or a["train_loss"].shape != (n,) or a["train_seconds"].shape != (n,):
        return "array shapes disagree"
    for name, p in (("server_probits", sp[:, done]), ("test_probits", tp[:, done])):
        p = p.astype(np.float64)
        if not np.isfinite(p).all() or (p < 0).any() or (np.abs(p.sum(-1) - 1) > 5e-3).any():
            return f"{name} of a finished client are not probit vectors"
    for name in ("server_labels", "test_labels"):
        if a[name].size and not (0 <= a[name].min() and a[name].max() < tp.shape[2]):
            return f"{name} outside 0..{tp.shape[2] - 1}"
    return None


def collect_clients(spec: CollectionSpec, ds: Dataset, path: str | os.PathLike[str], *,
                    device: torch.device | str = "cpu",
                    on_client: Callable[[int, float], None] | None = None) -> Path:
    """Train the clients of ``spec`` not yet in ``path`` and store their probits there; returns the path.

    Resumes per client: a file already at ``path`` is read, checked against ``spec`` and ``ds`` (a
    mismatch raises :class:`~fedcal.config.ConfigError` naming the differing entries) and its
    finished clients kept. ``on_client(cid, seconds)`` after each client is stored.
    """
    path = Path(path)
    manifest = _manifest(spec, ds)
    cfg = spec.client
    n, c = cfg.num_clients, ds.num_classes
    srv_idx = torch.from_numpy(server_split(ds.y_train.numpy(), cfg.inf_server_frac, cfg.seed)[0])
    n_test = spec.inf_test_queries or len(ds.y_test)
    if path.exists():
        arrays, old = _read(path)
        if old != manifest:
            diff = sorted(k for k in set(old["config"]) | set(manifest["config"])
                          if old["config"].get(k) != manifest["config"].get(k))
            what = ", ".join(diff) if diff else ("the data" if old.get("data") != manifest["data"] else "the manifest")
            raise ConfigError(f"{path}: collected for another setting ({what} differ); choose another --probits file")
    else:
        arrays = {"server_probits": np.zeros((len(srv_idx), n, c), np.float16),
                  "test_probits": np.zeros((n_test, n, c), np.float16),
                  "server_labels": ds.y_train[srv_idx].numpy().astype(np.int64),
                  "test_labels": ds.y_test[:n_test].numpy().astype(np.int64),
                  "server_index": srv_idx.numpy().astype(np.int64),
                  "done": np.zeros(n, bool), "train_loss": np.zeros(n), "train_seconds": np.zeros(n)}
        path.parent.mkdir(parents=True, exist_ok=True)
    for cid in range(n):
        if arrays["done"][cid]:
            continue
        start = time.perf_counter()
        model, loss, _ = train_client(cfg, ds, cid, device=device)
        arrays["server_probits"][:, cid] = client_probits(model, ds.x_train[srv_idx], device=device).numpy()
        arrays["test_probits"][:, cid] = client_probits(model, ds.x_test[:n_test], device=device).numpy()
        arrays["done"][cid], arrays["train_loss"][cid] = True, loss
        arrays["train_seconds"][cid] = time.perf_counter() - start
        _write(path, arrays, manifest)
        if on_client is not None:
            on_client(cid, float(arrays["train_seconds"][cid]))
    if not path.exists():  # every client was done already, but the file was never written (impossible) or gone
        _write(path, arrays, manifest)
    return path


def load_collection(path: str | os.PathLike[str]) -> tuple[ProbitData, dict]:
    """The stored probits as :class:`~fedcal.inference.evaluate.ProbitData` (float32, each row
    renormalised to sum to 1; every client valid on every query) and the manifest; refuses, in one line,
    a collection with clients missing."""
    arrays, manifest = _read(Path(path))
    missing = np.flatnonzero(~arrays["done"]).tolist()
    if missing:
        raise ConfigError(f"{path}: the collection is unfinished (clients {missing} missing); run it again to resume")
    # float16 rows sum to 1 within ~5e-4, outside the probit check's 1e-4: renormalised in float32
    sp, tp = (torch.from_numpy(arrays[k].astype(np.float32)) for k in ("server_probits", "test_probits"))
    sp, tp = (t / t.sum(dim=-1, keepdim=True) for t in (sp, tp))
    n = sp.shape[1]
    data = ProbitData(server_probits=sp, server_labels=torch.from_numpy(arrays["server_labels"]),
                      test_probits=tp, test_valid=torch.ones(tp.shape[:2], dtype=torch.bool),
                      test_labels=torch.from_numpy(arrays["test_labels"]), clients=list(range(n)))
    return data, manifest
