"""fedcal's robust-inference attacks (``inf-attacks``) and aggregators (``inf-aggregators``), declared once."""

from __future__ import annotations

from fedcal.catalogue import Component, register

_P = "fedcal.inference.probit_attacks"
_LEARNED = frozenset({"server-model"})  # trained on the server's split of the training data
#: every inference attack's logit-space form (against aggregators that read logits) is its own too
_FORMS = ("fedcal.inference.logit_attacks",)

for _c in (
    Component("inference-attack", "none", f"{_P}:no_attack", modules=_FORMS, summary="no attack"),
    Component("inference-attack", "logit_flip", f"{_P}:logit_flip", modules=_FORMS,
              summary="the adversaries flip their logits"),
    Component("inference-attack", "sia_blackbox", f"{_P}:sia_blackbox", modules=_FORMS, summary="SIA, black box"),
    Component("inference-attack", "sia_blackbox_colluding", f"{_P}:_sia_colluding",
              modules=_FORMS, summary="SIA, black box, colluding adversaries"),
    Component("inference-attack", "sia_whitebox", f"{_P}:sia_whitebox", modules=_FORMS, summary="SIA, white box"),
    Component("inference-attack", "lma", f"{_P}:lma", modules=_FORMS, summary="least-likely-class attack"),
    Component("inference-attack", "cpa", f"{_P}:cpa", modules=_FORMS, summary="class-prior attack"),
    Component("inference-attack", "pgd_cw", f"{_P}:pgd_cw", modules=_FORMS,
              summary="PGD on the CW margin of the aggregate"),
    Component("inference-attack", "sia_whitebox_raise", f"{_P}:sia_whitebox_raise",
              modules=_FORMS, summary="SIA, white box, the literature's off-simplex rows"),
):
    register(_c)

_A = "fedcal.inference"
for _name, _target, _needs in (
    ("mean", "aggregators:Mean", frozenset()),
    ("median", "aggregators:CoordinateMedian", frozenset()),
    ("geometric_median", "aggregators:GeometricMedian", frozenset()),
    ("trimmed_mean", "aggregators:TrimmedMean", frozenset()),
    ("manifold_projection", "purify:ManifoldProjection", _LEARNED),
    ("copur", "purify:CoPur", _LEARNED),
    ("manifold_projection_logit", "purify:ManifoldProjection", _LEARNED),
    ("copur_logit", "purify:CoPur", _LEARNED),
    ("deepset_plain", "deepset:DeepSet", _LEARNED),
    ("deepset_plain_tm", "deepset:DeepSetTM", _LEARNED),
    ("deepset", "deepset:DeepSet", _LEARNED),
    ("deepset_tm", "deepset:DeepSetTM", _LEARNED),
):
    register(Component("inference-aggregator", _name, f"{_A}.{_target}", needs=_needs))
