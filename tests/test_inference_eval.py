"""Evaluation of robust federated inference: paired attacks, absent clients, worst case, seed tables."""

import logging

import numpy as np
import pandas as pd
import pytest
import torch

from fedcal.inference import DeepSetTM, Mean, TrimmedMean
from fedcal.inference.evaluate import AGGREGATOR_NAMES, ProbitData, attack_accuracy, build_aggregators
from fedcal.reports import ablation_table, seed_table, worst_case


def _synthetic(N=300, n=7, C=4, seed=0, signal=2.0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, C, (N,), generator=g)
    logits = torch.randn(N, n, C, generator=g)
    logits[torch.arange(N), :, y] += signal
    return logits.softmax(-1), y


def _data(N=300, n=7, C=4, seed=0):
    sp, sy = _synthetic(N, n, C, seed)
    tp, ty = _synthetic(N, n, C, seed + 1)
    return ProbitData(sp, sy, tp, torch.ones(N, n, dtype=torch.bool), ty, list(range(n)))


def test_no_adversary_is_clean_accuracy():
    data = _data()
    df = attack_accuracy({"mean": Mean()}, data, 0, ["none", "lma", "sia_whitebox"], seed=3)
    clean = (data.test_probits.mean(1).argmax(1) == data.test_labels).float().mean().item()  # by hand
    assert np.allclose(df["accuracy"], clean)


def test_absent_clients_are_left_out_of_each_query():
    """Client 0 is absent for the first half of the queries: their answers are built from the others."""
    data = _data()
    data.test_valid[:150, 0] = False
    data.test_probits[:150, 0] = 0.0  # what the server stores for an absent client
    df = attack_accuracy({"mean": Mean()}, data, 0, ["none"])
    first = data.test_probits[:150, 1:].mean(1).argmax(1) == data.test_labels[:150]
    second = data.test_probits[150:].mean(1).argmax(1) == data.test_labels[150:]
    assert df["accuracy"].item() == pytest.approx(torch.cat([first, second]).float().mean().item())


def test_too_few_clients_count_as_wrong(caplog):
    data = _data(n=5)
    data.test_valid[:100, :2] = False  # 3 clients answer the first 100 queries
    with caplog.at_level(logging.WARNING):
        df = attack_accuracy({"trimmed_mean": TrimmedMean(2)}, data, 1, ["none"])  # needs n' > 4
    assert df["queries"].item() == 300
    rest = TrimmedMean(2)(data.test_probits[100:]).argmax(1) == data.test_labels[100:]
    assert df["accuracy"].item() == pytest.approx(rest.sum().item() / 300)
    df = attack_accuracy({"mean": Mean()}, data, 2, ["none"])  # f_adv = 2 of 3 answering: no honest majority
    assert "not a minority" in caplog.text and df["queries"].item() == 300


def test_adversaries_are_shared_by_attacks_and_aggregators():
    """Same seed → same adversary rows: LMA with the mean gives the same accuracy when evaluated
    alone or with other attacks and aggregators; other seeds draw other rows."""
    data = _data()
    alone = attack_accuracy({"mean": Mean()}, data, 2, ["lma"], seed=5)
    together = attack_accuracy({"tm": TrimmedMean(2), "mean": Mean()}, data, 2, ["none", "cpa", "lma"], seed=5)
    pick = together[(together.aggregator == "mean") & (together.attack == "lma")]
    assert pick["accuracy"].item() == alone["accuracy"].item()
    by_seed = {s: attack_accuracy({"mean": Mean()}, data, 2, ["lma"], seed=s)["accuracy"].item() for s in range(6)}
    assert len(set(by_seed.values())) > 1  # the seed does redraw the adversaries


def test_white_box_attack_targets_the_aggregator_under_evaluation():
    """SIA white-box against the mean hurts the mean more than the same attack computed
    against the trimmed mean hurts the mean (it is evaluated per aggregator)."""
    data = _data(n=9)
    df = attack_accuracy({"mean": Mean(), "trimmed_mean": TrimmedMean(3)}, data, 3, ["none", "sia_whitebox"])
    acc = df.set_index(["aggregator", "attack"])["accuracy"]
    assert acc["mean", "sia_whitebox"] < acc["mean", "none"]
    assert acc["trimmed_mean", "sia_whitebox"] > acc["mean", "sia_whitebox"]


def test_unknown_attack_and_bad_f():
    data = _data()
    with pytest.raises(ValueError, match="unknown attacks"):
        attack_accuracy({"mean": Mean()}, data, 1, ["bogus"])
    with pytest.raises(ValueError, match="f_adv"):
        attack_accuracy({"mean": Mean()}, data, -1, ["none"])


def test_worst_case_and_seed_table_by_hand():
    rows = [("mean", "none", 0, 0.9), ("mean", "lma", 0, 0.5), ("mean", "cpa", 0, 0.6),
            ("mean", "none", 1, 0.8), ("mean", "lma", 1, 0.4), ("mean", "cpa", 1, 0.3)]
    df = pd.DataFrame(rows, columns=["aggregator", "attack", "seed", "accuracy"]).assign(f_adv=1)
    w = worst_case(df, by=("aggregator", "seed")).set_index("seed")
    assert w.loc[0, "worst_attack"] == "lma" and w.loc[1, "worst_attack"] == "cpa"
    table = seed_table(df)
    # worst case per seed (0.5, 0.3) then mean ± sample std: 40.00 ± 14.14
    assert table.loc["mean", "worst case"] == "40.00 ± 14.14"
    assert table.loc["mean", "none"] == "85.00 ± 7.07"
    assert list(table.columns) == ["none", "lma", "cpa", "worst case"]
    # one seed: the mean alone (a spread of one value is unknown, not zero)
    one = seed_table(df[df["seed"] == 1])
    assert one.loc["mean", "worst case"] == "30.00" and one.loc["mean", "none"] == "80.00"


def test_ablation_table_labels_the_four_deepset_variants():
    """One seed, hand-made accuracies: each variant's clean and worst-case cells, labelled by
    its robust elements; without the plain DeepSet (no adversarial phase) there is no table."""
    acc = {"deepset_plain": (0.8, 0.2), "deepset_plain_tm": (0.79, 0.4), "deepset": (0.78, 0.5),
           "deepset_tm": (0.77, 0.6), "mean": (0.81, 0.1)}
    rows = [(a, k, 0, v) for a, (clean, lma) in acc.items() for k, v in (("none", clean), ("lma", lma))]
    table = seed_table(pd.DataFrame(rows, columns=["aggregator", "attack", "seed", "accuracy"]).assign(f_adv=1))
    ab = ablation_table(table).set_index("aggregator")
    assert list(ab.index) == ["deepset_plain", "deepset_plain_tm", "deepset", "deepset_tm"]
    assert ab.loc["deepset_plain_tm", "trimmed pooling"] == "yes" and ab.loc["deepset_plain_tm", "adversarial training"] == "no"
    assert ab.loc["deepset", "worst case"] == "50.00" and ab.loc["deepset_tm", "clean"] == "77.00"
    assert ablation_table(table.drop(index="deepset_plain")).empty


def test_probit_data_round_trip(tmp_path):
    data = _data(N=20)
    data.save(tmp_path / "p.pt")
    back = ProbitData.load(tmp_path / "p.pt")
    assert torch.equal(back.test_probits, data.test_probits) and back.clients == data.clients


def test_build_aggregators_warm_up_then_adversarial_phase():
    """Ten aggregators; the history holds the clean epochs then the adversarial ones; DeepSet-TM
    is the trained DeepSet's weights with trimmed pooling. (That adversarial training makes the
    trimmed DeepSet more robust is tested in test_inference_aggregators.)"""
    sp, sy = _synthetic(200, 7, 4)
    aggs, history, learned = build_aggregators(sp, sy, 2, hidden=16, epochs=3, adv_epochs=2, lr=3e-3, seed=0)
    assert list(aggs) == ["mean", "median", "geometric_median", "trimmed_mean", "manifold_projection", "copur",
                          "deepset_plain", "deepset_plain_tm", "deepset", "deepset_tm"]
    # the reports' row order knows every aggregator; the logit purifiers exist only with the clients' logits
    assert list(aggs) == [a for a in AGGREGATOR_NAMES if not a.endswith("_logit")]
    with_logits, _, _ = build_aggregators(sp, sy, 2, hidden=16, epochs=3, adv_epochs=0, lr=3e-3, seed=0,
                                       server_logits=sp.clamp_min(1e-6).log())
    assert [a for a in AGGREGATOR_NAMES if a not in ("deepset_plain", "deepset_plain_tm")] == list(with_logits)
    assert with_logits["copur_logit"].reads == "logits" and with_logits["copur"].reads == "probits"
    assert with_logits["copur_logit"].fusion is with_logits["manifold_projection_logit"].fusion
    # built alone (its own seeded generators), an aggregator is the one built among all; nothing else is trained
    alone, h_alone, alone_state = build_aggregators(sp, sy, 2, hidden=16, epochs=3, adv_epochs=2, lr=3e-3, seed=0,
                                       names=["deepset_tm", "mean"])
    assert list(alone) == ["mean", "deepset_tm"] and h_alone == history
    assert all(torch.equal(v, aggs["deepset_tm"].state_dict()[k]) for k, v in alone["deepset_tm"].state_dict().items())
    # what a build saves is every component it trained, not only the aggregators asked for: DeepSet-TM alone
    # still carries the DeepSet from before its adversarial phase, without which a later build retrains
    assert set(alone_state) == {"deepset", "deepset_plain", "history"} and set(learned) >= set(alone_state)
    assert all(torch.equal(v, learned["deepset_plain"][k]) for k, v in alone_state["deepset_plain"].items())
    reloaded, h_reloaded, _ = build_aggregators(sp, sy, 2, hidden=16, epochs=0, adv_epochs=2, lr=3e-3, seed=0,
                                                names=["deepset_plain_tm"], state=alone_state)
    assert h_reloaded == history  # loaded (with epochs=0 a retrained one would have no history)
    assert all(torch.equal(v, aggs["deepset_plain_tm"].state_dict()[k])
               for k, v in reloaded["deepset_plain_tm"].state_dict().items())
    purifier, h_none, _ = build_aggregators(sp, sy, 2, hidden=16, epochs=3, adv_epochs=2, lr=3e-3, seed=0,
                                         names=["copur"])
    assert h_none == [] and list(purifier) == ["copur"]
    assert all(torch.equal(v, aggs["copur"].state_dict()[k]) for k, v in purifier["copur"].state_dict().items())
    with pytest.raises(ValueError, match="unknown aggregators"):
        build_aggregators(sp, sy, 2, epochs=1, names=["krum"])
    # a build from the saved state (epochs=0: nothing could be trained) answers exactly as the trained one
    loaded, h_loaded, _ = build_aggregators(sp, sy, 2, hidden=16, epochs=0, adv_epochs=2, lr=3e-3, seed=0,
                                         state=learned)
    assert h_loaded == history and list(loaded) == list(aggs)
    with torch.no_grad():
        assert all(torch.equal(loaded[a](sp[:20]), aggs[a](sp[:20])) for a in aggs)
    from fedcal.config import ConfigError, RunConfig
    with pytest.raises(ConfigError, match="'inf-aggregators'"):
        RunConfig.from_flower(dict(task="inference", inf_aggregators="deepset,krum"))
    with pytest.raises(ConfigError, match="inf-client-output=logits"):
        RunConfig.from_flower(dict(task="inference", inf_aggregators="copur_logit"))
    assert len(history) == 5 and history[2] < history[0]
    assert aggs["deepset_tm"].rho is aggs["deepset"].rho and aggs["deepset_tm"].f == 2
    assert isinstance(aggs["deepset_tm"], DeepSetTM) and aggs["deepset_tm"].pooling == "trimmed"
    assert aggs["deepset_plain_tm"].rho is aggs["deepset_plain"].rho and aggs["deepset_plain_tm"].f == 2
    assert aggs["copur"].fusion is aggs["manifold_projection"].fusion  # one autoencoder, two purifiers
    plain, h, _ = build_aggregators(sp, sy, 2, hidden=16, epochs=3, adv_epochs=0, lr=3e-3, seed=0)
    assert len(h) == 3 and h == history[:3]  # same seed, same clean phase
    # the ablation's plain DeepSet is the clean phase's model, untouched by the adversarial phase
    kept, trained = aggs["deepset_plain"].state_dict(), aggs["deepset"].state_dict()
    assert all(torch.equal(kept[k], plain["deepset"].state_dict()[k]) for k in kept)
    assert not all(torch.equal(kept[k], trained[k]) for k in kept)
    assert "deepset_plain" not in plain  # without an adversarial phase "deepset" is the plain one
