"""Analyses of finished runs, end to end on tiny in-process runs (through the CLI)."""

import pandas as pd
import pytest

from fedcal.app.sweep import run_sweep
from fedcal.cli import main as cli_main
from fedcal.config import RunConfig
from fedcal.results import run_dir_for

BASE = dict(dataset="digits", num_clients=6, clients_per_round=3, num_rounds=8, batch_size=32, local_steps=5,
            lr=0.1, engine="inprocess", attacker_ratio=0.34)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    cfgs = {
        "benign0": RunConfig.from_flower(dict(BASE, attack="none", seed=0, output_dir=str(out))),
        "benign1": RunConfig.from_flower(dict(BASE, attack="none", seed=1, output_dir=str(out))),
        "tsa5": RunConfig.from_flower(dict(BASE, attack="tsa", tau=5.0, seed=0, output_dir=str(out))),
    }
    assert run_sweep(list(cfgs.values()), jobs=1, progress=False) == {}
    return {k: run_dir_for(c) for k, c in cfgs.items()}


def test_posthoc(runs, tmp_path):
    assert cli_main(["posthoc", str(runs["tsa5"]), str(runs["benign0"]), "--n-cal", "10,100",
                     "--out", str(tmp_path)]) == 0
    t = pd.read_csv(tmp_path / "posthoc.csv")
    assert set(t["method"]) == {"none", "temperature", "platt", "isotonic", "histogram"}
    assert set(t["n_cal"]) == {10, 100}
    assert (tmp_path / "posthoc.png").exists()
    # temperature scaling never changes accuracy; with 100 samples it should not worsen |sECE| much
    for _, g in t.groupby(["run", "n_cal"]):
        g = g.set_index("method")
        assert g.loc["temperature", "accuracy"] == pytest.approx(g.loc["none", "accuracy"])


def test_triage(runs, tmp_path):
    assert cli_main(["triage", str(runs["tsa5"]), "--benign", str(runs["benign0"]), "--out", str(tmp_path)]) == 0
    t = pd.read_csv(tmp_path / "triage.csv")
    assert set(t["run"]) == {"benign", "tsa τ=5"}
    benign = t[t.run == "benign"]
    assert (benign["unnecessary_change"] == 0).all()
    at0 = t[t.gamma == 0]
    assert (at0["sent"] == 0).all()  # γ = 0: nothing is sent for verification


def test_triage_pairs_each_attacked_run_with_the_benign_run_of_its_seed(runs, tmp_path):
    """With one benign run per seed, the attacked run's change is measured against its own seed's
    benign run: the same numbers as with that benign run alone; a seed without a benign run, or
    two benign runs of one seed, is an error."""
    from fedcal.reports import triage_table

    alone = triage_table([runs["tsa5"]], runs["benign0"])
    both = triage_table([runs["tsa5"]], [runs["benign1"], runs["benign0"]])
    assert sorted(both.loc[both.run == "benign", "seed"].unique()) == [0, 1]
    pd.testing.assert_frame_equal(both[both.run == "tsa τ=5"].reset_index(drop=True),
                                  alone[alone.run == "tsa τ=5"].reset_index(drop=True))
    with pytest.raises(ValueError, match="no benign run of seed 0"):
        triage_table([runs["tsa5"]], [runs["benign1"]])
    with pytest.raises(ValueError, match="two benign runs of seed 0"):
        triage_table([runs["tsa5"]], [runs["benign0"], runs["benign0"]])
    assert cli_main(["triage", str(runs["tsa5"]), "--benign", str(runs["benign0"]), str(runs["benign1"]),
                     "--out", str(tmp_path)]) == 0
    assert (tmp_path / "triage.png").exists()


def test_similarity(runs, tmp_path):
    assert cli_main(["similarity", str(runs["tsa5"]), "--benign", str(runs["benign0"]), str(runs["benign1"]),
                     "--out", str(tmp_path)]) == 0
    t = pd.read_csv(tmp_path / "similarity.csv")
    assert set(t["pair"]) == {"benign vs benign", "benign vs tsa τ=5"}
    assert len(t) == 1 + 2  # one seed-to-seed pair, two benign-vs-attacked pairs
    assert t["cka"].between(0, 1).all() and t["logit_cosine"].between(-1, 1).all()


def test_stealth(runs, tmp_path):
    assert cli_main(["stealth", str(runs["benign0"]), "--steps", "4", "--out", str(tmp_path)]) == 0
    t = pd.read_csv(tmp_path / "stealth.csv")
    assert set(t["step"]) == {1, 2, 3, 4}
    last = t[t.step == 4].set_index("variant")["cosine"]
    assert last["tsa_coupled_tau5"] > last["labelflip_k1"]
    assert set(t["start_round"]) == {8} and set(t["reference"]) == {"same"} and set(t["compare"]) == {"update"}
    assert (tmp_path / "stealth.md").exists()


def test_stealth_protocols(runs, tmp_path):
    """Start models (initial, a recomputed round, final), references and compared vectors: the start
    model's accuracy is what the run logged at that round (the recomputed round 3 too:
    fedcal.reference replays the Flower run)."""
    out = tmp_path / "s"
    assert cli_main(["stealth", str(runs["benign0"]), "--steps", "2", "--round", "0,3,final",
                     "--reference", "same,others", "--others", "2", "--compare", "update,weights", "--variants", "tsa",
                     "--out", str(out)]) == 0
    t = pd.read_csv(out / "stealth.csv")
    assert set(t["start_round"]) == {0, 3, 8} and set(t["seed"]) == {0}
    assert set(t["variant"]) == {"benign", "tsa_coupled_tau0.2", "tsa_coupled_tau5", "tsa_uncoupled_tau0.2",
                                 "tsa_uncoupled_tau5"}
    assert len(t) == 3 * 2 * 2 * 5 * 2  # rounds × references × compared × variants × steps
    assert (t["start_accuracy"] - t["logged_accuracy"]).abs().max() < 1e-12
    assert t.groupby("start_round")["start_accuracy"].first().is_monotonic_increasing  # training helped
    benign = t[t["variant"] == "benign"].set_index(["reference", "compare", "start_round", "step"])["cosine"].sort_index()
    assert (benign.loc[("same", "update")] - 1).abs().max() < 1e-12
    assert (benign.loc[("others", "update")] < 1 - 1e-6).all()  # other clients' data: another direction
    md = (out / "stealth.md").read_text()
    assert "| start_round | reference | compare | variant | runs | step 1 | step 2 |" in md
    assert cli_main(["stealth", str(runs["benign0"]), "--round", "next", "--out", str(out)]) == 2
    assert cli_main(["stealth", str(runs["benign0"]), "--reference", "all", "--out", str(out)]) == 2
    assert cli_main(["stealth", str(runs["benign0"]), "--variants", "tsa9", "--out", str(out)]) == 2
    assert cli_main(["stealth", str(runs["benign0"]), "--round", "9", "--out", str(out)]) == 2  # past num-rounds


def test_stealth_summary_averages_runs():
    from fedcal.reports.studies import stealth_summary

    rows = [dict(run=r, start_round=0, reference="same", compare="update", variant="tsa", step=k, cosine=c)
            for r, cs in (("a", (0.9, 0.5)), ("b", (0.7, 0.3))) for k, c in zip((1, 2), cs)]
    got = stealth_summary(pd.DataFrame(rows))
    assert got.to_dict("records") == [dict(start_round=0, reference="same", compare="update", variant="tsa", runs=2,
                                           **{"step 1": "0.800 ± 0.141", "step 2": "0.400 ± 0.141"})]


def test_analysis_of_a_non_run_fails_clearly(tmp_path, capsys):
    assert cli_main(["posthoc", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "config.json" in capsys.readouterr().err


def test_report_command_on_real_runs(runs, tmp_path):
    """`fedcal report` over finished runs: the table, and each figure with its table."""
    assert cli_main(["report", str(runs["benign0"]), str(runs["benign1"]), str(runs["tsa5"]),
                     "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "table.csv")
    assert sorted(table["run"]) == ["TSA τ=5", "benign", "benign"]  # a TSA run is named with its τ
    assert table.loc[table["run"] == "benign", "d_sece"].tolist() == [0.0, 0.0]
    traj = pd.read_csv(tmp_path / "trajectories.csv")
    benign = traj[(traj["tau"] == 1.0) & (traj["metric"] == "accuracy")]
    assert set(benign["runs"]) == {2} and benign["round"].max() == BASE["num_rounds"]
    rel = pd.read_csv(tmp_path / "reliability.csv")
    assert set(rel["run"]) == {"benign (τ=1)", "TSA τ=5"}  # seed 0's diagrams
    # every bin's count adds up to the test set, per diagram
    assert rel.groupby("run")["count"].sum().nunique() == 1
    for png in ("reliability.png", "trajectories.png"):
        assert (tmp_path / png).stat().st_size > 0
