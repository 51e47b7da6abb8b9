"""KITTI 2D as the detection task's real dataset (det-data=kitti), on a tiny KITTI folder written
here in torchvision's layout (no download): parsing, letterboxing, splits, errors, the task end to end."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from fedcal.config import ConfigError, RunConfig
from fedcal.detect import kitti

torch.set_num_threads(1)
TAIL = "0.00 0 -1.57 {} {} {} {} 1.5 1.6 3.9 1.0 1.7 20.0 -1.5"  # KITTI's 15 fields after the bbox's 4
TYPES = ("Car", "Pedestrian", "Cyclist", "Van", "Truck")


def _line(kind: str, box) -> str:
    return f"{kind} " + TAIL.format(*[f"{v:.2f}" for v in box])


def write_kitti(root, objects: dict[str, list[tuple[str, tuple]]], size=(200, 50)) -> None:
    """A KITTI folder: image ``name`` is black with a white rectangle per object; its label file
    lists them."""
    images = root / "Kitti" / "raw" / "training" / "image_2"
    labels = root / "Kitti" / "raw" / "training" / "label_2"
    images.mkdir(parents=True, exist_ok=True)
    labels.mkdir(parents=True, exist_ok=True)
    for name, objs in objects.items():
        pixels = np.zeros((size[1], size[0], 3), dtype=np.uint8)
        for kind, (x1, y1, x2, y2) in objs:
            if kind != "DontCare":
                pixels[int(y1):int(y2), int(x1):int(x2)] = 255
        Image.fromarray(pixels).save(images / f"{name}.png")
        (labels / f"{name}.txt").write_text("\n".join(_line(k, b) for k, b in objs) + "\n")


def _synthetic(n: int) -> dict[str, list[tuple[str, tuple]]]:
    rng = np.random.default_rng(0)
    out = {}
    for i in range(n):
        objs = []
        for j in range(1 + i % 3):
            x1, y1 = float(rng.integers(0, 150)), float(rng.integers(0, 25))
            objs.append((TYPES[(i + j) % len(TYPES)], (x1, y1, x1 + 40, y1 + 20)))
        objs.append(("DontCare", (0.0, 0.0, 10.0, 10.0)))
        out[f"{i:06d}"] = objs
    return out


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCAL_CACHE_DIR", str(tmp_path / "cache"))
    kitti.read_index.cache_clear()


def test_the_index_maps_kittis_types_and_drops_dontcare(tmp_path):
    write_kitti(tmp_path, {"000002": [("Tram", (1, 2, 30, 40)), ("DontCare", (0, 0, 5, 5))],
                           "000001": [("Car", (10, 5, 60, 25)), ("Car", (70, 5, 90, 25)), ("Pedestrian", (0, 0, 8, 30))],
                           "000003": [("DontCare", (0, 0, 5, 5))]})
    index = kitti.read_index(str(tmp_path))
    assert [p.rsplit("/", 1)[1] for p in index.paths] == ["000001.png", "000002.png", "000003.png"]  # by name
    assert index.labels[0].tolist() == [0, 0, 3] and index.labels[1].tolist() == [6] and len(index.labels[2]) == 0
    np.testing.assert_array_equal(index.boxes[0][0], [10, 5, 60, 25])
    assert index.dominant().tolist() == [0, 6, len(kitti.KITTI_CLASSES)]  # Car wins 2:1; an empty image apart


def test_bad_folders_and_labels_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="'data-dir'.*Kitti"):
        kitti.read_index(str(tmp_path / "nothing"))
    write_kitti(tmp_path / "a", {"000000": [("Spaceship", (1, 1, 9, 9))]})
    with pytest.raises(ValueError, match="000000.txt.*'Spaceship'"):
        kitti.read_index(str(tmp_path / "a"))
    write_kitti(tmp_path / "b", {"000000": [("Car", (20, 1, 9, 9))]})
    with pytest.raises(ValueError, match="000000.txt.*invalid Car box"):
        kitti.read_index(str(tmp_path / "b"))


def test_letterbox_scales_pixels_and_boxes_alike(tmp_path, caplog):
    # 200 × 50 onto a 64 canvas: scale 64/200 = 0.32; the 100..150 × 10..40 rectangle lands on 32..48 × 3.2..12.8
    write_kitti(tmp_path, {"000000": [("Car", (100, 10, 150, 40)), ("Cyclist", (0, 0, 2, 2))]})
    index = kitti.read_index(str(tmp_path))
    with caplog.at_level(logging.WARNING):
        scenes = kitti._cached_images(str(tmp_path), index, np.array([0]), 64, "test")
    assert "1 of 2 boxes" in caplog.text  # the 2-pixel cyclist is 0.64 px here: dropped, and said so
    np.testing.assert_allclose(scenes.boxes[0].numpy(), [[32, 3.2, 48, 12.8]], rtol=1e-6)
    assert scenes.labels[0].tolist() == [0]
    img = scenes.images[0, 0]
    assert img[5:11, 34:46].min() > 0.9 and img[16:].abs().max() == 0  # ink inside the box, padding below
    assert img[:, 2:30].max() < 0.1 and img[:, 50:].max() < 0.1  # (the cyclist's pixel sits at 0, 0)
    again = kitti._cached_images(str(tmp_path), index, np.array([0]), 64, "test")  # now from the cache
    assert torch.equal(again.images, scenes.images) and torch.equal(again.boxes[0], scenes.boxes[0])


def test_the_held_out_split_is_fixed_and_clients_are_disjoint(tmp_path):
    write_kitti(tmp_path, _synthetic(30))
    train, test = kitti.split(30)
    assert len(test) == 6 and not set(train) & set(test) and sorted({*train, *test}) == list(range(30))
    assert all(np.array_equal(a, b) for a, b in zip(kitti.split(30), (train, test)))
    root = str(tmp_path)
    clients = [kitti.kitti_client(root, 32, 100, 3, k, alpha=0.5, seed=1) for k in range(3)]
    test_set = kitti.kitti_test(root, 32, 100)
    assert len(test_set) == 6 and sum(len(c) for c in clients) == 24  # every training image, once
    seen = {c.images[i].numpy().tobytes() for c in clients for i in range(len(c))}
    assert len(seen) == 24 and not seen & {test_set.images[i].numpy().tobytes() for i in range(6)}
    other = kitti.kitti_client(root, 32, 100, 3, 0, alpha=0.5, seed=2)
    assert len(other) != len(clients[0]) or not torch.equal(other.images, clients[0].images)  # the seed deals


TINY = dict(task="detect", det_data="kitti", num_clients=2, clients_per_round=2, attack="tsa", tau=5.0,
            attacker_ratio=0.5, det_size=32, det_train_scenes=8, det_test_scenes=4, det_rounds=2, det_local_steps=2,
            det_batch_size=4, det_backbone_width=4, engine="inprocess", device="cpu")


def test_kitti_end_to_end_through_flower(tmp_path):
    from fedcal.app.engine import simulate
    from fedcal.results import config_hash, default_run_name
    from fedcal.tasks.detect import check_detect_config, detector_spec

    write_kitti(tmp_path / "data", _synthetic(20))
    cfg = RunConfig.from_flower(dict(TINY, data_dir=str(tmp_path / "data"), output_dir=str(tmp_path / "runs")))
    assert detector_spec(cfg).num_classes == 8
    run = simulate(cfg, progress=False)
    assert run.name.startswith("detect-grid-kitti-tsa5-s0-") and (run / "DONE").exists()
    head = torch.load(run / "model.pt", weights_only=True)["cls.weight"]
    assert head.shape[0] == 9  # 8 KITTI classes + no object
    final = pd.read_csv(run / "metrics.csv").query("round == 2").set_index("metric")["value"]
    assert final["replies_accepted"] == 2 and 0 <= final["map50"] <= 1
    benign = RunConfig.from_flower(dict(TINY, data_dir=str(tmp_path / "data"), attack="none"))
    scenes = RunConfig.from_flower(dict(TINY, det_data="scenes", det_digits="digits"))
    assert "kitti" not in default_run_name(scenes) and config_hash(scenes) != config_hash(cfg)
    with pytest.raises(ConfigError, match="'data-dir'"):
        check_detect_config(RunConfig.from_flower(dict(TINY, data_dir=str(tmp_path / "none"))))
    check_detect_config(benign)


@pytest.mark.parametrize("entry", ["run", "simulate", "serverapp"])
def test_every_entry_point_runs_the_detect_preflight_before_a_run_starts(entry, tmp_path, capsys, monkeypatch,
                                                                        caplog):
    """`fedcal run task=detect`, simulate() and the ServerApp's main refuse a KITTI run without its
    data as early as `fedcal detect` does: one line naming data-dir, before any engine or ServerApp
    starts (before the ServerApp's main does anything else but say where its run directory is,
    which then says failed)."""
    def started(*args, **kwargs):
        raise AssertionError("a run started before the preflight")

    monkeypatch.setattr("fedcal.app.server.server_app_for", started)
    monkeypatch.setattr("fedcal.app.server.log_reporter", started)
    overrides = dict(TINY, data_dir=str(tmp_path / "none"), output_dir=str(tmp_path / "runs"), engine="inprocess")
    cfg = RunConfig.from_flower(overrides)
    if entry == "run":
        from fedcal.cli import main

        assert main(["run", "--no-progress", *(f"{k.replace('_', '-')}={v!r}" if isinstance(v, str) else
                                               f"{k.replace('_', '-')}={v}" for k, v in overrides.items())]) == 2
        assert "'data-dir'" in capsys.readouterr().err
    elif entry == "simulate":
        from fedcal.app.engine import simulate

        with pytest.raises(ConfigError, match="'data-dir'"):
            simulate(cfg, progress=False)
    else:
        from flwr.app import Context, RecordDict

        from fedcal.app.server import main as server_main

        class NoGrid:  # the preflight fails before the grid is used
            def __getattr__(self, name):
                raise AssertionError(f"the grid was used ({name}) before the preflight")

        import logging

        from fedcal.results import run_state

        # the ServerApp ends in ONE error line (no traceback out of it) and its run directory says
        # failed, with the reason, to `fedcal runs`: nothing else ran (no round, the grid unused)
        with caplog.at_level(logging.INFO, logger="flwr"):
            server_main(NoGrid(), Context(run_id=0, node_id=0, node_config={}, state=RecordDict(),
                                          run_config=cfg.to_flower()))
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "'data-dir'" in errors[0], errors
        (state,) = [run_state(d) for d in (tmp_path / "runs").iterdir()]
        assert state.status == "failed" and "'data-dir'" in state.reason and state.last_round is None
        return
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
