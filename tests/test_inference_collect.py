"""Inference clients at the robust-inference authors' recipe, their probits as a stored artefact, and
adversarial training at the authors' volume (docs/inference.md, "Stored probits")."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedcal.config import ConfigError, RunConfig
from fedcal.data import load_dataset
from fedcal.inference import collect as collect_mod
from fedcal.inference import deepset as deepset_mod
from fedcal.inference.collect import client_probits, collect_clients, load_collection
from fedcal.inference.deepset import DeepSet, _literature_inputs, _literature_inputs_batched, train_deepset
from fedcal.inference.federated import InferenceClientSpec, server_split, train_client
from fedcal.local_training import cosine_epochs, local_train
from fedcal.models import build_model
from fedcal.results.identity import aggregator_hash, collection_hash, config_hash
from fedcal.tasks.inference import collection_spec



# ------------------------------------------------------------------ the authors' ResNet-8
class _AuthorsBlock(nn.Module):
    """FL/models/resnet8.py's BasicBlock (github.com/sacs-epfl/robust-federated-inference), copied."""

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride, bias=False),
                                          nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class _AuthorsResNet8(nn.Module):
    """FL/models/resnet8.py's ResNet8 forward pass, copied (its unused linear2 and emb left out)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 128, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(128)
        self.layer1 = _AuthorsBlock(128, 128, 1)
        self.layer2 = _AuthorsBlock(128, 256, 2)
        self.layer3 = _AuthorsBlock(256, 512, 2)
        self.linear1 = nn.Linear(2048, num_classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = F.avg_pool2d(out, 4)
        return self.linear1(out.view(out.size(0), -1))


def _copy_in_order(src: nn.Module, dst: nn.Module) -> None:
    """Copy ``src``'s parameters and buffers into ``dst``'s, matched by shape in registration order per
    module kind (convolutions, batch norms, linears)."""
    for kind in (nn.Conv2d, nn.BatchNorm2d, nn.Linear):
        a = [m for m in src.modules() if isinstance(m, kind)]
        b = [m for m in dst.modules() if isinstance(m, kind)]
        # both register a block's shortcut after its two convolutions? the authors' do; torchvision's
        # BasicBlock registers conv1, bn1, conv2, bn2, then downsample: the same order
        assert len(a) == len(b), kind
        for ma, mb in zip(a, b):
            mb.load_state_dict(ma.state_dict())


def test_resnet8_wide_is_the_authors_client_model():
    """Same weights, same outputs as the authors' ResNet-8; 4,911,754 parameters, by hand:
    stem 3·128·9 + 2·128; stage 1 2·128²·9 + 2·2·128; stage 2 128·256·9 + 256²·9 + 128·256 + 3·2·256;
    stage 3 256·512·9 + 512²·9 + 256·512 + 3·2·512; head 2048·10 + 10."""
    hand = (3 * 128 * 9 + 2 * 128) + (2 * 128 ** 2 * 9 + 2 * 2 * 128) \
        + (128 * 256 * 9 + 256 ** 2 * 9 + 128 * 256 + 3 * 2 * 256) \
        + (256 * 512 * 9 + 512 ** 2 * 9 + 256 * 512 + 3 * 2 * 512) + (2048 * 10 + 10)
    ours = build_model("resnet8-wide", (3, 32, 32), 10, seed=0)
    assert sum(p.numel() for p in ours.parameters()) == hand == 4_911_754
    theirs = _AuthorsResNet8()
    torch.manual_seed(1)
    for m in theirs.modules():  # non-trivial batch-norm statistics, so eval mode tests them too
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5), m.bias.data.uniform_(-0.2, 0.2)
    _copy_in_order(theirs, ours)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(ours.eval()(x), theirs.eval()(x), atol=1e-5)
    # the default ResNet-8 keeps its width and its parameters (committed runs were trained with it)
    assert sum(p.numel() for p in build_model("resnet8", (3, 32, 32), 10).parameters()) == 78_042


# ------------------------------------------------------------------ the authors' client recipe
def test_cosine_epochs_anneals_per_epoch_to_eta_min():
    """CosineAnnealingLR(T_max=4, eta_min=0.001) stepped per epoch: epoch e at
    0.001 + 0.099 (1 + cos(π e / 4)) / 2 — 0.1, 0.08550, 0.0505, 0.01550 — each for 3 steps."""
    lr_at = cosine_epochs(0.1, 4, 3)
    expected = [0.1, 0.001 + 0.099 * (1 + math.sqrt(0.5)) / 2, 0.0505, 0.001 + 0.099 * (1 - math.sqrt(0.5)) / 2]
    assert [lr_at(k) for k in range(1, 13)] == pytest.approx([v for v in expected for _ in range(3)], abs=1e-12)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(torch.optim.SGD([torch.zeros(1)], lr=0.1), T_max=4,
                                                       eta_min=0.001)
    torch_lrs = []
    for _ in range(4):
        torch_lrs.append(sched.get_last_lr()[0])
        sched.optimizer.step(), sched.step()
    assert torch_lrs == pytest.approx(expected, abs=1e-12)


def _train(lr_at, steps=4):
    torch.manual_seed(0)
    model = nn.Linear(5, 3)
    x, y = torch.randn(20, 5), torch.randint(0, 3, (20,))
    local_train(model, x, y, steps=steps, batch_size=8, lr=0.1, generator=torch.Generator().manual_seed(0),
                lr_at=lr_at)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_local_train_takes_each_steps_rate_from_the_schedule():
    start = _train(lambda k: 0.0)
    torch.manual_seed(0)
    assert torch.equal(start, torch.cat([p.detach().flatten() for p in nn.Linear(5, 3).parameters()]))
    assert torch.equal(_train(lambda k: 0.1), _train(None))  # a constant schedule is no schedule
    assert torch.equal(_train(lambda k: 0.1 if k <= 2 else 0.0), _train(None, steps=2))  # rate 0 after step 2
    with pytest.raises(ValueError, match="tau = 1"):
        local_train(nn.Linear(5, 3), torch.randn(4, 5), torch.zeros(4).long(), steps=1, batch_size=4, lr=0.1,
                    tau=2.0, lr_at=lambda k: 0.1)


def test_an_inference_client_trains_on_the_cosine_schedule(monkeypatch):
    """inf-lr-schedule=cosine reaches the client's SGD: each step's rate is cosine_epochs' for its epoch."""
    import fedcal.inference.federated as federated

    seen = []
    real = federated.local_train
    monkeypatch.setattr(federated, "local_train", lambda *a, **k: seen.append(k["lr_at"]) or real(*a, **k))
    cfg, ds = _cfg(**{"inf-local-epochs": 3, "lr": 0.1}), load_dataset("digits")
    train_client(InferenceClientSpec.from_config(cfg), ds, 0)
    train_client(InferenceClientSpec.from_config(cfg.replace(inf_lr_schedule="constant")), ds, 0)
    per_epoch = math.ceil(len(federated.client_indices(ds.y_train.numpy(), 3, cfg.dirichlet_alpha, 0.1, 0)[0]) / 64)
    cosine, constant = seen
    assert constant is None
    assert [cosine(e * per_epoch + 1) for e in range(3)] == pytest.approx([0.1, 0.001 + 0.099 * 0.75,
                                                                         0.001 + 0.099 * 0.25])


def test_the_recipe_keys_rename_no_earlier_run():
    """New keys at their defaults leave every hash as the code before them computed it (pinned from
    main: the committed ResNet-8 literature cells and the default inference run); set, they count."""
    lit = RunConfig.from_flower({"task": "inference", "num-clients": 17, "dataset": "cifar10", "model": "resnet8",
                                 "dirichlet-alpha": 0.5, "lr": 0.05, "momentum": 0.9, "weight-decay": 5e-4,
                                 "inf-augment": "crop-flip", "inf-local-epochs": 20, "agg-adv-attack": "literature"})
    plain = RunConfig.from_flower({"task": "inference"})
    for cfg, pinned in ((lit, ("ba8ddc72fa33", "95d1ffa8167a", "70e2a439a0ac", "d1d237457e2f")),
                        (plain, ("e3fa35c2866e", "65f1a93610a8", "0b09d0bf7c95", "0b617be35bdc"))):
        assert (config_hash(cfg), collection_hash(cfg), aggregator_hash(cfg, "deepset"),
                aggregator_hash(cfg, "fusion")) == pinned
    cos = lit.replace(inf_lr_schedule="cosine")
    assert config_hash(cos) != config_hash(lit) and collection_hash(cos) != collection_hash(lit)
    wide = lit.replace(model="resnet8-wide")
    assert collection_hash(wide) != collection_hash(lit)
    vol = lit.replace(agg_adv_subsets=300)
    assert config_hash(vol) != config_hash(lit) and aggregator_hash(vol, "deepset") != aggregator_hash(lit, "deepset")
    assert collection_hash(vol) == collection_hash(lit)  # the same clients: a volume run reuses their probits


# ------------------------------------------------------------------ the stored collection
def _cfg(**kw) -> RunConfig:
    base = {"task": "inference", "dataset": "digits", "model": "mlp", "num-clients": 3, "clients-per-round": 3,
            "inf-f": 1, "inf-local-epochs": 2, "inf-test-queries": 200, "inf-lr-schedule": "cosine"}
    return RunConfig.from_flower({**base, **kw})


def test_stored_probits_are_the_live_clients_within_float16(tmp_path):
    cfg, ds = _cfg(), load_dataset("digits")
    path = collect_clients(collection_spec(cfg), ds, tmp_path / "c.npz")
    data, manifest = load_collection(path)
    srv = torch.from_numpy(server_split(ds.y_train.numpy(), cfg.inf_server_frac, cfg.seed)[0])
    assert torch.equal(data.server_labels, ds.y_train[srv]) and torch.equal(data.test_labels, ds.y_test[:200])
    assert data.test_probits.shape == (200, 3, 10) and bool(data.test_valid.all())
    for cid in range(3):
        model, _, _ = train_client(InferenceClientSpec.from_config(cfg), ds, cid)
        live_s, live_t = client_probits(model, ds.x_train[srv]), client_probits(model, ds.x_test[:200])
        # float16 rounds a probability p by ≤ 2^-11·p; renormalising the row moves each entry by ≤ 2^-11 more
        assert (data.server_probits[:, cid] - live_s).abs().max() <= 2 ** -10
        assert (data.test_probits[:, cid] - live_t).abs().max() <= 2 ** -10
    assert torch.allclose(data.test_probits.sum(-1), torch.ones(200, 3), atol=1e-6)
    assert manifest["collection_hash"] == collection_hash(cfg) and manifest["config"]["inf_lr_schedule"] == "cosine"
    side = Path(str(path) + ".json").read_text()
    assert '"done"' in side and manifest["data"] in side


def test_a_resumed_collection_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    cfg, ds = _cfg(), load_dataset("digits")
    whole = collect_clients(collection_spec(cfg), ds, tmp_path / "whole.npz")

    def stop_after_first(cid, seconds):
        if cid == 0:
            raise KeyboardInterrupt

    part = tmp_path / "part.npz"
    with pytest.raises(KeyboardInterrupt):
        collect_clients(collection_spec(cfg), ds, part, on_client=stop_after_first)
    with np.load(part) as z:
        assert z["done"].tolist() == [True, False, False]
    with pytest.raises(ConfigError, match=r"unfinished \(clients \[1, 2\] missing\)"):
        load_collection(part)
    trained = []
    real = collect_mod.train_client
    monkeypatch.setattr(collect_mod, "train_client", lambda spec, ds, cid, **kw: trained.append(cid) or real(
        spec, ds, cid, **kw))
    collect_clients(collection_spec(cfg), ds, part)
    assert trained == [1, 2]  # the stored client is not trained again
    with np.load(whole) as a, np.load(part) as b:
        assert a.files == b.files
        for k in a.files:
            if k != "train_seconds":
                assert np.array_equal(a[k], b[k]), k


def test_a_collection_for_another_setting_or_a_foreign_file_is_refused(tmp_path):
    cfg, ds = _cfg(**{"inf-local-epochs": 1}), load_dataset("digits")
    path = collect_clients(collection_spec(cfg), ds, tmp_path / "c.npz")
    with pytest.raises(ConfigError, match=r"another setting \(inf_local_epochs differ\)"):
        collect_clients(collection_spec(_cfg(**{"inf-local-epochs": 2})), ds, path)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not an npz")
    with pytest.raises(ConfigError, match="not a probit collection"):
        collect_clients(collection_spec(cfg), ds, junk)
    with pytest.raises(ConfigError, match="not a probit collection"):
        load_collection(junk)


# ------------------------------------------------------------------ adversarial training at the authors' volume
def test_the_batched_literature_attack_is_the_unbatched_one():
    torch.manual_seed(0)
    b, n, c, f = 48, 17, 10, 4
    x = torch.softmax(3 * torch.randn(b, n, c, dtype=torch.float64), -1)
    y = torch.randint(0, c, (b,))
    model = DeepSet(c, hidden=32, seed=1).double()
    ref = _literature_inputs(model, x, y, f, 20, 0.1, torch.Generator().manual_seed(3))
    new = _literature_inputs_batched(model, x, y, f, 20, 0.1, torch.Generator().manual_seed(3))
    assert torch.allclose(ref, new, atol=1e-12, rtol=0)
    moved = (new != x).any(-1)
    assert int(moved.sum(1).max()) <= f and int(moved.sum()) > b  # ≤ f rows changed per sample, mostly f
    assert torch.allclose(new.sum(-1), torch.ones(b, n, dtype=torch.float64))
    with pytest.raises(ValueError, match="mean-pooled"):
        _literature_inputs_batched(model.as_trimmed(f), x, y, f, 1, 0.1, torch.Generator())


def test_subsets_visit_each_server_sample_that_many_times_an_epoch(monkeypatch):
    seen = []
    real = deepset_mod._literature_inputs_batched

    def spy(model, x, y, *a):
        seen.append(x.clone())
        return real(model, x, y, *a)

    monkeypatch.setattr(deepset_mod, "_literature_inputs_batched", spy)
    torch.manual_seed(0)
    probits = torch.softmax(torch.randn(7, 5, 3), -1)
    labels = torch.arange(7) % 3
    train_deepset(DeepSet(3, hidden=8, seed=0), probits, labels, epochs=2, batch_size=4, adversarial=True, f=2,
                  attack_steps=2, adv_attack="literature", subsets=3)
    rows = torch.cat(seen)
    assert len(seen) == 2 * math.ceil(7 * 3 / 4) and len(rows) == 2 * 7 * 3
    # every server sample appears subsets × epochs times
    counts = [int((rows == probits[i]).all(-1).all(-1).sum()) for i in range(7)]
    assert counts == [6] * 7
    with pytest.raises(ValueError, match="subsets"):
        train_deepset(DeepSet(3, hidden=8), probits, labels, epochs=1, subsets=0)


# ------------------------------------------------------------------ an inference run from stored probits
def test_an_inference_run_reads_stored_probits_and_trains_no_client(tmp_path, monkeypatch, capsys):
    """`fedcal inference inf-probits=stored` evaluates the collection `fedcal inference-collect` stored for
    the same keys — no client trains, none is queried — and is a run of its own (hash); a grid cell
    without its collection fails in one line before anything runs."""
    import fedcal.tasks.inference as task
    from fedcal.cli import main
    from fedcal.inference.evaluate import ProbitData

    keys = ["dataset=digits", "num-clients=5", "inf-f=1", "dirichlet-alpha=0.5", "lr=0.1", "batch-size=32",
            "inf-local-epochs=2", "inf-test-queries=300", f"inf-probits-dir={tmp_path / 'probits'}"]
    assert main(["inference-collect", *keys, "clients-per-round=5"]) == 0
    (stored,) = (tmp_path / "probits").glob("*.npz")

    def no_clients(*a, **k):
        raise AssertionError("a client was trained or queried")

    monkeypatch.setattr(task, "collect_probits", no_clients)
    monkeypatch.setattr(task, "train_client", no_clients, raising=False)
    run = ["inference", "--nf", "5:1", "--seeds", "0", "--report", str(tmp_path / "rep"), "--no-progress",
           "engine=inprocess", f"output-dir={tmp_path / 'runs'}", "agg-epochs=5", "agg-adv-epochs=1",
           "agg-hidden=16", "inf-pgd-steps=2", "inf-f-curve=false", 'inf-amp-curve=""', "inf-attacks=none,lma",
           *keys]
    assert main([*run, "inf-probits=stored"]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    used = ProbitData.load(run_dir / "probits.pt")
    data, _ = load_collection(stored)
    assert torch.equal(used.test_probits, data.test_probits) and torch.equal(used.server_probits, data.server_probits)
    cfg = RunConfig.from_flower({"task": "inference", "inf-probits": "stored",
                                 **{k.split("=")[0]: v for k, v in (a.split("=", 1) for a in keys)}})
    assert config_hash(cfg) != config_hash(cfg.replace(inf_probits="live"))
    capsys.readouterr()
    seed1 = [a if a != "0" else "1" for a in run]  # --seeds 1: a cell no collection was made for
    assert main([*seed1, "inf-probits=stored", f"output-dir={tmp_path / 'runs1'}"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'inf-probits'" in err[0] and "inference-collect" in err[0], err


def _tampered(path: Path, out: Path, **changes) -> Path:
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(changes)
    with open(out, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    return out


@pytest.mark.parametrize("change,words", [
    (lambda a: {"test_probits": np.where(np.arange(10) == 3, np.float16("nan"), a["test_probits"])},
     "test_probits of a finished client are not probit vectors"),
    (lambda a: {"server_probits": (a["server_probits"] * 2).astype(np.float16)}, "server_probits of a finished"),
    (lambda a: {"server_probits": -a["server_probits"]}, "server_probits of a finished"),
    (lambda a: {"test_probits": a["test_probits"].astype(np.float32)}, "not float16"),
    (lambda a: {"done": np.ones(4, bool)}, "shapes disagree"),
    (lambda a: {"test_labels": a["test_labels"] + 10}, "test_labels outside 0..9"),
    (lambda a: {"train_loss": np.zeros(1)}, "shapes disagree"),
])
def test_a_damaged_collection_is_refused_in_one_line(change, words, tmp_path):
    """A collection file is untrusted input: NaN, negative or unnormalised probits of a finished client,
    wrong dtypes or shapes, labels out of range — each refused naming the file and the damage."""
    cfg, ds = _cfg(**{"inf-local-epochs": 1}), load_dataset("digits")
    path = collect_clients(collection_spec(cfg), ds, tmp_path / "c.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    bad = _tampered(path, tmp_path / "bad.npz", **change(arrays))
    for act in (lambda: load_collection(bad), lambda: collect_clients(collection_spec(cfg), ds, bad)):
        with pytest.raises(ConfigError, match="damaged probit collection") as err:
            act()
        assert words in str(err.value) and str(bad) in str(err.value) and "\n" not in str(err.value)
