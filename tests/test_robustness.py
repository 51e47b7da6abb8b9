"""Temperature as a robustness knob: attacks, corruptions, geometry, the τ study's runs, the command."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from fedcal.cli import main
from fedcal.config import RunConfig
from fedcal.data import load_dataset, pixel_space
from fedcal.models import build_model
from fedcal.reports.robustness import training_of
from fedcal.robustness.runs import evaluate_run
from fedcal.studies.robustness import temperature_configs
from fedcal.robustness import (ATTACKS, AttackBudget, MarginLoss, RobustnessSpec, adversarial_examples, corrupt,
                               evaluate_robustness, negative_prototype_spread, predict_pixels, random_targets,
                               spec_for)
from fedcal.robustness.corruptions import CORRUPTIONS, _disk_kernel


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


@pytest.fixture(scope="module")
def trained(digits):
    """An MLP trained on digits for 400 plain SGD steps (~95 % test accuracy)."""
    model = build_model("mlp", digits.input_shape, digits.num_classes, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(0)
    for _ in range(400):
        idx = torch.randint(0, len(digits.y_train), (64,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(model(digits.x_train[idx]), digits.y_train[idx]).backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def batch(digits):
    space = pixel_space("digits")
    return space, space.to_pixels(digits.x_test[:300]), digits.y_test[:300]


BUDGET = AttackBudget(eps=0.1, step=0.025, steps=20)


def _accuracy(model, pixels, labels, space) -> float:
    return float((predict_pixels(model, pixels, space) == labels).float().mean())


# ------------------------------------------------------------------------------------ attacks
@pytest.mark.parametrize("attack", ATTACKS)
def test_attacks_stay_in_the_eps_ball_and_the_pixel_range(trained, batch, attack):
    space, x, y = batch
    targets = random_targets(y, 10, seed=0)
    adv = adversarial_examples(trained, x, y, space, 10, attack, BUDGET, targets=targets)
    assert adv.shape == x.shape and adv.dtype == torch.float32
    assert (adv - x).abs().max() <= BUDGET.eps + 1e-6
    assert adv.min() >= 0.0 and adv.max() <= 1.0
    assert (adv - x).abs().max() > BUDGET.eps / 2  # it did move


def test_pgd_below_fgsm_below_clean_and_far_below_clean(trained, batch):
    space, x, y = batch
    clean = _accuracy(trained, x, y, space)
    fgsm = _accuracy(trained, adversarial_examples(trained, x, y, space, 10, "fgsm", BUDGET), y, space)
    pgd = _accuracy(trained, adversarial_examples(trained, x, y, space, 10, "pgd", BUDGET), y, space)
    cw = _accuracy(trained, adversarial_examples(trained, x, y, space, 10, "cw", BUDGET), y, space)
    assert clean > 0.9
    assert pgd <= fgsm <= clean
    assert pgd < clean / 3 and cw < clean / 3  # PGD-20 breaks an undefended model


def _reference_pgd(model, space, x, y, eps, step, steps, delta0):
    """A second, plain-torch PGD (sign-gradient ascent on the cross-entropy, projection, clip)."""
    adv = (x + delta0).clamp(0, 1)
    for _ in range(steps):
        adv = adv.detach().requires_grad_(True)
        loss = nn.functional.cross_entropy(trained_logits(model, space, adv), y)
        (grad,) = torch.autograd.grad(loss, adv)
        adv = torch.min(torch.max(adv + step * grad.sign(), x - eps), x + eps).clamp(0, 1)
    return adv.detach()


def trained_logits(model, space, pixels):
    return model(space.to_inputs(pixels))


def test_library_pgd_agrees_with_a_plain_torch_pgd(trained, batch):
    space, x, y = batch
    g = torch.Generator().manual_seed(1)
    delta0 = (torch.rand(x.shape, generator=g) * 2 - 1) * BUDGET.eps
    ref = _accuracy(trained, _reference_pgd(trained, space, x, y, BUDGET.eps, BUDGET.step, BUDGET.steps, delta0),
                    y, space)
    lib = _accuracy(trained, adversarial_examples(trained, x, y, space, 10, "pgd", BUDGET, seed=3), y, space)
    assert abs(lib - ref) <= 0.05, (lib, ref)


def test_targeted_success_counts_only_target_hits(trained, batch):
    space, x, y = batch
    targets = random_targets(y, 10, seed=0)
    assert (targets != y).all() and targets.min() >= 0 and targets.max() <= 9
    assert torch.equal(targets, random_targets(y, 10, seed=0))
    adv = adversarial_examples(trained, x, y, space, 10, "pgd_targeted", BUDGET, targets=targets)
    pred = predict_pixels(trained, adv, space)
    spec = RobustnessSpec(eps=0.1, attacks=("pgd_targeted",), corruptions=(), n_test=300)
    ds = load_dataset("digits")
    got = evaluate_robustness(trained, ds, spec)["pgd_targeted_success"]
    hits = float((pred == targets).float().mean())
    misclassified = float((pred != y).float().mean())
    assert got == pytest.approx(hits)
    assert hits < misclassified  # some adversarial examples land on a wrong class that is not the target


def test_attacks_are_deterministic_and_leave_numpy_global_state_alone(trained, batch):
    space, x, y = batch
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    a = adversarial_examples(trained, x, y, space, 10, "pgd", BUDGET, seed=5)
    assert np.array_equal(np.random.get_state()[1], before)
    b = adversarial_examples(trained, x, y, space, 10, "pgd", BUDGET, seed=5)
    assert torch.equal(a, b)


def test_attacks_run_the_model_in_eval_mode(batch):
    space, x, y = batch
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.Dropout(0.5), nn.ReLU(), nn.Linear(32, 10))
    model.train()
    a = adversarial_examples(model, x[:50], y[:50], space, 10, "fgsm", BUDGET)
    b = adversarial_examples(model, x[:50], y[:50], space, 10, "fgsm", BUDGET)
    assert torch.equal(a, b)  # dropout active would make the gradient (and FGSM) random
    assert not model.training


def test_margin_loss_by_hand():
    logits = torch.tensor([[3.0, 1.0, 2.0], [0.0, 4.0, 1.0]])
    # sample 0, label 0: max other 2 − 3 = −1; sample 1, label 0: 4 − 0 = 4
    assert MarginLoss()(logits, torch.tensor([0, 0])).item() == pytest.approx(3.0)
    assert MarginLoss()(logits, torch.eye(3)[[0, 0]]).item() == pytest.approx(3.0)  # one-hot labels


@pytest.mark.parametrize("bad, match", [
    (dict(eps=0.0), "epsilon"), (dict(eps=-0.1), "epsilon"), (dict(eps=0.1, steps=0), "steps"),
    (dict(eps=0.1, attacks=("pgd", "deepfool")), "unknown attack 'deepfool'"),
    (dict(eps=0.1, corruptions=("fog",)), "unknown corruption 'fog'"), (dict(eps=0.1, severity=6), "severity"),
    (dict(eps=0.1, n_test=0), "n_test"), (dict(eps=0.1, step=-1.0), "step"),
])
def test_spec_rejects_bad_values(bad, match):
    with pytest.raises(ValueError, match=match):
        RobustnessSpec(**bad)


def test_spec_defaults():
    spec = spec_for("cifar10")
    assert spec.eps == pytest.approx(8 / 255) and spec.step == pytest.approx(2 / 255) and spec.steps == 20
    assert spec.n_test == 1000 and spec.severity == 3
    assert spec_for("mnist").eps == 0.1
    assert spec_for("mnist").key() != spec_for("mnist", steps=10).key()


# ------------------------------------------------------------------------------------ corruptions
@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return {"rgb": rng.integers(0, 256, size=(6, 32, 32, 3), dtype=np.uint8),
            "grey": rng.integers(0, 256, size=(6, 28, 28, 1), dtype=np.uint8)}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
@pytest.mark.parametrize("kind", ["rgb", "grey"])
def test_corruptions_keep_shape_dtype_and_are_seeded(images, name, kind):
    x = images[kind]
    a = corrupt(x, name, 3, seed=0)
    assert a.shape == x.shape and a.dtype == np.uint8
    assert np.array_equal(a, corrupt(x, name, 3, seed=0))
    if name in ("gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise"):
        assert not np.array_equal(a, corrupt(x, name, 3, seed=1))
    if not (name == "saturate" and kind == "grey"):
        assert not np.array_equal(a, x)


def test_corruptions_by_hand():
    grey = np.full((1, 4, 4, 1), 100, dtype=np.uint8)
    # contrast: (x − mean)·c + mean leaves a constant image alone
    assert np.array_equal(corrupt(grey, "contrast", 3), grey)
    two = np.array([[[[0], [200]]]], dtype=np.uint8)  # mean 100/255; c = 0.4 at severity 3
    expected = np.uint8(np.clip((np.array([0, 200]) / 255 - 100 / 255) * 0.4 + 100 / 255, 0, 1) * 255)
    assert np.array_equal(corrupt(two, "contrast", 3).ravel(), expected)
    # brightness on grey: HSV value is the grey level, + 0.15 at severity 3
    assert np.all(corrupt(grey, "brightness", 3) == np.uint8(np.clip(100 / 255 + 0.15, 0, 1) * 255))
    # pixelate and both blurs leave a constant image alone (up to the last grey level: like
    # CIFAR-10-C, the result is truncated to uint8, and a blur's sum of weights is 1 only to rounding)
    for name in ("pixelate", "defocus_blur", "gaussian_blur"):
        assert np.abs(corrupt(grey, name, 3).astype(int) - grey).max() <= 1, name


def test_noise_statistics():
    mid = np.full((20, 32, 32, 3), 128, dtype=np.uint8)
    noisy = corrupt(mid, "gaussian_noise", 3).astype(float) / 255
    assert noisy.std() == pytest.approx(0.08, rel=0.03)  # σ = 0.08 at severity 3
    hit = corrupt(mid, "impulse_noise", 3)
    frac = np.mean((hit == 0) | (hit == 255))
    assert frac == pytest.approx(0.03, rel=0.1)  # 3 % of the values are salt or pepper


def test_defocus_kernel():
    k = _disk_kernel(0.5, 0.6)
    assert k.sum() == pytest.approx(1.0) and k.shape == (17, 17)
    assert np.allclose(k, k.T) and np.allclose(k, k[::-1, ::-1])  # symmetric
    taps = np.exp(-np.array([1.0, 0.0, 1.0]) / (2 * 0.36))
    taps /= taps.sum()
    assert np.allclose(k[7:10, 7:10], np.outer(taps, taps))  # radius 0.5: one pixel, then the 3×3 Gaussian


@pytest.mark.parametrize("bad, match", [
    (dict(name="fog"), "unknown corruption"), (dict(severity=0), "severity"),
    (dict(images=np.zeros((2, 8, 8, 3), dtype=np.float32)), "uint8"),
    (dict(images=np.zeros((8, 8, 3), dtype=np.uint8)), "N×H×W×C"),
])
def test_corrupt_rejects_bad_input(bad, match):
    args = dict(images=np.zeros((2, 8, 8, 3), dtype=np.uint8), name="contrast", severity=3) | bad
    with pytest.raises(ValueError, match=match):
        corrupt(**args)


# ------------------------------------------------------------------------------------ geometry
def test_negative_prototype_spread_by_hand():
    features = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    prototypes = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, -3.0]])
    # sample 0 (label 0): negatives at 2 and 3 → var 0.25, mean 2.5 → CV² 0.04
    # sample 1 (label 2): negatives at 1 and 2 → var 0.25, mean 1.5 → CV² 1/9
    out = negative_prototype_spread(features, prototypes, torch.tensor([0, 2]))
    assert out["proto_var"] == pytest.approx(0.25)
    assert out["proto_cv2"] == pytest.approx((0.04 + 1 / 9) / 2)
    equidistant = negative_prototype_spread(torch.zeros(1, 2), torch.tensor([[1.0, 0], [0, 1.0], [-1.0, 0]]),
                                            torch.tensor([0]))
    assert equidistant["proto_var"] == pytest.approx(0.0)


def test_zero_gradient_fraction_detects_a_saturated_softmax(trained, batch):
    from fedcal.robustness import zero_gradient_fraction

    space, x, y = batch
    assert zero_gradient_fraction(trained, x, y, space) < 0.2

    class Scaled(nn.Module):  # the same classifier with logits 10⁴ times larger: a saturated softmax
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, inputs):
            return 1e4 * self.inner(inputs)

    pred = predict_pixels(trained, x, space)
    right = pred == y
    frac = zero_gradient_fraction(Scaled(trained), x, y, space)
    # every correctly classified image's gradient vanishes in float32 (p_y rounds to 1)
    assert frac >= 0.95 * float(right.float().mean())
    # PGD on the cross-entropy is stopped by it; the CW margin (no softmax) is not
    pgd = _accuracy(Scaled(trained), adversarial_examples(Scaled(trained), x, y, space, 10, "pgd", BUDGET), y, space)
    cw = _accuracy(Scaled(trained), adversarial_examples(Scaled(trained), x, y, space, 10, "cw", BUDGET), y, space)
    assert cw < pgd - 0.3


# ------------------------------------------------------------------------------------ evaluation
def test_evaluate_robustness_reports_every_metric(trained, digits):
    spec = RobustnessSpec(eps=0.1, n_test=120)
    out = evaluate_robustness(trained, digits, spec)
    for key in ("accuracy", "ece", "sece", "clean_acc", "zero_grad_frac", "fgsm_acc", "pgd_acc", "pgd_targeted_success", "cw_acc",
                "corruption_acc", "proto_var", "proto_cv2", *(f"{c}_acc" for c in spec.corruptions)):
        assert key in out, key
    assert out["n_attacked"] == 120
    assert out["corruption_acc"] == pytest.approx(np.mean([out[f"{c}_acc"] for c in spec.corruptions]))
    assert 0 <= out["pgd_acc"] <= out["fgsm_acc"] <= out["clean_acc"] <= 1


def test_temperature_configs():
    base = RunConfig.from_flower(dict(dataset="digits", num_clients=4, clients_per_round=4, local_steps=3))
    cfgs = temperature_configs(base, [1, 10], [0, 1], ["federated", "centralised"])
    assert len(cfgs) == 8
    fed10 = [c for c in cfgs if c.num_clients == 4 and c.tau == 10]
    assert all(c.attack == "tsa" and c.num_attackers == 4 and not c.coupled for c in fed10)
    assert all(c.attack == "none" for c in cfgs if c.tau == 1)
    central = [c for c in cfgs if c.num_clients == 1]
    assert len(central) == 4 and all(c.local_steps == 12 and c.partition == "iid" for c in central)
    assert all(c.num_attackers == 1 for c in central if c.tau == 10)
    assert training_of(fed10[0]) == "all clients at τ, η=β"
    both = temperature_configs(base, [1, 10], [0], ["federated"], ["fixed", "coupled"])
    assert [(c.attack, c.coupled) for c in both] == [("none", True), ("tsa", False), ("tsa", True)]  # benign once
    assert training_of(both[2]) == "all clients at τ, η=β·τ"
    with pytest.raises(ValueError, match="unknown setting"):
        temperature_configs(base, [1], [0], ["decentralised"])
    with pytest.raises(ValueError, match="unknown coupling"):
        temperature_configs(base, [1], [0], ["federated"], ["adaptive"])


# ------------------------------------------------------------------------------------ the command
STUDY = ["dataset=digits", "num-clients=4", "clients-per-round=4", "num-rounds=2", "local-steps=3", "lr=0.05",
         "engine=inprocess", "--n-test", "60", "--steps", "5", "--no-progress"]


def test_robustness_command_trains_evaluates_caches_and_bridges(tmp_path, monkeypatch, capsys):
    out = tmp_path / "rob"
    assert main(["robustness", "--taus", "1,10", "--seeds", "0", "--report", str(out), *STUDY]) == 0
    runs = pd.read_csv(out / "robustness_runs.csv")
    assert sorted(runs["setting"]) == ["centralised", "centralised", "federated", "federated"]
    assert set(runs["tau"]) == {1.0, 10.0}
    summary = pd.read_csv(out / "robustness.csv")
    assert {"pgd_acc_mean", "pgd_acc_std", "corruption_acc_mean", "seeds"} <= set(summary.columns)
    md = (out / "robustness.md").read_text()
    assert "### federated, digits–mlp, fedavg" in md and "### centralised" in md and "PGD acc %" in md
    assert (out / "robustness.png").stat().st_size > 0
    run_dirs = sorted((out / "runs").iterdir())
    # one run, one number: the table reads each run's own final metrics, not a second evaluation of its model
    from fedcal.reports.runs import final_metrics

    finals = final_metrics(run_dirs).set_index("run_id")
    for r in runs.itertuples():
        assert (r.accuracy, r.sece) == (finals.loc[r.run, "accuracy"], finals.loc[r.run, "sece"])
    caches = [list((d / "robustness").glob("*.json")) for d in run_dirs]
    assert all(len(c) == 1 for c in caches)
    cached = json.loads(caches[0][0].read_text())
    assert cached["spec"]["steps"] == 5 and "pgd_acc" in cached["metrics"]

    # a second report reuses every cached evaluation (nothing is trained or attacked again)
    import fedcal.robustness.runs as rob

    monkeypatch.setattr(rob, "evaluate_robustness", lambda *a, **k: pytest.fail("re-evaluated a cached model"))
    assert main(["robustness", "--taus", "1,10", "--seeds", "0", "--report", str(out), *STUDY]) == 0
    again = pd.read_csv(out / "robustness_runs.csv")
    pd.testing.assert_frame_equal(runs, again)

    monkeypatch.undo()

    # the bridge: finished runs evaluated as they are, here re-evaluated (--force) two at a time in
    # worker processes: the same numbers as the first, serial evaluation
    assert main(["robustness", "--runs", *map(str, run_dirs), "--report", str(tmp_path / "bridge"), "--force",
                 "--jobs", "2", "--n-test", "60", "--steps", "5", "--no-progress"]) == 0
    bridge = pd.read_csv(tmp_path / "bridge" / "robustness_runs.csv")
    pd.testing.assert_frame_equal(bridge.sort_values("run").reset_index(drop=True),
                                  runs.sort_values("run").reset_index(drop=True))

    # a model that cannot be attacked (non-finite weights) is named and left out; the others stay
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(run_dirs[0], broken)
    state = torch.load(broken / "model.pt")
    torch.save({k: torch.full_like(v, float("nan")) for k, v in state.items()}, broken / "model.pt")
    capsys.readouterr()
    code = main(["robustness", "--runs", str(broken), str(run_dirs[1]), "--report", str(tmp_path / "b2"), "--force",
                 "--n-test", "60", "--steps", "5", "--no-progress"])
    assert code == 1
    assert "broken left out of the table: ValueError: the model produces non-finite logits" in capsys.readouterr().err
    assert list(pd.read_csv(tmp_path / "b2" / "robustness_runs.csv")["run"]) == [run_dirs[1].name]


def test_evaluate_run_refuses_unfinished_and_modelless_runs(tmp_path, trained):
    from fedcal.results import RunStore, UnfinishedRunError

    cfg = RunConfig.from_flower(dict(dataset="digits", output_dir=str(tmp_path)))
    store = RunStore(tmp_path / "r", cfg)
    store.start()
    spec = RobustnessSpec(eps=0.1, n_test=10)
    with pytest.raises(UnfinishedRunError):
        evaluate_run(tmp_path / "r", spec)
    store.log_round(0, {"accuracy": 0.1})
    store.finish()
    with pytest.raises(FileNotFoundError, match="model.pt"):
        evaluate_run(tmp_path / "r", spec)


def test_rejected_rounds_counts_rounds_that_kept_the_model(tmp_path):
    from fedcal.reports.robustness import rejected_rounds
    from fedcal.results import RunStore

    store = RunStore(tmp_path / "r", RunConfig.from_flower(dict(dataset="digits")))
    store.start()
    store.log_round(0, {"accuracy": 0.1})
    for rnd, accepted in ((1, 5), (2, 0), (3, 2), (4, 0)):
        store.log_round(rnd, {"replies_received": 5, "replies_accepted": accepted, "replies_rejected": 5 - accepted})
    store.finish()
    assert rejected_rounds(tmp_path / "r") == 2  # rounds 2 and 4 aggregated nothing


@pytest.mark.parametrize("args, message", [
    (["--attacks", "pgd,deepfool"], "unknown attack 'deepfool'"),
    (["--corruptions", "fog"], "unknown corruption 'fog'"),
    (["--eps", "0"], "epsilon"), (["--steps", "0"], "steps"),
    (["--settings", "federated,decentralised"], "unknown setting 'decentralised'"),
    (["--coupling", "fixed,adaptive"], "unknown coupling 'adaptive'"),
])
def test_robustness_command_bad_input(tmp_path, capsys, args, message):
    code = main(["robustness", "--taus", "1", "--seeds", "0", "--settings", "federated", "--report",
                 str(tmp_path / "r"), *STUDY, *args])
    assert code == 2
    assert message in capsys.readouterr().err


def test_robustness_command_refuses_a_directory_without_a_run_or_a_model(tmp_path, capsys):
    assert main(["robustness", "--runs", str(tmp_path), "--report", str(tmp_path / "r")]) == 2
    assert "no config.json" in capsys.readouterr().err
    from fedcal.results import RunStore

    cfg = RunConfig.from_flower(dict(dataset="digits", output_dir=str(tmp_path)))
    store = RunStore(tmp_path / "old", cfg)
    store.start()
    store.log_round(0, {"accuracy": 0.1})
    store.finish()
    assert main(["robustness", "--runs", str(tmp_path / "old"), "--report", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "finished run without a final model (model.pt" in err and "old" in err


def test_the_robustness_table_reads_each_runs_own_final_metrics(tmp_path, monkeypatch):
    """One run, one number: the clean accuracy and calibration a robustness table shows are those the run
    stored (its last round's evaluation), not a second evaluation of its model, which another batch order
    or thread count moves (46.91 % here against 46.92 % in the τ table was one run under one id)."""
    import fedcal.reports.robustness as rob
    from fedcal.results import RunStore, run_dir_for

    cfg = RunConfig(dataset="synthetic", output_dir=str(tmp_path), num_rounds=2, eval_every=1)
    store = RunStore(run_dir_for(cfg), cfg)
    store.start()
    for rnd, acc in ((0, 0.30), (1, 0.50), (2, 0.4692)):
        store.log_round(rnd, {"accuracy": acc, "ece": 0.1, "sece": -0.1, "brier": 0.2, "nll": 0.3})
    store.finish()
    again = {"accuracy": 0.4691, "ece": 0.11, "sece": -0.11, "brier": 0.21, "nll": 0.31, "pgd_acc": 0.05}
    monkeypatch.setattr(rob, "evaluate_runs", lambda dirs, *a, **k: ({str(d): dict(again) for d in dirs}, {}))
    t = rob.robustness_table([run_dir_for(cfg)], RobustnessSpec(eps=0.1, n_test=60))
    row = t.iloc[0]
    assert (row["accuracy"], row["ece"], row["sece"], row["brier"], row["nll"]) == (0.4692, 0.1, -0.1, 0.2, 0.3)
    assert row["pgd_acc"] == 0.05  # what only the robustness evaluation measures stays its own
