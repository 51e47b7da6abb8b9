"""ConfigSpec: a core module's typed spec is built from the run config by keyword, field by field,
with no default of its own that could drift from the setting's."""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass

import pytest

from fedcal.config import ConfigSpec, RunConfig, check_spec, field_names, setting_of

# every spec of the core, by module (a new spec is added here; the test below also finds any
# ConfigSpec subclass the imports bring in)
SPEC_MODULES = ("fedcal.attacks", "fedcal.reference", "fedcal.inference.federated", "fedcal.lm.model",
                "fedcal.lm.run_inputs", "fedcal.distill.run_data", "fedcal.detect.model", "fedcal.detect.scenes")


@dataclass(frozen=True)
class _Local(ConfigSpec):
    lr: float
    seed: int


@dataclass(frozen=True)
class _Toy(ConfigSpec):
    CONFIG_KEYS = {"clients": "num_clients"}
    GIVEN = ("classes",)
    OWN = ("steps",)

    clients: int
    tau: float
    classes: int
    local: _Local
    num_attackers: int  # a property of the train group
    steps: int = 7


def test_from_config_reads_each_field_by_name_or_by_its_declared_key():
    cfg = RunConfig(num_clients=12, tau=3.0, lr=0.5, seed=4, attacker_ratio=0.25)
    toy = _Toy.from_config(cfg, classes=5)
    assert toy == _Toy(clients=12, tau=3.0, classes=5, local=_Local(lr=0.5, seed=4), num_attackers=3, steps=7)
    assert _Toy.config_keys() == {"clients": "num_clients", "tau": "tau", "num_attackers": "num_attackers"}
    # a spec holding the keys under the config's names builds a smaller one (no RunConfig needed)
    assert _Local.from_config(_Local(lr=0.1, seed=2)) == _Local(lr=0.1, seed=2)


def test_from_config_takes_exactly_the_given_fields():
    with pytest.raises(TypeError, match="given field.*classes"):
        _Toy.from_config(RunConfig())
    with pytest.raises(TypeError, match="given field"):
        _Local.from_config(RunConfig(), lr=1.0)  # a config key cannot be overridden past the config


def test_check_spec_names_a_field_no_run_config_key_backs():
    @dataclass(frozen=True)
    class Bad(ConfigSpec):
        CONFIG_KEYS = {"size": "det_sise"}
        size: int
        lr: float

    with pytest.raises(TypeError, match=r"Bad: no run-config field for size <- det_sise"):
        check_spec(Bad)

    @dataclass
    class Mutable(ConfigSpec):
        lr: float

    with pytest.raises(TypeError, match="frozen"):
        check_spec(Mutable)
    check_spec(_Toy)


def _specs() -> list[type[ConfigSpec]]:
    for name in SPEC_MODULES:
        importlib.import_module(name)
    found, todo = [], list(ConfigSpec.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("fedcal."):
            found.append(cls)
    return sorted(found, key=lambda c: (c.__module__, c.__name__))


def test_the_core_specs_are_found():
    names = {c.__name__ for c in _specs()}
    assert {"AttackSpec", "LocalRoundSpec", "ReferenceSpec", "InferenceClientSpec", "LMConfig", "LMRunSpec",
            "DistillRunSpec", "DetectorSpec", "SceneSpec"} <= names


@pytest.mark.parametrize("spec", _specs(), ids=lambda c: c.__name__)
def test_every_core_spec_reads_run_config_fields_and_repeats_no_default(spec):
    """Each field is backed by a run-config field (or is given / the spec's own); a default a spec
    field carries is the setting's own, so the two cannot drift apart; and the spec built from a
    config holds that config's values."""
    check_spec(spec)
    keys = spec.config_keys()
    for f in dataclasses.fields(spec):
        if f.name in keys and f.default is not dataclasses.MISSING and keys[f.name] in field_names():
            assert f.default == setting_of(keys[f.name]).default, f"{spec.__name__}.{f.name}"
    cfg = RunConfig(seed=3, num_clients=7, tau=2.0, lr=0.05, det_size=48, lm_context=32, dst_rounds=4)
    given = {name: object() for name in spec.GIVEN}
    built = spec.from_config(cfg, **given)
    for name, key in keys.items():
        assert getattr(built, name) == getattr(cfg, key), f"{spec.__name__}.{name}"
