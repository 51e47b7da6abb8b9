"""RFD-LoRA core: robust federated distillation of heterogeneous-rank LoRA clients (flwr-free;
pure torch).

Clients of different LoRA ranks cannot average their adapters directly; instead each uploads its
logits on a shared anchor set, the server forms a robust consensus teacher and distils it into the
student. One round's uploads are a tensor Z of shape (n clients, A anchors, C classes).

==============  ===================================================================================
module          contents
==============  ===================================================================================
consensus       :func:`clip_logits`, :func:`random_groups`, :func:`group_moments`,
                :func:`median_of_means`, :func:`aggregate_logits` ("mom" / "median" / "mean") →
                :class:`Consensus` (logits z̃, moments μ̂ and σ̂², DIS dispersion v), :func:`true_median`;
                :func:`~fedcal.distill.consensus.prior_correct` (fedcal's label-prior correction)
loss            :func:`dis_weights` (DIS), :func:`cat_temperature` (CAT), :func:`distillation_loss`,
                :func:`distillation_terms` (per-anchor pieces, :class:`DistillationTerms`)
lora            the baselines' adapter aggregation: :func:`fedit_average` (FedIT),
                :func:`ffa_average` (FFA-LoRA), :func:`flora_stack` (FLoRA),
                :func:`flexlora_redistribute` (FlexLoRA), :func:`lora_fair_refine` (LoRA-FAIR),
                :func:`lora_delta`
anchor_attack   anchor-set poisoning by clients that know the public anchors: the anchors that carry
                the trigger or that an adversary chooses, and its crafted target-class logits
clients         (peft; import it as ``fedcal.distill.clients``) heterogeneous-rank LoRA clients on a
                frozen HF sequence classifier: :func:`lora_model`, :func:`adapter_state` /
                :func:`load_adapter_state`, :func:`local_train`, :func:`anchor_logits`
adapters        (peft) the baselines' rules applied to clients' adapter states and written back
                into peft models: FedIT, FFA-LoRA, FLoRA (merge + fresh adapter), FlexLoRA, LoRA-FAIR
methods         the ``dst-method`` choices, one object each with its client and server hooks
                (``lora-method`` components of :mod:`fedcal.catalogue`), :func:`~fedcal.distill.methods.upload_bytes`
student         (peft) the server's student (frozen backbone + own LoRA + head),
                :func:`build_consensus`, :func:`distill_step`, :func:`predict`, CA / RA / ASR
==============  ===================================================================================

``clients``, ``adapters`` and ``student`` are not imported here: they need peft and transformers
(seconds to import), which the tensor core above does not.

A server round: ``Z = clip_logits(Z, c)``; ``teacher = aggregate_logits(Z, "mom", M, generator)``;
each student minimises ``distillation_loss(student_logits, teacher)``. Every function validates its
inputs and raises ``ValueError`` naming the problem. Each module's docstring gives its sources.
"""

from __future__ import annotations

from .consensus import (METHODS, Consensus, aggregate_logits, check_groups, clip_logits, group_dispersion,
                        group_moments, median_of_means, random_groups, true_median)
from .lora import fedit_average, ffa_average, flexlora_redistribute, flora_stack, lora_delta
from .loss import DistillationTerms, cat_temperature, dis_weights, distillation_loss, distillation_terms

__all__ = [
    "METHODS",
    "Consensus",
    "DistillationTerms",
    "aggregate_logits",
    "cat_temperature",
    "check_groups",
    "clip_logits",
    "dis_weights",
    "distillation_loss",
    "distillation_terms",
    "fedit_average",
    "ffa_average",
    "flexlora_redistribute",
    "flora_stack",
    "group_dispersion",
    "group_moments",
    "lora_delta",
    "median_of_means",
    "random_groups",
    "true_median",
]
