"""One typed, validated run configuration.

The single source of configuration is Flower's run config (``[tool.flwr.app.config]`` in
``pyproject.toml``, plus ``--run-config`` overrides). Its kebab-case keys map one-to-one to
the snake_case fields of :class:`RunConfig`. :meth:`RunConfig.from_flower` parses it once;
unknown keys, wrong types and out-of-range values raise :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import tomllib
from dataclasses import dataclass, fields
from typing import Any, Mapping

DATASETS = ("digits", "mnist", "cifar10", "cifar100", "synthetic")
MODELS = ("mlp", "cnn", "resnet18", "cnn1d")
ATTACKS = ("none", "tsa", "noise", "labelflip")
PARTITIONS = ("dirichlet", "iid")
STRATEGIES = ("fedavg", "fltrust", "foolsgold", "multikrum", "trimmed_mean", "median", "geometric_median",
              "median_of_means")
DEVICES = ("auto", "cpu", "cuda")
ENGINES = ("ray", "inprocess")
TASKS = ("tsa", "inference")
# Probit-space attacks of robust federated inference (SPEC §7); fedcal.inference.attacks.ATTACKS.
INFERENCE_ATTACKS = ("none", "logit_flip", "sia_blackbox", "sia_blackbox_colluding", "sia_whitebox", "lma", "cpa",
                     "pgd_cw")

# Keys that describe where and how a run executes, not what it computes: they are left
# out of the config hash so the same experiment on CPU or GPU is recognised as the same.
_NON_SEMANTIC = {"output_dir", "run_name", "device", "data_dir", "eval_batch_size", "client_cpus", "client_gpus", "engine",
                 "inf_timeout", "inf_query_batch"}
# What the clients' probits of an inference run depend on (their local training and the queries):
# runs that differ only in aggregator or attack settings reuse each other's probits.
_COLLECTION_KEYS = ("dataset", "model", "num_clients", "dirichlet_alpha", "lr", "momentum", "weight_decay",
                    "batch_size", "seed", "inf_server_frac", "inf_local_epochs", "inf_test_queries")
# Keys read only by the inference task: a TSA run's hash leaves them (and ``task``) out, so
# TSA hashes are those of configs written before the inference task existed.
_INFERENCE_ONLY = {"task", "inf_f", "inf_server_frac", "inf_local_epochs", "inf_attacks", "inf_amplification",
                   "inf_pgd_steps", "inf_f_curve", "inf_amp_curve", "agg_hidden", "agg_epochs", "agg_lr",
                   "agg_adv_epochs", "agg_attack_steps", "agg_restarts", "inf_test_queries", "inf_curve_queries"}


class ConfigError(ValueError):
    """A run-config key is unknown, mistyped or out of range. The message names the key."""


def key_of(field_name: str) -> str:
    """Run-config key (kebab-case) of a :class:`RunConfig` field."""
    return field_name.replace("_", "-")


@dataclass(frozen=True)
class RunConfig:
    """Everything one federated run needs. Defaults are SPEC §2's MNIST–MLP table row."""

    dataset: str = "mnist"
    data_dir: str = ""  # "" → $FEDCAL_DATA_DIR, else ~/.cache/fedcal/data
    model: str = "mlp"
    num_clients: int = 50  # K
    clients_per_round: int = 5  # M
    num_rounds: int = 100
    partition: str = "dirichlet"
    dirichlet_alpha: float = 1.0
    attack: str = "tsa"  # what the attacker subset does; "none" = all benign
    attacker_ratio: float = 0.25  # 13 of 50
    tau: float = 1.0  # TSA temperature (1.0 = benign behaviour)
    coupled: bool = True  # η = β·τ (False: the uncoupled ablation, η = β)
    noise_sigma: float = 0.1
    flip_shift: int = 1
    lr: float = 0.01  # β, the benign learning rate
    momentum: float = 0.0
    weight_decay: float = 0.0
    batch_size: int = 64  # B
    local_steps: int = 5  # E
    seed: int = 0
    n_bins: int = 15
    strategy: str = "fedavg"
    krum_f: int = 1  # MultiKrum: assumed Byzantine replies per round (f = 1 for n = 5)
    krum_m: int = 0  # MultiKrum: updates averaged; 0 → n − f
    trim_f: int = 1  # trimmed mean: values dropped per side and coordinate
    root_size: int = 100  # FLTrust: server's clean root set, drawn from the training data
    mom_groups: int = 3  # median-of-means: number of groups
    foolsgold_kappa: float = 1.0
    eval_batch_size: int = 1000
    eval_every: int = 1  # central evaluation every k rounds (and always after round 0 and the last)
    device: str = "auto"
    engine: str = "ray"  # "ray": Flower's Simulation Engine; "inprocess": same apps, no Ray
    client_cpus: float = 1.0  # Ray resources per virtual client (simulation only)
    client_gpus: float = 0.0  # fractional GPUs per virtual client, e.g. 0.25
    output_dir: str = "runs"
    run_name: str = ""
    # --- robust federated inference (task = "inference", SPEC §7) ---
    task: str = "tsa"  # "tsa": federated training under TSA; "inference": robust federated inference
    inf_f: int = 4  # adversarial clients per query, and what the robust aggregators are built for
    inf_server_frac: float = 0.1  # training data kept by the server for training its aggregator
    inf_local_epochs: int = 10  # epochs each client trains its own classifier
    inf_attacks: str = ",".join(INFERENCE_ATTACKS)  # evaluated attacks (comma-separated)
    inf_amplification: float = 2.0  # logit flipping's a
    inf_pgd_steps: int = 50  # PGD-CW sign-gradient steps (step 0.1)
    inf_test_queries: int = 0  # test queries evaluated (the first k of the test set; 0 = all)
    inf_f_curve: bool = True  # also evaluate every f_adv = 0..(n-1)//2 (aggregators stay built for inf-f)
    inf_curve_queries: int = 2000  # test queries of the accuracy-vs-f and vs-amplification curves (0 = all)
    inf_amp_curve: str = "0.5,1,2,4,8,16"  # logit-flip amplifications for the accuracy-vs-a curve ("" = none)
    inf_query_batch: int = 500  # queries per message
    inf_timeout: float = 600.0  # seconds the server waits for replies to one query message
    agg_hidden: int = 224  # DeepSet width h
    agg_epochs: int = 100  # DeepSet epochs on the clean probits (cheap) ...
    agg_adv_epochs: int = 20  # ... then epochs of adversarial training (SPEC §7; 0 = plain DeepSet)
    agg_lr: float = 1e-3
    agg_attack_steps: int = 10  # sign-gradient steps per adversarial-training batch
    agg_restarts: int = 2  # adversarial-training starts per batch (the 2nd from a simplex vertex); worst kept

    # ------------------------------------------------------------------ parsing
    @classmethod
    def from_flower(cls, run_config: Mapping[str, Any] | None = None, **overrides: Any) -> RunConfig:
        """Build from a Flower run config (kebab-case keys) plus keyword overrides.

        Keyword overrides may use either snake_case or kebab-case names.
        """
        raw: dict[str, Any] = {}
        for source in (run_config or {}), overrides:
            for k, v in source.items():
                raw[str(k).replace("_", "-")] = v
        known = {key_of(f.name): f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown run-config key {unknown[0]!r}"
                + (f" (and {unknown[1:]})" if len(unknown) > 1 else "")
                + f"; known keys: {', '.join(sorted(known))}"
            )
        values = {known[k].name: _coerce(k, v, known[k].type) for k, v in raw.items()}
        cfg = cls(**values)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Raise :class:`ConfigError` for the first out-of-range value."""
        _choice("dataset", self.dataset, DATASETS)
        _choice("model", self.model, MODELS)
        _choice("attack", self.attack, ATTACKS)
        _choice("partition", self.partition, PARTITIONS)
        _choice("strategy", self.strategy, STRATEGIES)
        _choice("device", self.device, DEVICES)
        _choice("engine", self.engine, ENGINES)
        _check("num-clients", self.num_clients >= 1, self.num_clients, "must be >= 1")
        _check("clients-per-round", self.clients_per_round >= 1, self.clients_per_round, "must be >= 1")
        _check(
            "clients-per-round",
            self.clients_per_round <= self.num_clients,
            self.clients_per_round,
            f"must not exceed num-clients ({self.num_clients})",
        )
        _check("num-rounds", self.num_rounds >= 1, self.num_rounds, "must be >= 1")
        _check("dirichlet-alpha", self.dirichlet_alpha > 0, self.dirichlet_alpha, "must be > 0")
        _check("attacker-ratio", 0 <= self.attacker_ratio < 1, self.attacker_ratio, "must lie in [0, 1)")
        _check("tau", self.tau > 0 and math.isfinite(self.tau), self.tau, "must be a finite number > 0")
        _check("noise-sigma", self.noise_sigma >= 0, self.noise_sigma, "must be >= 0")
        _check("flip-shift", self.flip_shift >= 1, self.flip_shift, "must be >= 1")
        _check("lr", self.lr > 0 and math.isfinite(self.lr), self.lr, "must be a finite number > 0")
        _check("momentum", 0 <= self.momentum < 1, self.momentum, "must lie in [0, 1)")
        _check("weight-decay", self.weight_decay >= 0, self.weight_decay, "must be >= 0")
        _check("batch-size", self.batch_size >= 1, self.batch_size, "must be >= 1")
        _check("local-steps", self.local_steps >= 1, self.local_steps, "must be >= 1")
        _check("seed", self.seed >= 0, self.seed, "must be >= 0")
        _check("n-bins", self.n_bins >= 1, self.n_bins, "must be >= 1")
        _check("client-cpus", self.client_cpus > 0, self.client_cpus, "must be > 0")
        _check("client-gpus", self.client_gpus >= 0, self.client_gpus, "must be >= 0")
        _check("krum-f", self.krum_f >= 0, self.krum_f, "must be >= 0")
        _check("krum-m", self.krum_m >= 0, self.krum_m, "must be >= 0 (0 = n - f)")
        if self.strategy == "multikrum":
            _check("krum-f", self.clients_per_round >= self.krum_f + 3, self.krum_f,
                   f"needs clients-per-round >= krum-f + 3 (clients-per-round = {self.clients_per_round})")
            _check("krum-m", self.krum_m <= self.clients_per_round, self.krum_m,
                   f"must not exceed clients-per-round ({self.clients_per_round})")
        _check("trim-f", self.trim_f >= 0, self.trim_f, "must be >= 0")
        if self.strategy == "trimmed_mean":
            _check("trim-f", self.clients_per_round > 2 * self.trim_f, self.trim_f,
                   f"needs clients-per-round > 2 * trim-f (clients-per-round = {self.clients_per_round})")
        _check("root-size", self.root_size >= 1, self.root_size, "must be >= 1")
        _check("mom-groups", self.mom_groups >= 1, self.mom_groups, "must be >= 1")
        _check("foolsgold-kappa", self.foolsgold_kappa > 0, self.foolsgold_kappa, "must be > 0")
        _check("eval-every", self.eval_every >= 1, self.eval_every, "must be >= 1")
        _check("eval-batch-size", self.eval_batch_size >= 1, self.eval_batch_size, "must be >= 1")
        _choice("task", self.task, TASKS)
        _check("inf-f", self.inf_f >= 0, self.inf_f, "must be >= 0")
        if self.task == "inference":
            _check("inf-f", 2 * self.inf_f < self.num_clients, self.inf_f,
                   f"needs 2 * inf-f < num-clients (num-clients = {self.num_clients})")
        _check("inf-server-frac", 0 < self.inf_server_frac < 1, self.inf_server_frac, "must lie in (0, 1)")
        _check("inf-local-epochs", self.inf_local_epochs >= 1, self.inf_local_epochs, "must be >= 1")
        for name in self.inference_attacks:
            _choice("inf-attacks", name, INFERENCE_ATTACKS)
        _check("inf-attacks", bool(self.inference_attacks), self.inf_attacks, "must name at least one attack")
        _check("inf-amplification", self.inf_amplification > 0, self.inf_amplification, "must be > 0")
        _check("inf-pgd-steps", self.inf_pgd_steps >= 0, self.inf_pgd_steps, "must be >= 0")
        try:
            amps = self.amplification_curve
        except ValueError:
            raise ConfigError(f"run-config key 'inf-amp-curve' must be comma-separated numbers, got {self.inf_amp_curve!r}")
        _check("inf-amp-curve", all(a > 0 for a in amps), self.inf_amp_curve, "values must be > 0")
        _check("inf-query-batch", self.inf_query_batch >= 1, self.inf_query_batch, "must be >= 1")
        _check("inf-timeout", self.inf_timeout > 0, self.inf_timeout, "must be > 0")
        _check("agg-hidden", self.agg_hidden >= 1, self.agg_hidden, "must be >= 1")
        _check("agg-epochs", self.agg_epochs >= 0, self.agg_epochs, "must be >= 0")
        _check("agg-adv-epochs", self.agg_adv_epochs >= 0, self.agg_adv_epochs, "must be >= 0")
        _check("inf-test-queries", self.inf_test_queries >= 0, self.inf_test_queries, "must be >= 0 (0 = all)")
        _check("inf-curve-queries", self.inf_curve_queries >= 0, self.inf_curve_queries, "must be >= 0 (0 = all)")
        _check("agg-lr", self.agg_lr > 0, self.agg_lr, "must be > 0")
        _check("agg-attack-steps", self.agg_attack_steps >= 0, self.agg_attack_steps, "must be >= 0")
        _check("agg-restarts", self.agg_restarts >= 1, self.agg_restarts, "must be >= 1")
        if self.task == "inference" and self.agg_adv_epochs:
            _check("inf-f", self.inf_f >= 1, self.inf_f, "must be >= 1 for adversarial training (agg-adv-epochs > 0)")

    # ------------------------------------------------------------------ output
    def to_flower(self) -> dict[str, Any]:
        """Kebab-case dict of every key: a valid Flower run config / ConfigRecord."""
        return {key_of(f.name): getattr(self, f.name) for f in fields(self)}

    def replace(self, **changes: Any) -> RunConfig:
        """A validated copy with some fields changed (snake_case or kebab-case names)."""
        return RunConfig.from_flower(self.to_flower(), **changes)

    def config_hash(self) -> str:
        """Stable hash of the keys that change what is computed (not where it runs)."""
        skip = _NON_SEMANTIC | (_INFERENCE_ONLY if self.task == "tsa" else set())
        semantic = {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}
        blob = json.dumps(semantic, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def collection_hash(self) -> str:
        """Hash of what an inference run's collected client probits depend on."""
        blob = json.dumps({k: getattr(self, k) for k in _COLLECTION_KEYS}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def default_run_name(self) -> str:
        """Readable, unique-per-config directory name."""
        if self.task == "inference":
            return (f"{self.dataset}-{self.model}-inference-n{self.num_clients}-f{self.inf_f}-s{self.seed}-"
                    f"{self.config_hash()[:8]}")
        what = self.attack if self.attack != "tsa" else f"tsa{self.tau:g}" + ("" if self.coupled else "u")
        return f"{self.dataset}-{self.model}-{self.strategy}-{what}-s{self.seed}-{self.config_hash()[:8]}"

    @property
    def inference_attacks(self) -> tuple[str, ...]:
        """``inf-attacks`` as a tuple of names."""
        return tuple(a.strip() for a in self.inf_attacks.split(",") if a.strip())

    @property
    def amplification_curve(self) -> tuple[float, ...]:
        """``inf-amp-curve`` as a tuple of amplifications (empty: no curve)."""
        return tuple(float(a) for a in self.inf_amp_curve.split(",") if a.strip())

    @property
    def num_attackers(self) -> int:
        """Number of malicious clients: round-half-up of ratio·K (0.25·50 → 13)."""
        if self.attack == "none":
            return 0
        return int(math.floor(self.attacker_ratio * self.num_clients + 0.5 + 1e-9))


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``key=value`` override; values are TOML (``tau=5``, ``coupled=false``).

    Bare words that are not TOML are taken as strings (``dataset=digits``).
    """
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value")
    key, value = (s.strip() for s in text.split("=", 1))
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    return key, parsed


def _coerce(key: str, value: Any, typ: Any) -> Any:
    typ = {"int": int, "float": float, "bool": bool, "str": str}.get(typ, typ) if isinstance(typ, str) else typ
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(f"run-config key {key!r} must be a bool, got {value!r}")
    if typ in (int, float):
        kind = "an integer" if typ is int else "a number"
        if not isinstance(value, bool):
            if typ is int and isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, int) or (typ is float and isinstance(value, float)):
                return typ(value)
            if isinstance(value, str):
                try:
                    return typ(value)
                except ValueError:
                    pass
        raise ConfigError(f"run-config key {key!r} must be {kind}, got {value!r}")
    if typ is str:
        if not isinstance(value, str):
            raise ConfigError(f"run-config key {key!r} must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {typ!r}")  # pragma: no cover


def _choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"run-config key {key!r}: unknown value {value!r}; choose one of {', '.join(allowed)}")


def _check(key: str, ok: bool, value: Any, why: str) -> None:
    if not ok:
        raise ConfigError(f"run-config key {key!r} {why}, got {value!r}")
