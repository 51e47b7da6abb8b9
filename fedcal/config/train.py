"""The ``train`` group (federated training under attack: rounds, attackers, evaluation) and the
configuration facts of the ``train`` task."""

from __future__ import annotations

import math

from fedcal import catalogue
from fedcal.config.schema import (ComponentNames, RunConfig, Task, check, group, identity_includes, register_task,
                                  setting, setting_of)

__all__ = ["AUGMENTATIONS", "CALIBRATION_ESTIMATORS", "CROP_FLIP_DATASETS", "calibration_estimators",
           "evaluable_rules"]

# The attacks (``attack``) are components of fedcal.catalogue: the client behaviours, the model-poisoning
# attacks the omniscient colluders craft (need ``omniscient``) and the pixel backdoor, each declaring its own
# keys there (fedcal/catalogue/attacks.py: they join this group, read only when their attack is chosen).
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


def _client_momentum(c: RunConfig) -> None:
    if c.client_momentum:  # only the train task's clients keep the buffer
        check("client-momentum", c.task == "train", c.client_momentum,
              f"is kept by the train task's clients, not task={c.task}")


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
       rules=(_round_size, _local_work, _client_momentum, _byzantine_attacks, _calibration, _calguard_clients))
class Train:
    clients_per_round: int = setting(5, "M, clients sampled per round (<= num-clients)", ge=1)
    num_rounds: int = setting(100, "federated rounds", ge=1)
    attack: str = setting("tsa", 'what the attacker subset does; "none" = all benign', choices=_ATTACKS)
    attacker_ratio: float = setting(0.25, "attackers = round-half-up(ratio * K): 13 of 50 (1 = every "
                                         "client, e.g. temperature training for all)", ge=0, le=1)
    tau: float = setting(1.0, "TSA temperature (1.0 = benign behaviour)", gt=0, finite=True)
    coupled: bool = setting(True, "TSA learning rate eta = beta * tau (false: the uncoupled ablation, "
                                  "eta = beta)")
    local_steps: int = setting(5, "E, local SGD steps per round", ge=1)
    eval_every: int = setting(1, "central evaluation every k rounds (always round 0 and the last)", ge=1)
    client_momentum: float = setting(0.0, "client momentum as ByzFL's honest clients keep it: each benign client "
                                          "keeps a buffer m <- beta * m + (1 - beta) * update across its rounds and "
                                          "sends global + m (with local-steps = 1: ByzFL's D-SGD momentum)", ge=0,
                                     lt=1, note="0 = off", hash_when_set=True)
    local_epochs: int = setting(0, "local epochs per round: passes over each client's own data, the last "
                                   "batch of a pass smaller when B does not divide it (replaces "
                                   "local-steps, which must then stay at its default)", ge=0,
                                note="0 = local-steps", hash_when_set=True)
    augment: str = setting("none", "augmentation of every client's training batches (crop-flip: pad 4, "
                                   "random 32x32 crop, horizontal flip; CIFAR only)", choices=AUGMENTATIONS,
                           hash_when_set=True)

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


def _run_name(cfg: RunConfig, short_hash: str) -> str:
    what = catalogue.get("attack", cfg.attack).run_label(cfg)  # the attack's own words (TSA: tsa<tau> and its knobs)
    return f"{cfg.dataset}-{cfg.model}-{cfg.strategy}-{what}-s{cfg.seed}-{short_hash}"


# The train task's hash covers common, train and defense without the task key: the key set its
# runs were named by before any other task existed, so those run directories keep their names.
TASK = register_task(Task(
    "train", "fedcal.tasks.train:run_train",
    summary="federated training under client poisoning (TSA, noise, label flipping) with a robust strategy",
    groups=("train", "defense"), hash_groups=("common", "train", "defense"), hash_task_key=False, run_name=_run_name,
    schedule=("accuracy", "num_rounds", "eval_every"), image_classifier=True,
    # Flower's message types: the strategy's train round, and the federated calibration's evaluate round
    handlers={"train": "fedcal.tasks.train:train", "evaluate": "fedcal.tasks.federated_eval:evaluate_heldout"},
    rounds=lambda cfg: cfg.num_rounds, report="fedcal.reports.taus:task_report",
    preflight="fedcal.tasks.train:load_images", needs={"batchable"}, label="fedcal.tasks.train:progress_label",
    final_summary="fedcal.tasks.train:final_summary"))
