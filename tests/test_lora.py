"""RFD-LoRA on peft models (fedcal.distill.clients / adapters / student), on tiny randomly
initialised RoBERTa classifiers (hidden 16, one layer, vocabulary 100) so each test takes about a
second on a CPU."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

from fedcal.distill import clip_logits, lora_delta  # noqa: E402
from fedcal.distill.clients import (DEFAULT_RANKS, adapter_state, anchor_logits, assign_ranks,  # noqa: E402
                                    check_rank, load_adapter_state, local_train, lora_model, upload_bytes)

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
    state["some.lora_A.x"] = torch.zeros(1)
    del state["some.lora_A.x"]
    fresh = lora_model(base, 8, seed=2)  # another initialisation, overwritten by the state
    load_adapter_state(fresh, state)
    for k, v in adapter_state(fresh).items():
        assert torch.equal(v, state[k])
    torch.testing.assert_close(anchor_logits(fresh, ids, mask), anchor_logits(model, ids, mask), rtol=0, atol=0)
    with pytest.raises(ValueError, match="different LoRA rank"):
        load_adapter_state(lora_model(base, 4), state)
    with pytest.raises(ValueError, match="missing"):
        load_adapter_state(fresh, {k: v for k, v in list(state.items())[1:]})


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
