import torch

from fedcal.attacks import Behaviour, attackers_of, behaviour_for, client_round, flip_labels, select_attackers
from fedcal.config import RunConfig
from fedcal.data import synthetic_dataset
from fedcal.models import build_model


def test_default_selects_13_of_50_seeded_and_fixed():
    cfg = RunConfig()
    a = attackers_of(cfg)
    assert len(a) == 13 and all(0 <= i < 50 for i in a)
    assert a == attackers_of(RunConfig())  # chosen once per run: same seed → same set
    assert a == attackers_of(cfg.replace(tau=5.0))  # τ does not change who attacks
    assert a != attackers_of(cfg.replace(seed=1))


def test_attacker_selection_is_uniform_over_seeds():
    counts = torch.zeros(10)
    for s in range(2000):
        for i in select_attackers(10, 3, s):
            counts[i] += 1
    freq = counts / 2000
    assert torch.allclose(freq, torch.full((10,), 0.3), atol=0.04)


def test_behaviours_follow_config():
    cfg = RunConfig(attack="tsa", tau=5.0)
    bad = sorted(attackers_of(cfg))
    good = sorted(set(range(50)) - set(bad))
    assert behaviour_for(cfg, bad[0]) == Behaviour("tsa", tau=5.0, coupled=True)
    assert behaviour_for(cfg, good[0]).kind == "benign"
    assert behaviour_for(cfg.replace(attack="noise", noise_sigma=0.05), bad[0]).noise_sigma == 0.05
    assert behaviour_for(cfg.replace(attack="labelflip", flip_shift=3), bad[0]).flip_shift == 3
    assert all(behaviour_for(cfg.replace(attack="none"), i).kind == "benign" for i in range(50))


def test_flip_labels():
    assert flip_labels(torch.tensor([0, 1, 9]), 2, 10).tolist() == [2, 3, 1]


def _round(kind_cfg, behaviour):
    ds = synthetic_dataset(n_train=100, n_test=5)
    m = build_model("mlp", ds.input_shape, ds.num_classes, seed=0)
    start = [p.detach().clone() for p in m.parameters()]
    client_round(m, ds.x_train, ds.y_train, ds.num_classes, behaviour, kind_cfg, server_round=1, client_id=0)
    return torch.cat([(p - s).flatten() for p, s in zip(m.parameters(), start)]).detach()


def test_noise_injection_adds_gaussian_of_sigma_to_update():
    cfg = RunConfig(dataset="synthetic", local_steps=2, batch_size=16, lr=0.01)
    benign = _round(cfg, Behaviour())
    noisy = _round(cfg, Behaviour("noise", noise_sigma=0.1))
    eps = noisy - benign  # same seeded batches: the difference is exactly the noise
    assert abs(float(eps.std()) - 0.1) < 0.005
    assert abs(float(eps.mean())) < 0.005


def test_client_rounds_are_reproducible():
    cfg = RunConfig(dataset="synthetic", local_steps=3, batch_size=16)
    assert torch.equal(_round(cfg, Behaviour("tsa", tau=5.0)), _round(cfg, Behaviour("tsa", tau=5.0)))
