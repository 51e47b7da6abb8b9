"""fedcal's attacks (``attack``), declared once: the client behaviours (TSA, noise, label flipping, the
pixel backdoor) and the model-poisoning attacks of Byzantine-robust FL, whose replies the omniscient
colluders craft from the round's honest updates (``needs`` ``omniscient``; the line searches among them
evaluate the server's rule: ``rule-aware``).

Each declares the run-config keys only it reads with their rules (``settings``). They join the ``train``
group, whose hash covered them before they moved here (every committed run keeps its name); TSA's
``tau`` and ``coupled`` stay keys of the group itself (the lm and detect tasks' clients read them too).
"""

from __future__ import annotations

from typing import Any

from fedcal.catalogue import Component, register
from fedcal.config.schema import setting

_A = "fedcal.attacks"
#: crafted by the colluders from the round's honest updates, after benign local training: the batched
#: train task runs the same colluders (fedcal.tasks.poisoning.Colluders) on its stacked clients' updates
_OMNISCIENT = frozenset({"omniscient", "batchable"})
#: the group of fedcal's attacks' own keys: the train group, whose hash has always covered them
_G = "train"


def _alie(spec: Any) -> dict[str, Any]:
    return {"z": spec.alie_z or None}  # alie-z 0 → the paper's z from the round's n and f


def _tsa_name(cfg: Any) -> list[str]:
    """``tsa<τ>`` (``u`` appended for the uncoupled ablation), then the adaptive attacker's knobs, named
    only when used."""
    return [f"tsa{cfg.tau:g}" + ("" if cfg.coupled else "u"),
            *([f"f{cfg.tsa_step_frac:g}"] if cfg.tsa_step_frac != 1 else []),
            *([f"b{cfg.tsa_blend:g}"] if cfg.tsa_blend != 1 else []),
            *([f"d{cfg.tsa_duty:g}"] if cfg.tsa_duty != 1 else [])]


_TSA = {
    "tsa_step_frac": setting(1.0, "adaptive TSA: share of the local steps trained at tau (the first round(frac * E), "
                                  "at least one; the rest benign)", gt=0, le=1, hash_when_set=True, group=_G),
    "tsa_blend": setting(1.0, "adaptive TSA: the reply is benign + blend * (TSA - benign), both trained on the same "
                              "batches (1 = plain TSA)", gt=0, finite=True, hash_when_set=True, group=_G),
    "tsa_duty": setting(1.0, "adaptive TSA: share of its rounds an attacker attacks (a seeded draw per client round; "
                             "benign in the others; 1 = every round)", gt=0, le=1, hash_when_set=True, group=_G),
}
_DIRECTION = setting("unit", "Min-Max / Min-Sum (attack = minmax, minsum): the perturbation direction: unit "
                             "(mean / |mean|), std, sign (of the mean)", choices=("unit", "std", "sign"),
                     hash_when_set=True, group=_G)

for _c in (
    Component("attack", "none", f"{_A}.behaviour:BehaviourKind", needs=frozenset({"batchable"}),
              summary="every client benign"),
    Component("attack", "tsa", f"{_A}.tsa:TemperatureScalingAttack", keys=("tau", "coupled"), settings=_TSA,
              needs=frozenset({"batchable", "loss-temperature"}), name_part=_tsa_name,
              # its studies: the τ sweeps, temperature as a robustness knob, the defenses against it
              modules=("fedcal.reports.taus", "fedcal.reports.robustness", "fedcal.studies.defense",
                       "fedcal.reports.defense"),
              summary="Temperature Scaling Attack: the attackers train at temperature tau"),
    Component("attack", "noise", f"{_A}.noise:NoiseInjection", settings={
        "noise_sigma": setting(0.1, "sigma of the Gaussian added to the update (attack = noise)", ge=0, finite=True,
                               group=_G)},
              summary="Gaussian noise added to the update"),
    Component("attack", "labelflip", f"{_A}.labelflip:LabelFlipping", settings={
        "flip_shift": setting(1, "k in y <- (y + k) mod C (attack = labelflip)", ge=1, group=_G)},
              summary="labels shifted by k modulo the classes"),
    Component("attack", "alie", f"{_A}.alie:alie", settings={
        "alie_z": setting(0.0, "ALIE (attack = alie): malicious update = mean - z * std of the round's honest "
                               "updates", finite=True, note="0 = the paper's z from the round's n and f",
                          hash_when_set=True, group=_G)},
              params=_alie, needs=_OMNISCIENT, summary="Baruch et al., A Little Is Enough (NeurIPS 2019)"),
    Component("attack", "ipm", f"{_A}.ipm:ipm", settings={
        "ipm_epsilon": setting(0.1, "IPM (attack = ipm): malicious update = -epsilon * mean of the honest updates",
                               gt=0, finite=True, hash_when_set=True, group=_G)},
              params=lambda spec: {"epsilon": spec.ipm_epsilon}, needs=_OMNISCIENT,
              summary="Xie et al., inner-product manipulation (UAI 2019)"),
    Component("attack", "minmax", f"{_A}.minmax:min_max", settings={"minmax_direction": _DIRECTION},
              params=lambda spec: {"direction": spec.minmax_direction}, needs=_OMNISCIENT,
              summary="Shejwalkar & Houmansadr, Min-Max (NDSS 2021)"),
    Component("attack", "minsum", f"{_A}.minmax:min_sum", settings={"minmax_direction": _DIRECTION},
              params=lambda spec: {"direction": spec.minmax_direction}, needs=_OMNISCIENT,
              summary="Shejwalkar & Houmansadr, Min-Sum (NDSS 2021)"),
    Component("attack", "fang-trmean", f"{_A}.fang:fang_trimmed_mean", settings={
        "fang_b": setting(2.0, "Fang's trimmed-mean attack (attack = fang-trmean): values drawn within a factor b "
                               "beyond the honest extreme", gt=1, finite=True, hash_when_set=True, group=_G)},
              params=lambda spec: {"b": spec.fang_b}, needs=_OMNISCIENT,
              summary="Fang et al. (USENIX Security 2020), against the trimmed mean / median"),
    Component("attack", "fang-krum", f"{_A}.fang:fang_krum", needs=_OMNISCIENT,
              summary="Fang et al. (USENIX Security 2020), against Krum"),
    Component("attack", "signflip", f"{_A}.baselines:sign_flipping", needs=_OMNISCIENT,
              summary="Allen-Zhu et al. (ICLR 2021); ByzFL's SignFlipping"),
    Component("attack", "mimic", f"{_A}.baselines:mimic", settings={
        "mimic_target": setting(0, "Mimic (attack = mimic): the attackers copy the honest update of this index "
                                   "among the round's honest updates in partition-id order", ge=0,
                                hash_when_set=True, group=_G)},
              params=lambda spec: {"target": spec.mimic_target}, needs=_OMNISCIENT,
              summary="Karimireddy, He & Jaggi (ICLR 2022); ByzFL's Mimic"),
    Component("attack", "inf", f"{_A}.baselines:inf", needs=_OMNISCIENT,
              summary="ByzFL's Inf (a test of the server's input validation)"),
    Component("attack", "opt-alie", f"{_A}.optimal:optimal_alie", needs=_OMNISCIENT | {"rule-aware"},
              summary="ByzFL's Optimal_ALittleIsEnough (Allouah et al., AISTATS 2023)"),
    Component("attack", "opt-ipm", f"{_A}.optimal:optimal_ipm", needs=_OMNISCIENT | {"rule-aware"},
              summary="ByzFL's Optimal_InnerProductManipulation (Allouah et al., AISTATS 2023)"),
    Component("attack", "backdoor", f"{_A}.crafted:ImageBackdoor", settings={
        "backdoor_target": setting(0, "pixel backdoor (attack = backdoor): the target class", ge=0,
                                   hash_when_set=True, group=_G),
        "backdoor_frac": setting(0.2, "pixel backdoor: share of an attacker's training images stamped and "
                                      "relabelled", gt=0, le=1, hash_when_set=True, group=_G)},
              summary="pixel-pattern image backdoor"),
):
    register(_c)
