"""The encoder layers' linear modules on attended positions only (fedcal.text.unpad): the logits and
the LoRA and head gradients equal transformers' padded forward (train mode with dropout included, so
the dropout draws are the same), the hooks leave with the forward, and anything it cannot vouch for
runs padded."""

from __future__ import annotations

import contextlib

import pytest
import torch

from fedcal.distill.clients import forward_logits, lora_model
from fedcal.text.frozen import prefix_features, split_classifier
from fedcal.text.unpad import LINEARS, keep_padding, linear_modules, skip_padding
from tests.test_backbone_pretrained import _tiny_classifiers

pytestmark = pytest.mark.usefixtures("one_thread_and_tmp_cache")


def _mixed_batch(family: str):
    """5 right-padded rows of lengths 12, 7, 12, 4, 9 (the batch keeps its full width 12, so
    forward_logits' cut to the longest text leaves the padded path's tensors the same shape)."""
    ids = torch.randint(3, 99, (5, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    for row, n in enumerate((12, 7, 12, 4, 9)):
        mask[row, n:] = 0
    ids[mask == 0] = 1 if family == "roberta" else 0
    return ids, mask


def _adapted(model, seed: int = 3):
    """A rank-4 q/v LoRA with its head, every trainable tensor random (B ≠ 0: the adapters matter)."""
    wrapped = lora_model(model, 4, alpha=8, target_modules=("query", "value"), seed=seed)
    with torch.no_grad():
        for p in wrapped.parameters():
            if p.requires_grad:
                p.normal_(0, 0.3)
    return wrapped


def _step(model, x, mask, padded: bool, seed: int = 7):
    """Logits and the trainable parameters' gradients of one forward/backward under a fixed seed."""
    model.zero_grad(set_to_none=True)
    y = torch.arange(x.shape[0]) % 3
    with keep_padding() if padded else contextlib.nullcontext():
        torch.manual_seed(seed)
        logits = forward_logits(model, x, mask)
        torch.nn.functional.cross_entropy(logits, y).backward()
    return logits.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}


def _rows_seen(model, act: list | None = None):
    """The row counts the first layer's query nn.Linear computes in each forward (a hook under the
    module hooked); ``act`` collects those of its feed-forward activation (GELU)."""
    seen = []
    base = linear_modules(model)[0]
    base = base.get_base_layer() if hasattr(base, "get_base_layer") else base
    base.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[:-1].numel()))
    if act is not None:
        gelu = [m for name, m in model.named_modules() if name.endswith("layer.0.intermediate.intermediate_act_fn")]
        assert len(gelu) == 1
        gelu[0].register_forward_hook(lambda mod, args, out: act.append(args[0].shape[:-1].numel()))
    return seen


def _assert_same(a, b):
    (za, ga), (zb, gb) = a, b
    torch.testing.assert_close(za, zb, rtol=1e-5, atol=1e-6)
    assert ga.keys() == gb.keys() and any("lora_A" in k for k in ga) and any("classifier" in k for k in ga)
    for k in ga:
        torch.testing.assert_close(ga[k], gb[k], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_eval_logits_equal_the_padded_forward_on_attended_rows_only(family):
    model = _adapted(_tiny_classifiers()[family]).eval()
    ids, mask = _mixed_batch(family)
    act = []
    seen = _rows_seen(model, act)
    with torch.no_grad():
        fast = forward_logits(model, ids, mask)
        with keep_padding():
            padded = forward_logits(model, ids, mask)
        whole = model(input_ids=ids, attention_mask=mask).logits  # transformers' own forward, no fedcal in it
    assert seen == [int(mask.sum()), mask.numel(), mask.numel()]  # 44 attended rows, then all 60 twice
    assert act == seen  # the feed-forward pair stays cut through its activation
    torch.testing.assert_close(fast, padded, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast, whole, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_train_mode_with_dropout_gives_the_same_logits_and_gradients(family):
    """Dropout 0.1 on the attention probabilities, the hidden states and the head: with the same seed
    the same masks are drawn, so the logits and the LoRA and head gradients are the padded path's."""
    model = _adapted(_tiny_classifiers()[family]).train()
    ids, mask = _mixed_batch(family)
    _assert_same(_step(model, ids, mask, padded=False), _step(model, ids, mask, padded=True))
    # the dropout is live: another seed gives other logits
    assert not torch.allclose(_step(model, ids, mask, padded=False)[0], _step(model, ids, mask, False, seed=8)[0])


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_a_peft_top_model_over_cached_states_equals_its_padded_forward(family):
    full = _tiny_classifiers()[family]
    for p in full.parameters():
        p.requires_grad_(False)
    prefix, top = split_classifier(full, 2)
    model = _adapted(top).train()
    ids, mask = _mixed_batch(family)
    feats = prefix_features(prefix, ids, mask, batch_size=2)
    seen = _rows_seen(model)
    fast = _step(model, feats, mask, padded=False)
    assert seen == [int(mask.sum())]
    _assert_same(fast, _step(model, feats, mask, padded=True))
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(forward_logits(model, feats, mask),
                                   model(inputs_embeds=feats, attention_mask=mask).logits, rtol=1e-5, atol=1e-6)


def _hooks(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in linear_modules(model))


def test_no_padding_or_no_mask_runs_the_padded_forward_unchanged():
    model = _adapted(_tiny_classifiers()["bert"]).eval()
    ids, mask = _mixed_batch("bert")
    full = torch.ones_like(mask)
    for m in (full, None):
        with skip_padding(model, m) as on:
            assert on is False and _hooks(model) == 0
    seen = _rows_seen(model)
    with torch.no_grad():
        forward_logits(model, ids, full)
    assert seen == [full.numel()]


def test_what_it_cannot_vouch_for_runs_padded():
    ids, mask = _mixed_batch("bert")
    # a row whose first position is padding: a [CLS] head would read a padded position
    left = mask.flip(1)
    model = _adapted(_tiny_classifiers()["bert"])
    with skip_padding(model, left) as on:
        assert not on
    # an active LoRA dropout would draw a (T, H) mask instead of the padded path's (N, L, H)
    dropped = lora_model(_tiny_classifiers()["bert"], 4, dropout=0.1).train()
    with skip_padding(dropped, mask) as on:
        assert not on
    with skip_padding(dropped.eval(), mask) as on:  # eval mode: no draw, so it applies
        assert on
    # a layer without one of the expected linear modules: the structure is not the one assumed
    odd = _tiny_classifiers()["bert"]
    odd.encoder.encoder.layer[1].intermediate.dense = torch.nn.Sequential(torch.nn.Linear(32, 64))
    assert linear_modules(odd) is None
    with skip_padding(odd, mask) as on:
        assert not on
    with skip_padding(torch.nn.Linear(3, 3), mask) as on:  # no encoder at all
        assert not on
    assert len(linear_modules(model)) == 4 * len(LINEARS)


def test_the_hooks_leave_with_the_forward_even_when_it_raises():
    model = _adapted(_tiny_classifiers()["bert"]).eval()
    ids, mask = _mixed_batch("bert")
    with skip_padding(model, mask) as on:
        assert on and _hooks(model) == 2 * 4 * len(LINEARS)
    assert _hooks(model) == 0
    with pytest.raises(IndexError):
        forward_logits(model, ids + 1000, mask)  # token ids beyond the vocabulary: the embedding lookup raises
    assert _hooks(model) == 0
    with pytest.raises(RuntimeError, match="boom"):
        with skip_padding(model, mask):
            raise RuntimeError("boom")
    assert _hooks(model) == 0
