"""The MIT-BIH loader (fedcal.data.ecg) on records written with wfdb's own writer.

No download is possible here: every record is a small synthetic one written into tmp_path with
``wfdb.wrsamp`` / ``wfdb.wrann`` under real MIT-BIH record names (DS1: 101, 106, 108; DS2: 100;
the paced 102), with a known sequence of beat and non-beat annotations.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

wfdb = pytest.importorskip("wfdb")

from fedcal.config import ConfigError, RunConfig  # noqa: E402
from fedcal.data import client_partitions, load_dataset, patient_partition  # noqa: E402
from fedcal.data import ecg  # noqa: E402

N_SAMPLES = 3600  # 10 s at 360 Hz
GAIN = 200.0  # ADC units per mV: the physical signal is d / 200 exactly

# (sample, symbol) per record; the comments give the AAMI class of each kept beat.
RECORDS = {
    "101": (["MLII", "V1"], [
        (10, "+"), (89, "N"),  # rhythm change (not a beat); a beat 89 samples from the start: dropped
        (90, "N"),  # N, the first window that fits: [0, 180)
        (300, "~"), (400, "A"), (700, "V"), (900, "|"), (1100, "F"), (1400, "/"), (1700, "L"),  # S V F Q N
        (2000, "x"), (2300, "e"), (2600, "!"), (2900, "Q"),  # N Q (x, ! are not beats)
        (3510, "R"),  # N, the last window that fits: [3420, 3600)
        (3511, "N"),  # one sample too near the end: dropped
    ]),
    "106": (["V1", "MLII"], [  # MLII is the second channel (as in MIT-BIH's 114)
        (200, "N"), (500, "S"), (800, "j"), (1100, "E"), (1400, "f"), (1700, "J"), (2000, '"'), (2300, "a"),
        (2600, "N"),
    ]),
    "108": (["MLII", "V1"], [(100, "+"), (400, "N"), (1000, "V"), (1600, "N"), (2200, "V"), (2800, "N")]),
    "100": (["MLII", "V5"], [(300, "N"), (900, "V"), (1500, "A"), (2100, "F"), (2700, "Q"), (3300, "N")]),
    "102": (["V5", "V2"], [(300, "/"), (900, "/")]),  # paced, no MLII (as in MIT-BIH): never read
}
# Kept beats by hand: (R peak, label) per record; N=0 S=1 V=2 F=3 Q=4.
EXPECTED = {
    "101": [(90, 0), (400, 1), (700, 2), (1100, 3), (1400, 4), (1700, 0), (2300, 0), (2900, 4), (3510, 0)],
    "106": [(200, 0), (500, 1), (800, 0), (1100, 2), (1400, 4), (1700, 1), (2300, 1), (2600, 0)],
    "108": [(400, 0), (1000, 2), (1600, 0), (2200, 2), (2800, 0)],
    "100": [(300, 0), (900, 2), (1500, 1), (2100, 3), (2700, 4), (3300, 0)],
}


def write_record(folder, name, sig_names, annotations, seed=0):
    """Write record ``name`` (random digital samples, gain 200/mV) and its .atr; return the
    physical signal as wfdb reads it back (d / 200)."""
    rng = np.random.default_rng([int(name), seed])
    d = rng.integers(-400, 400, size=(N_SAMPLES, len(sig_names))).astype(np.int16)
    k = len(sig_names)
    wfdb.wrsamp(name, fs=ecg.FS, units=["mV"] * k, sig_name=list(sig_names), d_signal=d, fmt=["16"] * k,
                adc_gain=[GAIN] * k, baseline=[0] * k, write_dir=str(folder))
    samples, symbols = zip(*annotations)
    wfdb.wrann(name, "atr", np.array(samples), list(symbols), write_dir=str(folder))
    return d.astype(np.float64) / GAIN


@pytest.fixture
def mitbih(tmp_path):
    """tmp_path/mitbih holding the records above; returns (data_dir, {record: physical signal})."""
    folder = tmp_path / "mitbih"
    folder.mkdir()
    signals = {name: write_record(folder, name, leads, ann) for name, (leads, ann) in RECORDS.items()}
    return tmp_path, signals


def _zscore(w):
    w = np.asarray(w, dtype=np.float64)
    return (w - w.sum() / len(w)) / np.sqrt(((w - w.sum() / len(w)) ** 2).sum() / len(w))


# ---------------------------------------------------------------------- beats
def test_beats_classes_windows_and_patients_by_hand(mitbih):
    data_dir, signals = mitbih
    train, test = ecg.load_mitbih(data_dir / "mitbih", cache=False)
    for beats, names in ((train, ["101", "106", "108"]), (test, ["100"])):  # DS order, paced 102 left out
        want = [(int(n), r, c) for n in names for r, c in EXPECTED[n]]
        assert list(zip(beats.record.tolist(), beats.sample.tolist(), beats.y.tolist())) == want
        assert beats.x.shape == (len(want), 180) and beats.x.dtype == np.float32
        for i, (rec, r, _) in enumerate(want):
            lead = RECORDS[str(rec)][0].index("MLII")
            expected = _zscore(signals[str(rec)][r - 90:r + 90, lead])  # the written slice, z-scored
            np.testing.assert_allclose(beats.x[i], expected, atol=1e-5)
    assert len(train) == 22 and len(test) == 6
    assert np.bincount(train.y, minlength=5).tolist() == [10, 4, 4, 1, 3]
    # beats too near the record edges are dropped: 101's R peaks at 89 and 3511 (90 samples are
    # needed before the peak and 90 from it to the end); 90 and 3510 are the extreme kept ones
    assert 89 not in train.sample[train.record == 101] and 3511 not in train.sample[train.record == 101]


def test_extract_beats_skips_non_beats_and_edges():
    signal = np.arange(400, dtype=float) ** 1.5
    x, y, r = ecg.extract_beats(signal, [5, 100, 150, 200, 311], ["N", "+", "V", "~", "/"])
    assert r.tolist() == [150] and y.tolist() == [2]  # 5 and 311 too near the edges, + ~ not beats
    np.testing.assert_allclose(x[0], _zscore(signal[60:240]), atol=1e-5)
    x, y, r = ecg.extract_beats(np.ones(400), [200], ["N"])  # a flat window is zeros, not NaN
    assert np.all(x == 0)
    assert {s for c in ecg.AAMI_CLASSES for s in ecg.AAMI_SYMBOLS[c]} == set(ecg.SYMBOL_CLASS)
    assert [ecg.SYMBOL_CLASS[s] for s in "NLRejAaJSVEF/fQ"] == [0] * 5 + [1] * 4 + [2, 2, 3, 4, 4, 4]


def test_split_lists_are_de_chazals():
    assert len(ecg.DS1) == len(ecg.DS2) == 22
    assert not set(ecg.DS1) & set(ecg.DS2) and not set(ecg.PACED) & set(ecg.DS1 + ecg.DS2)
    # with the paced four, the 48 records of MIT-BIH
    assert len(set(ecg.DS1 + ecg.DS2 + ecg.PACED)) == 48


# ---------------------------------------------------------------------- the dataset and its cache
def test_load_dataset_mitbih_shapes_and_cache(mitbih, monkeypatch):
    data_dir, _ = mitbih
    ds = load_dataset("mitbih", data_dir)
    assert ds.name == "mitbih" and ds.num_classes == 5 and ds.input_shape == (1, 180)
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    assert ds.groups_train.tolist() == [101] * 9 + [106] * 8 + [108] * 5
    assert len(ds.y_test) == 6
    cache = data_dir / "mitbih" / ecg.CACHE_FILE
    assert cache.is_file()

    # a second load reads the cache: no record is opened
    def no_read(*a, **k):
        raise AssertionError("records read despite the cache")

    monkeypatch.setattr(ecg, "read_record", no_read)
    train, test = ecg.load_mitbih(data_dir / "mitbih")
    np.testing.assert_array_equal(train.x, ds.x_train[:, 0].numpy())
    np.testing.assert_array_equal(test.y, ds.y_test.numpy())
    # a changed record file invalidates it
    atr = data_dir / "mitbih" / "108.atr"
    os.utime(atr, ns=(atr.stat().st_atime_ns, atr.stat().st_mtime_ns + 10**9))
    with pytest.raises(AssertionError, match="despite the cache"):
        ecg.load_mitbih(data_dir / "mitbih")


def test_records_directly_in_data_dir(mitbih):
    data_dir, _ = mitbih
    folder = data_dir / "mitbih"
    assert ecg.records_folder(data_dir) == folder
    assert ecg.records_folder(folder) == folder  # data-dir itself holds the .hea files
    assert len(ecg.load_mitbih(ecg.records_folder(folder), cache=False)[0]) == 22


def test_cnn1d_takes_the_beats(mitbih):
    from fedcal.models import build_model

    ds = load_dataset("mitbih", mitbih[0])
    model = build_model("cnn1d", ds.input_shape, ds.num_classes, seed=0)
    assert model(ds.x_train[:4]).shape == (4, 5)


# ---------------------------------------------------------------------- the patient partition
def test_patient_partition_keeps_records_whole_and_is_seeded(mitbih):
    data_dir, _ = mitbih
    ds = load_dataset("mitbih", data_dir)
    groups = ds.groups_train.numpy()
    for k in (1, 2, 3):
        parts = client_partitions("mitbih", str(data_dir), k, "patient", 1.0, 0)
        assert len(parts) == k and sorted(np.concatenate(parts).tolist()) == list(range(len(groups)))
        owners = [{int(g) for g in groups[p]} for p in parts]
        assert all(owners) and sum(len(o) for o in owners) == 3  # every record on exactly one client
        for p, o in zip(parts, owners):
            assert sorted(p.tolist()) == np.flatnonzero(np.isin(groups, sorted(o))).tolist()  # whole records
    a = patient_partition(groups, 3, seed=5)
    b = patient_partition(groups, 3, seed=5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assignments = {tuple(int(groups[p[0]]) for p in patient_partition(groups, 3, seed=s)) for s in range(10)}
    assert len(assignments) > 1  # the seed changes which client gets which record


def test_patient_partition_errors(mitbih):
    with pytest.raises(ConfigError, match="'num-clients'.*3"):
        patient_partition(np.array([101, 101, 106, 108]), 4, seed=0)
    with pytest.raises(ConfigError, match="'partition'.*mitbih"):
        client_partitions("digits", "", 2, "patient", 1.0, 0)


def test_patient_is_a_partition_and_mitbih_a_dataset():
    cfg = RunConfig.from_flower({"dataset": "mitbih", "model": "cnn1d", "partition": "patient"})
    assert (cfg.dataset, cfg.partition) == ("mitbih", "patient")


# ---------------------------------------------------------------------- errors
def test_missing_folder_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="'data-dir'.*no MIT-BIH records.*download_mitbih"):
        ecg.load_mitbih(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="'data-dir'"):
        load_dataset("mitbih", tmp_path / "empty")


def test_missing_atr_is_one_clear_error(mitbih):
    data_dir, _ = mitbih
    (data_dir / "mitbih" / "106.atr").unlink()
    with pytest.raises(ConfigError, match="'data-dir'.*106.*106.atr"):
        ecg.load_mitbih(data_dir / "mitbih")


def test_record_without_mlii_is_one_clear_error(tmp_path):
    write_record(tmp_path, "101", ["V1", "V5"], [(300, "N")])
    write_record(tmp_path, "100", ["MLII", "V5"], [(300, "N")])
    with pytest.raises(ConfigError, match="'data-dir'.*record 101.*no MLII lead.*V1, V5"):
        ecg.load_mitbih(tmp_path)


def test_no_beat_left_is_one_clear_error(tmp_path):
    write_record(tmp_path, "101", ["MLII"], [(10, "+"), (500, "~"), (3590, "N")])  # N too near the end
    write_record(tmp_path, "100", ["MLII"], [(300, "N")])
    with pytest.raises(ConfigError, match="'data-dir'.*DS1.*no beat"):
        ecg.load_mitbih(tmp_path)


def test_folder_without_a_ds2_record_is_one_clear_error(tmp_path):
    write_record(tmp_path, "101", ["MLII"], [(300, "N")])
    with pytest.raises(ConfigError, match="'data-dir'.*no record of DS2"):
        ecg.load_mitbih(tmp_path)


# ---------------------------------------------------------------------- end to end
def test_train_task_end_to_end_on_written_records(mitbih):
    from fedcal.app.engine import simulate
    from fedcal.results import load_metrics

    torch.set_num_threads(1)
    data_dir, _ = mitbih
    cfg = RunConfig.from_flower(dict(
        dataset="mitbih", model="cnn1d", partition="patient", num_clients=3, clients_per_round=3,
        num_rounds=2, lr=0.05, batch_size=4, local_steps=2, attack="tsa", tau=5.0, engine="inprocess",
        data_dir=str(data_dir), output_dir=str(data_dir / "runs")))
    run_dir = simulate(cfg, progress=False)
    assert (run_dir / "DONE").exists()
    wide = load_metrics(run_dir).pivot(index="round", columns="metric", values="value")
    assert wide.index.tolist() == [0, 1, 2]
    assert wide.loc[[1, 2], "replies_accepted"].tolist() == [3, 3]
    assert np.isfinite(wide.loc[2, "ece"]) and 0 <= wide.loc[2, "accuracy"] <= 1
