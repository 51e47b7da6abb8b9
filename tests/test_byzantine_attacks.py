"""The model-poisoning attacks of Byzantine-robust FL (ALIE, IPM, Min-Max, Min-Sum, Fang, and ByzFL's
sign flipping, Mimic and Inf) and the
pixel-pattern backdoor: hand-computed values on small updates, invariants, closed forms as second
implementations, and ByzFL's ALIE / IPM / sign flipping / Mimic / Inf where installed."""

from __future__ import annotations

import doctest
import functools
import importlib
import math
import statistics

import numpy as np
import pytest
import torch

from fedcal import aggregate as A
from fedcal import attacks as T
from fedcal.attacks.fang import fang_krum_lambda_max
from fedcal.attacks.minmax import min_max_gamma, min_sum_gamma
from fedcal.data import pixel_space


def t64(rows):
    return torch.tensor(rows, dtype=torch.float64)


def rand(n, d, seed=0, dtype=torch.float64):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def phi_inv(p: float) -> float:
    return statistics.NormalDist().inv_cdf(p)


# --------------------------------------------------------------------------------------------
# ALIE
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, f, s", [(50, 10, 16), (10, 3, 3), (25, 6, 7), (5, 2, 1), (10, 5, 1), (7, 0, 4)])
def test_alie_z_is_the_papers(n, f, s):
    # s = ⌊n/2 + 1⌋ − f supporters, z = Φ⁻¹((n − s) / n)
    assert math.floor(n / 2 + 1) - f == s
    assert math.isclose(T.alie_z(n, f), phi_inv((n - s) / n), rel_tol=1e-12, abs_tol=1e-15)


def test_alie_z_refuses_a_majority_of_attackers():
    with pytest.raises(ValueError, match="f ≤ ⌊n/2⌋"):
        T.alie_z(10, 6)


def test_alie_by_hand():
    honest = t64([[0.0, 1.0, -3.0], [2.0, 1.0, 0.0], [4.0, 1.0, 3.0]])
    # column means 2, 1, 0; sample standard deviations 2, 0, 3
    out = T.alie(honest, f=2, z=1.0)
    assert torch.equal(out, t64([[0.0, 1.0, -3.0], [0.0, 1.0, -3.0]]))
    # default z: n = 3 + 2 = 5, s = ⌊3.5⌋ − 2 = 1, z = Φ⁻¹(4/5)
    z = phi_inv(0.8)
    assert torch.allclose(T.alie(honest, f=2), t64([[2 - 2 * z, 1.0, -3 * z]] * 2), atol=1e-12)


def test_alie_stays_within_the_honest_range_for_z_up_to_one_over_sqrt_n():
    for seed in range(5):
        honest = rand(9, 40, seed=seed) ** 3  # skewed columns
        out = T.alie(honest, f=3, z=1 / math.sqrt(9))
        assert bool((out >= honest.amin(0) - 1e-12).all() and (out <= honest.amax(0)).all())
    # the bound is tight: one value of 1 among zeros sits exactly at μ − σ/√n = min
    tight = t64([[0.0]] * 9 + [[1.0]])
    assert math.isclose(float(T.alie(tight, 1, z=1 / math.sqrt(10))[0, 0]), 0.0, abs_tol=1e-12)
    assert float(T.alie(tight, 1, z=1.1 / math.sqrt(10))[0, 0]) < 0.0


@pytest.mark.parametrize("kwargs, match", [
    ({"honest": t64([[1.0, 2.0]]), "f": 1, "z": 1.0}, "at least 2 honest"),
    ({"honest": t64([[1.0], [2.0]]), "f": 1, "z": float("inf")}, "z must be finite"),
    ({"honest": t64([[1.0], [2.0]]), "f": -1, "z": 1.0}, "f must be"),
])
def test_alie_refuses_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        T.alie(**kwargs)


# --------------------------------------------------------------------------------------------
# IPM
# --------------------------------------------------------------------------------------------
def test_ipm_by_hand_and_its_inner_product_is_negative():
    honest = t64([[1.0, 2.0], [3.0, 4.0]])
    assert torch.equal(T.ipm(honest, f=3, epsilon=0.5), t64([[-1.0, -1.5]] * 3))
    for seed in range(5):
        h = rand(8, 30, seed=seed) + 0.1
        mu = h.mean(0)
        m = T.ipm(h, 2, epsilon=0.3)[0]
        assert math.isclose(float(m @ mu), -0.3 * float(mu @ mu), rel_tol=1e-12)
        assert float(m @ mu) < 0


@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan")])
def test_ipm_refuses_a_non_positive_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        T.ipm(rand(3, 2), 1, epsilon=eps)


# --------------------------------------------------------------------------------------------
# Min-Max / Min-Sum
# --------------------------------------------------------------------------------------------
def test_min_max_and_min_sum_by_hand():
    honest = t64([[0.0], [0.0], [3.0]])  # μ = 1, unit direction p = +1, a = μ − x = (1, 1, −2)
    # Min-Max: max_i (a_i − γ)² = (2 + γ)² ≤ max pairwise 9 → γ* = 1, m = 0
    assert abs(min_max_gamma(honest) - 1.0) <= 1e-5
    # Min-Sum: Σ (a_i − γ)² = 6 + 3γ² ≤ max_i Σ_j (x_i − x_j)² = 18 → γ* = 2, m = −1
    assert abs(min_sum_gamma(honest) - 2.0) <= 1e-5
    # the authors' code bounds by the smallest sum, 9 → γ* = 1
    assert abs(min_sum_gamma(honest, bound="min") - 1.0) <= 1e-5
    assert torch.allclose(T.min_max(honest, 2), t64([[0.0], [0.0]]), atol=1e-5)
    assert torch.allclose(T.min_sum(honest, 1), t64([[-1.0]]), atol=1e-5)


def test_min_max_two_dimensional_by_hand():
    # x = (0,0), (2,0), (0,2): μ = (2/3, 2/3), p = μ/‖μ‖ = (1,1)/√2; the bound is the largest
    # pairwise distance², 8. The farthest point from μ − γp along −(1,1) is (2,0) or (0,2):
    # ‖(2/3 − γ/√2 − 2, 2/3 − γ/√2)‖² = 8 → with u = 2/3 − γ/√2: (u − 2)² + u² = 8 → u = 1 − √3
    honest = t64([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]])
    gamma = (2 / 3 - (1 - math.sqrt(3))) * math.sqrt(2)
    assert abs(min_max_gamma(honest, tol=1e-9) - gamma) <= 1e-9


def _closed_form_gammas(x: np.ndarray, p: np.ndarray):
    """Independent γ*: the largest roots of the constraints' quadratics, in numpy."""
    mu = x.mean(0)
    a = mu - x
    A_, B_, P = (a * a).sum(1), a @ p, float(p @ p)
    D = np.array([[((xi - xj) ** 2).sum() for xj in x] for xi in x])
    gmax = float(np.min((B_ + np.sqrt(B_ ** 2 - P * (A_ - D.max()))) / P))
    n = len(x)
    gsum = math.sqrt((D.sum(1).max() - A_.sum()) / (n * P))  # Σ a_i = 0: no linear term
    return gmax, gsum


@pytest.mark.parametrize("direction", ["unit", "std", "sign"])
def test_min_max_and_min_sum_match_the_closed_form_and_are_tight_to_the_tolerance(direction):
    tol = 1e-6
    for seed in range(3):
        x = rand(7, 25, seed=seed) + 0.2
        xn = x.numpy()
        mu = xn.mean(0)
        p = {"unit": mu / np.linalg.norm(mu), "std": xn.std(0, ddof=1), "sign": np.sign(mu)}[direction]
        gmax, gsum = _closed_form_gammas(xn, p)
        g1, g2 = min_max_gamma(x, direction, tol=tol), min_sum_gamma(x, direction, tol=tol)
        assert g1 <= gmax + 1e-12 and gmax < g1 + tol and g2 <= gsum + 1e-12 and gsum < g2 + tol
        # the bound holds at γ and fails at γ + tol, measured directly on the rows
        bound = max(float(((xi - xj) ** 2).sum()) for xi in x for xj in x)
        assert float(((mu - g1 * p - xn) ** 2).sum(1).max()) <= bound * (1 + 1e-12)
        assert float(((mu - (g1 + tol) * p - xn) ** 2).sum(1).max()) > bound
        m = T.min_max(x, 2, direction, tol=tol)
        assert m.shape == (2, 25) and torch.allclose(m[0], torch.from_numpy(mu - g1 * p))


def test_min_max_finds_gamma_beyond_the_reference_codes_cap():
    # the authors' search starts at 10 and cannot pass 20; a wide honest spread needs more
    x = rand(6, 10, seed=4) * 100
    gmax, _ = _closed_form_gammas(x.numpy(), (x.mean(0) / x.mean(0).norm()).numpy())
    assert gmax > 20
    assert abs(min_max_gamma(x) - gmax) <= 1e-5


def test_min_max_with_no_direction_sends_the_mean():
    same = t64([[1.0, -2.0]] * 4)  # σ = 0: the std direction is zero; identical rows: bound 0
    assert min_max_gamma(same, "std") == 0.0
    assert torch.equal(T.min_max(same, 1, "std"), t64([[1.0, -2.0]]))
    assert torch.allclose(T.min_sum(same, 1, "unit"), t64([[1.0, -2.0]]), atol=1e-5)
    zero_mean = t64([[1.0, 1.0], [-1.0, -1.0]])
    assert torch.equal(T.min_max(zero_mean, 1, "unit"), t64([[0.0, 0.0]]))


@pytest.mark.parametrize("kwargs, match", [
    ({"direction": "up"}, "unknown direction"), ({"tol": 0.0}, "tol"), ({"bound": "mean"}, "bound"),
])
def test_min_sum_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        T.min_sum(rand(4, 3), 1, **kwargs)


# --------------------------------------------------------------------------------------------
# Fang
# --------------------------------------------------------------------------------------------
def test_fang_trimmed_mean_intervals_by_hand():
    # columns: s>0 with min>0 | s>0 with min≤0 | s<0 with max>0 | s<0 with max≤0 | s=0
    honest = t64([[1.0, -1.0, 1.0, -1.0, 1.0],
                  [3.0, 4.0, -4.0, -3.0, -1.0]])
    lo = t64([0.5, -2.0, 1.0, -1.0, 0.0])  # [min/2, min] | [2·min, min] | [max, 2·max] | [max, max/2] | 0
    hi = t64([1.0, -1.0, 2.0, -0.5, 0.0])
    out = T.fang_trimmed_mean(honest, f=2000, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2000, 5)
    assert bool((out >= lo).all() and (out <= hi).all())
    span = hi - lo
    assert torch.allclose(out.amin(0), lo, atol=0.01) and torch.allclose(out.amax(0), hi, atol=0.01)
    assert torch.allclose(out.mean(0), (lo + hi) / 2, atol=0.03)  # uniform on each interval
    assert bool((span[:4] > 0).all())


def test_fang_trimmed_mean_drags_trimmed_mean_and_median_against_the_honest_direction():
    for seed in range(3):
        honest = rand(12, 60, seed=seed) + 0.3 * torch.sign(rand(1, 60, seed=seed + 100))
        s = torch.sign(honest.mean(0))
        f = 4
        mal = T.fang_trimmed_mean(honest, f, generator=torch.Generator().manual_seed(seed))
        both = torch.cat([honest, mal])
        assert bool(((A.trimmed_mean(both, f) - A.trimmed_mean(honest, f)) * s < 0).all())
        assert bool(((A.coordinate_median(both) - A.coordinate_median(honest)) * s < 0).all())


def test_fang_trimmed_mean_is_seeded():
    h = rand(5, 7, seed=1)
    one = T.fang_trimmed_mean(h, 3, generator=torch.Generator().manual_seed(4))
    assert torch.equal(one, T.fang_trimmed_mean(h, 3, generator=torch.Generator().manual_seed(4)))
    assert not torch.equal(one, T.fang_trimmed_mean(h, 3, generator=torch.Generator().manual_seed(5)))
    with pytest.raises(ValueError, match="b must be"):
        T.fang_trimmed_mean(h, 3, b=1.0)


def test_fang_krum_by_hand_success():
    # n_h = 4, f = 2 (n = 6); Krum counts n − f − 2 = 2 neighbours. λ_max: nearest-2 honest
    # distance sums (6, 4, 4, 6) → min 4, over (n − 2f − 1)√d = 1; plus max |x| / √d = 5 → 9.
    honest = t64([[-1.0], [1.0], [3.0], [5.0]])
    assert math.isclose(fang_krum_lambda_max(honest, 2), 9.0, rel_tol=1e-12)
    # s = sign(2) = +1, attack −λ. λ = 9: attack score 0 + 8² = 64 > best honest 8 (fails);
    # λ = 4.5: 3.5² = 12.25 > 8 (fails); λ = 2.25: 1.25² = 1.5625 < every honest score → chosen
    out = T.fang_krum(honest, 2)
    assert torch.equal(out, t64([[-2.25], [-2.25]]))
    assert int(A.multikrum_select(torch.cat([honest, out]), 2, m=1)[0]) >= 4  # fedcal's Krum picks it


def test_fang_krum_by_hand_when_krum_never_picks_it():
    # n_h = 3, f = 1: λ_max = 1/(1·1)·1 + 4/1 = 5 (nearest distances 1, 1, 2); Krum's single
    # neighbour makes the attack's score (1 + λ)² > 1 for every λ > 0, so λ halves below 1e-5:
    # 5 / 2^19 is the first value under it
    honest = t64([[1.0], [2.0], [4.0]])
    assert math.isclose(fang_krum_lambda_max(honest, 1), 5.0, rel_tol=1e-12)
    assert torch.equal(T.fang_krum(honest, 1), t64([[-5.0 / 2 ** 19]]))


def test_fang_krum_is_picked_by_krum_on_random_updates():
    for seed in range(3):
        honest = rand(15, 40, seed=seed) * 0.1 + 0.05
        out = T.fang_krum(honest, 4)
        assert out.shape == (4, 40) and bool((out.abs() > 0).all())
        assert int(A.multikrum_select(torch.cat([honest, out]), 4, m=1)[0]) >= 15
        s = torch.sign(honest.mean(0))
        assert bool((out[0] * s < 0).all())  # against the honest direction in every coordinate


def test_fang_krum_refuses_too_many_attackers():
    with pytest.raises(ValueError, match="n − 2f − 1 > 0"):
        T.fang_krum(rand(4, 3), 3)
    with pytest.raises(ValueError, match="at least 3 honest"):
        T.fang_krum(rand(2, 3), 1)
    assert T.fang_krum(rand(4, 3), 0).shape == (0, 3)


# --------------------------------------------------------------------------------------------
# ByzFL's baselines: sign flipping, Mimic, Inf
# --------------------------------------------------------------------------------------------
BASE = t64([[1.0, -2.0, 0.5], [3.0, 4.0, 0.5], [-1.0, 1.0, 2.0]])  # column means 1, 1, 1


def test_sign_flipping_by_hand_is_ipm_at_epsilon_one():
    assert torch.equal(T.sign_flipping(BASE, 2), t64([[-1.0, -1.0, -1.0]] * 2))
    h = rand(7, 5, seed=4)
    assert torch.allclose(T.sign_flipping(h, 3), T.ipm(h, 3, epsilon=1.0), atol=0, rtol=0)
    assert T.sign_flipping(BASE, 0).shape == (0, 3)


@pytest.mark.parametrize("target", [0, 1, 2])
def test_mimic_copies_the_target_update(target):
    out = T.mimic(BASE, 2, target=target)
    assert torch.equal(out, BASE[target].expand(2, 3))
    out[0, 0] = 99.0  # a copy, not a view of the honest updates
    assert BASE[target, 0] != 99.0


@pytest.mark.parametrize("target, match", [(3, "not one of the round's 3 honest"), (-1, "≥ 0"), (0.5, "integer")])
def test_mimic_refuses_a_target_outside_the_round(target, match):
    with pytest.raises(ValueError, match=match):
        T.mimic(BASE, 1, target=target)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inf_is_positive_infinity_everywhere_in_the_honest_dtype(dtype):
    out = T.inf(BASE.to(dtype), 2)
    assert out.shape == (2, 3) and out.dtype == dtype and bool((out == float("inf")).all())


def test_an_inf_reply_makes_the_plain_rules_non_finite():
    # why the server must drop it before aggregating (fedcal's strategies do: test_byzantine_wiring)
    rows = torch.cat([BASE, T.inf(BASE, 1)])
    assert not torch.isfinite(rows.mean(0)).any()


# --------------------------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------------------------
def test_registry_names_and_dispatch():
    assert list(T.POISONING) == ["alie", "ipm", "minmax", "minsum", "fang-trmean", "fang-krum", "signflip", "mimic",
                                 "inf", "opt-alie", "opt-ipm"]
    assert all(name == attack.name for name, attack in T.POISONING.items())
    h = rand(10, 6, seed=3) + 0.2
    assert torch.equal(T.craft_malicious("alie", h, 3, z=0.7), T.alie(h, 3, z=0.7))
    assert torch.equal(T.craft_malicious("ipm", h, 2, generator=torch.Generator()), T.ipm(h, 2))
    g = torch.Generator().manual_seed(9)
    assert torch.equal(T.craft_malicious("fang-trmean", h, 3, generator=g),
                       T.fang_trimmed_mean(h, 3, generator=torch.Generator().manual_seed(9)))
    assert torch.equal(T.craft_malicious("mimic", h, 2, generator=g, target=4), T.mimic(h, 2, target=4))
    assert torch.equal(T.craft_malicious("signflip", h, 2), T.sign_flipping(h, 2))
    assert torch.equal(T.craft_malicious("opt-alie", h, 2, aggregate=A.coordinate_median),
                       T.optimal_alie(h, 2, A.coordinate_median))
    assert torch.equal(T.craft_malicious("ipm", h, 2, aggregate=A.coordinate_median), T.ipm(h, 2))  # ignored
    with pytest.raises(ValueError, match="give aggregate="):
        T.craft_malicious("opt-ipm", h, 1)
    with pytest.raises(ValueError, match="unknown model-poisoning attack 'lie'"):
        T.craft_malicious("lie", h, 1)


ALL = ["alie", "ipm", "minmax", "minsum", "fang-trmean", "fang-krum", "signflip", "mimic", "inf", "opt-alie", "opt-ipm"]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("f", [0, 1, 3])
def test_every_attack_returns_f_rows_of_the_honest_dtype(name, f):
    h = rand(9, 5, seed=f, dtype=torch.float32) + 0.1
    out = T.craft_malicious(name, h, f, generator=torch.Generator().manual_seed(0), aggregate=A.coordinate_median)
    # every attack but Inf (whose point is to be non-finite) crafts finite updates
    assert out.shape == (f, 5) and out.dtype == torch.float32
    assert bool(torch.isfinite(out).all()) == (name != "inf" or f == 0)


@pytest.mark.parametrize("name", ALL)
def test_every_attack_validates_the_honest_updates(name):
    with pytest.raises(ValueError, match="NaN or Inf"):
        T.craft_malicious(name, t64([[1.0, float("nan")], [0.0, 1.0], [1.0, 1.0]]), 1, aggregate=A.fedavg)
    with pytest.raises(ValueError, match="2-D"):
        T.craft_malicious(name, torch.zeros(4), 1, aggregate=A.fedavg)


@pytest.mark.parametrize("module", ["alie", "ipm", "minmax", "fang", "baselines", "optimal", "backdoor"])
def test_docstring_examples_run(module):
    mod = importlib.import_module(f"fedcal.attacks.{module}")
    result = doctest.testmod(mod, extraglobs={"torch": torch})
    assert result.attempted > 0 and result.failed == 0


# --------------------------------------------------------------------------------------------
# ByzFL (not a dependency: pip install byzfl)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("z", [0.0, 0.5, 1.5])
def test_alie_matches_byzfl(z):
    byzfl = pytest.importorskip("byzfl")
    h = rand(12, 30, seed=int(10 * z), dtype=torch.float32)
    # ByzFL's ALIE is μ + τσ (sample σ): fedcal's μ − zσ is theirs at τ = −z
    assert torch.allclose(T.alie(h, 3, z=z)[0], byzfl.ALittleIsEnough(tau=-z)(h), atol=1e-6)


@pytest.mark.parametrize("eps", [0.1, 2.0])
def test_ipm_matches_byzfl(eps):
    byzfl = pytest.importorskip("byzfl")
    h = rand(12, 30, seed=3, dtype=torch.float32)
    assert torch.allclose(T.ipm(h, 2, epsilon=eps)[0], byzfl.InnerProductManipulation(tau=eps)(h), atol=1e-6)


@pytest.mark.parametrize("target", [0, 5])
def test_sign_flipping_mimic_and_inf_match_byzfl(target):
    byzfl = pytest.importorskip("byzfl")
    h = rand(12, 30, seed=target, dtype=torch.float32)
    assert torch.allclose(T.sign_flipping(h, 3)[0], byzfl.SignFlipping()(h), atol=1e-6)
    assert torch.equal(T.mimic(h, 2, target=target)[0], byzfl.Mimic(epsilon=target)(h))
    theirs = byzfl.Inf()(h)
    assert torch.equal(T.inf(h, 1)[0].double(), torch.as_tensor(theirs).double())


# --------------------------------------------------------------------------------------------
# the pixel-pattern backdoor
# --------------------------------------------------------------------------------------------
def test_stamp_writes_the_pattern_in_normalised_space_and_nothing_else():
    space = pixel_space("cifar10")
    x = rand(4, 3 * 32 * 32, seed=1, dtype=torch.float32).reshape(4, 3, 32, 32)
    out = T.stamp(x, space)
    # default: 3 × 3 checkerboard, one pixel from the bottom-right corner → rows/cols 28 … 30
    region = (slice(None), slice(None), slice(28, 31), slice(28, 31))
    mask = torch.zeros(32, 32, dtype=torch.bool)
    mask[28:31, 28:31] = True
    assert torch.equal(out[:, :, ~mask], x[:, :, ~mask])  # every other value bit for bit
    # pixel 1 of channel 0 is (1 − 0.4914) / 0.2470 in the model's input; pixel 0 of channel 2 is −0.4465 / 0.2616
    assert math.isclose(float(out[0, 0, 28, 28]), (1 - 0.4914) / 0.2470, rel_tol=1e-6)
    assert math.isclose(float(out[2, 2, 28, 29]), (0 - 0.4465) / 0.2616, rel_tol=1e-6)
    pixels = space.to_pixels(out)[region]
    assert torch.allclose(pixels, torch.tensor(T.PixelTrigger().pattern).expand(4, 3, 3, 3), atol=1e-6)


def test_stamp_on_flat_digits_inputs_and_at_a_chosen_place():
    space = pixel_space("digits")  # inputs (N, 64), per-pixel standardisation
    x = rand(3, 64, seed=2, dtype=torch.float32)
    trigger = T.PixelTrigger(pattern=((1.0, 1.0),), row=0, col=2)
    out = T.stamp(x, space, trigger)
    assert out.shape == (3, 64)
    changed = (out != x).any(0).nonzero().flatten().tolist()
    assert changed == [2, 3]  # row 0, columns 2 and 3 of the 8 × 8 image
    assert torch.allclose(space.to_pixels(out).reshape(3, 64)[:, [2, 3]], torch.ones(3, 2), atol=1e-5)


@pytest.mark.parametrize("trigger, match", [
    (T.PixelTrigger(pattern=((1.0, 2.0),)), "pixel values in"),
    (T.PixelTrigger(pattern=((1.0,), (1.0, 0.0))), "rectangle"),
    (T.PixelTrigger(pattern=()), "rectangle"),
    (T.PixelTrigger(row=27, col=0), "does not fit"),
    (T.PixelTrigger(margin=30), "does not fit"),
])
def test_stamp_refuses_a_bad_trigger(trigger, match):
    with pytest.raises(ValueError, match=match):
        T.stamp(torch.zeros(2, 1, 28, 28), pixel_space("mnist"), trigger)


def test_stamp_refuses_inputs_of_another_shape():
    with pytest.raises(ValueError, match="not images of shape"):
        T.stamp(torch.zeros(2, 3, 32, 32), pixel_space("mnist"))


def test_poison_images_by_hand():
    space = pixel_space("mnist")
    x = rand(10, 784, seed=3, dtype=torch.float32).reshape(10, 1, 28, 28)
    y = torch.tensor([0, 1, 2, 0, 3, 0, 4, 0, 5, 0])  # five of the target class 0
    bd = T.PixelBackdoor(target=0, poison_frac=0.3)
    out = T.poison_images(x, y, bd, space, generator=torch.Generator().manual_seed(0))
    assert len(out.indices) == 3 and bool((y[out.indices] != 0).all())  # non-target samples first
    assert torch.equal(out.y[out.indices], torch.zeros(3, dtype=torch.long))
    rest = torch.tensor([i for i in range(10) if i not in out.indices.tolist()])
    assert torch.equal(out.x[rest], x[rest]) and torch.equal(out.y[rest], y[rest])
    assert torch.equal(out.x[out.indices], T.stamp(x[out.indices], space))
    # 80 %: all 5 non-target samples, then 3 of the target class
    most = T.poison_images(x, y, T.PixelBackdoor(0, 0.8), space, generator=torch.Generator().manual_seed(0))
    assert len(most.indices) == 8 and set(range(10)) - set(most.indices.tolist()) <= {0, 3, 5, 7, 9}
    assert set(torch.nonzero(y != 0).flatten().tolist()) <= set(most.indices.tolist())
    none = T.poison_images(x, y, T.PixelBackdoor(0, 0.0), space)
    assert len(none.indices) == 0 and torch.equal(none.x, x) and torch.equal(none.y, y)


def test_poison_images_is_seeded():
    space = pixel_space("mnist")
    x = torch.zeros(50, 1, 28, 28)
    y = torch.arange(50) % 10
    a = T.poison_images(x, y, T.PixelBackdoor(3, 0.2), space, generator=torch.Generator().manual_seed(1))
    b = T.poison_images(x, y, T.PixelBackdoor(3, 0.2), space, generator=torch.Generator().manual_seed(1))
    c = T.poison_images(x, y, T.PixelBackdoor(3, 0.2), space, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a.indices, b.indices) and not torch.equal(a.indices, c.indices)


@pytest.mark.parametrize("kwargs, match", [
    ({"target": -1, "poison_frac": 0.1}, "target"),
    ({"target": 1, "poison_frac": 1.5}, "poison_frac"),
    ({"target": 1, "poison_frac": float("nan")}, "poison_frac"),
])
def test_pixel_backdoor_refuses_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        T.PixelBackdoor(**kwargs)


def test_triggered_test_set_and_asr_by_hand():
    space = pixel_space("mnist")
    x = torch.zeros(6, 1, 28, 28)
    y = torch.tensor([2, 0, 1, 2, 0, 3])
    trig = T.triggered_test_set(x, y, T.PixelBackdoor(target=2, poison_frac=0.1), space)
    assert trig.indices.tolist() == [1, 2, 4, 5] and trig.labels.tolist() == [0, 1, 0, 3]
    assert torch.equal(trig.x, T.stamp(x[[1, 2, 4, 5]], space))
    # predictions 2, 1, 2, 0 on the four: two of four go to the target
    assert T.attack_success_rate(torch.tensor([2, 1, 2, 0]), trig.labels, 2) == 0.5
    with pytest.raises(ValueError, match="ASR is undefined"):
        T.attack_success_rate(torch.tensor([1, 1]), torch.tensor([2, 2]), 2)
    with pytest.raises(ValueError, match="one length"):
        T.attack_success_rate(torch.tensor([1, 1]), torch.tensor([2, 2, 2]), 2)


def test_a_model_trained_on_poisoned_digits_learns_the_backdoor():
    """The known trend: a poisoned training set implants trigger ⇒ target, a clean one does not,
    and clean accuracy barely moves."""
    from fedcal.data import load_dataset
    from fedcal.models import build_model
    from fedcal.local_training import local_train, predict_logits

    ds = load_dataset("digits")
    space = pixel_space("digits")
    bd = T.PixelBackdoor(target=0, poison_frac=0.2, trigger=T.PixelTrigger(pattern=((1.0, 1.0), (1.0, 1.0)), margin=0))
    poisoned = T.poison_images(ds.x_train, ds.y_train, bd, space, generator=torch.Generator().manual_seed(0))
    trig = T.triggered_test_set(ds.x_test, ds.y_test, bd, space)
    results = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small MLP: more threads only contend on a busy machine
    try:
        for name, (x, y) in {"clean": (ds.x_train, ds.y_train), "poisoned": (poisoned.x, poisoned.y)}.items():
            model = build_model("mlp", ds.input_shape, ds.num_classes, seed=0)
            local_train(model, x, y, steps=400, batch_size=32, lr=0.1, generator=torch.Generator().manual_seed(1))
            acc = float((predict_logits(model, ds.x_test).argmax(1) == ds.y_test).double().mean())
            asr = T.attack_success_rate(predict_logits(model, trig.x).argmax(1), trig.labels, bd.target)
            results[name] = (acc, asr)
    finally:
        torch.set_num_threads(threads)
    (clean_acc, clean_asr), (bd_acc, bd_asr) = results["clean"], results["poisoned"]
    assert bd_asr > 0.9 and clean_asr < 0.2, results
    assert clean_acc > 0.9 and bd_acc > clean_acc - 0.05, results


def test_the_snippets_of_docs_attacks_md_run():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "attacks.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 3
    for block in blocks:
        exec(compile(block, "docs/attacks.md", "exec"), {})


def test_docs_attacks_md_shows_the_benchmark_output_file():
    """The cost table on the page is the file the benchmark command above it wrote."""
    from pathlib import Path

    from fedcal.pages import include_tables as module

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "attacks.md").read_text()
    assert "<!-- output: docs/results/benchmarks/byzantine.txt -->" in page
    assert module.refreshed(page) == page


# --------------------------------------------------------------------------------------------
# ByzFL's line-search ("optimal") ALIE and IPM
# --------------------------------------------------------------------------------------------
def test_line_search_by_hand():
    from fedcal.attacks.optimal import line_search

    seen = []

    def linear(t):
        seen.append(t)
        return t

    # an ever-improving objective: 20 expansion steps 0, 10, 30, 70, … (the step doubles each time)
    assert line_search(linear) == 10.0 * (2 ** 19 - 1) and len(seen) == 20
    seen.clear()
    peak = lambda t: -abs(t - 25.0)  # noqa: E731
    # 0 → 10 → 30 improve, 70 does not (step 40 → 32); contraction from 30 with 32, 25.6, …: all worse
    assert line_search(peak, evals=6) == 30.0
    # start below the peak by a negative delta: 40 → 30 improves (−10 → −20), 10 does not
    # (step −16); contraction 30 − 16 = 14 worse (step −12.8), 17.2 worse
    assert line_search(peak, start=40.0, delta=-10.0, evals=5) == 30.0
    assert line_search(peak, evals=1) == 0.0


@pytest.mark.parametrize("kwargs, match", [({"evals": 0}, "evals"), ({"delta": 0.0}, "delta"),
                                           ({"ratio": 0.5}, "ratio"), ({"start": float("inf")}, "start")])
def test_line_search_refuses_bad_parameters(kwargs, match):
    from fedcal.attacks.optimal import line_search

    with pytest.raises(ValueError, match=match):
        line_search(lambda t: t, **kwargs)


def test_optimal_ipm_against_the_mean_by_hand():
    from fedcal.attacks.optimal import optimal_ipm_tau

    honest = t64([[1.0, 2.0], [3.0, 2.0]])  # μ = (2, 2)
    # mean of 2 honest + 1 copy of −τμ: μ(2 − τ)/3, distance ‖μ‖(1 + τ)/3, growing in τ: pure expansion
    tau, rows = optimal_ipm_tau(honest, 1, A.fedavg, evals=4)
    assert tau == 70.0 and torch.equal(rows, t64([[-140.0, -140.0]]))


def test_optimal_alie_against_the_median_by_hand():
    from fedcal.attacks.optimal import optimal_alie_tau

    honest = t64([[0.0, 5.0], [2.0, 5.0], [4.0, 5.0]])  # μ = (2, 5), σ = (2, 0)
    # median of {0, 2, 4, 2 + 2τ} (and 5s): 2 at τ = 0, 3 for τ ≥ 1: the first step, τ = 10, is kept
    tau, rows = optimal_alie_tau(honest, 1, A.coordinate_median)
    assert tau == 10.0 and torch.equal(rows, t64([[22.0, 5.0]]))
    # two attackers: median of {0, 2, 4, m, m} is 4 once m ≥ 4: again τ = 10
    tau2, rows2 = optimal_alie_tau(honest, 2, A.coordinate_median)
    assert tau2 == 10.0 and rows2.shape == (2, 2)


def test_optimal_attacks_beat_or_equal_their_fixed_versions_on_their_grid():
    from fedcal.attacks.optimal import optimal_alie_tau, optimal_ipm_tau

    h = rand(9, 6, seed=5) + 0.3
    rule = functools.partial(A.trimmed_mean, f=2)
    mean = h.mean(0)

    def dist(rows):
        return float((rule(torch.cat([h, rows])) - mean).norm())

    tau, rows = optimal_alie_tau(h, 2, rule)
    assert dist(rows) >= max(dist(T.alie(h, 2, z=-t)) for t in (0.0, 10.0)) - 1e-12
    tau, rows = optimal_ipm_tau(h, 2, rule)
    assert dist(rows) >= dist(T.ipm(h, 2, epsilon=10.0)) - 1e-12


def test_optimal_attacks_with_no_attacker_return_no_rows():
    from fedcal.attacks.optimal import optimal_alie, optimal_ipm

    assert optimal_alie(rand(4, 3), 0, A.fedavg).shape == (0, 3)
    assert optimal_ipm(rand(4, 3), 0, A.fedavg).shape == (0, 3)


@pytest.mark.parametrize("rule", ["mean", "median", "trimmed_mean", "nnm+trimmed_mean"])
def test_optimal_alie_and_ipm_match_byzfl(rule):
    byzfl = pytest.importorskip("byzfl")
    from fedcal.attacks.optimal import optimal_alie, optimal_ipm

    trmean = functools.partial(A.trimmed_mean, f=2)
    ours = {"mean": A.fedavg, "median": A.coordinate_median, "trimmed_mean": trmean,
            "nnm+trimmed_mean": A.compose([functools.partial(A.nnm, f=2)], trmean)}[rule]
    theirs = {"mean": byzfl.Average(), "median": byzfl.Median(), "trimmed_mean": byzfl.TrMean(f=2),
              "nnm+trimmed_mean": byzfl.TrMean(f=2)}[rule]
    pre = [byzfl.NNM(f=2)] if rule.startswith("nnm") else []  # ByzFL's default is static clipping
    h = rand(8, 20, seed=11, dtype=torch.float32) + 0.1  # ByzFL computes in float32
    for f in (1, 2):
        a = byzfl.Optimal_ALittleIsEnough(agg=theirs, pre_agg_list=pre, f=f)(h)
        i = byzfl.Optimal_InnerProductManipulation(agg=theirs, pre_agg_list=pre, f=f)(h)
        assert torch.allclose(optimal_alie(h, f, ours)[0], torch.as_tensor(a), rtol=1e-5, atol=1e-5)
        assert torch.allclose(optimal_ipm(h, f, ours)[0], torch.as_tensor(i), rtol=1e-5, atol=1e-5)
