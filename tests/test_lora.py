"""RFD-LoRA on peft models (fedcal.distill.clients / adapters / student), on tiny randomly
initialised RoBERTa classifiers (hidden 16, one layer, vocabulary 100) so each test takes about a
second on a CPU."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

from fedcal.distill import clip_logits, distillation_loss, lora_delta  # noqa: E402
from fedcal.distill.clients import (DEFAULT_RANKS, adapter_state, anchor_logits, assign_ranks,  # noqa: E402
                                    check_rank, load_adapter_state, local_train, lora_model)
from fedcal.distill.methods import upload_bytes  # noqa: E402

HIDDEN, CLASSES, VOCAB, LENGTH = 16, 3, 100, 8
ALPHA = 8.0


def tiny_base(seed: int = 0, num_labels: int = CLASSES):
    """A randomly initialised one-layer RoBERTa classifier (frozen by the wrappers)."""
    config = transformers.RobertaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=1,
                                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=LENGTH + 4,
                                        num_labels=num_labels, pad_token_id=1,
                                        initializer_range=0.3)  # input-dependent features at init
    torch.manual_seed(seed)
    return transformers.RobertaForSequenceClassification(config).eval()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy machine the threads' spinning
    made these tests 20× slower; the count is restored for the rest of the session."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def base():
    return tiny_base()


def separable_task(n: int = 48, seed: int = 0):
    """Class c's sequences use only the 4 tokens 10 + 4c … 13 + 4c: separable by content."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % CLASSES
    width = 4
    ids = 10 + y[:, None] * width + torch.randint(0, width, (n, LENGTH), generator=g)
    ids[:, 0] = 0  # <s>, the token RoBERTa's head reads
    return ids, torch.ones_like(ids), y


# ------------------------------------------------------------------------------------- clients

def test_rank_outside_the_allowed_set_names_the_client_and_the_set(base):
    with pytest.raises(ValueError, match=r"client 7: LoRA rank 3 is not in the allowed set \[2, 4, 8, 16\]"):
        lora_model(base, 3, client=7)
    with pytest.raises(ValueError, match=r"client a: .*\[1, 5\]"):
        lora_model(base, 2, client="a", allowed_ranks={5, 1})
    with pytest.raises(ValueError, match="integer >= 1"):
        check_rank(0, None)
    assert check_rank(3, None) == 3 and assign_ranks(6) == [2, 4, 8, 16, 2, 4]
    assert DEFAULT_RANKS == (2, 4, 8, 16)


@pytest.mark.parametrize("train_head", [True, False])
def test_only_lora_and_the_head_are_trainable(base, train_head):
    model = lora_model(base, 4, train_head=train_head)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n or (train_head and ".modules_to_save." in n)
                             for n in trainable)
    assert sum(".lora_A." in n for n in trainable) == 2  # query and value of the one layer
    assert any(".modules_to_save." in n for n in trainable) == train_head
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert any("word_embeddings" in n for n in frozen) and any("query.base_layer" in n for n in frozen)
    assert all(p.requires_grad for p in base.parameters())  # the deep copy left the caller's base alone
    assert not any(".lora_" in n for n, _ in base.named_parameters())
    # B starts at zero: the wrapper computes the base model's function.
    ids, mask, _ = separable_task(6)
    torch.testing.assert_close(anchor_logits(model, ids, mask, clip=1e6), base(input_ids=ids, attention_mask=mask).logits.detach())


def test_adapter_state_round_trip_and_survival_in_a_fresh_wrapper(base):
    ids, mask, y = separable_task()
    model = lora_model(base, 8, seed=1)
    local_train(model, ids, mask, y, epochs=1, batch_size=16, lr=1e-2, generator=torch.Generator().manual_seed(0))
    state = adapter_state(model)
    assert all(t.device.type == "cpu" and not t.requires_grad for t in state.values())
    assert [k for k in state] == [n for n, _ in model.named_parameters() if ".lora_" in n or "modules_to_save" in n]
    assert any(".modules_to_save." in k for k in state)
    assert all(float(v.abs().sum()) > 0 for k, v in state.items() if ".lora_B." in k)  # B moved off zero
    fresh = lora_model(base, 8, seed=2)  # another initialisation, overwritten by the state
    load_adapter_state(fresh, state)
    for k, v in adapter_state(fresh).items():
        assert torch.equal(v, state[k])
    torch.testing.assert_close(anchor_logits(fresh, ids, mask), anchor_logits(model, ids, mask), rtol=0, atol=0)
    with pytest.raises(ValueError, match="different LoRA rank"):
        load_adapter_state(lora_model(base, 4), state)
    with pytest.raises(ValueError, match="missing"):
        load_adapter_state(fresh, {k: v for k, v in list(state.items())[1:]})
    with pytest.raises(ValueError, match="unexpected"):
        load_adapter_state(fresh, {**state, "x.lora_A.default.weight": torch.zeros(1)})


def test_local_train_lowers_the_loss_and_is_deterministic(base):
    ids, mask, y = separable_task()
    ce = lambda m: float(torch.nn.functional.cross_entropy(anchor_logits(m, ids, mask, clip=1e6), y))
    runs = []
    for _ in range(2):
        model = lora_model(base, 4, seed=3)
        before = ce(model)
        stats = local_train(model, ids, mask, y, epochs=6, batch_size=8, lr=2e-2,
                            generator=torch.Generator().manual_seed(5))
        runs.append((stats, adapter_state(model)))
        assert ce(model) < 0.5 * before, (before, ce(model))
    (s1, a1), (s2, a2) = runs
    assert s1.steps == 6 * 6 == len(s1.lrs) and s1.mean_loss == s2.mean_loss
    assert all(torch.equal(a1[k], a2[k]) for k in a1)
    other = lora_model(base, 4, seed=3)
    s3 = local_train(other, ids, mask, y, epochs=6, batch_size=8, lr=2e-2, generator=torch.Generator().manual_seed(6))
    assert s3.mean_loss != s1.mean_loss


def test_warmup_schedule_starts_at_zero_and_peaks_after_warmup(base):
    ids, mask, y = separable_task(40)
    model = lora_model(base, 2)
    stats = local_train(model, ids, mask, y, epochs=2, batch_size=4, lr=1e-3, warmup_frac=0.25,
                        generator=torch.Generator().manual_seed(0))
    lrs = stats.lrs  # 20 steps, 5 of warm-up
    assert stats.steps == 20 and lrs[0] == pytest.approx(0.0)
    assert max(lrs) == pytest.approx(1e-3) and lrs.index(max(lrs)) == 5
    assert all(a < b for a, b in zip(lrs[:5], lrs[1:6])) and all(a > b for a, b in zip(lrs[5:], lrs[6:]))


def test_anchor_logits_are_clipped_float32_cpu(base):
    ids, mask, _ = separable_task(10)
    model = lora_model(base, 2)
    with torch.no_grad():  # blow the head up so the logits exceed the clip
        for n, p in model.named_parameters():
            if "modules_to_save" in n and "out_proj.weight" in n:
                p.mul_(1e4)
    raw = anchor_logits(model, ids, mask, clip=1e9)
    z = anchor_logits(model, ids, mask, clip=10.0, batch_size=3)
    assert z.shape == (10, CLASSES) and z.dtype == torch.float32 and z.device.type == "cpu"
    assert float(raw.abs().max()) > 10 and float(z.abs().max()) == 10.0
    torch.testing.assert_close(z, clip_logits(raw, 10.0))
    assert model.training  # the wrapper's mode is restored


def test_upload_bytes_logits_do_not_depend_on_rank_adapters_grow_with_it(base):
    states = {r: adapter_state(lora_model(base, r)) for r in DEFAULT_RANKS}
    logits = {r: upload_bytes("rfd", num_anchors=100, num_classes=CLASSES) for r in DEFAULT_RANKS}
    assert set(logits.values()) == {100 * CLASSES * 4}
    for method in ("fedit", "ffa", "flora", "flexlora"):
        sizes = [upload_bytes(method, state=states[r]) for r in DEFAULT_RANKS]
        assert all(a < b for a, b in zip(sizes, sizes[1:])), (method, sizes)
    # Per rank step: 2 adapted layers × (A r×16 + B 16×r) float32, FFA only B.
    assert upload_bytes("fedit", state=states[4]) - upload_bytes("fedit", state=states[2]) == 2 * 2 * (2 * 16) * 4
    assert upload_bytes("ffa", state=states[4]) - upload_bytes("ffa", state=states[2]) == 2 * 2 * 16 * 4
    with pytest.raises(ValueError, match="unknown method"):
        upload_bytes("fedprox", state=states[2])


# ------------------------------------------------------------------------------------ adapters

from fedcal.distill.adapters import (effective_weight, ffa_aggregate, fedit_aggregate, flexlora_aggregate,  # noqa: E402
                                     flora_aggregate, head_state, layer_delta, lora_pairs, merge_flora)
from fedcal.distill.clients import lora_factors  # noqa: E402


def trained_clients(base, ranks, *, seeds=None, freeze_a=False, n=24, targets=("query", "value")):
    """One client per rank, each a few steps on its own slice of the task."""
    models = []
    for k, r in enumerate(ranks):
        model = lora_model(base, r, seed=k if seeds is None else seeds[k], freeze_a=freeze_a, target_modules=targets)
        ids, mask, y = separable_task(n, seed=10 + k)
        local_train(model, ids, mask, y, epochs=2, batch_size=8, lr=2e-2, generator=torch.Generator().manual_seed(k))
        models.append(model)
    return models


def test_fedit_on_peft_models_equals_the_hand_averaged_factors(base):
    clients = trained_clients(base, [4, 4, 4])
    states = [adapter_state(m) for m in clients]
    w = [1.0, 2.0, 5.0]
    glob = lora_model(base, 4, seed=9)
    load_adapter_state(glob, fedit_aggregate(states, w))
    read = adapter_state(glob)
    for key in states[0]:  # every A, B and head tensor is the weighted average
        torch.testing.assert_close(read[key], sum(wk / 8 * s[key] for wk, s in zip(w, states)))
    layer = next(iter(lora_pairs(read)))
    A_bar = sum(wk / 8 * lora_pairs(s)[layer][0] for wk, s in zip(w, states))
    B_bar = sum(wk / 8 * lora_pairs(s)[layer][1] for wk, s in zip(w, states))
    torch.testing.assert_close(layer_delta(glob, layer), (ALPHA / 4) * B_bar @ A_bar)
    with pytest.raises(ValueError, match="client 1"):
        fedit_aggregate([states[0], adapter_state(lora_model(base, 2))])


def test_ffa_keeps_A_at_its_shared_init_and_averages_B(base):
    init = adapter_state(lora_model(base, 4, seed=0, freeze_a=True))
    clients = trained_clients(base, [4, 4], seeds=[0, 0], freeze_a=True)
    states = [adapter_state(m) for m in clients]
    for s in states:
        for key in s:
            if ".lora_A." in key:
                assert torch.equal(s[key], init[key])  # A never trained
            elif ".lora_B." in key:
                assert not torch.equal(s[key], init[key])  # B did
    assert all(not p.requires_grad for n, p in clients[0].named_parameters() if ".lora_A." in n)
    agg = ffa_aggregate(states)
    for key in agg:
        if ".lora_A." in key:
            assert torch.equal(agg[key], init[key])
        else:
            torch.testing.assert_close(agg[key], (states[0][key] + states[1][key]) / 2)
    # A shared A makes the averaged update exact: (α/r) B̄ A = mean of the clients' ΔW.
    layer = next(iter(lora_pairs(agg)))
    mean_delta = sum(lora_delta(*lora_pairs(s)[layer], ALPHA) for s in states) / 2
    torch.testing.assert_close(lora_delta(*lora_pairs(agg)[layer], ALPHA), mean_delta)
    with pytest.raises(ValueError, match="client 1: A of .* differs"):
        ffa_aggregate([states[0], adapter_state(trained_clients(base, [4], seeds=[5])[0])])


def test_flora_written_back_model_carries_the_weighted_sum_of_updates(base):
    ranks, w = [2, 4, 8, 16], [3.0, 1.0, 1.0, 5.0]
    states = [adapter_state(m) for m in trained_clients(base, ranks)]
    update = flora_aggregate(states, w, alpha=ALPHA)
    base_weights = [p.detach().clone() for p in base.parameters()]
    for r in ranks:  # every client continues from the merged global update with a fresh adapter
        client = lora_model(base, r, seed=r)
        original = {layer: effective_weight(client, layer) for layer in update.stacked}
        merge_flora(client, update, seed=100 + r)
        for layer in update.stacked:
            expected = sum(wk / sum(w) * (ALPHA / rk) * lora_pairs(s)[layer][1] @ lora_pairs(s)[layer][0]
                           for wk, rk, s in zip(w, ranks, states))
            assert update.stacked[layer][0].shape[0] == sum(ranks)
            torch.testing.assert_close(effective_weight(client, layer) - original[layer], expected,
                                       rtol=1e-5, atol=1e-6)
            assert float(layer_delta(client, layer).abs().max()) == 0.0  # fresh adapter: B = 0
        for key, v in head_state(adapter_state(client)).items():
            torch.testing.assert_close(v, sum(wk / sum(w) * s[key] for wk, s in zip(w, states)))
        assert [n for n, p in client.named_parameters() if p.requires_grad and "base_layer" in n] == []
    # Each client merged into its own copy: the shared base is untouched.
    assert all(torch.equal(a, b) for a, b in zip(base_weights, base.parameters()))


def test_flexlora_per_rank_product_is_the_truncated_svd_of_the_average(base):
    ranks = [2, 4, 8, 16]
    states = [adapter_state(m) for m in trained_clients(base, ranks)]
    per_rank = flexlora_aggregate(states, alpha=ALPHA, ranks=ranks)
    for r in ranks:
        client = lora_model(base, r, seed=1)
        load_adapter_state(client, per_rank[r])
        for layer in lora_pairs(states[0]):
            W = sum((ALPHA / rk) * lora_pairs(s)[layer][1] @ lora_pairs(s)[layer][0] for rk, s in zip(ranks, states)) / 4
            U, S, Vh = torch.linalg.svd(W)
            torch.testing.assert_close(layer_delta(client, layer), (U[:, :r] * S[:r]) @ Vh[:r], rtol=1e-4, atol=1e-6)
    layer = next(iter(lora_pairs(states[0])))
    full = layer_delta(client, layer)  # r = 16 = hidden: the full average itself
    torch.testing.assert_close(full, sum((ALPHA / rk) * lora_pairs(s)[layer][1] @ lora_pairs(s)[layer][0]
                                         for rk, s in zip(ranks, states)) / 4, rtol=1e-4, atol=1e-6)


# --------------------------------------------------------------------- LoRA on the word embeddings

EMB = ("query", "value", "word_embeddings")
EMB_LAYER = "base_model.model.roberta.embeddings.word_embeddings"


def test_embedding_lora_adds_the_transposed_scaled_product_to_the_table(base):
    model = lora_model(base, 4, target_modules=EMB, seed=3)
    module = model.get_submodule(EMB_LAYER)
    A, B = lora_factors(module)
    assert (A.shape, B.shape) == ((4, VOCAB), (HIDDEN, 4))  # the linear layers' (r, d_in) / (d_out, r)
    assert float(A.detach().abs().max()) == 0.0 and float(B.detach().abs().max()) > 0  # peft's embedding init: ΔW = 0
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        A.copy_(torch.randn(A.shape, generator=g))
    ids = torch.tensor([[0, 5, 17, 99, 1]])
    table = base.roberta.embeddings.word_embeddings.weight.detach()
    expected = table[ids] + (ALPHA / 4) * (B.detach() @ A.detach()).T[ids]  # by hand: row t of E + s (B A)ᵀ
    torch.testing.assert_close(module(ids), expected)
    torch.testing.assert_close(effective_weight(model, EMB_LAYER), (table + (ALPHA / 4) * (B @ A).T.detach()).T)
    state = adapter_state(model)
    assert {k for k in state if "word_embeddings" in k} == {EMB_LAYER + ".lora_embedding_A.default",
                                                            EMB_LAYER + ".lora_embedding_B.default"}
    assert EMB_LAYER in lora_pairs(state)


def test_embedding_adapter_trains_a_per_token_code(base):
    model = lora_model(base, 2, target_modules=("word_embeddings",), seed=0)
    ids, mask, y = separable_task(48)
    before = lora_factors(model.get_submodule(EMB_LAYER))[0].detach().clone()
    stats = local_train(model, ids, mask, y, epochs=3, batch_size=8, lr=2e-2, generator=torch.Generator().manual_seed(0))
    after = lora_factors(model.get_submodule(EMB_LAYER))[0].detach()
    used = torch.unique(ids)
    unused = torch.tensor(sorted(set(range(VOCAB)) - set(used.tolist())))
    assert float((after[:, used] - before[:, used]).abs().max()) > 0  # codes of the tokens seen moved
    # weight decay only shrinks an unseen token's code, which starts at 0: it stays exactly 0
    assert float(after[:, unused].abs().max()) == 0.0
    assert stats.last_epoch_loss < stats.mean_loss


def test_ffa_embedding_adapter_starts_with_a_random_frozen_A(base):
    model = lora_model(base, 4, target_modules=EMB, seed=0, freeze_a=True)
    A, B = lora_factors(model.get_submodule(EMB_LAYER))
    assert not A.requires_grad and B.requires_grad
    assert float(B.detach().abs().max()) == 0.0 and 0.8 < float(A.detach().std()) < 1.2  # A ~ N(0, 1), ΔW = 0
    again = lora_factors(lora_model(base, 4, target_modules=EMB, seed=0, freeze_a=True).get_submodule(EMB_LAYER))[0]
    assert torch.equal(A, again)  # one seed, one frozen A: FFA's shared initialisation


def test_flora_and_flexlora_handle_the_embedding_table(base):
    ranks, w = [2, 4], [1.0, 3.0]
    states = [adapter_state(m) for m in trained_clients(base, ranks, targets=EMB)]
    update = flora_aggregate(states, w, alpha=ALPHA)
    expected = sum(wk / 4 * (ALPHA / rk) * lora_pairs(s)[EMB_LAYER][1] @ lora_pairs(s)[EMB_LAYER][0]
                   for wk, rk, s in zip(w, ranks, states))
    assert float(expected.abs().max()) > 0
    client = lora_model(base, 2, target_modules=EMB, seed=1)
    before = effective_weight(client, EMB_LAYER)
    merge_flora(client, update, seed=5)
    torch.testing.assert_close(effective_weight(client, EMB_LAYER) - before, expected, rtol=1e-5, atol=1e-6)
    table = client.get_submodule(EMB_LAYER).get_base_layer().weight.detach()
    torch.testing.assert_close(table - base.roberta.embeddings.word_embeddings.weight.detach(), expected.T,
                               rtol=1e-5, atol=1e-6)  # merged into the (vocabulary × hidden) table itself
    assert float(layer_delta(client, EMB_LAYER).abs().max()) == 0.0  # a fresh adapter on top
    per_rank = flexlora_aggregate(states, w, alpha=ALPHA, ranks=[2])
    flex = lora_model(base, 2, target_modules=EMB, seed=1)
    load_adapter_state(flex, per_rank[2])
    U, S, Vh = torch.linalg.svd(expected)
    torch.testing.assert_close(layer_delta(flex, EMB_LAYER), (U[:, :2] * S[:2]) @ Vh[:2], rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------------- student

from fedcal.distill.student import (attack_success_rate, build_consensus, clean_accuracy, distill_step,  # noqa: E402
                                    predict, robust_accuracy, student_loss, student_model)


def fixed_consensus(n_anchors: int = 24):
    """A consensus from three clients' logits that agree on a class per anchor, plus one outlier."""
    ids, mask, y = separable_task(n_anchors, seed=3)
    g = torch.Generator().manual_seed(0)
    uploads = [4.0 * torch.nn.functional.one_hot(y, CLASSES) + torch.randn(n_anchors, CLASSES, generator=g)
               for _ in range(3)]
    uploads.append(torch.full((n_anchors, CLASSES), 1e3))  # clipped to 10 by the server
    return ids, mask, y, uploads


@pytest.mark.parametrize("switches", [dict(), dict(cat=False, mmd=False, dis=False), dict(mmd=False)])
@pytest.mark.parametrize("method", ["mom", "median", "mean"])
def test_distill_step_reduces_the_distillation_loss(base, switches, method):
    ids, mask, y, uploads = fixed_consensus()
    consensus = build_consensus(uploads, method=method, num_groups=2, generator=torch.Generator().manual_seed(0))
    assert float(consensus.logits.abs().max()) <= 10.0
    student = student_model(base, rank=8)
    assert any(".modules_to_save." in n for n, p in student.named_parameters() if p.requires_grad)
    optimizer = torch.optim.AdamW([p for p in student.parameters() if p.requires_grad], lr=2e-2, weight_decay=0.01)
    before = student_loss(student, ids, mask, consensus, **switches)
    stats = distill_step(student, ids, mask, consensus, optimizer, steps=30, batch_size=8,
                         generator=torch.Generator().manual_seed(1), **switches)
    after = student_loss(student, ids, mask, consensus, **switches)
    assert stats.steps == 30 and len(stats.losses) == 30
    # CE's floor is the teacher's entropy, not 0: measure the excess over a student that outputs
    # the consensus logits exactly.
    floor = float(distillation_loss(consensus.logits, consensus, **switches))
    assert after - floor < 0.5 * (before - floor), (floor, before, after)
    if not switches.get("mmd", True):
        # Without the moment term the loss is the tempered CE alone, and 30 steps teach the
        # teacher's classes; with it, the first steps go into matching the logits' level μ̂ (a
        # shift shared by all classes), so the argmax is not yet a fair check.
        assert clean_accuracy(predict(student, ids, mask), consensus.logits.argmax(1)) >= 0.9


def test_distill_step_is_deterministic_and_checks_its_inputs(base):
    ids, mask, y, uploads = fixed_consensus()
    consensus = build_consensus(uploads, method="mean")
    runs = []
    for _ in range(2):
        student = student_model(base, rank=4)
        opt = torch.optim.AdamW([p for p in student.parameters() if p.requires_grad], lr=1e-2)
        runs.append(distill_step(student, ids, mask, consensus, opt, steps=3, batch_size=5,
                                 generator=torch.Generator().manual_seed(2)).losses)
    assert runs[0] == runs[1]
    with pytest.raises(ValueError, match="one row per anchor"):
        distill_step(student, ids[:5], mask[:5], consensus, opt)
    with pytest.raises(ValueError, match="num_groups"):
        build_consensus(uploads, method="mom")


def test_ca_ra_asr_on_hand_made_predictions():
    labels = torch.tensor([0, 1, 2, 2, 1, 0])
    clean = torch.tensor([0, 1, 2, 0, 1, 1])  # 4 of 6 right
    triggered = torch.tensor([2, 2, 2, 2, 1, 0])  # target 2: inputs 0, 1 flipped to it; 4, 5 resisted
    assert clean_accuracy(clean, labels) == pytest.approx(4 / 6)
    assert robust_accuracy(triggered, labels) == pytest.approx(4 / 6)  # 2, 3 (target class), 4, 5
    assert attack_success_rate(triggered, labels, target=2) == pytest.approx(2 / 4)  # of the 4 non-target
    assert attack_success_rate(torch.tensor([0, 1]), torch.tensor([0, 1]), target=2) == 0.0
    with pytest.raises(ValueError, match="undefined"):
        attack_success_rate(torch.tensor([2, 2]), torch.tensor([2, 2]), target=2)
    with pytest.raises(ValueError, match="integer class indices"):
        clean_accuracy(torch.rand(6, 3).argmax(1).float(), labels)
    with pytest.raises(ValueError, match="one length"):
        robust_accuracy(clean[:3], labels)


def test_predict_is_argmax_of_eval_logits(base):
    ids, mask, _ = separable_task(7)
    model = lora_model(base, 2)
    pred = predict(model, ids, mask, batch_size=3)
    assert pred.dtype == torch.int64 and torch.equal(pred, anchor_logits(model, ids, mask, clip=1e6).argmax(1))
