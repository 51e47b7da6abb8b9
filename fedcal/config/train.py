"""The ``train`` group (federated training under attack: rounds, attackers, evaluation) and the
configuration facts of the ``train`` task."""

from __future__ import annotations

import math

from fedcal import catalogue
from fedcal.config.schema import (ComponentNames, RunConfig, TaskConfig, check, group, identity_includes,
                                  register_task, setting, setting_of)

__all__ = ["AUGMENTATIONS", "CALIBRATION_ESTIMATORS", "CROP_FLIP_DATASETS", "calibration_estimators",
           "evaluable_rules", "tsa_label"]

# The attacks (``attack``) are components of fedcal.catalogue: the client behaviours, the model-poisoning
# attacks the omniscient colluders craft (need ``omniscient``) and the pixel backdoor, each with its own keys.
_ATTACKS = ComponentNames("attack")


def evaluable_rules() -> tuple[str, ...]:
    """The rules a ``rule-aware`` attack (opt-alie, opt-ipm) can evaluate: a function of the round's updates
    alone (FLTrust needs the server's root update, FoolsGold and CalGuard their history)."""
    return tuple(n for n, c in catalogue.components("rule").items() if not {"history", "root-set"} & c.needs)
AUGMENTATIONS = ("none", "crop-flip")
#: datasets ``augment=crop-flip`` applies to (digits are not mirror-invariant, CIFAR's objects are)
CROP_FLIP_DATASETS = ("cifar10", "cifar100")
#: the calibration estimators a run may record beside accuracy, ECE, sECE, Brier and NLL
#: (``calibration-metrics``; fedcal.calibration_metrics computes them, docs/analyses.md explains them)
CALIBRATION_ESTIMATORS = ("mce", "smce", "rmsce", "ace", "cwece", "ksce", "sksce", "smece")


def calibration_estimators(text: str) -> tuple[str, ...]:
    """The estimator names of a ``calibration-metrics`` value: comma-separated names of
    :data:`CALIBRATION_ESTIMATORS`, ``all``, or "" (none); ValueError names an unknown one."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    if names == ["all"]:
        return CALIBRATION_ESTIMATORS
    bad = [s for s in names if s not in CALIBRATION_ESTIMATORS]
    if bad:
        raise ValueError(f"unknown estimator {bad[0]!r}; choose from {', '.join(CALIBRATION_ESTIMATORS)} or all")
    return tuple(dict.fromkeys(names))


def _round_size(c: RunConfig) -> None:
    if not identity_includes(c, "train"):  # a task that does not read this group samples no clients
        return
    check("clients-per-round", c.clients_per_round <= c.num_clients, c.clients_per_round,
          f"must not exceed num-clients ({c.num_clients})")
    check("fed-eval-clients", c.fed_eval_clients <= c.num_clients, c.fed_eval_clients,
          f"must not exceed num-clients ({c.num_clients})")


def _local_work(c: RunConfig) -> None:
    if c.local_epochs:
        check("local-steps", c.local_steps == setting_of("local_steps").default, c.local_steps,
              f"is replaced by local-epochs ({c.local_epochs}): set one of them, not both")
    for key, value in (("augment", c.augment), ("inf-augment", c.inf_augment)):
        if value == "crop-flip":
            check(key, c.dataset in CROP_FLIP_DATASETS, value,
                  f"is CIFAR's augmentation ({', '.join(CROP_FLIP_DATASETS)}), not for dataset {c.dataset!r}")


def _byzantine_attacks(c: RunConfig) -> None:
    needs = catalogue.get("attack", c.attack).needs
    backdoor = setting_of("backdoor_target").read_by(c)  # the image backdoor's own keys are read
    if "omniscient" in needs or backdoor:
        check("attack", c.task == "train", c.attack, f"is a train-task attack (task = {c.task})")
    if "rule-aware" in needs:
        check("attack", c.strategy in evaluable_rules(), c.attack,
              f"searches against the server's rule, which it can evaluate for strategy = "
              f"{', '.join(evaluable_rules())}, not {c.strategy} (a rule with state or a root set)")
    if backdoor:
        classes = {"digits": 10, "mnist": 10, "cifar10": 10, "cifar100": 100}
        check("attack", c.dataset in classes, c.attack, "is an image backdoor (digits, mnist, cifar10, cifar100)")
        check("backdoor-target", c.backdoor_target < classes.get(c.dataset, 0), c.backdoor_target,
              f"must be a class of dataset={c.dataset}")


def _calguard_clients(c: RunConfig) -> None:
    if setting_of("calguard_signal").read_by(c) and c.calguard_signal == "clients":  # only the train task's clients report drift
        check("calguard-signal", c.task == "train", c.calguard_signal,
              f"clients needs the train task's clients (they report their calibration drift), not task={c.task}")


def _calibration(c: RunConfig) -> None:
    try:
        calibration_estimators(c.calibration_metrics)
    except ValueError as e:
        check("calibration-metrics", False, c.calibration_metrics, f"names an {e}")


@group("train", "federated training under attack (task = train): rounds, attackers, evaluation",
       rules=(_round_size, _local_work, _byzantine_attacks, _calibration, _calguard_clients))
class Train:
    clients_per_round: int = setting(5, "M, clients sampled per round (<= num-clients)", ge=1)
    num_rounds: int = setting(100, "federated rounds", ge=1)
    attack: str = setting("tsa", 'what the attacker subset does; "none" = all benign', choices=_ATTACKS)
    attacker_ratio: float = setting(0.25, "attackers = round-half-up(ratio * K): 13 of 50 (1 = every "
                                         "client, e.g. temperature training for all)", ge=0, le=1)
    tau: float = setting(1.0, "TSA temperature (1.0 = benign behaviour)", gt=0, finite=True)
    coupled: bool = setting(True, "TSA learning rate eta = beta * tau (false: the uncoupled ablation, "
                                  "eta = beta)")
    noise_sigma: float = setting(0.1, "sigma of the Gaussian added to the update (attack = noise)", ge=0,
                                 finite=True, only_with=("attack", _ATTACKS))
    flip_shift: int = setting(1, "k in y <- (y + k) mod C (attack = labelflip)", ge=1,
                              only_with=("attack", _ATTACKS))
    local_steps: int = setting(5, "E, local SGD steps per round", ge=1)
    eval_every: int = setting(1, "central evaluation every k rounds (always round 0 and the last)", ge=1)
    tsa_step_frac: float = setting(1.0, "adaptive TSA: share of the local steps trained at tau (the first "
                                        "round(frac * E), at least one; the rest benign)", gt=0, le=1,
                                   hash_when_set=True, only_with=("attack", _ATTACKS))
    tsa_blend: float = setting(1.0, "adaptive TSA: the reply is benign + blend * (TSA - benign), both "
                                    "trained on the same batches (1 = plain TSA)", gt=0, finite=True,
                               hash_when_set=True, only_with=("attack", _ATTACKS))
    local_epochs: int = setting(0, "local epochs per round: passes over each client's own data, the last "
                                   "batch of a pass smaller when B does not divide it (replaces "
                                   "local-steps, which must then stay at its default)", ge=0,
                                note="0 = local-steps", hash_when_set=True)
    augment: str = setting("none", "augmentation of every client's training batches (crop-flip: pad 4, "
                                   "random 32x32 crop, horizontal flip; CIFAR only)", choices=AUGMENTATIONS,
                           hash_when_set=True)
    tsa_duty: float = setting(1.0, "adaptive TSA: share of its rounds an attacker attacks (a seeded draw per "
                                   "client round; benign in the others; 1 = every round)", gt=0, le=1,
                              hash_when_set=True, only_with=("attack", _ATTACKS))
    alie_z: float = setting(0.0, "ALIE (attack = alie): malicious update = mean - z * std of the round's honest "
                                 "updates", finite=True, note="0 = the paper's z from the round's n and f",
                            hash_when_set=True, only_with=("attack", _ATTACKS))
    ipm_epsilon: float = setting(0.1, "IPM (attack = ipm): malicious update = -epsilon * mean of the honest updates",
                                 gt=0, finite=True, hash_when_set=True, only_with=("attack", _ATTACKS))
    minmax_direction: str = setting("unit", "Min-Max / Min-Sum (attack = minmax, minsum): the perturbation "
                                            "direction: unit (mean / |mean|), std, sign (of the mean)",
                                    choices=("unit", "std", "sign"), hash_when_set=True,
                                    only_with=("attack", _ATTACKS))
    fang_b: float = setting(2.0, "Fang's trimmed-mean attack (attack = fang-trmean): values drawn within a factor b "
                                 "beyond the honest extreme", gt=1, finite=True, hash_when_set=True,
                            only_with=("attack", _ATTACKS))
    mimic_target: int = setting(0, "Mimic (attack = mimic): the attackers copy the honest update of this index "
                                   "among the round's honest updates in partition-id order", ge=0,
                                hash_when_set=True, only_with=("attack", _ATTACKS))
    backdoor_target: int = setting(0, "pixel backdoor (attack = backdoor): the target class", ge=0,
                                   hash_when_set=True, only_with=("attack", _ATTACKS))
    backdoor_frac: float = setting(0.2, "pixel backdoor: share of an attacker's training images stamped and "
                                        "relabelled", gt=0, le=1, hash_when_set=True,
                                   only_with=("attack", _ATTACKS))

    calibration_metrics: str = setting("", "calibration estimators recorded at each evaluation beside accuracy, ECE, "
                                           "sECE, Brier and NLL: comma-separated of "
                                           + ", ".join(CALIBRATION_ESTIMATORS) + ", or all (docs/analyses.md)",
                                       note='"" = none', hash_when_set=True)
    fed_eval_clients: int = setting(0, "federated calibration: clients sampled (seeded) at every central evaluation "
                                       "round >= 1 to evaluate the global model on their own held-out data (their "
                                       "share of the test set) and send a calibration state the server merges "
                                       "(fed_* metrics, federated_calibration.csv)", ge=0,
                                    note="0 = none; <= num-clients", hash_when_set=True)
    calibration_bootstrap: int = setting(0, "percentile-bootstrap resamples of the test set for 95 % intervals of "
                                            "every recorded calibration metric at the final round "
                                            "(calibration_intervals.csv)", ge=0, note="0 = no intervals",
                                         hash_when_set=True)

    @property
    def num_attackers(self) -> int:
        """Number of malicious clients: round-half-up of ratio·K (0.25·50 → 13)."""
        if self.attack == "none":
            return 0
        return int(math.floor(self.attacker_ratio * self.num_clients + 0.5 + 1e-9))


def tsa_label(cfg: RunConfig) -> str:
    """``tsa<τ>`` of a run name, ``u`` appended for the uncoupled ablation."""
    return f"tsa{cfg.tau:g}" + ("" if cfg.coupled else "u")


def _run_name(cfg: RunConfig, short_hash: str) -> str:
    what = cfg.attack if cfg.attack != "tsa" else tsa_label(cfg)
    if cfg.attack == "tsa":  # the adaptive attacker's knobs, named only when used
        what += (f"-f{cfg.tsa_step_frac:g}" if cfg.tsa_step_frac != 1 else "") + \
                (f"-b{cfg.tsa_blend:g}" if cfg.tsa_blend != 1 else "") + \
                (f"-d{cfg.tsa_duty:g}" if cfg.tsa_duty != 1 else "")
    return f"{cfg.dataset}-{cfg.model}-{cfg.strategy}-{what}-s{cfg.seed}-{short_hash}"


# The train task's hash covers common, train and defense without the task key: the key set its
# runs were named by before any other task existed, so those run directories keep their names.
TASK = register_task(TaskConfig("train", groups=("train", "defense"), hash_groups=("common", "train", "defense"),
                                hash_task_key=False, run_name=_run_name,
                                schedule=("accuracy", "num_rounds", "eval_every"), image_classifier=True))
