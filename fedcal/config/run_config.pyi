# Generated from fedcal/config/<group>.py and the components' own keys (fedcal/catalogue/) by
# `python -m fedcal.config --write-stub`: do not edit by hand (a test checks it is current).
# RunConfig derives from RunConfigFields while type checking only.
"""The static types of RunConfig's built-in fields and of its groups' properties (fedcal/config/stub.py)."""

class RunConfigFields:
    # common: read by every task: data, the clients' model and optimiser, seed, task
    dataset: str
    model: str
    num_clients: int
    partition: str
    dirichlet_alpha: float
    lr: float
    momentum: float
    weight_decay: float
    batch_size: int
    seed: int
    n_bins: int
    task: str
    optimizer: str
    # train: federated training under attack (task = train): rounds, attackers, evaluation
    clients_per_round: int
    num_rounds: int
    attack: str
    attacker_ratio: float
    tau: float
    coupled: bool
    noise_sigma: float
    flip_shift: int
    local_steps: int
    eval_every: int
    tsa_step_frac: float
    tsa_blend: float
    local_epochs: int
    augment: str
    tsa_duty: float
    alie_z: float
    ipm_epsilon: float
    minmax_direction: str
    fang_b: float
    backdoor_target: int
    backdoor_frac: float
    calibration_metrics: str
    calibration_bootstrap: int
    fed_eval_clients: int
    client_momentum: float
    mimic_target: int
    # defense: the server's aggregation rule and its parameters (task = train)
    strategy: str
    krum_f: int
    krum_m: int
    trim_f: int
    root_size: int
    mom_groups: int
    foolsgold_kappa: float
    calguard_kappa: float
    calguard_window: int
    calguard_strikes: int
    calguard_mode: str
    calguard_cusum: bool
    calguard_cusum_signal: str
    calguard_cusum_k: float
    calguard_cusum_h_low: float
    calguard_cusum_h_high: float
    pre_aggregation: str
    pre_f: int
    clip_c: float
    cclip_tau: float
    cclip_iterations: int
    calguard_signal: str
    # inference: robust federated inference (task = inference, SPEC §7)
    inf_f: int
    inf_server_frac: float
    inf_local_epochs: int
    inf_augment: str
    inf_client_output: str
    inf_attacks: str
    inf_amplification: float
    inf_pgd_steps: int
    inf_pgd_start: str
    inf_pgd_loss: str
    inf_pgd_grad: str
    inf_test_queries: int
    inf_eval_queries: int
    inf_aggregators: str
    inf_f_curve: bool
    inf_curve_queries: int
    inf_amp_curve: str
    inf_query_batch: int
    inf_timeout: float
    agg_hidden: int
    agg_epochs: int
    agg_adv_epochs: int
    agg_lr: float
    agg_attack_steps: int
    agg_restarts: int
    agg_adv_attack: str
    agg_latent: int
    copur_steps: int
    inf_lr_schedule: str
    inf_probits: str
    inf_probits_dir: str
    agg_adv_subsets: int
    # distill: RFD-LoRA and the LoRA baselines on text (task = distill, SPEC §8)
    dst_corpus: str
    dst_method: str
    dst_rounds: int
    dst_local_epochs: int
    dst_client_lr: float
    dst_weight_decay: float
    dst_warmup: float
    dst_ranks: str
    dst_alpha: float
    dst_lora_targets: str
    dst_lora_layers: int
    dst_anchor_frac: float
    dst_clip: float
    dst_aggregator: str
    dst_groups: int
    dst_cat: bool
    dst_mmd: bool
    dst_dis: bool
    dst_t0: float
    dst_kappa: float
    dst_tau: float
    dst_lambda: float
    dst_rho: float
    dst_student_rank: int
    dst_distill_steps: int
    dst_distill_lr: float
    dst_distill_batch: int
    dst_partition: str
    dst_backdoor_ratio: float
    dst_poison_frac: float
    dst_trigger: str
    dst_target: int
    dst_control: str
    dst_anchor_attack: str
    dst_anchor_attack_frac: float
    dst_prior_correct: bool
    dst_logit_attack: str
    dst_attack_factor: float
    dst_backbone: str
    dst_bb_hidden: int
    dst_bb_layers: int
    dst_bb_heads: int
    dst_bb_intermediate: int
    dst_bb_vocab: int
    dst_bb_steps: int
    dst_max_length: int
    dst_train_size: int
    dst_test_size: int
    dst_min_replies: int
    dst_eval_every: int
    dst_prior_target: str
    # lm: TSA on a federated GPT-2 language model (task = lm, SPEC §10)
    lm_corpus: str
    lm_partition: str
    lm_model: str
    lm_tokenizer: str
    lm_vocab: int
    lm_layers: int
    lm_hidden: int
    lm_heads: int
    lm_context: int
    lm_pretrain_steps: int
    lm_top_p: float
    lm_prompts: str
    lm_prompt_count: int
    lm_prompt_words: int
    lm_gen_tokens: int
    lm_samples: int
    lm_eval_windows: int
    # detect: TSA on federated DETR object detection (task = detect, SPEC §10)
    det_model: str
    det_data: str
    det_digits: str
    det_size: int
    det_min_digits: int
    det_max_digits: int
    det_min_scale: int
    det_max_scale: int
    det_alpha: float
    det_train_scenes: int
    det_test_scenes: int
    det_rounds: int
    det_clients_per_round: int
    det_local_steps: int
    det_batch_size: int
    det_lr: float
    det_weight_decay: float
    det_queries: int
    det_d_model: int
    det_enc_layers: int
    det_dec_layers: int
    det_backbone_width: int
    det_eos_coef: float
    det_threshold: float
    det_eval_every: int
    det_keep: str
    # execution: where and how a run executes; never part of a run's identity (config hash)
    data_dir: str
    eval_batch_size: int
    device: str
    engine: str
    client_cpus: float
    client_gpus: float
    output_dir: str
    run_name: str
    checkpoint_every: int
    tracker: str
    ray_address: str
    # the groups' properties
    @property
    def num_attackers(self) -> int: ...
    @property
    def pre_aggregations(self) -> tuple[str, ...]: ...
    @property
    def inference_attacks(self) -> tuple[str, ...]: ...
    @property
    def inference_aggregators(self) -> tuple[str, ...]: ...
    @property
    def amplification_curve(self) -> tuple[float, ...]: ...
    @property
    def distill_ranks(self) -> tuple[int, ...]: ...
    @property
    def lora_targets(self) -> tuple[str, ...]: ...
    @property
    def num_backdoor_clients(self) -> int: ...
