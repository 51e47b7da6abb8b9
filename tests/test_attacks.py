import pytest
import torch

from fedcal.attacks import AttackSpec, LocalRoundSpec
from fedcal.attacks import (
    BEHAVIOURS,
    BENIGN,
    Behaviour,
    BehaviourKind,
    LabelFlipping,
    NoiseInjection,
    TemperatureScalingAttack,
    attackers_of,
    behaviour_for,
    behaviour_kind,
    client_round,
    flip_labels,
    kind_for_attack,
    round_generator,
    select_attackers,
    stealth_variants,
)
from fedcal import catalogue
from fedcal.config import RunConfig
from fedcal.data import synthetic_dataset
from fedcal.models import build_model


def test_default_selects_13_of_50_seeded_and_fixed():
    cfg = RunConfig()
    a = attackers_of(AttackSpec.from_config(cfg))
    assert len(a) == 13 and all(0 <= i < 50 for i in a)
    assert a == attackers_of(AttackSpec.from_config(RunConfig()))  # chosen once per run: same seed → same set
    assert a == attackers_of(AttackSpec.from_config(cfg.replace(tau=5.0)))  # τ does not change who attacks
    assert a != attackers_of(AttackSpec.from_config(cfg.replace(seed=1)))


def test_attacker_selection_is_uniform_over_seeds():
    counts = torch.zeros(10)
    for s in range(2000):
        for i in select_attackers(10, 3, s):
            counts[i] += 1
    freq = counts / 2000
    assert torch.allclose(freq, torch.full((10,), 0.3), atol=0.04)


def test_behaviours_follow_config():
    cfg = RunConfig(attack="tsa", tau=5.0)
    bad = sorted(attackers_of(AttackSpec.from_config(cfg)))
    good = sorted(set(range(50)) - set(bad))
    # the attacker's behaviour holds TSA's own parameters (its keys), none of another attack's
    assert behaviour_for(AttackSpec.from_config(cfg), bad[0]) == Behaviour("tsa", tau=5.0, coupled=True, step_frac=1.0,
                                                                           blend=1.0, duty=1.0)
    assert AttackSpec.from_config(cfg).params == (("tau", 5.0), ("coupled", True), ("tsa_step_frac", 1.0),
                                                  ("tsa_blend", 1.0), ("tsa_duty", 1.0))
    with pytest.raises(AttributeError, match="attack 'tsa' has no key 'noise_sigma'"):
        AttackSpec.from_config(cfg).noise_sigma
    with pytest.raises(AttributeError, match="behaviour 'tsa' sets no parameter 'noise_sigma'"):
        behaviour_for(AttackSpec.from_config(cfg), bad[0]).noise_sigma
    assert behaviour_for(AttackSpec.from_config(cfg), good[0]).kind == "benign"
    assert behaviour_for(AttackSpec.from_config(cfg.replace(attack="noise", noise_sigma=0.05)), bad[0]).noise_sigma == 0.05
    assert behaviour_for(AttackSpec.from_config(cfg.replace(attack="labelflip", flip_shift=3)), bad[0]).flip_shift == 3
    assert all(behaviour_for(AttackSpec.from_config(cfg.replace(attack="none")), i).kind == "benign" for i in range(50))


def test_flip_labels():
    assert flip_labels(torch.tensor([0, 1, 9]), 2, 10).tolist() == [2, 3, 1]


def _round(kind_cfg, behaviour):
    ds = synthetic_dataset(n_train=100, n_test=5)
    m = build_model("mlp", ds.input_shape, ds.num_classes, seed=0)
    start = [p.detach().clone() for p in m.parameters()]
    client_round(m, ds.x_train, ds.y_train, ds.num_classes, behaviour, LocalRoundSpec.from_config(kind_cfg), server_round=1, client_id=0)
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


# ---------------------------------------------------------------------------- random streams (pinned)
def test_random_streams_are_pinned():
    """Attacker choice and round generators are part of every committed result: pin them."""
    assert sorted(select_attackers(50, 13, 0)) == [2, 8, 10, 12, 16, 17, 21, 23, 24, 25, 31, 40, 42]
    assert round_generator(0, 1, 2).initial_seed() == 8813330156778602405
    assert round_generator(3, 7, 11, "noise").initial_seed() == 8691112110512573954
    assert torch.randint(0, 1000, (5,), generator=round_generator(0, 1, 2)).tolist() == [943, 782, 268, 301, 62]


# ---------------------------------------------------------------------------- the behaviour registry
def test_every_config_attack_has_one_behaviour():
    ATTACKS = catalogue.names("attack")
    assert {kind.attack for kind in BEHAVIOURS.values()} == set(ATTACKS)
    assert len({kind.attack for kind in BEHAVIOURS.values()}) == len(BEHAVIOURS)  # one kind per attack name
    assert all(key == kind.kind for key, kind in BEHAVIOURS.items())
    assert kind_for_attack("none") is BEHAVIOURS["benign"]
    for attack in ATTACKS:
        cfg = RunConfig(attack=attack, tau=5.0, noise_sigma=0.05, flip_shift=2)
        attacker = min(attackers_of(AttackSpec.from_config(cfg))) if cfg.num_attackers else 0
        b = behaviour_for(AttackSpec.from_config(cfg), attacker)
        assert b.kind in BEHAVIOURS and kind_for_attack(attack).kind == b.kind
        assert b.malicious == (attack != "none")


def test_registry_kinds_are_findable_by_name():
    assert isinstance(BEHAVIOURS["tsa"], TemperatureScalingAttack)
    assert isinstance(BEHAVIOURS["noise"], NoiseInjection)
    assert isinstance(BEHAVIOURS["labelflip"], LabelFlipping)
    assert type(BEHAVIOURS["benign"]) is BehaviourKind
    assert BEHAVIOURS["tsa"].loss_temperature(Behaviour("tsa", tau=0.2, coupled=False)) == (0.2, False)
    assert BEHAVIOURS["benign"].loss_temperature(BENIGN) == (1.0, True)
    y = torch.tensor([0, 4, 9])
    assert BEHAVIOURS["labelflip"].train_labels(Behaviour("labelflip", flip_shift=3), y, 10).tolist() == [3, 7, 2]
    assert BEHAVIOURS["tsa"].train_labels(Behaviour("tsa", tau=5.0), y, 10) is y


def test_stealth_variants_come_from_the_registry():
    from fedcal.analysis import default_variants

    v = stealth_variants()
    assert default_variants() == v
    assert list(v) == [name for kind in BEHAVIOURS.values() for name in kind.variants()]
    for kind in BEHAVIOURS.values():
        assert all(b.kind == kind.kind for b in kind.variants().values())
    assert BEHAVIOURS["benign"].variants() == {}


def test_registry_rejects_unknown_names_and_bad_parameters():
    with pytest.raises(ValueError, match="unknown kind 'bogus'"):
        behaviour_kind("bogus")
    with pytest.raises(ValueError, match="unknown attack 'bogus'"):
        kind_for_attack("bogus")
    with pytest.raises(ValueError, match="noise_sigma"):
        BEHAVIOURS["noise"].check(Behaviour("noise", noise_sigma=-1.0))
    with pytest.raises(ValueError, match="tau"):
        BEHAVIOURS["tsa"].check(Behaviour("tsa", tau=float("inf")))
    ds = synthetic_dataset(n_train=20, n_test=2)
    m = build_model("mlp", ds.input_shape, ds.num_classes, seed=0)
    with pytest.raises(ValueError, match="unknown kind"):
        client_round(m, ds.x_train, ds.y_train, ds.num_classes, Behaviour("bogus"),
                     LocalRoundSpec.from_config(RunConfig(dataset="synthetic")),
                     server_round=1, client_id=0)
