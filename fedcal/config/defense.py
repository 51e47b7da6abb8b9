"""The ``defense`` group: the server's aggregation rule and its parameters."""

from __future__ import annotations

from fedcal.config.schema import ComponentNames, RunConfig, check, group, setting, setting_of, tasks_reading

__all__ = ["CALGUARD_MODES", "CALGUARD_SIGNALS", "CALGUARD_SOURCES", "CALGUARD_MIN_ROOT", "CUSUM_CALIBRATED_REPLIES"]

# The rules (``strategy``) and pre-aggregation steps (``pre-aggregation``) are components of fedcal.catalogue:
# their names, their own keys below (each read only with the components that declare it) and their needs.
RULES = ComponentNames("rule")
STEPS = ComponentNames("pre-aggregation")
CALGUARD_MODES = ("filter", "audit")  # fedcal.aggregate.calguard.CALGUARD_MODES (a test keeps them equal)
#: expected replies per client of the runs the sequential test's default thresholds were calibrated on
#: (5 of 50 clients a round, 100 rounds): a benign client's statistic climbs further with more replies
#: (docs/defense.md, "The sequential test's thresholds at 10 clients a round")
CUSUM_CALIBRATED_REPLIES = 10.0
CALGUARD_SIGNALS = ("ratio", "scale")  # fedcal.strategies.calguard.SEQUENTIAL_SIGNALS (a test keeps them equal)
CALGUARD_MIN_ROOT = 20  # fedcal.aggregate.calguard.MIN_ROOT_SIZE
CALGUARD_SOURCES = ("root", "clients")  # fedcal.aggregate.calguard.CALGUARD_SOURCES (a test keeps them equal)
# Bucketing is no pre-aggregation step of the catalogue: it turns the clients' rows into buckets, so
# per-client weights and the aggregation audit no longer apply (fedcal.aggregate.bucketing stays a library step).
#: the smallest clipping norm (``clip-c``, ``cclip-tau``): float32 weights resolve changes of about 1e-7 of their
#: size, so an update clipped below 1e-6 changes no weight of a usual size and nothing trains (c = 1e-300
#: left every model at its initial accuracy)
MIN_CLIP_NORM = 1e-6
TINY_NORM = "smaller bounds clip every update below float32's resolution of the weights: nothing would train"
#: the most centred-clipping iterations L (``cclip-iterations``): each is a pass over the round's (n, d)
#: updates, and CC's centre settles within a few (L = 1e8 ran for minutes per round)
MAX_CCLIP_ITERATIONS = 100


def _reads(c: RunConfig, field: str) -> bool:
    """Whether a run of ``c`` reads ``field`` (its rule or step declares it among its own keys)."""
    return setting_of(field).read_by(c)


def _defense_parameters(c: RunConfig) -> None:
    m = c.clients_per_round
    if _reads(c, "krum_f"):
        check("krum-f", m >= c.krum_f + 3, c.krum_f, f"needs clients-per-round >= krum-f + 3 (clients-per-round = {m})")
        check("krum-m", c.krum_m <= m, c.krum_m, f"must not exceed clients-per-round ({m})")
    if _reads(c, "trim_f"):
        check("trim-f", m > 2 * c.trim_f, c.trim_f, f"needs clients-per-round > 2 * trim-f (clients-per-round = {m})")
    if _reads(c, "calguard_signal") and c.calguard_signal == "root":
        check("root-size", c.root_size >= CALGUARD_MIN_ROOT, c.root_size,
              f"must be >= {CALGUARD_MIN_ROOT} for CalGuard (its robust signature needs a root set)")
        check("clients-per-round", m >= 3, m, "must be >= 3 for CalGuard (a reply is compared with the others)")


def _pre_aggregation(c: RunConfig) -> None:
    steps = [a.strip() for a in c.pre_aggregation.split(",")]
    check("pre-aggregation", not c.pre_aggregation.strip() or "" not in steps, c.pre_aggregation,
          "has an empty step (two commas, or one at either end)")
    for step in c.pre_aggregations:
        check("pre-aggregation", step in STEPS, c.pre_aggregation,
              f"has unknown step {step!r}; choose from {', '.join(STEPS)}")
    if c.pre_aggregations:
        readers = tasks_reading("defense")
        check("pre-aggregation", c.task in readers, c.pre_aggregation,
              f"runs in the strategies of the {' and '.join(readers)} tasks, not task={c.task}")
    if _reads(c, "pre_f"):
        check("pre-f", c.pre_f < c.clients_per_round, c.pre_f,
              f"must be < clients-per-round ({c.clients_per_round}) for {' / '.join(setting_of('pre_f').only_with[1])}")


@group("defense", "the server's aggregation rule and its parameters (task = train)", rules=(_defense_parameters, _pre_aggregation))
class Defense:
    strategy: str = setting("fedavg", "the server's aggregation rule", choices=RULES)
    krum_f: int = setting(1, "MultiKrum: assumed Byzantine replies per round (needs M >= f + 3)", ge=0,
                          only_with=("strategy", RULES))
    krum_m: int = setting(0, "MultiKrum: updates averaged (<= M)", ge=0, note="0 = n - f",
                          only_with=("strategy", RULES))
    trim_f: int = setting(1, "trimmed mean: values dropped per side and coordinate (needs M > 2f)",
                          ge=0, only_with=("strategy", RULES))
    root_size: int = setting(100, "FLTrust and CalGuard: the server's clean root set, drawn from the "
                                 "training data",
                             ge=1, only_with=("strategy", RULES))
    mom_groups: int = setting(3, "median-of-means: number of groups", ge=1,
                              only_with=("strategy", RULES))
    foolsgold_kappa: float = setting(1.0, "FoolsGold: logit confidence kappa", gt=0, finite=True,
                                     only_with=("strategy", RULES))
    calguard_kappa: float = setting(5.0, "CalGuard: drop a reply whose robust score |z| of its logit-scale "
                                         "shift exceeds this", gt=0, finite=True, hash_when_set=True,
                                     only_with=("strategy", RULES))
    calguard_window: int = setting(10, "CalGuard: rounds of signature deviations pooled for the robust "
                                       "scale", ge=1, hash_when_set=True, only_with=("strategy", RULES))
    calguard_strikes: int = setting(3, "CalGuard: a client flagged this many times is dropped from then on",
                                    ge=0, note="0 = never", hash_when_set=True, only_with=("strategy", RULES))
    calguard_mode: str = setting("filter", "CalGuard: filter drops flagged replies; audit only records "
                                           "them (FedAvg aggregation)", choices=CALGUARD_MODES,
                                 hash_when_set=True, only_with=("strategy", RULES))
    calguard_cusum: bool = setting(False, "CalGuard: also drop clients whose scores stay low (tau < 1) or "
                                          "high over their rounds (two one-sided CUSUMs per client)",
                                   hash_when_set=True, only_with=("strategy", RULES))
    calguard_cusum_signal: str = setting("ratio", "CalGuard's sequential test is fed the robust score of the "
                                                  "logit-scale shift per unit of update norm (ratio) or of "
                                                  "the shift itself (scale)", choices=CALGUARD_SIGNALS,
                                         hash_when_set=True, only_with=("strategy", RULES))
    calguard_cusum_k: float = setting(0.5, "CalGuard's sequential test: reference value k (half the "
                                           "persistent shift to detect, robust units)", ge=0, finite=True,
                                      hash_when_set=True, only_with=("strategy", RULES))
    # the thresholds' defaults are the ones docs/results/detector/thresholds.csv calibrates (ratio,
    # k = 0.5, every seed's benign runs, 2 % of benign replies): runs of 5 of 50 clients a round for 100
    # rounds, CUSUM_CALIBRATED_REPLIES replies per client
    calguard_cusum_h_low: float = setting(11.07, "CalGuard's sequential test: threshold of the low side "
                                                 "(under-confidence)", gt=0, finite=True,
                                          hash_when_set=True, only_with=("strategy", RULES))
    calguard_cusum_h_high: float = setting(10.89, "CalGuard's sequential test: threshold of the high side "
                                                  "(over-confidence)", gt=0, finite=True,
                                           hash_when_set=True, only_with=("strategy", RULES))
    calguard_signal: str = setting("root", "CalGuard's signal: root (each reply's logit-scale shift on the server's "
                                           "root set) or clients (no root set: each reply's mean-confidence shift "
                                           "against the global model on its client's held-out data, from the two "
                                           "calibration states the client reports, self-reported; docs/defense.md)", choices=CALGUARD_SOURCES,
                                   hash_when_set=True, only_with=("strategy", RULES))
    pre_aggregation: str = setting("", "pre-aggregation steps run on the round's validated updates before the "
                                       "strategy's rule, comma-separated, in order: nnm, clip (static), arc, cclip "
                                       "(centred clipping)", note='"" = none', hash_when_set=True)
    pre_f: int = setting(1, "nnm and arc: assumed Byzantine replies per round (< clients-per-round)", ge=0,
                         hash_when_set=True, only_with=("pre_aggregation", STEPS))
    clip_c: float = setting(1.0, "clip: the update norm bound c", ge=MIN_CLIP_NORM, finite=True, note=TINY_NORM,
                            hash_when_set=True, only_with=("pre_aggregation", STEPS))
    cclip_tau: float = setting(1.0, "cclip: centred clipping's radius tau", ge=MIN_CLIP_NORM, finite=True,
                               note=TINY_NORM, hash_when_set=True, only_with=("pre_aggregation", STEPS))
    cclip_iterations: int = setting(1, "cclip: centred clipping's iterations L", ge=1, le=MAX_CCLIP_ITERATIONS,
                                    note="each is one pass over the round's updates; the authors' default is 1",
                                    hash_when_set=True, only_with=("pre_aggregation", STEPS))

    @property
    def pre_aggregations(self) -> tuple[str, ...]:
        """``pre-aggregation`` as a tuple of step names, in order (empty: none)."""
        return tuple(a.strip() for a in self.pre_aggregation.split(",") if a.strip())
