"""Federated language-model corpora: each client's text, held-out text, and public text.

=================  ==================================================================================
corpus             source and partition
=================  ==================================================================================
shakespeare        Shakespeare's 36 First Folio plays (``../shared/data/shakespeare``): LEAF's
                   partition (Caldas et al., 2018), one client per speaking role — the ``num-clients``
                   roles with the most text, every speech of a role its sample — or, with
                   ``lm-partition=play``, one client per play (the largest plays)
wikitext2          WikiText-2 (raw) through Hugging Face ``datasets`` (networked users): the training
                   articles dealt round-robin to the clients, the validation split public
synthetic          a seeded toy play built here (each role favours its own words), for tests and
                   smoke runs without the data
=================  ==================================================================================

Held-out text: as LEAF's ``sample`` split, each client's speeches are shuffled with the seed and
``test_frac`` of them (at least one) are held out; the evaluation text is the union of the
clients' held-out speeches. Public text (the small model's pretraining text, see
:mod:`fedcal.lm.model`) is every speech of a role — or play — that is not a client, plus the
poems, less any speech whose exact text a client also speaks: no client's speech, train or held out,
is in it.

Why the largest roles: LEAF keeps all 1,129 roles and samples a few per round; a federation of 10
clients (SPEC §10) of LEAF's median role (a few hundred words) would hold too little text for a
local step of 64 windows. The 10 largest roles (Hamlet, Iago, King Henry V, …) hold 27–55 thousand
characters each.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedcal.config import LM_CORPORA, LM_PARTITIONS, ConfigError
from fedcal.text.corpora import FOLIO_GENRE, play_passages, play_speeches, shakespeare_dir, shakespeare_works

#: The held-out share of each client's speeches (LEAF's default ``--tf 0.9`` keeps 90 % for training).
TEST_FRAC = 0.1


@dataclass(frozen=True)
class LMCorpus:
    """Text of a federated language-model task, held in memory.

    ``clients[k]`` names client k (``hamlet/Ham``); ``train[k]`` and ``test[k]`` are its training
    and held-out samples (speeches, each one string); ``public`` is text no client holds.
    """

    name: str
    clients: tuple[str, ...]
    train: tuple[tuple[str, ...], ...]
    test: tuple[tuple[str, ...], ...]
    public: tuple[str, ...]

    def __post_init__(self):
        if not (len(self.clients) == len(self.train) == len(self.test)):
            raise ValueError(f"{self.name}: {len(self.clients)} clients, {len(self.train)} training and "
                             f"{len(self.test)} held-out parts")
        for name, tr, te in zip(self.clients, self.train, self.test):
            if not tr or not te:
                raise ConfigError(f"{self.name}: client {name!r} has an empty training or held-out partition")

    @property
    def test_texts(self) -> list[str]:
        """Every client's held-out speeches, client by client."""
        return [t for part in self.test for t in part]

    def words(self) -> set[str]:
        """The lower-cased words (:func:`word_tokens`) of all of the corpus's text: the word list of
        the non-word rate (:func:`fedcal.lm.metrics.nonword_rate`)."""
        out: set[str] = set()
        for texts in (*self.train, *self.test, self.public):
            for t in texts:
                out.update(word_tokens(t))
        return out


_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")


def word_tokens(text: str) -> list[str]:
    """Lower-cased words of ``text``: runs of letters, inner apostrophes kept (``'tis`` → ``tis``,
    ``o'er`` stays); digits and punctuation separate words."""
    return _WORD.findall(text.lower())


def split_samples(samples: Sequence[str], test_frac: float, seed: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """LEAF's per-client sample split: a seeded permutation; the first ``max(1, round(f·n))`` are
    held out, the rest train (both keep the original order). Needs at least two samples."""
    n = len(samples)
    if n < 2:
        raise ConfigError(f"a client needs at least 2 samples to hold one out, got {n}")
    k = min(n - 1, max(1, round(test_frac * n)))
    held = set(np.random.default_rng(seed).permutation(n)[:k].tolist())
    return (tuple(s for i, s in enumerate(samples) if i not in held),
            tuple(s for i, s in enumerate(samples) if i in held))


def shakespeare_lm(num_clients: int, partition: str = "role", seed: int = 0, test_frac: float = TEST_FRAC,
                   data_dir: str | os.PathLike[str] | None = None) -> LMCorpus:
    """Shakespeare's plays as a federated LM corpus (module docstring). A speech is its lines
    joined by newlines (the verse layout is part of what a model of the text learns)."""
    if partition not in LM_PARTITIONS:
        raise ConfigError(f"run-config key 'lm-partition': unknown value {partition!r}; choose one of "
                          f"{', '.join(LM_PARTITIONS)}")
    shakespeare_dir(data_dir)  # a clear error naming data-dir when the folder is missing
    speeches: dict[str, list[str]] = defaultdict(list)  # owner (role or play) → speeches
    for play in sorted(FOLIO_GENRE):
        for speaker, lines in play_speeches(play, data_dir, bare_tags=True):
            text = "\n".join(lines).strip()
            if text and speaker is not None:
                speeches[f"{play}/{speaker}" if partition == "role" else play].append(text)
    size = {owner: sum(map(len, texts)) for owner, texts in speeches.items()}
    ranked = sorted(size, key=lambda o: (-size[o], o))
    if num_clients > len(ranked):
        raise ConfigError(f"run-config key 'num-clients': {num_clients} clients but the corpus has only "
                          f"{len(ranked)} {partition}s")
    clients = ranked[:num_clients]
    parts = [split_samples(speeches[c], test_frac, seed + 7919 * k) for k, c in enumerate(clients)]
    public = [t for owner in ranked[num_clients:] for t in speeches[owner]]
    for stem in sorted(shakespeare_works(data_dir)):  # the poems (and Pericles, not a Folio play)
        if stem not in FOLIO_GENRE:
            public += play_passages(stem, data_dir=data_dir)
    # stock lines recur across roles ("'Tis better as it is."): a public speech whose exact text a
    # client speaks is dropped, so no client's text, training or held out, is pretrained on
    client_text = {t for owner in clients for t in speeches[owner]}
    public = [t for t in public if t not in client_text]
    return LMCorpus(f"shakespeare-{partition}", tuple(clients), tuple(p[0] for p in parts),
                    tuple(p[1] for p in parts), tuple(public))


def synthetic_lm(num_clients: int, seed: int = 0, speeches: int = 40, public: int = 200) -> LMCorpus:
    """A seeded toy play: every speech is 1–3 lines of 4–9 words drawn from a shared vocabulary of
    40 words and the role's own 6 favourite words (each favourite word twice as likely), so the
    roles differ the way real roles do, in what they talk about."""
    rng = np.random.default_rng(seed)
    shared = [f"w{i}" for i in range(40)]

    def speech(favourites: list[str]) -> str:
        pool = shared + favourites * 2
        return "\n".join(" ".join(rng.choice(pool, size=rng.integers(4, 10))) + "."
                         for _ in range(rng.integers(1, 4)))

    clients, parts = [], []
    for k in range(num_clients):
        fav = [f"r{k}x{i}" for i in range(6)]
        clients.append(f"role{k}")
        parts.append(split_samples([speech(fav) for _ in range(speeches)], TEST_FRAC, seed + k))
    pub = [speech([]) for _ in range(public)]
    return LMCorpus("synthetic", tuple(clients), tuple(p[0] for p in parts), tuple(p[1] for p in parts), tuple(pub))


def articles(lines: Sequence[str]) -> list[str]:
    """WikiText's lines grouped into articles: a line `` = Title = `` (one ``=`` on each side) opens
    an article; empty lines are dropped, section headings (`` = = … = = ``) stay in their article."""
    out: list[list[str]] = []
    for ln in lines:
        s = ln.strip()
        if not s:
            continue
        if re.fullmatch(r"= [^=].*[^=] =", s) or (not out):
            out.append([])
        out[-1].append(s)
    return ["\n".join(a) for a in out]


#: WikiText-2's dataset name on the Hugging Face Hub, as ``load_dataset`` takes it
WIKITEXT_REPO = "wikitext"


def wikitext2_lm(num_clients: int, seed: int = 0, cache_dir: str | os.PathLike[str] | None = None) -> LMCorpus:
    """WikiText-2 (raw) through Hugging Face ``datasets`` (downloads; networked users): the training
    articles dealt round-robin to ``num_clients`` clients, each client's articles split as
    :func:`split_samples`; the validation split is the public text."""
    try:
        from datasets import load_dataset
    except ImportError:
        raise ConfigError("run-config key 'lm-corpus': wikitext2 needs Hugging Face datasets (`pip install datasets`), "
                          "not installed here; offline, use lm-corpus=shakespeare or synthetic") from None
    from fedcal.hub import check_hub_name

    check_hub_name("lm-corpus", WIKITEXT_REPO, repo_type="dataset")  # one request at most, not load_dataset's retries
    try:
        ds = load_dataset(WIKITEXT_REPO, "wikitext-2-raw-v1", cache_dir=cache_dir)
    except Exception as exc:  # noqa: BLE001 — offline without a cached copy, a broken download
        raise ConfigError(f"run-config key 'lm-corpus': WikiText-2 cannot be loaded ({type(exc).__name__}: "
                          f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''})") from None
    train = articles(ds["train"]["text"])
    if num_clients > len(train):
        raise ConfigError(f"run-config key 'num-clients': {num_clients} clients but WikiText-2 has {len(train)} articles")
    parts = [split_samples(train[k::num_clients], TEST_FRAC, seed + k) for k in range(num_clients)]
    return LMCorpus("wikitext2", tuple(f"client{k}" for k in range(num_clients)), tuple(p[0] for p in parts),
                    tuple(p[1] for p in parts), tuple(articles(ds["validation"]["text"])))


def lm_corpus(name: str, num_clients: int, partition: str = "role", seed: int = 0,
              data_dir: str | os.PathLike[str] | None = None) -> LMCorpus:
    """The corpus ``name`` (:data:`LM_CORPORA`) for ``num_clients`` clients."""
    if name == "shakespeare":
        return shakespeare_lm(num_clients, partition, seed, data_dir=data_dir)
    if name == "synthetic":
        return synthetic_lm(num_clients, seed)
    if name == "wikitext2":
        return wikitext2_lm(num_clients, seed)
    raise ConfigError(f"run-config key 'lm-corpus': unknown value {name!r}; choose one of {', '.join(LM_CORPORA)}")
