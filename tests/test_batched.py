"""The batched engine computes the in-process engine's runs (fedcal.app.batched)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from fedcal.tasks import train_batched as batched
from fedcal.app.engine import simulate
from fedcal.app.sweep import run_sweep
from fedcal.config import RunConfig
from fedcal.data import load_dataset
from fedcal.results import AUDIT_FILE, REJECTIONS_FILE, RunFailed, RunStore, load_metrics, run_dir_for

BASE = dict(dataset="digits", num_rounds=4, attack="tsa", num_clients=10, clients_per_round=5, local_steps=4,
            batch_size=32, momentum=0.5)
#: FedAvg and three robust rules (FoolsGold keeps a per-node history across rounds)
STRATEGIES = ("fedavg", "multikrum", "foolsgold", "median")
METRICS = ["accuracy", "ece", "sece", "brier", "nll", "replies_received", "replies_accepted", "replies_rejected"]


def _cells(out, **extra):
    return [RunConfig.from_flower(dict(BASE, tau=tau, seed=seed, strategy=strategy, output_dir=str(out), **extra))
            for tau in (0.5, 3.0) for seed in (0, 1) for strategy in STRATEGIES]


def _table(cfg: RunConfig) -> pd.Series:
    df = load_metrics(run_dir_for(cfg))
    return df[df.metric.isin(METRICS)].set_index(["round", "metric"])["value"].sort_index()


def test_batched_sweep_equals_inprocess_runs(tmp_path):
    cells = _cells(tmp_path / "b", engine="batched")
    assert run_sweep(cells, jobs=1, progress=False) == {}
    n_test = len(load_dataset("digits").y_test)
    for cfg in cells:
        ref = cfg.replace(engine="inprocess", output_dir=str(tmp_path / "i"))
        simulate(ref, progress=False)
        got, want = _table(cfg), _table(ref)
        assert list(got.index) == list(want.index)
        gap = (got - want).abs()
        # the same run up to float summation order: accuracy within one test sample, the
        # probability-based metrics within 1e-4, the reply accounting exactly
        assert gap.xs("accuracy", level="metric").max() <= 1 / n_test + 1e-12
        for m in ("ece", "sece", "brier", "nll"):
            assert gap.xs(m, level="metric").max() < 1e-4, (cfg.tau, cfg.seed, cfg.strategy, m)
        for m in ("replies_received", "replies_accepted", "replies_rejected"):
            assert gap.xs(m, level="metric").max() == 0
        b, i = run_dir_for(cfg), run_dir_for(ref)
        assert RunStore(b, cfg).is_done()
        for name in ("reliability.csv", REJECTIONS_FILE, AUDIT_FILE, "model.pt"):
            assert (b / name).exists(), name
        audit_b, audit_i = pd.read_csv(b / AUDIT_FILE), pd.read_csv(i / AUDIT_FILE)
        assert list(audit_b.columns) == list(audit_i.columns)
        # node ids are the engine's own; which clients were weighted how is the same run
        pd.testing.assert_frame_equal(audit_b[["round", "partition_id"]], audit_i[["round", "partition_id"]])
        assert (audit_b.weight - audit_i.weight).abs().max() < 1e-5
        final_b = torch.load(b / "model.pt")
        final_i = torch.load(i / "model.pt")
        assert final_b.keys() == final_i.keys()
        assert max(float((final_b[k] - final_i[k]).abs().max()) for k in final_b) < 1e-4


def test_unsupported_cells_run_in_process_and_single_runs_refuse(tmp_path):
    noise = RunConfig.from_flower(dict(BASE, attack="noise", output_dir=str(tmp_path), engine="batched"))
    assert "noise" in batched.batched_unsupported(noise)
    assert run_sweep([noise], jobs=1, progress=False) == {}  # through the in-process engine
    assert RunStore(run_dir_for(noise), noise).is_done()
    adaptive = noise.replace(attack="tsa", tsa_blend=0.5, run_name="adaptive")
    assert "adaptive" in batched.batched_unsupported(adaptive)
    with pytest.raises(RunFailed, match="adaptive"):
        simulate(adaptive, progress=False)
    assert "fltrust" in batched.batched_unsupported(adaptive.replace(tsa_blend=1.0, strategy="fltrust"))
    assert "task" in batched.batched_unsupported(adaptive.replace(task="inference"))
    assert "optimizer" in batched.batched_unsupported(adaptive.replace(tsa_blend=1.0, optimizer="adamw"))
    # client momentum runs batched (each benign client's buffer kept per run, as the Flower path keeps it)
    assert batched.batched_unsupported(adaptive.replace(tsa_blend=1.0, client_momentum=0.9)) is None
    with pytest.raises(ValueError, match="one group"):
        batched.run_batched([noise.replace(attack="tsa"), noise.replace(attack="tsa", num_rounds=2, seed=3)])


def test_a_non_finite_reply_is_rejected_with_its_reason_and_the_round_continues(tmp_path):
    cfg = RunConfig.from_flower(dict(BASE, output_dir=str(tmp_path)))
    from fedcal.strategies import strategy_from_config
    from fedcal.data import client_partitions

    store = RunStore(run_dir_for(cfg), cfg)
    store.start()
    base = {"w": torch.zeros(3), "b": torch.zeros(2)}
    run = batched._Run(cfg, store, strategy_from_config(cfg, node_sort_key=lambda n: n, node_label=lambda n: n),
                       dict(base), client_partitions("digits", cfg.data_dir, 10, cfg.partition, cfg.dirichlet_alpha, 0),
                       [None] * 10)
    replies = {"w": torch.tensor([[1.0, 1.0, 1.0], [float("nan"), 0.0, 0.0], [3.0, 3.0, 3.0]]),
               "b": torch.ones(3, 2)}
    batched._aggregate(run, 1, [0, 4, 7], replies, base, ["w", "b"])
    account = run.strategy.replies[1]
    assert account.rejections == [(4, "array 'w' contains NaN or Inf")]
    assert account.accepted == [0, 7] and account.aggregated
    sizes = [len(run.parts[c]) for c in (0, 7)]
    expected = (1.0 * sizes[0] + 3.0 * sizes[1]) / sum(sizes)  # FedAvg of the two good replies
    assert torch.allclose(run.params["w"], torch.full((3,), expected))
    all_bad = {"w": torch.full((2, 3), float("inf")), "b": torch.ones(2, 2)}
    batched._aggregate(run, 2, [1, 2], all_bad, run.params, ["w", "b"])
    assert not run.strategy.replies[2].aggregated  # nothing valid: the global model is kept
    assert torch.allclose(run.params["w"], torch.full((3,), expected))


def test_batched_runs_record_the_chosen_calibration_estimators_and_intervals(tmp_path):
    """``calibration-metrics`` and ``calibration-bootstrap`` mean the same under both engines."""
    extra = dict(num_rounds=2, calibration_metrics="mce,ksce,smece", calibration_bootstrap=50)
    cell = RunConfig.from_flower(dict(BASE, **extra, tau=3.0, output_dir=str(tmp_path / "b"), engine="batched"))
    assert run_sweep([cell], jobs=1, progress=False) == {}
    ref = cell.replace(engine="inprocess", output_dir=str(tmp_path / "i"))
    simulate(ref, progress=False)
    got, want = (load_metrics(run_dir_for(c)) for c in (cell, ref))
    for m in ("mce", "ksce", "smece", "smece_sigma"):
        a, b = (df[df.metric == m].set_index("round")["value"] for df in (got, want))
        assert list(a.index) == [0, 1, 2] and (a - b).abs().max() < 1e-4, m
    iv_b, iv_i = (pd.read_csv(run_dir_for(c) / "calibration_intervals.csv").set_index("metric") for c in (cell, ref))
    assert set(iv_b.index) == {"accuracy", "ece", "sece", "brier", "nll", "mce", "ksce", "smece"}
    assert (iv_b[["estimate", "lo", "hi"]] - iv_i[["estimate", "lo", "hi"]]).abs().max().max() < 1e-3
