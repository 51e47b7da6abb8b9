"""Analyses of finished runs (flwr-free): post-hoc calibration, triage thresholds,
representation similarity and update-cosine curves. Every ``*_table`` function reads run
directories (config + final global model from the run store) and returns a tidy pandas table;
the figure drawn from each table is in :mod:`fedcal.reports.plots` (``posthoc_curves``,
``triage_plot``, ``similarity_scatter``, ``stealth_plot``).

Runs are compared only within one configuration: the post-hoc table names each run's configuration in
a ``config`` column when several are given; triage and similarity, which measure each run against a
benign one, refuse runs of different configurations (up to seed, τ and the attack) with one line
naming the keys (:mod:`fedcal.reports.groups`). Every table flags a model whose test accuracy is
within noise of chance (``chance_level``, :mod:`fedcal.reports.chance`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from fedcal.analysis import COMPARED, default_variants, representation_similarity, triage_change, triage_curves
from fedcal.calibrate import CALIBRATORS, DEFAULT_CALIBRATORS
from fedcal.calibrate.posthoc import posthoc_scores
from fedcal.config import ConfigError
from fedcal.reports.chance import labels_chance
from fedcal.reports.groups import CONFIG, config_labels, require_one_config
from fedcal.reports.markdown import markdown_table
from fedcal.results import load_config, load_model
from fedcal.run_analysis import stealth_curves, test_logits

N_CALS = (10, 50, 100, 250, 500)
#: what the analyses' run labels show (``benign`` / ``tsa τ=5``) besides the seed
SHOWN = ("tau", "attack", "coupled")
CHANCE = "chance_level"


def at_chance(logits, y) -> bool:
    """Whether the model's test accuracy (``logits``, ``y``: torch tensors) is within noise of chance on these
    labels."""
    acc = float((logits.argmax(1) == y).double().mean())
    return labels_chance(y.numpy(), int(logits.shape[1])).flags(acc)


def _label(cfg) -> str:
    return "benign" if cfg.attack == "none" else f"{cfg.attack} τ={cfg.tau:g}"


# --------------------------------------------------------------------------- post-hoc calibration
def posthoc_table(run_dirs: Sequence[str | Path], n_cals: Sequence[int] | None = None,
                  methods: Sequence[str] = DEFAULT_CALIBRATORS, seed: int = 0, n_bins: int = 15) -> pd.DataFrame:
    """Fit each calibrator on n_cal held-out test samples of each run's final model and
    score it on the remaining test samples (SPEC §5). ``method = "none"`` is the uncalibrated
    model on the same remaining samples. ``n_cals`` None: the sizes of :data:`N_CALS` below each
    run's test-set size (digits' 450 test samples leave out 500); a size given must be below it."""
    unknown = [m for m in methods if m not in CALIBRATORS]
    if unknown:
        raise ValueError(f"unknown calibrator {unknown[0]!r}; choose from {', '.join(CALIBRATORS)}")
    rows = []
    labels = config_labels([load_config(d) for d in run_dirs], (*SHOWN, "strategy"))
    for d, label in zip(run_dirs, labels):
        cfg, logits, y = test_logits(d)
        own = {CONFIG: label} if any(labels) else {}
        chance = at_chance(logits, y)
        sizes = [k for k in N_CALS if k < len(y)] if n_cals is None else n_cals
        if not sizes:
            raise ConfigError(f"{d}: its test set has {len(y)} samples, no more than any default calibration size "
                              f"({', '.join(map(str, N_CALS))}); give sizes below {len(y)} (fedcal posthoc --n-cal)")
        for n_cal in sizes:
            for name, m in posthoc_scores(logits, y, n_cal, methods, seed, n_bins).items():
                rows.append({**own, "run": _label(cfg), "tau": cfg.tau, "seed": cfg.seed, "strategy": cfg.strategy,
                             "method": name, "n_cal": n_cal, **m, "run_dir": str(d), CHANCE: chance})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- triage
def triage_table(attacked_dirs: Sequence[str | Path], benign_dirs: str | Path | Sequence[str | Path],
                 gammas: np.ndarray | None = None) -> pd.DataFrame:
    """Unnecessary / missed verifications vs γ for each run, and their change against the
    benign run of the same seed (SPEC §6); one tidy table with ``run`` and ``seed`` columns.

    ``benign_dirs``: one benign run, or one per seed; every attacked run is compared with the
    benign run of its own seed (a ValueError names an attacked run whose seed has none, and two
    benign runs of one seed).
    """
    gammas = np.linspace(0, 1, 101) if gammas is None else gammas
    benign_dirs = [benign_dirs] if isinstance(benign_dirs, (str, Path)) else list(benign_dirs)
    every = [*benign_dirs, *attacked_dirs]
    require_one_config([load_config(d) for d in every], SHOWN, "the triage table", [str(d) for d in every])
    benign: dict[int, pd.DataFrame] = {}
    for d in benign_dirs:
        cfg, logits, y = test_logits(d)
        if cfg.seed in benign:
            raise ValueError(f"two benign runs of seed {cfg.seed} (the last: {d}); give one per seed")
        benign[cfg.seed] = triage_curves(logits, y, gammas).assign(**{CHANCE: at_chance(logits, y)})
    frames = [b.assign(run="benign", seed=s, unnecessary_change=0.0, missed_change=0.0) for s, b in benign.items()]
    for d in attacked_dirs:
        cfg, logits, y = test_logits(d)
        if cfg.seed not in benign:
            raise ValueError(f"{d}: no benign run of seed {cfg.seed} among the benign runs "
                             f"(seeds {sorted(benign)}): its change would be measured against another partition")
        cur = triage_curves(logits, y, gammas)
        change = triage_change(cur, benign[cfg.seed])
        cur = cur.merge(change[["gamma", "unnecessary_change", "missed_change"]], on="gamma")
        frames.append(cur.assign(run=_label(cfg), seed=cfg.seed, **{CHANCE: at_chance(logits, y)}))
    return pd.concat(frames, ignore_index=True)


# --------------------------------------------------------------------------- representations
def similarity_table(reference_dirs: Sequence[str | Path], other_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """Logit cosine and linear CKA (penultimate features) on the test set between every
    reference (benign) model and every other model; benign–benign pairs of different seeds
    are the seed-to-seed reference (``pair = "benign vs benign"``)."""
    every = [*reference_dirs, *other_dirs]
    require_one_config([load_config(d) for d in every], SHOWN, "the similarity table", [str(d) for d in every])
    loaded = {str(d): load_model(d) for d in every}
    chance = {d: at_chance(*test_logits(d)[1:]) for d in loaded}
    rows = []
    refs = [str(d) for d in reference_dirs]
    for i, a in enumerate(refs):
        cfg_a, model_a, ds = loaded[a]
        targets = [(b, "benign vs benign") for b in refs[i + 1:]] + [(str(b), None) for b in other_dirs]
        for b, pair in targets:
            cfg_b, model_b, _ = loaded[b]
            sim = representation_similarity(model_a, model_b, ds.x_test)
            rows.append({"pair": pair or f"benign vs {_label(cfg_b)}", "tau": cfg_b.tau, "seed_a": cfg_a.seed,
                         "seed_b": cfg_b.seed, **sim, CHANCE: chance[a] or chance[b]})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- update cosine
#: the benign references of the stealth analysis (fedcal.analysis.update_cosine_curves)
STEALTH_REFERENCES = ("same", "others")


def stealth_table(run_dir: str | Path, client_id: int = 0, steps: int = 10, seed: int = 0,
                  start_round: int | None = None, reference: str = "same", others: int = 4,
                  compare: str = "update", variants: Sequence[str] | None = None) -> pd.DataFrame:
    """Cosine similarity to the benign reference after each of 1..steps local steps, for TSA
    (coupled/uncoupled), noise injection and label flipping (SPEC §4), on client ``client_id``'s data
    with the run's B and β (no augmentation), from one of the run's global models.

    The protocol (fedcal's default first; docs/results.md's stealth audit measures each):

    * ``start_round``: None = the run's final global model; 0 = its initial model; r = its global model
      after r rounds, recomputed with the run's configuration (:func:`fedcal.reference.global_state`);
    * ``reference``: ``same`` = the benign update of the same client on the same batches; ``others`` =
      the mean benign update of ``others`` other benign clients of the run (the next client ids after
      ``client_id``, cyclically), each on its own data (:func:`fedcal.analysis.update_cosine_curves`);
    * ``compare``: ``update`` (Δθ) or ``weights`` (θ_start + Δθ).

    ``variants``: names of :func:`fedcal.analysis.default_variants` (or prefixes such as ``tsa``) to
    keep; the benign variant is always measured. Columns: ``variant, step, cosine`` and the protocol
    (``run``, ``seed``, ``client``, ``start_round``, ``reference``, ``compare``, ``start_accuracy`` — the
    start model's test accuracy — and ``logged_accuracy``, what the run logged at that round, NaN if it
    did not evaluate it)."""
    if reference not in STEALTH_REFERENCES:
        raise ValueError(f"reference must be one of {', '.join(STEALTH_REFERENCES)}, got {reference!r}")
    if compare not in COMPARED:
        raise ValueError(f"compare must be one of {', '.join(COMPARED)}, got {compare!r}")
    chosen = default_variants()
    if variants:
        unknown = [v for v in variants if not any(name.startswith(v) for name in chosen)]
        if unknown:
            raise ValueError(f"unknown stealth variant {unknown[0]!r}; choose from {', '.join(chosen)}")
        chosen = {k: b for k, b in chosen.items() if any(k.startswith(v) for v in variants)}
    return stealth_curves(run_dir, chosen, client_id=client_id, steps=steps, seed=seed, start_round=start_round,
                          reference=reference, others=others, compare=compare)


def stealth_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per protocol (start round, reference, compared vectors) and variant: the cosine after the first
    and after the last local step, mean ± std over the runs (seeds), and how many."""
    last = int(table["step"].max())
    keys = ["start_round", "reference", "compare", "variant"]
    rows = []
    for key, g in table.groupby(keys, sort=False):
        row = dict(zip(keys, key))
        row["runs"] = g["run"].nunique()
        for step in (1, last):
            v = g[g["step"] == step]["cosine"].to_numpy(dtype=float)
            row[f"step {step}"] = f"{np.nanmean(v):.3f}" + (f" ± {np.nanstd(v, ddof=1):.3f}" if len(v) > 1 else "")
        rows.append(row)
    return pd.DataFrame(rows)


def stealth_markdown(table: pd.DataFrame, title: str = "") -> str:
    """:func:`stealth_summary` as Markdown."""
    return markdown_table(stealth_summary(table), title)
