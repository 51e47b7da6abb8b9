"""The ``inference`` group (robust federated inference, SPEC §7) and the ``inference`` task's
configuration facts."""

from __future__ import annotations

import math

from fedcal import catalogue
from fedcal.config.schema import ConfigError, RunConfig, Task, check, group, register_task, setting
from fedcal.config.train import AUGMENTATIONS

__all__ = ["CLIENT_OUTPUTS", "LR_SCHEDULES", "PROBIT_SOURCES",
           "DEFAULT_INFERENCE_ATTACKS", "PGD_STARTS", "PGD_LOSSES", "PGD_GRADS", "ADV_ATTACKS"]

#: the inference clients' learning-rate schedules (``inf-lr-schedule``)
LR_SCHEDULES = ("constant", "cosine")
#: where an inference run's client probits come from (``inf-probits``)
PROBIT_SOURCES = ("live", "stored")
#: what a client answers an inference query with (``inf-client-output``)
CLIENT_OUTPUTS = ("probits", "logits")
# The probit-space attacks (``inf-attacks``) and the aggregators (``inf-aggregators``) are components of
# fedcal.catalogue (kinds inference-attack, inference-aggregator).
# The attacks an inference run evaluates by default: SPEC §7's. A string literal, not all of
# the catalogue's inference attacks: the default is hashed, and an attack added to the list must not rename any run.
DEFAULT_INFERENCE_ATTACKS = "none,logit_flip,sia_blackbox,sia_blackbox_colluding,sia_whitebox,lma,cpa,pgd_cw"
# PGD-CW's start (the adversary's own row, or a random near-uniform row: logits ~ U[0, 1)^C, the authors'
# ``torch.rand_like``), its margin (on log-probabilities, or on probabilities: the authors' ``Carlini_Wagner_loss``)
# and its gradient through trimming and medians (their exact sort subgradient, or BPDA): fedcal's first, the
# robust-inference authors' code's second; declared here once, read by fedcal.inference.
PGD_STARTS = ("own", "uniform")
PGD_LOSSES = ("logit", "prob")
PGD_GRADS = ("exact", "bpda")
ADV_ATTACKS = ("fedcal", "literature")  # how the DeepSet's adversarial training finds its corrupted rows

def _inference_attacks(c: RunConfig) -> None:
    attacks, aggregators = catalogue.names("inference-attack"), catalogue.names("inference-aggregator")
    for name in c.inference_attacks:
        if name not in attacks:
            raise ConfigError(f"run-config key 'inf-attacks': unknown value {name!r}; choose one of "
                              f"{', '.join(attacks)}")
    check("inf-attacks", bool(c.inference_attacks), c.inf_attacks, "must name at least one attack")
    for name in c.inference_aggregators:
        if name not in aggregators:
            raise ConfigError(f"run-config key 'inf-aggregators': unknown value {name!r}; choose among "
                              f"{', '.join(aggregators)}")


def _amplification_curve(c: RunConfig) -> None:
    try:
        amps = c.amplification_curve
    except ValueError:
        raise ConfigError(f"run-config key 'inf-amp-curve' must be comma-separated numbers, got {c.inf_amp_curve!r}")
    check("inf-amp-curve", all(math.isfinite(a) and a > 0 for a in amps), c.inf_amp_curve,
          "values must be finite numbers > 0")


@group("inference", "robust federated inference (task = inference, SPEC §7)",
       rules=(_inference_attacks, _amplification_curve))
class Inference:
    inf_f: int = setting(4, "adversarial clients per query, and what the robust aggregators are built "
                            "for (2 * inf-f < num-clients)", ge=0)
    inf_server_frac: float = setting(0.1, "training data kept by the server to train its aggregator",
                                     gt=0, lt=1)
    inf_local_epochs: int = setting(10, "epochs each client trains its own classifier", ge=1)
    inf_augment: str = setting("none", "augmentation of the clients' training batches (crop-flip: pad 4, "
                                       "random 32x32 crop, horizontal flip; CIFAR only)",
                               choices=AUGMENTATIONS, hash_when_set=True)
    inf_lr_schedule: str = setting("constant", "the clients' learning-rate schedule: constant, or cosine "
                                               "(per epoch from lr down to 0.001 at the last, as "
                                               "CosineAnnealingLR(T_max=inf-local-epochs, eta_min=0.001): "
                                               "the robust-inference authors' clients)",
                                   choices=LR_SCHEDULES, hash_when_set=True)
    inf_client_output: str = setting("probits", "what a client answers a query with: probits (its "
                        "softmax output) or logits (the server takes the softmax itself and also keeps "
                        "the logits, for the logit-input aggregators and the attacks on logits)",
                                     choices=CLIENT_OUTPUTS, hash_when_set=True)
    inf_attacks: str = setting(DEFAULT_INFERENCE_ATTACKS, "evaluated probit attacks (the catalogue's inference attacks; "
                                                          "docs/configuration.md lists them)",
                               note="comma-separated names, at least one")
    inf_amplification: float = setting(2.0, "logit flipping's amplification a", gt=0, finite=True)
    inf_pgd_steps: int = setting(50, "PGD-CW sign-gradient steps (step 0.1)", ge=0)
    inf_pgd_start: str = setting("own", "where PGD-CW's adversarial rows start: own (the adversary's "
                                        "own probits) or uniform (random near-uniform rows, logits "
                                        "~ U[0,1): the robust-inference authors' code)",
                                 choices=PGD_STARTS, hash_when_set=True)
    inf_pgd_loss: str = setting("logit", "the Carlini-Wagner margin PGD-CW ascends: logit (on the "
                                         "aggregate's log-probabilities, capped at 0) or prob (on its "
                                         "probabilities, capped at 0.1: the authors' code)",
                                choices=PGD_LOSSES, hash_when_set=True)
    inf_pgd_grad: str = setting("exact", "PGD-CW's gradient through trimming and medians: exact (the "
                                         "sort's subgradient; trimmed rows get none) or bpda (forward "
                                         "as deployed, backward as the mean: the authors' code)",
                                choices=PGD_GRADS, hash_when_set=True)
    inf_test_queries: int = setting(0, "test queries evaluated (the first k of the test set)", ge=0,
                                    note="0 = all")
    inf_eval_queries: int = setting(0, "test queries of the main table: the first k of those collected "
                                       "(the collection, and so the clients, stay the same)", ge=0,
                                    note="0 = all", hash_when_set=True)
    inf_aggregators: str = setting("", "the aggregators built and evaluated: comma-separated names of "
                                       "the catalogue's inference aggregators (docs/configuration.md lists them)",
                                   note='"" = all (the *_logit ones need inf-client-output=logits)',
                                   hash_when_set=True)
    inf_f_curve: bool = setting(True, "also evaluate every f_adv = 0..(n-1)//2 (aggregators stay "
                                      "built for inf-f)")
    inf_curve_queries: int = setting(2000, "test queries of the accuracy-vs-f and vs-amplification "
                                           "curves", ge=0, note="0 = all")
    inf_amp_curve: str = setting("0.5,1,2,4,8,16", "logit-flip amplifications of the accuracy-vs-a "
                                                   "curve", note='comma-separated numbers > 0; "" = none',
                                 number_list=True)
    inf_probits: str = setting("live", "where the clients' probits come from: live (the clients train and "
                                       "answer in the run) or stored (a collection of `fedcal inference-collect` "
                                       "with the same keys, read from inf-probits-dir: no client trains; its "
                                       "float16 probits make it a run of its own)",
                               choices=PROBIT_SOURCES, hash_when_set=True)
    inf_probits_dir: str = setting("fedcal-probits", "the folder of stored collections read with "
                                                     "inf-probits=stored (each named by its collection hash)",
                                   hashed=False)
    inf_query_batch: int = setting(500, "queries per message", ge=1, hashed=False)
    inf_timeout: float = setting(600.0, "seconds the server waits for replies to one query message",
                                 gt=0, finite=True, hashed=False)
    agg_hidden: int = setting(224, "DeepSet width h", ge=1)
    agg_epochs: int = setting(100, "DeepSet epochs on the clean probits", ge=0)
    agg_adv_epochs: int = setting(20, "then epochs of adversarial training (0 = plain DeepSet)", ge=0)
    agg_lr: float = setting(1e-3, "DeepSet Adam learning rate", gt=0, finite=True)
    agg_attack_steps: int = setting(10, "sign-gradient steps per adversarial-training batch", ge=0)
    agg_restarts: int = setting(2, "adversarial-training starts per batch (the 2nd from a simplex "
                                   "vertex); the worst kept", ge=1)
    agg_adv_attack: str = setting("fedcal", "the adversarial-training attack: fedcal (1..f random "
                                            "positions, loss ascent from the clients' probits and a "
                                            "vertex) or literature (the robust-inference authors': "
                                            "mostly f positions, CW probability margin from a uniform "
                                            "start, agg-attack-steps steps)",
                                  choices=ADV_ATTACKS, hash_when_set=True)
    agg_adv_subsets: int = setting(1, "visits of each server sample per adversarial epoch, each with its own "
                                      "corrupted positions (the robust-inference authors train on 300 client "
                                      "subsets per sample)", ge=1, hash_when_set=True)
    agg_latent: int = setting(32, "latent width of the autoencoder of manifold projection and CoPur",
                              ge=1, hash_when_set=True)
    copur_steps: int = setting(30, "CoPur's gradient steps fitting the latent of each query (0 = start "
                                   "at the encoder's latent)", ge=0, hash_when_set=True)
    @property
    def inference_attacks(self) -> tuple[str, ...]:
        """``inf-attacks`` as a tuple of names."""
        return tuple(a.strip() for a in self.inf_attacks.split(",") if a.strip())

    @property
    def inference_aggregators(self) -> tuple[str, ...]:
        """``inf-aggregators`` as a tuple of names (empty: all)."""
        return tuple(a.strip() for a in self.inf_aggregators.split(",") if a.strip())

    @property
    def amplification_curve(self) -> tuple[float, ...]:
        """``inf-amp-curve`` as a tuple of amplifications (empty: no curve)."""
        return tuple(float(a) for a in self.inf_amp_curve.split(",") if a.strip())


# ---------------------------------------------------------------------- the inference task
def _inference_f(c: RunConfig) -> None:
    check("inf-f", 2 * c.inf_f < c.num_clients, c.inf_f,
          f"needs 2 * inf-f < num-clients (num-clients = {c.num_clients})")


def _logit_aggregators(c: RunConfig) -> None:
    if c.inf_client_output != "logits":
        logit_aggs = [a for a in c.inference_aggregators if a.endswith("_logit")]
        check("inf-aggregators", not logit_aggs, c.inf_aggregators,
              f"names {', '.join(logit_aggs)}, which read the clients' logits: set inf-client-output=logits")


def _adversarial_training(c: RunConfig) -> None:
    if c.agg_adv_epochs:
        check("inf-f", c.inf_f >= 1, c.inf_f, "must be >= 1 for adversarial training (agg-adv-epochs > 0)")


def _stored_probits(c: RunConfig) -> None:
    if c.inf_probits == "stored":  # a collection holds probits only
        check("inf-probits", c.inf_client_output == "probits", c.inf_probits,
              "needs inf-client-output=probits (a stored collection holds the clients' probits, not their logits)")


def _run_name(cfg: RunConfig, short_hash: str) -> str:
    return f"{cfg.dataset}-{cfg.model}-inference-n{cfg.num_clients}-f{cfg.inf_f}-s{cfg.seed}-{short_hash}"


# Its hash covers the train and defense groups too, which it barely reads: the key set its runs
# (and their cached client probits) were named by.
TASK = register_task(Task(
    "inference", "fedcal.tasks.inference:run_inference",
    summary="robust federated inference: aggregators of client probits under probit-space attacks",
    groups=("inference",), hash_groups=("common", "train", "defense", "inference"), run_name=_run_name,
    rules=(_inference_f, _logit_aggregators, _adversarial_training, _stored_probits),
    tables=(("accuracy.csv", ("aggregator", "attack", "accuracy")),),
    handlers={"train.local": "fedcal.tasks.inference:train_local", "query.probits": "fedcal.tasks.inference:probits"},
    report="fedcal.reports.inference:inference_report", preflight="fedcal.tasks.inference:preflight"))
