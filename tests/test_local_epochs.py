"""local-epochs (one pass = every client sample once) and augment=crop-flip: schedules, the
augmentation against torchvision's functional ops, the client round, the config rules, and a run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torchvision.transforms.v2 import functional as TF

from fedcal.attacks import AttackSpec, LocalRoundSpec
from fedcal.app.batched import batched_unsupported
from fedcal.app.engine import simulate
from fedcal.attacks.registry import augmenter, behaviour_for, client_round, local_batches
from fedcal.config import ConfigError, RunConfig
from fedcal.data import load_dataset, pixel_space
from fedcal.models import build_model
from fedcal.studies.robustness import temperature_configs
from fedcal.results import config_hash, load_metrics, run_dir_for
from fedcal.local_training import CropFlip, crop_flip, epoch_schedule, local_train


@pytest.mark.parametrize("n,b,epochs", [(10, 4, 2), (12, 4, 1), (3, 8, 3), (1, 1, 2)])
def test_each_epoch_is_one_pass_over_the_client_data(n, b, epochs):
    batches = epoch_schedule(n, epochs, b, torch.Generator().manual_seed(0))
    per_epoch = math.ceil(n / b)
    assert len(batches) == epochs * per_epoch
    for e in range(epochs):
        chunk = batches[e * per_epoch:(e + 1) * per_epoch]
        assert sorted(torch.cat(chunk).tolist()) == list(range(n))  # every sample exactly once
        assert [len(c) for c in chunk] == [b] * (n // b) + ([n % b] if n % b else [])
    again = epoch_schedule(n, epochs, b, torch.Generator().manual_seed(0))
    assert all(torch.equal(x, y) for x, y in zip(batches, again))


def test_epoch_schedule_refuses_empty_data_and_zero_epochs():
    with pytest.raises(ValueError, match="at least one training sample"):
        epoch_schedule(0, 1, 4, torch.Generator())
    with pytest.raises(ValueError, match="epochs must be >= 1"):
        epoch_schedule(5, 0, 4, torch.Generator())


def test_crop_flip_by_hand():
    x = torch.arange(9, dtype=torch.float32).view(1, 1, 3, 3)
    g = torch.Generator().manual_seed(0)
    off = torch.randint(0, 3, (2, 1), generator=g)  # the draws crop_flip makes, in its order
    flip = bool(torch.rand(1, generator=g)[0] < 0.5)
    padded = torch.full((5, 5), -1.0)
    padded[1:4, 1:4] = x[0, 0]
    want = padded[off[0, 0]:off[0, 0] + 3, off[1, 0]:off[1, 0] + 3]
    want = want.flip(1) if flip else want
    got = crop_flip(x, torch.Generator().manual_seed(0), fill=torch.tensor([-1.0]), pad=1)
    assert torch.equal(got[0, 0], want)


def test_crop_flip_equals_torchvision_per_image():
    """A second implementation: torchvision's functional pad / crop / horizontal_flip, image by
    image, with the same per-image draws."""
    x = torch.randn(16, 3, 32, 32)
    fill = torch.tensor([-1.9, -1.98, -1.7])
    got = crop_flip(x, torch.Generator().manual_seed(7), fill)
    g = torch.Generator().manual_seed(7)
    off = torch.randint(0, 9, (2, 16), generator=g)
    flip = torch.rand(16, generator=g) < 0.5
    for i in range(16):
        img = torch.stack([TF.pad(x[i, c:c + 1], [4], fill=float(fill[c]))[0] for c in range(3)])
        img = TF.crop(img, int(off[0, i]), int(off[1, i]), 32, 32)
        img = TF.horizontal_flip(img) if flip[i] else img
        assert torch.equal(got[i], img), i
    assert flip.any() and not flip.all()  # both branches exercised


def test_prepared_crop_flip_draws_the_same_images_as_batch_by_batch():
    """CropFlip.prepare draws a whole schedule's offsets first (one copy to a GPU): batch k of it
    equals the k-th call of the lazy augmenter on a generator with the same seed."""
    fill = torch.tensor([-1.9, -1.98, -1.7])
    sizes = [64, 64, 17, 64]
    xs = [torch.randn(n, 3, 32, 32) for n in sizes]
    lazy = CropFlip(torch.Generator().manual_seed(3), fill)
    prepared = CropFlip(torch.Generator().manual_seed(3), fill).prepare(sizes, torch.device("cpu"))
    assert len(prepared) == len(sizes)
    for x, aug in zip(xs, prepared):
        assert torch.equal(aug(x), lazy(x))
    assert CropFlip(torch.Generator(), fill).prepare([], torch.device("cpu")) == []


def test_local_train_with_a_crop_flip_object_equals_a_plain_callable():
    """local_train prepares a CropFlip's draws ahead; a plain callable wrapping the same augmenter is
    called batch by batch: both train to the same parameters and report the same loss."""
    x, y = torch.randn(150, 3, 32, 32), torch.randint(0, 10, (150,))
    fill = torch.tensor([-1.9, -1.98, -1.7])
    out = []
    for wrap in (False, True):
        model = build_model("cnn", (3, 32, 32), 10, seed=1)
        aug = CropFlip(torch.Generator().manual_seed(9), fill)
        stats = local_train(model, x, y, steps=5, batch_size=64, lr=0.05, tau=0.5, momentum=0.9,
                            generator=torch.Generator().manual_seed(2),
                            augment=(lambda xb, a=aug: a(xb)) if wrap else aug)
        out.append((stats, torch.cat([p.flatten() for p in model.state_dict().values()])))
    assert out[0][0] == out[1][0]
    assert torch.equal(out[0][1], out[1][1])


def test_crop_flip_fill_is_a_black_pixel_of_the_dataset():
    cfg = RunConfig(dataset="cifar10", augment="crop-flip")
    black = pixel_space("cifar10").to_inputs(torch.zeros(1, 3, 32, 32))
    out = augmenter(LocalRoundSpec.from_config(cfg), 1, 0)(black.clone())
    assert torch.allclose(out, black)  # padding a black image with black changes nothing


def _client(cfg: RunConfig, client_id: int = 0):
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    from fedcal.data import client_partitions

    part = client_partitions(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.partition, cfg.dirichlet_alpha,
                             cfg.seed)[client_id]
    return ds, ds.x_train[part], ds.y_train[part]


def _train(cfg: RunConfig, ds, x, y, client_id: int = 0):
    torch.manual_seed(0)
    model = build_model(cfg.model, ds.input_shape, ds.num_classes)
    stats = client_round(model, x, y, ds.num_classes, behaviour_for(AttackSpec.from_config(cfg), client_id), LocalRoundSpec.from_config(cfg),
                         3, client_id)
    return model, stats


def test_client_round_takes_its_epochs_steps():
    cfg = RunConfig(dataset="digits", num_clients=5, batch_size=32, local_epochs=2, attack="none")
    ds, x, y = _client(cfg)
    batches, steps = local_batches(LocalRoundSpec.from_config(cfg), len(y), 3, 0)
    assert steps == 2 * math.ceil(len(y) / 32) == len(batches)
    _, stats = _train(cfg, ds, x, y)
    assert stats.steps == steps and stats.num_examples == len(y)
    assert local_batches(LocalRoundSpec.from_config(cfg.replace(local_epochs=0)), len(y), 3, 0) == (None, 5)  # the literal E steps


def test_adaptive_attacker_counts_its_share_of_the_epoch_steps():
    cfg = RunConfig(dataset="digits", num_clients=4, batch_size=32, local_epochs=1, attack="tsa", tau=5.0,
                    attacker_ratio=1.0, tsa_step_frac=0.5)
    ds, x, y = _client(cfg)
    _, stats = _train(cfg, ds, x, y)
    assert stats.steps == math.ceil(len(y) / 32)


@pytest.fixture
def fake_cifar(tmp_path):
    rng = np.random.default_rng(0)
    for split, n in (("train", 400), ("test", 100)):
        np.savez(tmp_path / f"cifar10_{split}.npz", x=rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
                 y=np.arange(n) % 10)
    return tmp_path


def test_augmented_rounds_are_reproducible_and_differ_from_plain_ones(fake_cifar):
    cfg = RunConfig(dataset="cifar10", model="cnn", data_dir=str(fake_cifar), num_clients=5, batch_size=16,
                    attack="none", augment="crop-flip")
    ds, x, y = _client(cfg)
    a, _ = _train(cfg, ds, x, y)
    b, _ = _train(cfg, ds, x, y)
    plain, _ = _train(cfg.replace(augment="none"), ds, x, y)
    flat = lambda m: torch.cat([p.detach().flatten() for p in m.parameters()])  # noqa: E731
    assert torch.equal(flat(a), flat(b))
    assert not torch.equal(flat(a), flat(plain))


def test_config_rules_and_unchanged_run_identity():
    with pytest.raises(ConfigError, match="'local-steps' is replaced by local-epochs"):
        RunConfig.from_flower({"local-epochs": 1, "local-steps": 19})
    with pytest.raises(ConfigError, match="'augment' is CIFAR's augmentation"):
        RunConfig.from_flower({"augment": "crop-flip", "dataset": "mnist"})
    with pytest.raises(ConfigError, match="'local-epochs' must be >= 0"):
        RunConfig.from_flower({"local-epochs": -1})
    base = RunConfig()
    assert config_hash(base.replace(local_epochs=0, augment="none")) == config_hash(base)  # old runs keep their names
    assert config_hash(base.replace(local_epochs=1)) != config_hash(base)
    assert batched_unsupported(base.replace(dataset="digits", local_epochs=1)) == \
        "local-epochs (clients take different numbers of steps)"
    with pytest.raises(ValueError, match="centralised setting"):
        temperature_configs(base.replace(local_epochs=1), taus=[1.0], seeds=[0], settings=("centralised",))


def test_a_run_with_local_epochs_through_flower(tmp_path):
    cfg = RunConfig(dataset="digits", num_clients=5, clients_per_round=3, num_rounds=2, local_epochs=1,
                    batch_size=32, attack="tsa", tau=5.0, engine="inprocess", output_dir=str(tmp_path))
    run = simulate(cfg, progress=False)
    assert run == run_dir_for(cfg)
    m = load_metrics(run)
    assert m["finished"].all() and set(m["round"]) == {0, 1, 2}
    assert m[m.metric == "accuracy"]["value"].between(0, 1).all()


def test_fltrust_server_takes_a_mean_clients_epoch_steps():
    """FLTrust rescales every client update to the norm of the server's own update, so the server
    must take as many local steps as the clients (Cao et al.'s R): with local-epochs E, those of E
    epochs over the mean client's data, ⌈N / K / B⌉·E, not E epochs over its 100-sample root set.
    Checked by the update itself: equal to a benign round of that many local steps on the root set."""
    from fedcal.attacks.behaviour import BENIGN
    from fedcal.data import root_set
    from fedcal.tasks.train import root_train_fn_for
    from flwr.app import ArrayRecord

    ds = load_dataset("digits")
    cfg = RunConfig(dataset="digits", num_clients=10, local_epochs=2, batch_size=16, root_size=40, seed=3)
    steps = 2 * math.ceil(len(ds.y_train) / 10 / 16)
    assert steps > 2 * math.ceil(40 / 16)  # more than two epochs over the root set
    start = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=0)
    got = root_train_fn_for(cfg, ds, "cpu")(ArrayRecord(start.state_dict()), 4).to_torch_state_dict()
    x, y = root_set(ds, cfg.root_size, cfg.seed)
    by_hand = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=0)
    stats = client_round(by_hand, x, y, ds.num_classes, BENIGN, LocalRoundSpec.from_config(RunConfig(
                         dataset="digits", num_clients=10, local_steps=steps, batch_size=16, root_size=40, seed=3)),
                         4, client_id=-1)
    assert stats.steps == steps
    assert all(torch.equal(got[k], v) for k, v in by_hand.state_dict().items())
    # without local-epochs the server's round is the clients' local-steps, as always
    plain = RunConfig(dataset="digits", num_clients=10, batch_size=16, root_size=40, seed=3)
    got = root_train_fn_for(plain, ds, "cpu")(ArrayRecord(start.state_dict()), 4).to_torch_state_dict()
    five = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=0)
    client_round(five, x, y, ds.num_classes, BENIGN, LocalRoundSpec.from_config(plain), 4, client_id=-1)
    assert all(torch.equal(got[k], v) for k, v in five.state_dict().items())
