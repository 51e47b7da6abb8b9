"""``fedcal byzantine``: every strategy against every attack of Byzantine-robust FL (accuracy, sECE,
ASR, worst case) over the literature's settings, heterogeneity and seeds.

**Settings** (``--setting``):

- ``partial`` (the default): fedcal's partial participation, ``clients-per-round`` M of
  ``num-clients`` K a round, the attackers ``attacker-ratio`` of K (``--ratios``). The robust rules'
  assumed number of Byzantine replies per round (``krum-f``, ``trim-f``, ``pre-f``) is
  f = ⌈ratio · M⌉ (:func:`fedcal.reports.byzantine.assumed_f`), the expected attackers in a round
  rounded up.
- ``cross-silo``: the Byzantine-robust literature's and ByzFL's setting: ``--honest`` n honest
  clients and f Byzantine ones (``--byzantine``, e.g. ``1,2,3,4``), all n + f of them in every round
  (``num-clients`` = ``clients-per-round`` = n + f, ``attacker-ratio`` = f / (n + f), which selects
  exactly f attackers); every rule is given the true f.

**Heterogeneity** (``--alphas``): each value a table of its own: a Dirichlet α of the label skew
(``partition = dirichlet``, ``dirichlet-alpha`` = α) or ``inf`` (``partition = iid``).

**Strategy specs** (``--strategies``): a strategy name, optionally preceded by pre-aggregation steps
joined with ``+`` and followed by ``:switch`` options: ``nnm+trimmed_mean`` is ``strategy =
trimmed_mean`` with ``pre-aggregation = nnm``; ``calguard:cusum`` is ``strategy = calguard`` with
``calguard-cusum = true``; ``krum`` is Krum itself, ``strategy = multikrum`` with ``krum-m = 1`` (the
rule Fang's Krum attack is made against), so ``nnm+krum`` and ``cclip+median`` are rows too.

**Attack specs** (``--attacks``): an attack name, optionally followed by ``:`` and its parameter
(:data:`ATTACK_PARAMETERS`): ``alie`` (the paper's z from the round's n and f), ``alie:z=1.5``,
``ipm:eps=10``, ``minmax:std``, ``minsum:sign``, ``fang-trmean:b=3``, ``mimic:target=2``,
``backdoor:frac=0.5``. Each spec is a column; a strategy's worst case is taken over all of them.

The benign runs (attack = none) of a table use the same rules' f as its attacked runs, so a column's
drop from ``benign`` is the attack's alone. The table is :func:`fedcal.reports.byzantine.byzantine_report`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from fedcal.config import ConfigError, RunConfig
from fedcal.studies.common import (KEYS_EPILOG, add_cluster_options, add_run_options, check_run_dirs, cluster_of,
                                   config_overrides, count_type, jobs_type, names_type, number_list, parse_ints,
                                   parse_names, ratios_type, refuse_unread_keys, say_replaced, seeds_type)


#: the strategies of the strategy × attack table (docs/defense.md), in its order
DEFAULT_STRATEGIES = ("fedavg", "fltrust", "foolsgold", "multikrum", "median", "trimmed_mean", "geometric_median",
                      "median_of_means", "calguard", "calguard:cusum", "nnm+trimmed_mean")
#: the model-poisoning attacks of Byzantine-robust FL and the image backdoor (docs/attacks.md)
DEFAULT_ATTACKS = ("alie", "ipm", "minmax", "minsum", "fang-trmean", "fang-krum", "backdoor")
#: the settings of ``--setting``
SETTINGS = ("partial", "cross-silo")
#: the parameters an attack spec may set, per attack: spec name → run-config field; the name ""
#: takes a bare value (``minmax:std``)
ATTACK_PARAMETERS: dict[str, dict[str, str]] = {
    "alie": {"z": "alie_z"},
    "ipm": {"eps": "ipm_epsilon"},
    "minmax": {"": "minmax_direction", "direction": "minmax_direction"},
    "minsum": {"": "minmax_direction", "direction": "minmax_direction"},
    "fang-trmean": {"b": "fang_b"},
    "mimic": {"target": "mimic_target"},
    "backdoor": {"target": "backdoor_target", "frac": "backdoor_frac"},
}


class Group(NamedTuple):
    """The table a cell belongs to: the participation setting, the heterogeneity (α; ``inf`` = IID),
    the attacker ratio and the f the robust rules are given (cross-silo: the true number of attackers)."""

    setting: str
    alpha: float
    ratio: float
    f: int

    def describe(self, clients: int, per_round: int) -> str:
        data = "IID" if math.isinf(self.alpha) else f"Dirichlet α = {self.alpha:g}"
        if self.setting == "cross-silo":
            return (f"cross-silo, f = {self.f} Byzantine of {clients} clients ({clients - self.f} honest), all every "
                    f"round, {data}")
        return (f"partial participation, {per_round} of {clients} clients a round, attacker ratio {self.ratio:g} "
                f"(rules' f = {self.f}), {data}")


class Cell(NamedTuple):
    """One cell of the table: its :class:`Group`, its column (``benign`` or the attack spec) and the
    config of its run (one run may serve several cells: a benign run without an f)."""

    group: Group
    attack: str
    config: RunConfig


def parse_spec(spec: str) -> tuple[str, str, dict[str, Any]]:
    """``"nnm+trimmed_mean"`` → (strategy ``trimmed_mean``, pre-aggregation ``nnm``, no keys);
    ``"calguard:cusum"`` → (``calguard``, no pre-aggregation, ``{"calguard_cusum": True}``): a
    ``:name`` after the strategy turns on its boolean key ``<strategy>-<name>``, so a rule's variant
    (CalGuard with its sequential test) is a row of its own; ``"nnm+krum"`` → (``multikrum``,
    ``nnm``, ``{"krum_m": 1}``) (:data:`fedcal.catalogue.rules.PRESETS`)."""
    from fedcal.catalogue.rules import PRESETS
    from fedcal.config import STRATEGIES, field_names, setting_of

    parts = [p.strip() for p in spec.split("+")]
    if not spec.strip() or any(not p for p in parts):
        raise ConfigError(f"--strategies: {spec!r}: an empty step (write e.g. nnm+trimmed_mean)")
    strategy, *flags = [t.strip() for t in parts[-1].split(":")]
    strategy, keys = PRESETS.get(strategy, (strategy, {}))
    if strategy not in STRATEGIES:
        raise ConfigError(f"--strategies: {spec!r}: unknown strategy {strategy!r}; choose from "
                          f"{', '.join([*STRATEGIES, *PRESETS])}")
    keys = dict(keys)
    for flag in flags:
        name = f"{strategy}_{flag.replace('-', '_')}"
        if not flag or name not in field_names() or not isinstance(setting_of(name).default, bool):
            raise ConfigError(f"--strategies: {spec!r}: {flag!r} names no boolean key "
                              f"'{strategy}-{flag}' of the strategy")
        keys[name] = True
    return strategy, ",".join(parts[:-1]), keys


def parse_attack(spec: str) -> tuple[str, dict[str, Any]]:
    """``"ipm:eps=10"`` → (``ipm``, ``{"ipm_epsilon": 10.0}``); ``"minmax:std"`` → (``minmax``,
    ``{"minmax_direction": "std"}``); ``"alie"`` → (``alie``, {}) (the paper's z). The value is read as
    its key's type; its range is checked when the cell's config is built (:func:`byzantine_cells`).
    ConfigError, in one line naming the spec, for an unknown attack or parameter, a value that is not
    of the key's type, a parameter given twice, and ``alie:z=0`` (``alie-z = 0`` *is* the paper's z:
    write ``alie``)."""
    from fedcal.config import ATTACKS, key_of, setting_of

    name, *params = [t.strip() for t in spec.split(":")]
    if name not in ATTACKS or name == "none":
        raise ConfigError(f"--attacks: {spec!r}: unknown attack {name!r}; choose from "
                          f"{', '.join(a for a in ATTACKS if a != 'none')} (the benign run is always added)")
    allowed = ATTACK_PARAMETERS.get(name, {})
    keys: dict[str, Any] = {}
    for param in params:
        pname, eq, text = param.partition("=")
        pname, text = (pname.strip(), text.strip()) if eq else ("", pname.strip())
        field = allowed.get(pname)
        if field is None or not text:
            names = ", ".join(f"{name}:{p}=…" if p else f"{name}:<{key_of(f)}>" for p, f in allowed.items())
            raise ConfigError(f"--attacks: {spec!r}: {param!r} is no parameter of {name}"
                              + (f" (it takes {names})" if names else " (it takes none)"))
        if field in keys:
            raise ConfigError(f"--attacks: {spec!r}: {key_of(field)} given twice")
        kind = type(setting_of(field).default)
        try:
            value = kind(text) if kind is not bool else None
        except ValueError:
            value = None
        if value is None or (kind is float and not math.isfinite(value)):
            raise ConfigError(f"--attacks: {spec!r}: {pname or key_of(field)} must be "
                              f"{'an integer' if kind is int else 'a finite number' if kind is float else kind.__name__}"
                              f", got {text!r}")
        keys[field] = value
    if keys.get("alie_z") == 0:
        raise ConfigError(f"--attacks: {spec!r}: alie-z = 0 stands for the paper's z from the round's n and f; "
                          "write alie for it")
    return name, keys


def _alpha_item(text: str) -> float:
    if text.strip().lower() in ("inf", "iid"):
        return math.inf
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Dirichlet alpha (a finite number > 0) or inf (IID), "
                                         "e.g. inf,1,0.5,0.1")
    return value


def alphas_type(text: str) -> list[float]:
    """``--alphas``: comma-separated Dirichlet α > 0, or ``inf`` (= ``iid``) for the IID partition; "" = the
    config's partition."""
    if not str(text).strip():
        return []
    items = [t.strip() for t in str(text).split(",")]
    if any(not t for t in items):
        raise argparse.ArgumentTypeError(f"empty item in {text!r}")
    values = [_alpha_item(t) for t in items]
    if len(set(values)) < len(values):
        raise argparse.ArgumentTypeError(f"an alpha listed twice in {text!r}")
    return values


#: ``--byzantine``: numbers of Byzantine clients f of the cross-silo setting, >= 1 (f = 0 is the benign run)
byzantine_type = number_list(int, low=1, ranges=True, what="Byzantine counts", example="1,2,3,4 or 1-4")
#: ``--honest``: honest clients of the cross-silo setting
honest_type = count_type(1, "honest")


def assumed_f(ratio: float, clients_per_round: int) -> int:
    """f = ⌈ratio · M⌉ (at least 1): the rules' assumed Byzantine replies per round under partial participation."""
    return max(1, math.ceil(ratio * clients_per_round - 1e-9))


def alpha_of(cfg: RunConfig) -> float:
    """The heterogeneity of a run's partition: ``inf`` for IID, else its Dirichlet α."""
    return math.inf if cfg.partition == "iid" else float(cfg.dirichlet_alpha)


def study_groups(base: RunConfig, setting: str = "partial", *, ratios: Sequence[float] = (), honest: int = 10,
                 byzantine: Sequence[int] = (), alphas: Sequence[float] = ()) -> list[tuple[Group, RunConfig]]:
    """The tables of a study, each a (:class:`Group`, base config of its runs): per α of ``alphas``
    (none: the config's partition), ``cross-silo`` one per f of ``byzantine`` (n + f clients, all
    every round, attacker ratio f / (n + f), which selects exactly f attackers), ``partial`` one per
    attacker ratio of ``ratios`` (f = :func:`assumed_f`). ConfigError, in one line, for an unknown
    setting or a setting without its list."""
    from fedcal.config import defaults

    if setting not in SETTINGS:
        raise ConfigError(f"--setting {setting!r}: choose from {', '.join(SETTINGS)}")
    if setting == "cross-silo" and not byzantine:
        raise ConfigError("--setting cross-silo needs --byzantine (the numbers f of Byzantine clients, e.g. 1,2,3,4)")
    if setting == "partial" and not ratios:
        raise ConfigError("--setting partial needs --ratios (the attacker ratios, e.g. 0.1,0.25)")
    groups = []
    for alpha in alphas or [alpha_of(base)]:
        data = ({"partition": "iid", "dirichlet_alpha": defaults()["dirichlet_alpha"]} if math.isinf(alpha)
                else {"partition": "dirichlet", "dirichlet_alpha": alpha}) if alphas else {}
        if setting == "cross-silo":
            for f in byzantine:
                n = honest + f
                cfg = base.replace(num_clients=n, clients_per_round=n, **data)
                ratio = f / n
                # round-half-up(ratio · K) is f exactly (f / n · n = f up to rounding, far from a half)
                assert cfg.replace(attack="alie", attacker_ratio=ratio).num_attackers == f
                groups.append((Group(setting, alpha, ratio, f), cfg))
        else:
            cfg = base.replace(**data)
            groups.extend((Group(setting, alpha, float(r), assumed_f(r, cfg.clients_per_round)), cfg) for r in ratios)
    return groups


def _rules_f(strategy: str, pre: str, f: int) -> dict[str, int]:
    """The keys that give a rule (and its pre-aggregation steps) the f of its table: each one's declared
    ``f_key`` (:class:`fedcal.catalogue.Component`)."""
    from fedcal import catalogue

    rules, steps = catalogue.components("rule"), catalogue.components("pre-aggregation")
    # an unknown name gives no key here: the cell's config refuses it, naming its run-config key
    chosen = [rules.get(strategy), *(steps.get(p.strip()) for p in pre.split(","))]
    return {c.f_key: f for c in chosen if c is not None and c.f_key is not None}


def not_applicable(strategy: str, attack: str) -> bool:
    """Whether ``attack`` cannot run against ``strategy`` (the line-search attacks evaluate the rule from
    the round's updates alone: FLTrust, FoolsGold and CalGuard keep state or a root set): no such cell."""
    from fedcal import catalogue
    from fedcal.config import RULE_AWARE_STRATEGIES

    return attack in catalogue.needing("attack", "rule-aware") and strategy not in RULE_AWARE_STRATEGIES


def byzantine_cells(base: RunConfig, strategies: Sequence[str], attacks: Sequence[str], ratios: Sequence[float],
                    seeds: Sequence[int], *, setting: str = "partial", honest: int = 10,
                    byzantine: Sequence[int] = (), alphas: Sequence[float] = ()) -> list[Cell]:
    """Every cell: table (:func:`study_groups`) × strategy spec × seed × (benign + each attack spec),
    validated up front (a bad spec, or a rule whose f does not fit the round, fails here in one line
    naming the spec and the key). Only the keys a cell's computation reads are set: the f of the rule
    that takes one (``krum-f``, ``trim-f``, ``pre-f`` for nnm / arc), the attacker ratio of attacked
    cells and the attack's own parameters, so the benign run of a strategy without an f serves every
    ratio of a partial study (one config, several cells). A line-search attack against a rule it
    cannot evaluate (:func:`not_applicable`) has no cell. Two specs that are one run (``ipm`` and
    ``ipm:eps=0.1``) are refused."""
    from fedcal.results import config_hash

    defaults = RunConfig()
    labels = list(attacks)
    if len(set(labels)) < len(labels) or "benign" in labels:
        raise ConfigError(f"--attacks: {', '.join(labels)}: an attack listed twice (the benign run is always added)")
    if len(set(strategies)) < len(strategies):
        raise ConfigError(f"--strategies: {', '.join(strategies)}: a strategy spec listed twice")
    parsed = [("benign", "none", {}), *((spec, *parse_attack(spec)) for spec in labels)]
    specs = [(spec, *parse_spec(spec)) for spec in strategies]
    cells = []
    for group, gbase in study_groups(base, setting, ratios=ratios, honest=honest, byzantine=byzantine, alphas=alphas):
        for spec, strategy, pre, keys in specs:
            own = {"pre_aggregation": pre, **keys, **_rules_f(strategy, pre, group.f)}
            for seed in seeds:
                seen: dict[str, str] = {}
                for label, attack, params in parsed:
                    if not_applicable(strategy, attack):
                        continue
                    try:
                        c = gbase.replace(strategy=strategy, seed=seed, attack=attack, **own, **params,
                                          attacker_ratio=group.ratio if attack != "none" else defaults.attacker_ratio)
                    except ConfigError as exc:
                        raise ConfigError(f"{spec} under {label} ({group.describe(gbase.num_clients, gbase.clients_per_round)}): "
                                          f"{exc}") from None
                    h = config_hash(c)
                    if h in seen:
                        raise ConfigError(f"--attacks: {seen[h]!r} and {label!r} are the same run; list it once")
                    seen[h] = label
                    cells.append(Cell(group, label, c))
    return cells


def byzantine_configs(cells: Sequence[Cell]) -> list[RunConfig]:
    """The distinct configs of ``cells`` (:func:`byzantine_cells`), in order."""
    from fedcal.results import config_hash

    out: dict[str, RunConfig] = {}
    for cell in cells:
        out.setdefault(config_hash(cell.config), cell.config)
    return list(out.values())


def _refuse_set_by_options(overrides: dict, args: argparse.Namespace) -> None:
    """A run-config key the study sets per table or per cell, given as an override as well (it would be
    replaced without a word): one line naming it and what sets it."""
    from fedcal.config import key_of

    set_by = {"attacker-ratio": "--ratios" if args.setting == "partial" else "--honest and --byzantine",
              **{k: "the study (the f of each table)" for k in ("krum-f", "trim-f", "pre-f")}}
    for spec in parse_names(args.attacks):
        set_by.update({key_of(k): f"the attack spec {spec!r}" for k in parse_attack(spec)[1]})
    for spec in parse_names(args.strategies):
        set_by.update({key_of(k): f"the strategy spec {spec!r}" for k in parse_spec(spec)[2]})
    if args.setting == "cross-silo":
        set_by.update({"num-clients": "--honest and --byzantine", "clients-per-round": "--honest and --byzantine"})
    if args.alphas:
        set_by.update({"partition": "--alphas", "dirichlet-alpha": "--alphas"})
    for key, option in set_by.items():
        if key in overrides or key.replace("-", "_") in overrides:
            raise ConfigError(f"run-config key {key!r} is set by {option} here; leave it out")


def _options_of(args: argparse.Namespace) -> dict[str, Any]:
    """The setting options, each refused in one line where it does not apply."""
    if args.setting == "cross-silo":
        if args.ratios is not None:
            raise ConfigError("--ratios applies to --setting partial; cross-silo takes --honest and --byzantine")
        return {"setting": "cross-silo", "honest": args.honest or 10, "byzantine": args.byzantine or [1, 2, 3, 4]}
    for option, value in (("--honest", args.honest), ("--byzantine", args.byzantine)):
        if value is not None:
            raise ConfigError(f"{option} applies to --setting cross-silo; partial takes --ratios")
    return {"setting": "partial"}


def cmd_byzantine(args: argparse.Namespace) -> int:
    from fedcal.app.sweep import run_sweep
    from fedcal.reports.byzantine import byzantine_report

    overrides = config_overrides(args)
    _refuse_set_by_options(overrides, args)
    setting = _options_of(args)
    out = Path(args.report)
    overrides.setdefault("output-dir", str(out / "runs"))
    overrides.setdefault("engine", "inprocess")
    base = RunConfig.from_flower(overrides)
    ratios = list(args.ratios) if args.ratios is not None else [0.1, 0.25]
    cells = byzantine_cells(base, parse_names(args.strategies), parse_names(args.attacks), ratios,
                            parse_ints(args.seeds, "--seeds"), alphas=args.alphas, **setting)
    configs = byzantine_configs(cells)
    refuse_unread_keys(overrides, configs)
    check_run_dirs(configs)
    skipped = [f"{spec} × {attack}" for spec in parse_names(args.strategies) for attack in parse_names(args.attacks)
               if not_applicable(parse_spec(spec)[0], parse_attack(attack)[0])]
    if skipped:
        print(f"byzantine: no cell for {', '.join(skipped)} (a line-search attack evaluates the rule from the round's "
              "updates alone; FLTrust, FoolsGold and CalGuard keep state or a root set): n/a in the table")
    if args.table_only:  # the table of what has finished, e.g. while another process runs the rest
        failures = []
        print(f"byzantine: {len(configs)} runs; none started (--table-only)")
    else:
        print(f"byzantine: {len(configs)} runs; "
              + ("all run again (--force)" if args.force else "finished runs are skipped"))
        failures = run_sweep(configs, jobs=max(args.jobs, 1), progress=not args.no_progress, restart=args.restart,
                             cluster=cluster_of(args), force=args.force)
    say_replaced(out, ["table.md", "table.csv", "runs.csv"])
    print(byzantine_report(cells, out, args.title))
    print(f"tables: {out / 'table.md'}, {out / 'table.csv'}, {out / 'runs.csv'}")
    return 1 if failures else 0


def add_commands(add: Any) -> None:
    """Add this study's sub-command(s) with ``add(name, help, **kwargs)`` (:func:`fedcal.cli.build_parser`)."""
    p = add("byzantine", "every strategy against every attack of Byzantine-robust FL: accuracy, sECE, ASR, worst case",
            description="Every strategy spec × (benign + each attack spec) × table (setting, alpha, f or ratio) × "
                        "seed is one Flower run (task = train, engine = inprocess unless given). A spec "
                        "nnm+trimmed_mean is trimmed_mean with pre-aggregation = nnm, krum is multikrum with "
                        "krum-m = 1; an attack spec ipm:eps=10 sets ipm-epsilon = 10. partial: krum-f, trim-f and "
                        "pre-f are ceil(ratio * clients-per-round); cross-silo: honest + f clients, all every "
                        "round, the rules given the true f. Finished runs are skipped (docs/defense.md).",
            epilog=KEYS_EPILOG)
    add_run_options(p)
    p.add_argument("--strategies", default=", ".join(DEFAULT_STRATEGIES), type=names_type("strategy specs"),
                   help="strategy specs compared (nnm+trimmed_mean, krum, nnm+krum, cclip+median, calguard:cusum)")
    p.add_argument("--attacks", default=", ".join(DEFAULT_ATTACKS), type=names_type("attacks", empty=True),
                   help="attack specs (alie, alie:z=1.5, ipm:eps=10, minmax:std, minsum:sign, ...); the benign run "
                        "is always added")
    p.add_argument("--setting", default="partial", choices=SETTINGS,
                   help="partial: clients-per-round of num-clients a round, attackers by --ratios; cross-silo: "
                        "--honest + f clients, all every round, f from --byzantine")
    p.add_argument("--ratios", default=None, type=ratios_type, help="partial: attacker ratios (default 0.1,0.25)")
    p.add_argument("--honest", default=None, type=honest_type, help="cross-silo: honest clients n (default 10)")
    p.add_argument("--byzantine", default=None, type=byzantine_type,
                   help="cross-silo: Byzantine clients f, one table each (default 1,2,3,4)")
    p.add_argument("--alphas", default="", type=alphas_type,
                   help="heterogeneity, one table each: Dirichlet alphas, inf = IID; \"\" = the config's partition")
    p.add_argument("--seeds", default="0-2", type=seeds_type, help="seeds, e.g. 0-2")
    p.add_argument("--jobs", type=jobs_type, default=0, help="runs in parallel")
    p.add_argument("--title", default="", help="title of the table")
    p.add_argument("--report", default="fedcal-byzantine", help="folder for the runs and tables")
    p.add_argument("--table-only", action="store_true",
                   help="start no run: the table of the runs that have finished (the others are left blank)")
    add_cluster_options(p)
    p.set_defaults(func=cmd_byzantine)
