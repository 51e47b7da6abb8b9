"""The language-model case study of TSA (SPEC §10), flwr-free: federated corpora
(:mod:`~fedcal.lm.corpus`: Shakespeare's roles as clients), the small GPT-2 and its tokenizer
(:mod:`~fedcal.lm.model`), next-token calibration, the top-p nucleus and generation statistics
(:mod:`~fedcal.lm.metrics`), and what a run's nodes derive from the config (:mod:`~fedcal.lm.run_inputs`).
The Flower shell is :mod:`fedcal.tasks.lm`."""
