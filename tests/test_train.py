import copy

import pytest
import torch
import torch.nn.functional as F

from fedcal.data import synthetic_dataset
from fedcal.models import build_model
from fedcal.local_training import batch_schedule, effective_lr, local_train
from tests.conftest import partly_trained_digits_mlp


def flat_delta(model, base):
    return torch.cat([(p - q).flatten() for p, q in zip(model.parameters(), base.parameters())]).detach()


@pytest.fixture(scope="module")
def digits_setup():
    return partly_trained_digits_mlp()


def test_effective_lr_coupling():
    assert effective_lr(0.01, 5.0, True) == pytest.approx(0.05)
    assert effective_lr(0.01, 0.2, True) == pytest.approx(0.002)
    assert effective_lr(0.01, 5.0, False) == 0.01


def test_temperature_coupling_keeps_updates_collinear(digits_setup):
    """Same global state, same batches: coupled TSA updates stay aligned with the benign
    update; the uncoupled τ = 0.2 update (5× larger effective steps) drifts away."""
    ds, base = digits_setup
    batches = batch_schedule(len(ds.y_train), 10, 32, torch.Generator().manual_seed(2))

    def delta(tau, coupled):
        m = copy.deepcopy(base)
        local_train(m, ds.x_train, ds.y_train, steps=10, batch_size=32, lr=0.2, tau=tau, coupled=coupled,
                    batches=batches)
        return flat_delta(m, base)

    d1 = delta(1.0, True)
    cos = {k: float(F.cosine_similarity(delta(*k), d1, dim=0)) for k in [(5.0, True), (0.2, True), (0.2, False)]}
    assert cos[(5.0, True)] > 0.9
    assert cos[(0.2, True)] > 0.8
    assert cos[(0.2, False)] < cos[(0.2, True)] - 0.2


def test_tau_one_is_plain_cross_entropy_sgd():
    ds = synthetic_dataset(n_train=200, n_test=10)
    a = build_model("mlp", ds.input_shape, ds.num_classes, seed=0)
    b = copy.deepcopy(a)
    batches = batch_schedule(200, 3, 16, torch.Generator().manual_seed(0))
    local_train(a, ds.x_train, ds.y_train, steps=3, batch_size=16, lr=0.1, tau=1.0, batches=batches)
    opt = torch.optim.SGD(b.parameters(), lr=0.1)
    for idx in batches:  # independent reference loop
        opt.zero_grad()
        F.cross_entropy(b(ds.x_train[idx]), ds.y_train[idx]).backward()
        opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)


def test_tau_scales_logits_in_loss():
    """One SGD step at temperature τ equals one step on the loss CE(z/τ) with lr β·τ."""
    ds = synthetic_dataset(n_train=64, n_test=10)
    a = build_model("mlp", ds.input_shape, ds.num_classes, seed=0)
    b = copy.deepcopy(a)
    idx = torch.arange(64)
    local_train(a, ds.x_train, ds.y_train, steps=1, batch_size=64, lr=0.01, tau=4.0, batches=[idx])
    loss = F.cross_entropy(b(ds.x_train) / 4.0, ds.y_train)
    grads = torch.autograd.grad(loss, list(b.parameters()))
    with torch.no_grad():
        for p, g in zip(b.parameters(), grads):
            p -= 0.04 * g
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)


def test_batch_schedule_covers_epochs_without_repeats():
    sched = batch_schedule(10, 5, 4, torch.Generator().manual_seed(0))
    # 2 batches per epoch (8 of 10 samples), then reshuffle: no sample repeats inside an epoch
    for e in range(2):
        ep = torch.cat(sched[2 * e:2 * e + 2])
        assert len(set(ep.tolist())) == 8
    assert all(len(b) == 4 for b in sched)
    assert [len(b) for b in batch_schedule(3, 2, 64, torch.Generator())] == [3, 3]


def test_invalid_tau():
    ds = synthetic_dataset(n_train=10, n_test=2)
    with pytest.raises(ValueError):
        local_train(build_model("mlp", ds.input_shape, 4), ds.x_train, ds.y_train, steps=1, batch_size=4,
                    lr=0.1, tau=0.0)


@pytest.mark.parametrize("name,shape", [("mlp", (1, 28, 28)), ("cnn", (3, 32, 32)), ("cnn", (1, 28, 28)),
                                        ("lenet", (1, 28, 28)),
                                        ("resnet8", (3, 32, 32)), ("resnet18", (3, 32, 32)), ("cnn1d", (187,)),
                                        ("linear", (384,))])
def test_models_build_and_forward(name, shape):
    m = build_model(name, shape, 10, seed=0)
    out = m(torch.randn(2, *shape))
    assert out.shape == (2, 10)
    assert m.features(torch.randn(2, *shape)).ndim == 2
    # seeded construction is reproducible
    m2 = build_model(name, shape, 10, seed=0)
    for p, q in zip(m.parameters(), m2.parameters()):
        assert torch.equal(p, q)


def test_lenet_is_byzfl_cnn_mnist():
    """model=lenet is ByzFL's cnn_mnist: conv 1→20 and 20→50 (5×5), 800→500→10, by hand
    20·25+20 + 50·20·25+50 + 800·500+500 + 500·10+10 = 431 080 parameters; the existing cnn keeps
    its 32/64/512 widths. Where byzfl imports, its cnn_mnist loaded with lenet's weights gives
    log_softmax of lenet's logits."""
    m = build_model("lenet", (1, 28, 28), 10, seed=0)
    assert [tuple(p.shape) for p in m.parameters()] == [(20, 1, 5, 5), (20,), (50, 20, 5, 5), (50,), (500, 800),
                                                       (500,), (10, 500), (10,)]
    assert sum(p.numel() for p in m.parameters()) == 431_080
    assert [tuple(p.shape) for p in build_model("cnn", (1, 28, 28), 10).parameters()][::2] == [
        (32, 1, 5, 5), (64, 32, 5, 5), (512, 1024), (10, 512)]
    try:
        from byzfl.fed_framework.models import cnn_mnist
    except ImportError:
        return
    theirs = cnn_mnist()
    with torch.no_grad():
        for p, q in zip(theirs.parameters(), m.parameters(), strict=True):
            p.copy_(q)
    x = torch.randn(3, 1, 28, 28)
    torch.testing.assert_close(theirs(x), m(x).log_softmax(1))


def test_the_linear_model_is_logistic_regression():
    """model=linear is one affine map, (d + 1) · C parameters: the text datasets' probe."""
    m = build_model("linear", (384,), 2, seed=0)
    assert sum(p.numel() for p in m.parameters()) == 385 * 2
    x = torch.randn(3, 384)
    torch.testing.assert_close(m(x), x @ m.head.weight.T + m.head.bias)


def test_resnet8_is_he_et_al_cifar_resnet_with_one_block_per_stage():
    """Parameter count by hand: stem 3·16·9 + BN 32; stage 1 two 16→16 3×3 convs + 2 BN;
    stage 2 16→32 and 32→32 convs + 2 BN + 1×1 16→32 shortcut + BN; stage 3 likewise at 64;
    head 64·10 + 10. Output 64 features after global pooling; 8 weighted layers."""
    m = build_model("resnet8", (3, 32, 32), 10)
    by_hand = (3 * 16 * 9 + 32) + (2 * 16 * 16 * 9 + 2 * 32) \
        + (16 * 32 * 9 + 32 * 32 * 9 + 2 * 64 + 16 * 32 + 64) \
        + (32 * 64 * 9 + 64 * 64 * 9 + 2 * 128 + 32 * 64 + 128) + (64 * 10 + 10)
    assert sum(p.numel() for p in m.parameters()) == by_hand
    assert m.features(torch.randn(2, 3, 32, 32)).shape == (2, 64)
    convs = [c for c in m.modules() if isinstance(c, torch.nn.Conv2d) and c.kernel_size == (3, 3)]
    assert len(convs) + 1 == 8  # 7 3×3 convolutions + the linear head: ResNet-(6·1+2)
    with pytest.raises(ValueError, match="C×H×W"):
        build_model("resnet8", (784,), 10)


def test_resnet18_is_adapted_to_32px():
    m = build_model("resnet18", (3, 32, 32), 100)
    assert m.net.conv1.kernel_size == (3, 3) and m.net.conv1.stride == (1, 1)
    assert isinstance(m.net.maxpool, torch.nn.Identity)
