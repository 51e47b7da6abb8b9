"""The ``defense`` group: the server's aggregation rule and its parameters."""

from __future__ import annotations

from fedcal.config.schema import ComponentNames, RunConfig, check, group, setting, setting_of, tasks_reading

__all__ = ["CALGUARD_MODES", "CALGUARD_SIGNALS", "CALGUARD_SOURCES", "CALGUARD_MIN_ROOT", "CUSUM_CALIBRATED_REPLIES"]

# The rules (``strategy``) and pre-aggregation steps (``pre-aggregation``) are components of fedcal.catalogue:
# their names, their needs and their own keys (fedcal/catalogue/rules.py: they join this group, each read only
# with the components that declare it).
RULES = ComponentNames("rule")
STEPS = ComponentNames("pre-aggregation")
#: CalGuard's modes, its sequential test's signals and its signal sources: declared here once, read by
#: fedcal.aggregate.calguard and fedcal.strategies.calguard
CALGUARD_MODES = ("filter", "audit")
#: expected replies per client of the runs the sequential test's default thresholds were calibrated on
#: (5 of 50 clients a round, 100 rounds): a benign client's statistic climbs further with more replies
#: (docs/defense.md, "The sequential test's thresholds at 10 clients a round")
CUSUM_CALIBRATED_REPLIES = 10.0
CALGUARD_SIGNALS = ("ratio", "scale")
#: the smallest root set CalGuard accepts (a robust scale of the signature needs some samples)
CALGUARD_MIN_ROOT = 20
#: CalGuard's signals: the server's root set, or the clients' reported calibration drift
CALGUARD_SOURCES = ("root", "clients")
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
    pre_aggregation: str = setting("", "pre-aggregation steps run on the round's validated updates before the "
                                       "strategy's rule, comma-separated, in order: nnm, clip (static), arc, cclip "
                                       "(centred clipping)", note='"" = none', hash_when_set=True)

    @property
    def pre_aggregations(self) -> tuple[str, ...]:
        """``pre-aggregation`` as a tuple of step names, in order (empty: none)."""
        return tuple(a.strip() for a in self.pre_aggregation.split(",") if a.strip())
