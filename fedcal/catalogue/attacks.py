"""fedcal's attacks (``attack``), declared once: the client behaviours (TSA, noise, label flipping, the
pixel backdoor) and the model-poisoning attacks of Byzantine-robust FL, whose replies the omniscient
colluders craft from the round's honest updates (``needs`` ``omniscient``; the line searches among them
evaluate the server's rule: ``rule-aware``)."""

from __future__ import annotations

from typing import Any

from fedcal.catalogue import Component, register

_A = "fedcal.attacks"
#: crafted by the colluders from the round's honest updates, after benign local training: the batched
#: train task runs the same colluders (fedcal.tasks.poisoning.Colluders) on its stacked clients' updates
_OMNISCIENT = frozenset({"omniscient", "batchable"})


def _alie(spec: Any) -> dict[str, Any]:
    return {"z": spec.alie_z or None}  # alie-z 0 → the paper's z from the round's n and f


for _c in (
    Component("attack", "none", f"{_A}.behaviour:BehaviourKind", needs=frozenset({"batchable"}),
              summary="every client benign"),
    Component("attack", "tsa", f"{_A}.tsa:TemperatureScalingAttack",
              keys=("tau", "coupled", "tsa_step_frac", "tsa_blend", "tsa_duty"), needs=frozenset({"batchable"}),
              # its studies: the τ sweeps, temperature as a robustness knob, the defenses against it
              modules=("fedcal.reports.taus", "fedcal.reports.robustness", "fedcal.studies.defense",
                       "fedcal.reports.defense"),
              summary="Temperature Scaling Attack: the attackers train at temperature tau"),
    Component("attack", "noise", f"{_A}.noise:NoiseInjection", keys=("noise_sigma",),
              summary="Gaussian noise added to the update"),
    Component("attack", "labelflip", f"{_A}.labelflip:LabelFlipping", keys=("flip_shift",),
              summary="labels shifted by k modulo the classes"),
    Component("attack", "alie", f"{_A}.alie:alie", keys=("alie_z",), params=_alie, needs=_OMNISCIENT,
              summary="Baruch et al., A Little Is Enough (NeurIPS 2019)"),
    Component("attack", "ipm", f"{_A}.ipm:ipm", keys=("ipm_epsilon",),
              params=lambda spec: {"epsilon": spec.ipm_epsilon}, needs=_OMNISCIENT,
              summary="Xie et al., inner-product manipulation (UAI 2019)"),
    Component("attack", "minmax", f"{_A}.minmax:min_max", keys=("minmax_direction",),
              params=lambda spec: {"direction": spec.minmax_direction}, needs=_OMNISCIENT,
              summary="Shejwalkar & Houmansadr, Min-Max (NDSS 2021)"),
    Component("attack", "minsum", f"{_A}.minmax:min_sum", keys=("minmax_direction",),
              params=lambda spec: {"direction": spec.minmax_direction}, needs=_OMNISCIENT,
              summary="Shejwalkar & Houmansadr, Min-Sum (NDSS 2021)"),
    Component("attack", "fang-trmean", f"{_A}.fang:fang_trimmed_mean", keys=("fang_b",),
              params=lambda spec: {"b": spec.fang_b}, needs=_OMNISCIENT,
              summary="Fang et al. (USENIX Security 2020), against the trimmed mean / median"),
    Component("attack", "fang-krum", f"{_A}.fang:fang_krum", needs=_OMNISCIENT,
              summary="Fang et al. (USENIX Security 2020), against Krum"),
    Component("attack", "signflip", f"{_A}.baselines:sign_flipping", needs=_OMNISCIENT,
              summary="Allen-Zhu et al. (ICLR 2021); ByzFL's SignFlipping"),
    Component("attack", "mimic", f"{_A}.baselines:mimic", keys=("mimic_target",),
              params=lambda spec: {"target": spec.mimic_target}, needs=_OMNISCIENT,
              summary="Karimireddy, He & Jaggi (ICLR 2022); ByzFL's Mimic"),
    Component("attack", "inf", f"{_A}.baselines:inf", needs=_OMNISCIENT,
              summary="ByzFL's Inf (a test of the server's input validation)"),
    Component("attack", "opt-alie", f"{_A}.optimal:optimal_alie", needs=_OMNISCIENT | {"rule-aware"},
              summary="ByzFL's Optimal_ALittleIsEnough (Allouah et al., AISTATS 2023)"),
    Component("attack", "opt-ipm", f"{_A}.optimal:optimal_ipm", needs=_OMNISCIENT | {"rule-aware"},
              summary="ByzFL's Optimal_InnerProductManipulation (Allouah et al., AISTATS 2023)"),
    Component("attack", "backdoor", f"{_A}.crafted:ImageBackdoor", keys=("backdoor_target", "backdoor_frac"),
              summary="pixel-pattern image backdoor"),
):
    register(_c)
