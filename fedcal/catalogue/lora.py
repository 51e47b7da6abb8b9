"""The distill task's LoRA methods (``dst-method``), declared once; each target is the method's class
in :mod:`fedcal.distill.methods` (its facts and its client and server hooks), built with no arguments."""

from __future__ import annotations

from fedcal.catalogue import Component, register

_M = "fedcal.distill.methods"
#: RFD-LoRA's own keys: its server's consensus and student, and its clients' logit and anchor attacks
_RFD_KEYS = ("dst_clip", "dst_aggregator", "dst_groups", "dst_cat", "dst_mmd", "dst_dis", "dst_t0", "dst_kappa", "dst_tau",
             "dst_lambda", "dst_rho", "dst_student_rank", "dst_distill_steps", "dst_distill_lr", "dst_distill_batch",
             "dst_prior_correct", "dst_prior_target", "dst_logit_attack", "dst_attack_factor", "dst_anchor_attack",
             "dst_anchor_attack_frac")

for _c in (
    Component("lora-method", "rfd", f"{_M}:RFDLoRA", keys=_RFD_KEYS,
              modules=("fedcal.pages.distill_literature",),  # its Table-1 claims against fedcal's runs
              summary="RFD-LoRA: anchor logits, robust consensus, distillation into the server's student"),
    Component("lora-method", "fedit", f"{_M}:FedITMethod",
              modules=("fedcal.pages.distill_budget_curve",),  # its budget curve beside a centralised LoRA
              summary="FedIT: A and B averaged separately, one rank"),
    Component("lora-method", "ffa", f"{_M}:FFALoRAMethod", summary="FFA-LoRA: A frozen and never sent, B averaged"),
    Component("lora-method", "flora", f"{_M}:FLoRAMethod",
              summary="FLoRA: stacked adapters merged into the base, any mix of ranks"),
    Component("lora-method", "flexlora", f"{_M}:FlexLoRAMethod",
              summary="FlexLoRA: the averaged full update, truncated by SVD to each node's rank"),
    Component("lora-method", "lorafair", f"{_M}:LoRAFairMethod",
              summary="LoRA-FAIR: FedIT with the server's residual refinement of B, one rank"),
):
    register(_c)
