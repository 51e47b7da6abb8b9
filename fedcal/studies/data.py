"""``fedcal data``: write the ``<name>_{train,test}.npz`` files the loaders read first
(:func:`fedcal.data.datasets.load_dataset`), from torchvision's download.

A machine with internet runs ``fedcal data mnist cifar10 --out data`` once; every run then reads
``data-dir=data`` (or ``$FEDCAL_DATA_DIR``) without the network, and the folder can be copied to
machines that have none. torchvision's raw files go to a temporary folder inside ``--out`` and are
removed once the arrays are written; only the ``.npz`` files stay. Offline, the command fails in
one line naming the dataset, the URL it tried and what to do.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from fedcal.config import ConfigError


def write_npz(name: str, out: str | os.PathLike[str], raw_root: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Read ``name`` with torchvision's dataset class from ``raw_root`` (downloading there what is
    missing) and write ``<out>/<name>_train.npz`` and ``<out>/<name>_test.npz`` (arrays ``x`` uint8,
    ``y`` int64), each through a temporary file and a rename: a reader never sees half a file."""
    import numpy as np

    from fedcal.data.datasets import npz_files, torchvision_arrays

    xtr, ytr, xte, yte = torchvision_arrays(name, raw_root)
    paths = npz_files(name, out)
    for path, x, y in zip(paths, (xtr, xte), (ytr, yte)):
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, x=x, y=y)
        os.replace(tmp, path)
    return paths


def _reason(exc: BaseException) -> str:
    """Why a download failed, short: urllib's reason (``[Errno 111] Connection refused``) when
    torchvision's message carries one, else its text on one line (at most 200 characters)."""
    text = " ".join(str(exc).split())
    found = re.search(r"urlopen error ([^>]+)>", text)
    if found:
        return found.group(1).strip()
    return text if len(text) <= 200 else text[:197] + "..."


def cmd_data(args: argparse.Namespace) -> int:
    from fedcal.data.datasets import TORCHVISION_DATASETS, default_data_dir, download_urls, npz_files

    names = list(dict.fromkeys(args.names))
    unknown = [n for n in names if n not in TORCHVISION_DATASETS]
    if unknown:
        raise ConfigError(f"unknown dataset {', '.join(map(repr, unknown))}; choose from "
                          f"{', '.join(TORCHVISION_DATASETS)} (digits and synthetic need no files)")
    out = default_data_dir(args.out)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        train, test = npz_files(name, out)
        if train.exists() and test.exists() and not args.force:
            print(f"{name}: {train.name} and {test.name} already in {out}, kept (--force writes them again)")
            continue
        with tempfile.TemporaryDirectory(prefix=".torchvision-", dir=out) as raw:
            try:
                write_npz(name, out, raw)
            except Exception as exc:  # noqa: BLE001 - offline: URLError / RuntimeError from torchvision
                if created:
                    shutil.rmtree(out, ignore_errors=True)
                raise ConfigError(
                    f"cannot download {name} from {' or '.join(download_urls(name))} ({_reason(exc)}); "
                    f"run `fedcal data {name} --out DIR` on a machine with internet and copy DIR's "
                    f"{train.name} and {test.name} into {out}") from None
        print(f"{name}: wrote {train} and {test}")
    key = "" if args.out is None else f" data-dir={args.out}"
    print(f"runs read them with{key or ' data-dir unset (or $FEDCAL_DATA_DIR)'}, e.g. "
          f"fedcal run dataset={names[0]}{key}")
    return 0


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("data", "write the dataset files runs read (<name>_{train,test}.npz) from torchvision's download",
            description="Download MNIST, CIFAR-10 or CIFAR-100 through torchvision and write "
                        "<out>/<name>_train.npz and <out>/<name>_test.npz (x uint8, y int64), the files a run reads "
                        "with data-dir=<out> without the network. Copy the folder to an offline machine. "
                        "scikit-learn's digits (dataset=digits) needs no files.")
    p.add_argument("names", nargs="+", metavar="NAME", help="mnist, cifar10 and/or cifar100")
    p.add_argument("--out", default=None,
                   help="folder to write into (default: $FEDCAL_DATA_DIR, else ~/.cache/fedcal/data: where a run "
                        "with data-dir unset looks)")
    p.add_argument("--force", action="store_true", help="write the files again even if they exist")
    p.set_defaults(func=cmd_data)
