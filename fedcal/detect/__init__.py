"""The detection case study's core (SPEC §10, flwr-free): deterministic MNIST scenes
(:mod:`~fedcal.detect.scenes`), DETR and the grid detector (:mod:`~fedcal.detect.model`), the
local round with the TSA on the class logits (:mod:`~fedcal.detect.local_round`) and what is measured
(:mod:`~fedcal.detect.metrics`). docs/detection.md describes the study."""

# The tables a detect run writes beside metrics.csv (its server side writes them, the report reads them).
KEPT_FILE = "kept.csv"
EXAMPLE_FILE = "example.csv"
EXAMPLE_IMAGE = "example.npy"
