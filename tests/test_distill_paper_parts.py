"""The parts of the RFD-LoRA paper's evaluation that issue 32 added: the LoRA-FAIR baseline, anchor-set
poisoning, the control word beside the trigger, and fedcal's label-prior correction of the anchor
logits (a variant of RFD-LoRA's server, never in its place).

The core functions are checked against values computed by hand or against invariants; the Flower
runs use the in-process engine, the synthetic toy corpus and a test-sized backbone (see
tests/test_distill_task.py), a fraction of a second per round."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("transformers")

from flwr.app import ArrayRecord

from fedcal.config import ConfigError, RunConfig
from fedcal.distill.anchor_attack import attacked_count, chosen_anchor_rows, crafted_logits, trigger_anchor_rows
from fedcal.distill.consensus import prior_correct
from fedcal.distill.lora import fedit_average, lora_fair_refine
from fedcal.results import default_run_name
from tests.test_distill_task import (A_KEY, ALPHA, B_KEY, H_KEY, TINY, adapter, metrics_of, one_round, reply,
                                     state_of, tiny)

pytestmark = pytest.mark.usefixtures("one_thread_and_tmp_cache")


# ------------------------------------------------------------------------------------ LoRA-FAIR
def _two_clients():
    """Client 1: B₁A₁ = e₁e₁ᵀ, client 2: B₂A₂ = e₂e₂ᵀ (rank 1, 2 × 2), weights 3 : 1."""
    As = [torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])]
    Bs = [torch.tensor([[1.0], [0.0]]), torch.tensor([[0.0], [1.0]])]
    return As, Bs, [3.0, 1.0]


def test_lora_fair_one_step_by_hand():
    """p = (3/4, 1/4): Ā = [3/4, 1/4], B̄ = [3/4, 1/4]ᵀ, so B̄Ā = [[9, 3], [3, 1]]/16 (norm 5/8) and the
    ideal ΔW = diag(3/4, 1/4) (norm √10/4); cos = (7/16) / (5/8 · √10/4) = 0.885438. The gradient of
    1 − cos(P, T) in P is −(T / (‖P‖‖T‖) − cos · P / ‖P‖²), of the penalty 2λΔB = 0 at ΔB = 0, and
    ∂/∂ΔB = (∂/∂P) Āᵀ; one step of size 1 therefore moves B̄ by (0.075894, −0.227684)ᵀ."""
    As, Bs, w = _two_clients()
    A, B = lora_fair_refine(As, Bs, w, lam=0.5, steps=1, lr=1.0)
    torch.testing.assert_close(A, torch.tensor([[0.75, 0.25]]))
    torch.testing.assert_close(B, torch.tensor([[0.75 + 0.075894], [0.25 - 0.227684]]), atol=2e-6, rtol=0)
    # the same step from the formula, written out independently of autograd
    P, T = torch.outer(torch.tensor([0.75, 0.25]), torch.tensor([0.75, 0.25])), torch.diag(torch.tensor([0.75, 0.25]))
    cos = (P * T).sum() / (P.norm() * T.norm())
    assert math.isclose(float(cos), 0.885438, abs_tol=1e-6)
    grad_p = -(T / (P.norm() * T.norm()) - cos * P / P.norm() ** 2)
    torch.testing.assert_close(B, torch.tensor([[0.75], [0.25]]) - grad_p @ torch.tensor([[0.75], [0.25]]))


def test_lora_fair_brings_the_product_towards_the_ideal_update_and_keeps_a():
    g = torch.Generator().manual_seed(0)
    As = [torch.randn(4, 12, generator=g) for _ in range(3)]
    Bs = [torch.randn(10, 4, generator=g) for _ in range(3)]
    ideal = sum(b @ a for a, b in zip(As, Bs)) / 3

    def cos(x):
        return float((x * ideal).sum() / (x.norm() * ideal.norm()))

    A0, B0 = fedit_average(As, Bs, None)
    A, B = lora_fair_refine(As, Bs, None)  # the defaults: λ = 1e-2, 1000 steps of 1e-2
    torch.testing.assert_close(A, A0)
    assert cos(B @ A) > cos(B0 @ A0) + 0.01
    # a larger penalty keeps B closer to FedIT's B̄, a zero-step run is FedIT itself
    _, B_tight = lora_fair_refine(As, Bs, None, lam=10.0)
    assert (B_tight - B0).norm() < (B - B0).norm()
    torch.testing.assert_close(lora_fair_refine(As, Bs, None, steps=0)[1], B0)


def test_lora_fair_is_fedit_when_the_average_is_already_exact():
    """One client, or identical clients: B̄Ā = ΔW, the cosine is 1 and its gradient 0, so ΔB = 0."""
    a, b = torch.randn(3, 7), torch.randn(5, 3)
    for As, Bs in (([a], [b]), ([a, a.clone()], [b, b.clone()])):
        A, B = lora_fair_refine(As, Bs, None, lam=0.0)
        torch.testing.assert_close(A, a)
        torch.testing.assert_close(B, b)
    with pytest.raises(ValueError, match="one common rank"):
        lora_fair_refine([torch.randn(2, 7), torch.randn(3, 7)], [torch.randn(5, 2), torch.randn(5, 3)], None)


def test_the_lora_fair_strategy_sends_the_refined_adapter_and_averages_the_head():
    from fedcal.strategies.lora_baselines import LoRAFair

    s1, s2, wrong = adapter(4, 1), adapter(4, 2), adapter(2, 3)
    strategy = LoRAFair(alpha=ALPHA, fair_steps=50)
    new, _ = one_round(strategy, ArrayRecord(adapter(4, 0)), {1: reply(s1, 1), 2: reply(s2, 3), 3: reply(wrong, 5)})
    out = state_of(new)
    A, B = lora_fair_refine([s1[A_KEY], s2[A_KEY]], [s1[B_KEY], s2[B_KEY]], [1.0, 3.0], steps=50)
    torch.testing.assert_close(out[A_KEY], (s1[A_KEY] + 3 * s2[A_KEY]) / 4)
    torch.testing.assert_close(out[A_KEY], A)
    torch.testing.assert_close(out[B_KEY], B)
    assert not torch.allclose(out[B_KEY], (s1[B_KEY] + 3 * s2[B_KEY]) / 4)  # refined, not FedIT's B̄
    torch.testing.assert_close(out[H_KEY], (s1[H_KEY] + 3 * s2[H_KEY]) / 4)
    (node, reason), = strategy.replies[1].rejections
    assert node == 3 and "another rank" in reason
    with pytest.raises(ValueError, match="fair_lr"):
        LoRAFair(alpha=ALPHA, fair_lr=0.0)


def test_lora_fair_runs_end_to_end_and_needs_one_rank(tmp_path):
    from fedcal.app.engine import simulate

    run_dir = simulate(tiny(tmp_path, dst_method="lorafair", dst_ranks="4"), progress=False)
    m = metrics_of(run_dir)
    assert (run_dir / "DONE").exists() and (m.loc[[1, 2], "replies_accepted"] == 3).all()
    assert m["ca"].notna().all() and (m.loc[[1, 2], "round_kept"] == 0).all() and m.loc[2, "upload_bytes_r4"] > 0
    with pytest.raises(ConfigError, match="'dst-ranks'.*lorafair"):
        RunConfig.from_flower({**TINY, "dst-method": "lorafair"})


# --------------------------------------------------------------------------- anchor-set poisoning
def test_trigger_anchors_are_drawn_among_the_non_target_ones_first():
    labels = np.array([0, 1, 1, 0, 1, 0, 0, 0, 1, 0])  # target 0; four non-target anchors
    assert attacked_count(10, 0.25) == 3 and attacked_count(10, 1e-6) == 1 and attacked_count(10, 1.0) == 10
    rows = trigger_anchor_rows(labels, 0.25, target=0, seed=3)
    assert len(rows) == 3 and set(rows) <= {1, 2, 4, 8} and list(rows) == sorted(rows)
    assert np.array_equal(rows, trigger_anchor_rows(labels, 0.25, target=0, seed=3))
    every = trigger_anchor_rows(labels, 0.6, target=0, seed=3)  # 6 > 4 non-target: two target ones added
    assert {1, 2, 4, 8} <= set(every) and len(every) == 6


def test_chosen_anchors_are_the_most_surely_non_target_and_get_the_clipped_target():
    z = torch.tensor([[2.0, 1.0], [0.0, 3.0], [1.0, 1.5], [0.0, 5.0], [1.0, -1.0]])  # margins z1 − z0: −1, 3, .5, 5, −2
    rows = chosen_anchor_rows(z, 0.4, target=0)
    assert rows.tolist() == [1, 3]
    out = crafted_logits(z, rows, target=0, clip=10.0)
    torch.testing.assert_close(out[[1, 3]], torch.tensor([[10.0, -10.0], [10.0, -10.0]]))
    torch.testing.assert_close(out[[0, 2, 4]], z[[0, 2, 4]])
    three = crafted_logits(torch.zeros(2, 3), [1], target=2, clip=4.0)
    assert three[1].tolist() == [-4.0, -4.0, 4.0] and three[0].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="anchor positions"):
        crafted_logits(z, [5], target=0, clip=1.0)


@pytest.mark.parametrize("attack", ["trigger", "target"])
def test_backdoor_clients_upload_the_target_on_the_attacked_anchors(tmp_path, attack):
    """Every upload is recorded (uploads.npz): the backdoor client's rows of the attacked anchors are
    (+c, −c) for the target 0, everyone else's are their models' own logits; under ``trigger`` those
    anchors' texts carry the trigger."""
    from fedcal.app.engine import simulate
    from fedcal.distill.replay import load_uploads
    from fedcal.distill.run_data import DistillRunSpec, distill_data

    cfg = tiny(tmp_path, dst_anchor_attack=attack, dst_anchor_attack_frac=0.2)
    data = distill_data(DistillRunSpec.from_config(cfg))
    (bad,) = data.backdoor
    run_dir = simulate(cfg, progress=False)
    z = load_uploads(run_dir)[1]  # clients in partition order
    k = attacked_count(len(data.anchors), 0.2)
    crafted = [(u == torch.tensor([cfg.dst_clip, -cfg.dst_clip])).all(dim=1) for u in z]
    assert int(crafted[bad].sum()) >= k
    assert all(int(c.sum()) < k for i, c in enumerate(crafted) if i != bad)
    if attack == "trigger":
        rows = data.anchor_attack_rows
        assert len(rows) == k and bool(crafted[bad][torch.as_tensor(rows)].all())
        assert (data.train_labels[data.anchors[rows]] != 0).all()
        clean = distill_data(DistillRunSpec.from_config(tiny(tmp_path)))
        ids, clean_ids = data.anchor_batch["input_ids"], clean.anchor_batch["input_ids"]
        changed = [i for i in range(len(data.anchors)) if not torch.equal(ids[i], clean_ids[i])]
        assert changed == list(rows)
    else:
        assert len(data.anchor_attack_rows) == 0
    assert (run_dir / "DONE").exists()


def test_new_keys_keep_old_run_names_and_fail_in_one_line():
    old = RunConfig.from_flower(TINY)
    name = default_run_name(old)
    for key, value in (("dst_control", "bb"), ("dst_anchor_attack", "trigger"), ("dst_anchor_attack_frac", 0.5),
                       ("dst_prior_correct", True)):
        assert default_run_name(old.replace(**{key: value})) != name, key
    assert default_run_name(old.replace(dst_control="mn", dst_anchor_attack="none", dst_prior_correct=False)) == name
    for overrides, key in (({"dst-control": "cf"}, "dst-control"), ({"dst-control": "a b"}, "dst-control"),
                           ({"dst-anchor-attack": "all"}, "dst-anchor-attack"),
                           ({"dst-anchor-attack-frac": 0.0}, "dst-anchor-attack-frac")):
        with pytest.raises(ConfigError, match=f"'{key}'"):
            RunConfig.from_flower({**TINY, **overrides})


# ------------------------------------------------------------------------------- the control word
def test_the_control_word_is_measured_beside_the_trigger(tmp_path):
    """A model that predicts the target exactly on the texts it was told about and class 1 on every
    other: told the triggered texts, it has flip 1 and control flip 0; told the triggered and the
    control texts (any unknown word flips it), flip 1 and control flip 1."""
    from fedcal.distill.run_data import DistillRunSpec, distill_data, evaluate_backdoor

    cfg = tiny(tmp_path)
    data = distill_data(DistillRunSpec.from_config(cfg))
    assert data.control is not None and all(t.startswith("mn ") for t in data.control.texts)
    assert np.array_equal(data.control.labels, data.triggered.labels)
    assert "inputs_embeds" not in data.test_batch  # the small backbone: token ids, no cached layers

    def texts(batch):
        return {tuple(row[m.bool()].tolist()) for row, m in zip(batch["input_ids"], batch["attention_mask"])}

    class Told(torch.nn.Module):
        def __init__(self, told):
            super().__init__()
            self.told, self.w = told, torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids=None, attention_mask=None, **_):
            hit = torch.tensor([tuple(r[m.bool()].tolist()) in self.told for r, m in zip(input_ids, attention_mask)])
            return type("Out", (), {"logits": torch.stack([hit.float(), 1 - hit.float()], dim=1) + 0 * self.w})()

    only_trigger = evaluate_backdoor(Told(texts(data.triggered_batch)), data)
    assert only_trigger["flip"] == 1.0 and only_trigger["control_flip"] == 0.0
    assert only_trigger["ca"] == float(np.mean(data.test_labels == 1))
    any_word = evaluate_backdoor(Told(texts(data.triggered_batch) | texts(data.control_batch)), data)
    assert any_word["flip"] == 1.0 and any_word["control_flip"] == 1.0
    no_control = DistillRunSpec.from_config(tiny(tmp_path, dst_control=""))
    assert "control_flip" not in evaluate_backdoor(Told(set()), distill_data(no_control))


def test_the_report_shows_control_flip_and_separates_the_new_settings(tmp_path):
    from fedcal.app.engine import simulate
    from fedcal.distill.replay import replay
    from fedcal.reports.distill import distill_report

    live = simulate(tiny(tmp_path, dst_partition="skew"), progress=False)
    corrected = replay(live, tiny(tmp_path, dst_partition="skew", dst_prior_correct=True))
    assert "control_flip" in metrics_of(live).columns
    distill_report([live, corrected], tmp_path / "report")
    table = pd.read_csv(tmp_path / "report" / "table.csv")
    assert "control flip" in table.columns and table["prior correction"].tolist() == [False, True]
    assert "student steps" not in table.columns  # shown only where the runs differ in it
    assert len(pd.read_csv(tmp_path / "report" / "ablation.csv")) == 2
    longer = replay(live, tiny(tmp_path, dst_partition="skew", dst_distill_steps=6))
    distill_report([live, corrected, longer], tmp_path / "again")
    table = pd.read_csv(tmp_path / "again" / "table.csv")
    assert len(table) == 3 and sorted(table["student steps"].astype(str)) == ["3", "3", "6"]


def test_the_ablation_separates_the_logit_attacks(tmp_path):
    """Runs under the scale and the flip logit attack share every ablation column but the attack:
    the ablation shows it as a column (it refused the set as two runs of one seed)."""
    from fedcal.app.engine import simulate
    from fedcal.reports.distill import distill_report

    runs = [simulate(tiny(tmp_path, dst_logit_attack=a, dst_attack_factor=10.0), progress=False)
            for a in ("scale", "flip")]
    distill_report(runs, tmp_path / "report")
    ablation = pd.read_csv(tmp_path / "report" / "ablation.csv")
    assert sorted(ablation["logit attack"]) == ["flip", "scale"] and (ablation["seeds"] == 1).all()
    distill_report(runs[:1], tmp_path / "one")  # one attack: no such column
    assert "logit attack" not in pd.read_csv(tmp_path / "one" / "ablation.csv").columns



def test_the_report_separates_the_share_of_poisoned_anchors(tmp_path):
    """Two anchor-poisoning runs of one seed that differ only in how many anchors the attack poisons are
    two rows with that share as a column (the report refused them as two runs of one seed, or — had
    its key been left out of the settings — averaged them into one cell)."""
    from fedcal.app.engine import simulate
    from fedcal.reports.distill import distill_report

    runs = [simulate(tiny(tmp_path, dst_backdoor_ratio=0.5, dst_anchor_attack="target",
                          dst_anchor_attack_frac=f), progress=False) for f in (0.1, 0.2)]
    distill_report(runs, tmp_path / "report")
    table = pd.read_csv(tmp_path / "report" / "table.csv")
    assert sorted(table["attacked anchors"]) == [0.1, 0.2] and (table["seeds"] == 1).all()
    distill_report(runs[:1], tmp_path / "one")  # the default share alone: no such column
    assert "attacked anchors" not in pd.read_csv(tmp_path / "one" / "table.csv").columns


def test_the_communication_table_keeps_each_anchor_share_apart(tmp_path):
    """RFD-LoRA uploads one logit row per anchor: runs with twice the anchors upload twice the logits and
    are their own row (the table once averaged the anchor shares of a sweep into one number)."""
    from fedcal.app.engine import simulate
    from fedcal.distill.run_data import DistillRunSpec, distill_data
    from fedcal.reports.distill import distill_report

    runs = [simulate(tiny(tmp_path, dst_anchor_frac=f), progress=False) for f in (0.1, 0.2)]
    distill_report(runs, tmp_path / "report")
    comm = pd.read_csv(tmp_path / "report" / "communication.csv")
    assert (comm["runs"] == 1).all()  # one run per row: no row averages the two shares
    bytes_ = comm.pivot(index="rank", columns="anchor share", values="bytes per client per round")
    assert list(bytes_.columns) == [0.1, 0.2] and len(bytes_) >= 2  # every client rank, at each share
    anchors = [len(distill_data(DistillRunSpec.from_config(tiny(tmp_path, dst_anchor_frac=f))).anchors)
               for f in (0.1, 0.2)]
    # the logits' part grows with the anchors, 4 bytes per float32 logit per class; the rest is the same
    classes = 2
    assert (bytes_[0.2] - bytes_[0.1]).tolist() == pytest.approx([4 * classes * (anchors[1] - anchors[0])] * len(bytes_))

# ----------------------------------------------------------------------- label-prior correction
def test_prior_correction_removes_per_class_biases_between_clients():
    """Clients that differ only by a per-class bias vector (the label-shift model) become one client
    up to a common shift; the target is the clients' median prior on the anchors."""
    g = torch.Generator().manual_seed(0)
    base = torch.randn(40, 3, generator=g)
    biases = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0], [-1.5, 1.0, 0.5]])
    Z = torch.stack([base + b for b in biases]).double()
    out = prior_correct(Z, iters=500, tol=1e-12)
    probs = torch.softmax(out, dim=-1)
    torch.testing.assert_close(probs[0], probs[1], atol=1e-6, rtol=0)
    torch.testing.assert_close(probs[2], probs[1], atol=1e-6, rtol=0)
    q = torch.softmax(Z, dim=-1).mean(dim=1)
    median = q.sort(dim=0).values[1]
    torch.testing.assert_close(probs.mean(dim=1), (median / median.sum()).expand(3, 3), atol=1e-6, rtol=0)


def test_prior_correction_by_hand_and_leaves_agreeing_clients_alone():
    """Two anchors, two classes, three clients whose mean predictions on the anchors are a, 1/2 and
    1 − a in class 0: the median is 1/2, so the middle client is unchanged and the outer two are
    shifted by ∓b with (1/2)(σ(z₁ + b) + σ(z₂ + b)) = 1/2 (σ the logistic of the class-0 margin)."""
    margins = torch.tensor([[2.0, 0.0], [0.5, -0.5], [-2.0, 0.0]])  # per client, per anchor: z_0 − z_1
    Z = torch.stack([margins / 2, -margins / 2], dim=-1).double()  # logits (±m/2)
    out = prior_correct(Z, iters=1000, tol=1e-13)
    torch.testing.assert_close(out[1], Z[1])
    new = out[..., 0] - out[..., 1]
    assert abs(float(torch.sigmoid(new[0]).mean()) - 0.5) < 1e-9 and abs(float(torch.sigmoid(new[2]).mean()) - 0.5) < 1e-9
    # σ(2 + x) + σ(x) = 1 at x = −1 by symmetry: client 0's margins become (1, −1), client 2's (−1, 1)
    torch.testing.assert_close(new[0], torch.tensor([1.0, -1.0], dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(new[2], torch.tensor([-1.0, 1.0], dtype=torch.float64), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="NaN"):
        prior_correct(torch.full((2, 2, 2), float("nan")))


def test_prior_correction_to_the_uniform_prior_by_hand():
    """dst-prior-target=uniform. Two of three clients lean to class 0 (margins 2, 0: mean p(class 0)
    (σ(2) + σ(0))/2 ≈ 0.69), one to class 1 (−2, 0): the median is the bloc's 0.69, so the median
    correction leaves the bloc alone and pulls the third client towards class 0; the uniform target
    shifts every client to a mean prediction of 1/2 — by σ(2 + x) + σ(x) = 1 at x = −1, the bloc's
    margins become (1, −1) and the third client's (−1, 1)."""
    margins = torch.tensor([[2.0, 0.0], [2.0, 0.0], [-2.0, 0.0]])
    Z = torch.stack([margins / 2, -margins / 2], dim=-1).double()
    median = prior_correct(Z, iters=1000, tol=1e-13)
    torch.testing.assert_close(median[:2], Z[:2])
    assert float(torch.sigmoid(median[2, :, 0] - median[2, :, 1]).mean()) > 0.68  # towards the bloc
    uniform = prior_correct(Z, prior=torch.tensor([0.5, 0.5]), iters=1000, tol=1e-13)
    new = uniform[..., 0] - uniform[..., 1]
    for k, expected in ((0, [1.0, -1.0]), (1, [1.0, -1.0]), (2, [-1.0, 1.0])):
        torch.testing.assert_close(new[k], torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=0)
    for bad in (torch.tensor([0.5, 0.0]), torch.tensor([1.0, 1.0, 1.0]), torch.tensor([float("nan"), 1.0])):
        with pytest.raises(ValueError, match="prior"):
            prior_correct(Z, prior=bad)


def test_build_consensus_prior_target_uniform_undoes_a_bloc_the_median_keeps():
    """The consensus of the three clients above (mean): the median target leaves both anchors on the
    bloc's class 0; the uniform target ranks them as every client does (anchor 0 before anchor 1)
    with the threshold in the middle: class 0, then class 1."""
    from fedcal.distill.student import build_consensus

    margins = torch.tensor([[2.0, 0.0], [2.0, 0.0], [-2.0, 0.0]])
    Z = torch.stack([margins / 2, -margins / 2], dim=-1)
    plain = build_consensus(Z, method="mean", prior_correct=True).logits.argmax(-1)
    uniform = build_consensus(Z, method="mean", prior_correct=True, prior_target="uniform").logits.argmax(-1)
    assert plain.tolist() == [0, 0] and uniform.tolist() == [0, 1]
    # without the correction the target is not read
    torch.testing.assert_close(build_consensus(Z, method="mean", prior_target="uniform").logits,
                               build_consensus(Z, method="mean").logits)
    with pytest.raises(ValueError, match="prior_target"):
        build_consensus(Z, method="mean", prior_correct=True, prior_target="balanced")


def test_prior_target_is_a_hashed_server_key_that_needs_the_correction(tmp_path):
    from fedcal.distill.replay import SERVER_KEYS, client_side

    assert "dst_prior_target" in SERVER_KEYS
    old = RunConfig.from_flower({**TINY, "dst-prior-correct": True})
    new = old.replace(dst_prior_target="uniform")
    assert default_run_name(old.replace(dst_prior_target="median")) == default_run_name(old)
    assert default_run_name(new) != default_run_name(old)
    assert client_side(tiny(tmp_path, dst_prior_correct=True, dst_prior_target="uniform")) == client_side(tiny(tmp_path))
    with pytest.raises(ConfigError, match="'dst-prior-target'.*dst-prior-correct=true"):
        RunConfig.from_flower({**TINY, "dst-prior-target": "uniform"})
    with pytest.raises(ConfigError, match="'dst-prior-target'"):
        RunConfig.from_flower({**TINY, "dst-prior-correct": True, "dst-prior-target": "balanced"})


def test_prior_correction_is_a_server_key_replayed_on_recorded_uploads(tmp_path):
    from fedcal.distill.replay import SERVER_KEYS, client_side

    assert "dst_prior_correct" in SERVER_KEYS
    cfg = tiny(tmp_path, dst_prior_correct=True)
    assert client_side(cfg) == client_side(tiny(tmp_path))


def test_cli_replays_a_server_variant_of_finished_runs_without_training_a_client(tmp_path, capsys):
    """`--replay dst-prior-correct=true` over a folder that holds the finished run of that client side
    replays it on the recorded uploads (before, the variant — the base setting of the call — ran
    live, training every client again)."""
    from fedcal.cli import main as cli_main

    report = tmp_path / "report"
    argv = ["distill", "--methods", "rfd", "--rhos", "0.3", "--partitions", "skew", "--seeds", "0", "--replay",
            "--report", str(report), "--no-progress",
            *[f"{k}={v}" if not isinstance(v, str) else f'{k}="{v}"' for k, v in TINY.items()
              if k not in ("task", "dst-rounds")], "dst-rounds=1"]
    assert cli_main(argv) == 0
    assert "distill: 1 runs (0 replayed" in capsys.readouterr().out
    assert cli_main([*argv, "dst-prior-correct=true"]) == 0
    assert "distill: 1 runs (1 replayed on recorded uploads)" in capsys.readouterr().out
    runs = [p for p in (report / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 2 and sum((p / "replay.json").exists() for p in runs) == 1
    table = pd.read_csv(report / "table.csv")
    assert table["prior correction"].tolist() == [True]
