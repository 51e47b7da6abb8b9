"""MIT-BIH Arrhythmia Database → single-lead heartbeats in the five AAMI classes (flwr-free).

The source case of the triage analysis (docs/analyses.md): a 1-D CNN on MIT-BIH beats. Records
are read with ``wfdb`` (``rdheader`` / ``rdrecord`` for the signal, ``rdann(..., "atr")`` for
the cardiologists' reference annotations); ``download_mitbih`` fetches the database from
PhysioNet for networked users.

**Beats.** One beat per *beat* annotation: the window ``signal[r - BEFORE : r + AFTER]`` of lead
MLII around the annotated R peak ``r`` — 90 samples on each side at MIT-BIH's 360 Hz (±0.25 s,
180 samples, the R peak at index 90). This is the window of Mondéjar-Guerra et al., "Heartbeat
classification fusing temporal and morphological information of ECGs via ensemble of
classifiers", Biomedical Signal Processing and Control 47 (2019) 41–48 (``winL = winR = 90``
in the authors' code, github.com/mondejar/ecg-classification). A beat whose window does not fit
inside its record (an R peak closer than 90 samples to either end) is dropped, as there.

**Normalisation.** Each beat is z-scored on its own: ``(w - mean(w)) / std(w)`` (population
std), the per-segment Z-score normalisation of Acharya et al., "A deep convolutional neural
network model to classify heartbeats", Computers in Biology and Medicine 89 (2017) 389–396,
which removes each beat's offset and amplitude scale. A flat window (std < 1e-8) becomes zeros.
No other filtering (no baseline-wander removal).

**Classes.** Beat symbols map to the five classes of ANSI/AAMI EC57 (:data:`AAMI_SYMBOLS`):
N (N L R e j), S (A a J S), V (V E), F (F), Q (/ f Q). Every other annotation — rhythm changes
``+``, noise ``~``, isolated QRS-like artefacts ``|``, ventricular flutter waves ``!``,
non-conducted P waves ``x``, comments ``"`` … — is not a beat and is skipped.

**Patients and split.** A record is one patient (MIT-BIH's 48 records come from 47 subjects;
201 and 202 share one, and 201 is in DS1, 202 in DS2 — as in de Chazal's split). The
inter-patient split is de Chazal, O'Dwyer and Reilly, "Automatic classification of heartbeats
using ECG morphology and heartbeat interval features", IEEE Trans. Biomed. Eng. 51(7) (2004)
1196–1206: DS1 (22 records) trains, DS2 (22 records) tests, and the four paced records
(102, 104, 107, 217) are in neither.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedcal.config import ConfigError
from fedcal.extras import require

#: MIT-BIH's sampling rate (Hz); the window below is in samples at this rate.
FS = 360
#: samples before / after the annotated R peak (Mondéjar-Guerra et al. 2019: 90 + 90 at 360 Hz)
BEFORE, AFTER = 90, 90
WINDOW = BEFORE + AFTER
#: the lead the beats are cut from, chosen by signal name (it is the second channel of record 114)
LEAD = "MLII"
#: the AAMI classes, in label order (label k is AAMI_CLASSES[k])
AAMI_CLASSES = ("N", "S", "V", "F", "Q")
#: ANSI/AAMI EC57's grouping of MIT-BIH beat symbols into the AAMI classes
AAMI_SYMBOLS = {
    "N": ("N", "L", "R", "e", "j"),  # normal, left / right bundle branch block, atrial / nodal escape
    "S": ("A", "a", "J", "S"),  # atrial / aberrated atrial / nodal / supraventricular premature
    "V": ("V", "E"),  # premature ventricular contraction, ventricular escape
    "F": ("F",),  # fusion of ventricular and normal
    "Q": ("/", "f", "Q"),  # paced, fusion of paced and normal, unclassifiable
}
#: beat symbol → class label; annotations whose symbol is not here are not beats
SYMBOL_CLASS = {s: k for k, c in enumerate(AAMI_CLASSES) for s in AAMI_SYMBOLS[c]}
#: de Chazal et al. (2004)'s inter-patient split of MIT-BIH: DS1 trains, DS2 tests
DS1 = ("101", "106", "108", "109", "112", "114", "115", "116", "118", "119", "122", "124", "201", "203", "205",
       "207", "208", "209", "215", "220", "223", "230")
DS2 = ("100", "103", "105", "111", "113", "117", "121", "123", "200", "202", "210", "212", "213", "214", "219",
       "221", "222", "228", "231", "232", "233", "234")
#: the paced records, excluded from both sets (AAMI EC57's recommendation, as in de Chazal et al.)
PACED = ("102", "104", "107", "217")
#: the beat cache written beside the records (see :func:`load_mitbih`)
CACHE_FILE = "mitbih_beats.npz"
_CACHE_VERSION = 1
_KEY = "run-config key 'data-dir'"


@dataclass(frozen=True)
class Beats:
    """Heartbeats of one or more records: ``x`` (n, WINDOW) float32 z-scored windows, ``y`` (n,)
    int64 AAMI labels, ``record`` (n,) int64 record number (the patient), ``sample`` (n,) int64 R
    peak position in its record."""

    x: np.ndarray
    y: np.ndarray
    record: np.ndarray
    sample: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


def normalise_beats(windows: np.ndarray) -> np.ndarray:
    """Per-beat z-score of (n, L) windows in float64: ``(w - mean(w)) / std(w)`` row by row
    (population std); a row with std < 1e-8 becomes zeros."""
    w = np.asarray(windows, dtype=np.float64)
    centred = w - w.mean(axis=1, keepdims=True)
    std = w.std(axis=1, keepdims=True)
    return np.divide(centred, std, out=np.zeros_like(centred), where=std >= 1e-8)


def extract_beats(
    signal: np.ndarray, samples: np.ndarray, symbols, before: int = BEFORE, after: int = AFTER
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut the beats of one lead: for each annotation whose symbol is a beat (:data:`SYMBOL_CLASS`)
    and whose window ``[r - before, r + after)`` lies inside the signal, the normalised window
    (:func:`normalise_beats`, float32), its AAMI label and ``r``. Returns ``(x, y, r)``."""
    signal = np.asarray(signal, dtype=np.float64)
    samples = np.asarray(samples, dtype=np.int64)
    labels = np.array([SYMBOL_CLASS.get(s, -1) for s in symbols], dtype=np.int64)
    keep = (labels >= 0) & (samples - before >= 0) & (samples + after <= len(signal))
    r, y = samples[keep], labels[keep]
    windows = signal[r[:, None] + np.arange(-before, after)[None, :]] if len(r) else np.empty((0, before + after))
    return normalise_beats(windows).astype(np.float32), y, r


def record_names(folder: str | os.PathLike[str]) -> list[str]:
    """The records in ``folder``: the names of its ``*.hea`` headers, sorted."""
    folder = Path(folder)
    return sorted(p.stem for p in folder.glob("*.hea")) if folder.is_dir() else []


def read_record(folder: str | os.PathLike[str], name: str) -> Beats:
    """The beats of record ``name`` in ``folder`` (lead :data:`LEAD`, annotator ``atr``).

    Raises :class:`fedcal.config.ConfigError` (naming ``data-dir``) when the record has no
    ``.atr`` annotations, no MLII lead, another sampling rate than 360 Hz or cannot be read.
    """
    require("wfdb", "ecg", "MIT-BIH ECG records")
    import wfdb  # imported lazily: only MIT-BIH loads need it

    folder = Path(folder)
    path = str(folder / name)
    if not name.isdigit():
        raise ConfigError(f"{_KEY}: record {name!r} in {folder}: MIT-BIH record names are numbers")
    if not (folder / f"{name}.atr").is_file():
        raise ConfigError(f"{_KEY}: record {name} in {folder} has no reference annotations ({name}.atr); "
                          f"download the whole database (fedcal.data.ecg.download_mitbih)")
    try:
        header = wfdb.rdheader(path)
        if LEAD not in (header.sig_name or []):
            raise ConfigError(f"{_KEY}: record {name} in {folder} has no {LEAD} lead (its leads: "
                              f"{', '.join(header.sig_name or []) or 'none'})")
        if header.fs != FS:
            raise ConfigError(f"{_KEY}: record {name} in {folder} is sampled at {header.fs} Hz, not MIT-BIH's {FS} Hz")
        rec = wfdb.rdrecord(path, channels=[header.sig_name.index(LEAD)])
        ann = wfdb.rdann(path, "atr")
    except ConfigError:
        raise
    except Exception as exc:  # wfdb raises FileNotFoundError, ValueError, … on broken records
        raise ConfigError(f"{_KEY}: cannot read MIT-BIH record {name} in {folder}: {exc}") from exc
    x, y, r = extract_beats(rec.p_signal[:, 0], ann.sample, ann.symbol)
    return Beats(x, y, np.full(len(y), int(name), dtype=np.int64), r)


def concat_beats(parts: list[Beats]) -> Beats:
    """One :class:`Beats` of several, in order."""
    if not parts:
        return Beats(np.empty((0, WINDOW), np.float32), *(np.empty(0, np.int64) for _ in range(3)))
    return Beats(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("x", "y", "record", "sample")))


def read_beats(folder: str | os.PathLike[str], names) -> Beats:
    """The beats of records ``names`` in ``folder``, record after record."""
    return concat_beats([read_record(folder, n) for n in names])


def split_records(folder: str | os.PathLike[str]) -> tuple[list[str], list[str]]:
    """The DS1 (train) and DS2 (test) records present in ``folder``. Records of neither list (the
    paced ones, anything else) are left out. Raises :class:`ConfigError` when ``folder`` holds no
    record, or no record of DS1 or of DS2."""
    folder = Path(folder)
    present = record_names(folder)
    if not present:
        raise ConfigError(
            f"{_KEY}: no MIT-BIH records (*.hea with .dat and .atr) in {folder}. Networked users: "
            f"python -c \"from fedcal.data.ecg import download_mitbih; download_mitbih('{folder}')\"")
    train = [n for n in DS1 if n in present]
    test = [n for n in DS2 if n in present]
    for what, names, ds in (("training", train, "DS1"), ("test", test, "DS2")):
        if not names:
            raise ConfigError(f"{_KEY}: {folder} holds no record of {ds} (the {what} records of de Chazal's "
                              f"inter-patient split: {', '.join(DS1 if ds == 'DS1' else DS2)}); it holds "
                              f"{', '.join(present)}")
    return train, test


def _cache_key(folder: Path, train: list[str], test: list[str]) -> str:
    """What the cached beats were extracted from: the window, the lead, and the size and
    modification time of every file of every record used."""
    files = {}
    for name in (*train, *test):
        for ext in ("hea", "dat", "atr"):
            p = folder / f"{name}.{ext}"
            files[p.name] = [p.stat().st_size, p.stat().st_mtime_ns] if p.exists() else None
    return json.dumps({"version": _CACHE_VERSION, "before": BEFORE, "after": AFTER, "lead": LEAD,
                       "train": train, "test": test, "files": files}, sort_keys=True)


def load_mitbih(folder: str | os.PathLike[str], cache: bool = True) -> tuple[Beats, Beats]:
    """De Chazal's inter-patient split of the MIT-BIH records in ``folder``: (DS1 beats, DS2 beats).

    Only the records present are read (a folder with part of the database gives part of the
    split). With ``cache`` the beats are kept in ``folder/mitbih_beats.npz`` and read back while
    the window, the lead and every used record file (size, modification time) are unchanged; a
    folder that cannot be written is simply not cached. Raises :class:`ConfigError` naming
    ``data-dir`` for a missing folder, a record without ``.atr`` or MLII, or no beat at all.
    """
    folder = Path(folder)
    train_names, test_names = split_records(folder)
    key = _cache_key(folder, train_names, test_names)
    path = folder / CACHE_FILE
    if cache and path.is_file():
        try:
            with np.load(path) as f:
                if str(f["key"]) == key:
                    return tuple(Beats(f[f"x_{s}"], f[f"y_{s}"], f[f"record_{s}"], f[f"sample_{s}"])
                                 for s in ("train", "test"))
        except (OSError, ValueError, KeyError):
            pass  # an unreadable or older cache is rebuilt
    train, test = read_beats(folder, train_names), read_beats(folder, test_names)
    for what, beats, names in (("DS1 (training)", train, train_names), ("DS2 (test)", test, test_names)):
        if len(beats) == 0:
            raise ConfigError(f"{_KEY}: the {what} records in {folder} ({', '.join(names)}) hold no beat "
                              f"annotation ({' '.join(SYMBOL_CLASS)}) at least {BEFORE} samples from the "
                              f"start and {AFTER} from the end")
    if cache:
        tmp = folder / f".{CACHE_FILE}.{os.getpid()}.tmp.npz"
        try:
            np.savez(tmp, key=np.array(key), **{f"{f}_{s}": getattr(b, f) for s, b in (("train", train), ("test", test))
                                                for f in ("x", "y", "record", "sample")})
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)  # a read-only folder: no cache
    return train, test


def records_folder(data_dir: str | os.PathLike[str]) -> Path:
    """Where the MIT-BIH records of ``data-dir`` are: ``<data-dir>/mitbih`` if that folder
    exists, else ``data-dir`` itself if it holds ``*.hea`` headers, else ``<data-dir>/mitbih``
    (whose absence :func:`load_mitbih` then reports)."""
    root = Path(data_dir)
    if (root / "mitbih").is_dir() or not record_names(root):
        return root / "mitbih"
    return root


def download_mitbih(folder: str | os.PathLike[str]) -> Path:
    """Download the MIT-BIH Arrhythmia Database (PhysioNet's ``mitdb``, about 100 MB) into
    ``folder`` with ``wfdb.dl_database`` (networked machines only); returns ``folder``.
    ``fedcal run dataset=mitbih data-dir=<parent of folder>`` then reads ``<parent>/mitbih``."""
    require("wfdb", "ecg", "MIT-BIH ECG records")
    import wfdb

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    wfdb.dl_database("mitdb", str(folder))
    return folder
