"""The order of the built-in run-config keys.

:meth:`RunConfig.to_flower`, ``config.json`` and the sweep tables' config columns list the keys in
this order, so that committed tables rebuild byte for byte; keys of groups registered later (a
plug-in task's) follow in registration order. A new built-in key is appended at the end.
"""

KEY_ORDER = (
    "dataset", "data_dir", "model", "num_clients", "clients_per_round", "num_rounds", "partition",
    "dirichlet_alpha", "attack", "attacker_ratio", "tau", "coupled", "noise_sigma", "flip_shift", "lr", "momentum",
    "weight_decay", "batch_size", "local_steps", "seed", "n_bins", "strategy", "krum_f", "krum_m", "trim_f",
    "root_size", "mom_groups", "foolsgold_kappa", "eval_batch_size", "eval_every", "device", "engine",
    "client_cpus", "client_gpus", "output_dir", "run_name", "checkpoint_every", "task", "inf_f", "inf_server_frac",
    "inf_local_epochs", "inf_augment", "inf_client_output", "inf_attacks", "inf_amplification", "inf_pgd_steps",
    "inf_pgd_start", "inf_pgd_loss", "inf_pgd_grad", "inf_test_queries", "inf_eval_queries", "inf_aggregators",
    "inf_f_curve", "inf_curve_queries", "inf_amp_curve", "inf_query_batch", "inf_timeout", "agg_hidden",
    "agg_epochs", "agg_adv_epochs", "agg_lr", "agg_attack_steps", "agg_restarts", "agg_adv_attack", "agg_latent",
    "copur_steps", "dst_corpus", "dst_method", "dst_rounds", "dst_local_epochs", "dst_client_lr",
    "dst_weight_decay", "dst_warmup", "dst_ranks", "dst_alpha", "dst_lora_targets", "dst_lora_layers",
    "dst_anchor_frac", "dst_clip", "dst_aggregator", "dst_groups", "dst_cat", "dst_mmd", "dst_dis", "dst_t0",
    "dst_kappa", "dst_tau", "dst_lambda", "dst_rho", "dst_student_rank", "dst_distill_steps", "dst_distill_lr",
    "dst_distill_batch", "dst_partition", "dst_backdoor_ratio", "dst_poison_frac", "dst_trigger", "dst_target",
    "dst_control", "dst_anchor_attack", "dst_anchor_attack_frac", "dst_prior_correct", "dst_logit_attack",
    "dst_attack_factor", "dst_backbone", "dst_bb_hidden", "dst_bb_layers", "dst_bb_heads", "dst_bb_intermediate",
    "dst_bb_vocab", "dst_bb_steps", "dst_max_length", "dst_train_size", "dst_test_size", "dst_min_replies",
    "dst_eval_every", "calguard_kappa", "calguard_window", "calguard_strikes", "calguard_mode", "tsa_step_frac",
    "tsa_blend", "local_epochs", "augment", "optimizer", "lm_corpus", "lm_partition", "lm_model", "lm_tokenizer",
    "lm_vocab", "lm_layers", "lm_hidden", "lm_heads", "lm_context", "lm_pretrain_steps", "lm_top_p", "lm_prompts",
    "lm_prompt_count", "lm_prompt_words", "lm_gen_tokens", "lm_samples", "lm_eval_windows", "det_model", "det_data",
    "det_digits", "det_size", "det_min_digits", "det_max_digits", "det_min_scale", "det_max_scale", "det_alpha",
    "det_train_scenes", "det_test_scenes", "det_rounds", "det_clients_per_round", "det_local_steps",
    "det_batch_size", "det_lr", "det_weight_decay", "det_queries", "det_d_model", "det_enc_layers",
    "det_dec_layers", "det_backbone_width", "det_eos_coef", "det_threshold", "det_eval_every", "calguard_cusum",
    "calguard_cusum_signal", "calguard_cusum_k", "calguard_cusum_h_low", "calguard_cusum_h_high", "tsa_duty",
    "det_keep", "tracker", "ray_address", "alie_z", "ipm_epsilon", "minmax_direction", "fang_b", "backdoor_target",
    "backdoor_frac", "pre_aggregation", "pre_f", "clip_c", "cclip_tau", "cclip_iterations", "dst_prior_target",
    "calibration_metrics", "calibration_bootstrap", "fed_eval_clients", "calguard_signal",
)
