"""One typed, validated run configuration, declared group by group.

:mod:`fedcal.config.schema` holds the machinery (:func:`setting`, :func:`group`,
:class:`RunConfig`, :class:`Task`, the generic validator); each other module of this package
is one config group — its fields and its own cross-field rules — and, for a task's own group, the
task's one declaration (the groups its hash covers, its run name, its rules, its Flower side by name). Importing this
package registers the built-in groups in the order ``fedcal run --help`` and
docs/configuration.md list them.
"""

from fedcal.config.schema import (ConfigError, FieldInfo, Group, RunConfig, Setting, check, config_fields, defaults,
                                  describe, field_names, fields_of, group, groups, key_of, parse_override, set_key_order,
                                  setting, setting_of)
from fedcal.config.task import Task, all_tasks, get_task, register_task, task_names
from fedcal.config.spec import ConfigSpec, check_spec

from fedcal.config.common import *  # noqa: E402,F401,F403,I001 — each module registers its group
from fedcal.config.train import *  # noqa: E402,F401,F403
from fedcal.config.defense import *  # noqa: E402,F401,F403
from fedcal.config.inference import *  # noqa: E402,F401,F403
from fedcal.config.distill import *  # noqa: E402,F401,F403
from fedcal.config.lm import *  # noqa: E402,F401,F403
from fedcal.config.detect import *  # noqa: E402,F401,F403
from fedcal.config.execution import *  # noqa: E402,F401,F403
from fedcal.config.order import KEY_ORDER  # noqa: E402

set_key_order(KEY_ORDER)
# from here on the catalogue's components' own keys are fields too (fedcal.config.component_keys)
from fedcal.config import component_keys as _component_keys  # noqa: E402

_component_keys.ready()


def _names(kind: str, need: str | None = None):
    def names() -> tuple[str, ...]:
        from fedcal import catalogue

        return catalogue.names(kind) if need is None else catalogue.needing(kind, need)
    return names


#: names kept importable from earlier versions: each the catalogue's answer to a question, asked when read
#: (never a second list of names)
_FROM_CATALOGUE = {
    "STRATEGIES": _names("rule"),
    "ROOT_SET_STRATEGIES": _names("rule", "root-set"),
    "PRE_AGGREGATIONS": _names("pre-aggregation"),
    "ATTACKS": _names("attack"),
    "POISONING_ATTACKS": _names("attack", "omniscient"),
    "INFERENCE_ATTACKS": _names("inference-attack"),
    "INFERENCE_AGGREGATORS": _names("inference-aggregator"),
    "RULE_AWARE_STRATEGIES": evaluable_rules,  # noqa: F405 (fedcal.config.train's)
}


def __getattr__(name: str):
    if name in _FROM_CATALOGUE:
        return _FROM_CATALOGUE[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["ConfigError", "ConfigSpec", "FieldInfo", "Group", "RunConfig", "Setting", "Task", "all_tasks", "check",
           "config_fields", "defaults", "describe", "field_names", "fields_of", "get_task", "group", "groups", "key_of",
           "parse_override", "check_spec", "register_task", "set_key_order", "setting", "setting_of", "task_names"]
