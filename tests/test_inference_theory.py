"""The Theorem-1 quantities of robust federated inference (fedcal.inference.theory) and their report."""
import math

import numpy as np
import pytest
import torch

from fedcal.inference.aggregators import CoordinateMedian, GeometricMedian, Mean, TrimmedMean
from fedcal.inference.evaluate import ProbitData, attack_accuracy
from fedcal.inference.theory import theorem_frame, theorem_quantities


def test_quantities_by_hand():
    """Honest [0.6, 0.4] and [0.5, 0.5], one adversary [0, 1], the plain mean:
    z̄_H = [0.55, 0.45]; σ²_H = (2·0.05² + 2·0.05²)/2 = 0.005; m = 0.1;
    F = [1.1/3, 1.9/3]; e = √2 · |1.1/3 − 0.55| = √2 · 0.18333; the prediction changed, and e ≥ m/√2."""
    z = torch.tensor([[[0.6, 0.4], [0.5, 0.5], [0.0, 1.0]]])
    honest = torch.tensor([[True, True, False]])
    q = theorem_quantities(z, honest, Mean()(z))
    assert q["dissimilarity"].item() == pytest.approx(math.sqrt(0.005))
    assert q["margin"].item() == pytest.approx(0.1)
    assert q["error"].item() == pytest.approx(math.sqrt(2) * (0.55 - 1.1 / 3))
    assert q["changed"].item() and q["bound_holds"].item()
    with pytest.raises(ValueError, match="honest"):
        theorem_quantities(z, torch.zeros(1, 3, dtype=torch.bool), Mean()(z))


def test_a_changed_prediction_always_needs_an_error_of_half_the_margin():
    """The arithmetic behind the theorem: e < m/√2 leaves the argmax alone, whatever the aggregate."""
    g = torch.Generator().manual_seed(0)
    z = torch.softmax(3 * torch.randn(2000, 7, 5, generator=g), -1)
    honest = torch.rand(2000, 7, generator=g) > 0.3
    honest[:, 0] = True
    aggregate = torch.softmax(3 * torch.randn(2000, 5, generator=g), -1)
    q = theorem_quantities(z, honest, aggregate)
    assert q["changed"].any() and q["bound_holds"].all()
    assert (q["error"][q["changed"]] >= q["margin"][q["changed"]] / math.sqrt(2) - 1e-12).all()


def _data(N=300, n=9, C=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, C, (N,), generator=g)
    z = torch.randn(N, n, C, generator=g)
    z[torch.arange(N), :, y] += 1.5
    p = torch.softmax(z, -1)
    return ProbitData(p[:100], y[:100], p, torch.ones(N, n, dtype=torch.bool), y, list(range(n)))


def test_frame_uses_the_evaluations_adversaries_and_robust_averages_keep_kappa_bounded():
    """theorem_frame draws the adversaries as attack_accuracy does: its wrong share is one minus the
    evaluation's accuracy, aggregator by aggregator. Under SIA white-box the robust averages keep the
    error within a bounded multiple of the honest spread (κ_eff), the plain mean does not."""
    data = _data()
    aggs = {"mean": Mean(), "median": CoordinateMedian(), "geometric_median": GeometricMedian(),
            "trimmed_mean": TrimmedMean(3)}
    frame = theorem_frame(data, aggs, 3, ("none", "sia_whitebox"), seed=4, batch=128)
    assert len(frame) == 4 * 2 * 300 and frame["bound_holds"].all()
    acc = attack_accuracy(aggs, data, 3, ["none", "sia_whitebox"], seed=4, batch=128)
    wrong = frame.groupby(["aggregator", "attack"])["wrong"].mean()
    for r in acc.itertuples():
        assert wrong[r.aggregator, r.attack] == pytest.approx(1 - r.accuracy)
    kappa = frame[frame["attack"] == "sia_whitebox"].groupby("aggregator")["kappa_eff"].quantile(0.99)
    assert kappa["trimmed_mean"] < kappa["mean"] and kappa["median"] < kappa["mean"]
    # with no attack the f "adversaries" answer honestly: far fewer predictions move off the honest mean's
    changed = frame.groupby(["aggregator", "attack"])["changed"].mean()
    assert all(changed[a, "none"] < changed[a, "sia_whitebox"] for a in aggs)


def test_theorem_report_from_a_run_directory(tmp_path):
    """The command's report on a finished run: the summary table, the bins and the plot; no bound is
    ever violated; an unfinished run is refused."""
    from fedcal.config import RunConfig
    from fedcal.reports.inference_theory import theorem_report
    from fedcal.results import RunStore, UnfinishedRunError, run_dir_for
    import pandas as pd

    cfg = RunConfig.from_flower(dict(task="inference", dataset="digits", num_clients=9, clients_per_round=9,
                                     inf_f=3, output_dir=str(tmp_path)))
    store = RunStore(run_dir_for(cfg), cfg)
    store.start()
    _data().save(store.dir / "probits.pt")
    with pytest.raises(UnfinishedRunError):
        theorem_report([store.dir], tmp_path / "out")
    # a finished inference run has its accuracy table (the reports' soundness gate reads it)
    store.write_table("accuracy.csv", pd.DataFrame({"aggregator": ["mean"], "attack": ["none"], "accuracy": [0.5]}))
    store.finish()
    md = theorem_report([store.dir], tmp_path / "out", queries=200)
    assert "trimmed_mean" in md and (tmp_path / "out" / "theorem.png").exists()
    summary = pd.read_csv(tmp_path / "out" / "theorem_summary.csv")
    assert set(summary["attack"]) == {"none", "sia_whitebox"} and (summary["violations"] == 0).all()
    assert (summary["queries"] == 200).all()
    bins = pd.read_csv(tmp_path / "out" / "theorem_bins.csv")
    assert bins.groupby(["aggregator", "attack"])["queries"].sum().eq(200).all()
    assert np.isfinite(summary["kappa_p99"]).all()
    # the runs pooled, with their seed and the queries read from each
    runs = pd.read_csv(tmp_path / "out" / "theorem_runs.csv")
    assert runs[["run", "seed", "n", "f", "queries"]].values.tolist() == [[store.dir.name, 0, 9, 3, 200]]
