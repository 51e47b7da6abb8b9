"""The language-model case study (task ``lm``): metrics by hand and against second
implementations, the corpus partition, the model cache, bad input, and the task end to end
through Flower on the synthetic toy play with a test-sized GPT-2 (cached under tmp)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

pytest.importorskip("transformers")

from fedcal.config import ConfigError, RunConfig
from fedcal.lm.corpus import articles, lm_corpus, shakespeare_lm, split_samples, synthetic_lm, word_tokens
from fedcal.lm.metrics import distinct, generation_stats, nonword_rate, nucleus_sizes, seq_rep, token_metrics
from fedcal.metrics import calibration_metrics, confidence_calibration
from fedcal.results import config_hash

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
TINY = {"task": "lm", "engine": "inprocess", "device": "cpu", "lm-corpus": "synthetic", "num-clients": 3,
        "clients-per-round": 3, "num-rounds": 2, "attacker-ratio": 0.34, "attack": "tsa", "tau": 2.0,
        "lm-pretrain-steps": 5, "lm-vocab": 200, "lm-hidden": 16, "lm-heads": 2, "lm-layers": 1, "lm-context": 48,
        "lm-gen-tokens": 6, "lm-samples": 2, "lm-prompt-count": 2, "lm-prompt-words": 4, "batch-size": 8,
        "local-steps": 2, "optimizer": "adamw", "lr": 2e-3}


pytestmark = pytest.mark.usefixtures("one_thread_and_tmp_cache")


def tiny(tmp_path, **overrides) -> RunConfig:
    return RunConfig.from_flower({**TINY, "output-dir": str(tmp_path / "runs"), **overrides})


# ------------------------------------------------------------------------------ metrics by hand
def test_nucleus_size_by_hand():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5], [0.97, 0.01, 0.01, 0.01],
                          [0.25, 0.25, 0.25, 0.25]])
    # 0.5 + 0.3 = 0.8 < 0.9, + 0.15 = 0.95 ≥ 0.9 → 3 (order of the row does not matter); 0.97 alone → 1;
    # uniform: 0.75 < 0.9 after three → all 4
    assert nucleus_sizes(probs, 0.9).tolist() == [3, 3, 1, 4]
    assert nucleus_sizes(probs, 0.5).tolist() == [1, 1, 1, 2]
    assert nucleus_sizes(probs, 1.0).tolist() == [4, 4, 4, 4]
    with pytest.raises(ValueError, match="top_p"):
        nucleus_sizes(probs, 0.0)


def test_nucleus_size_equals_what_transformers_top_p_keeps():
    """Second implementation: transformers' TopPLogitsWarper (what generate samples from) keeps
    exactly the nucleus on random distributions."""
    from transformers.generation.logits_process import TopPLogitsWarper

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 50, generator=gen) * torch.linspace(0.3, 4, 200)[:, None]
    for p in (0.5, 0.9, 0.95):
        kept = torch.isfinite(TopPLogitsWarper(top_p=p)(None, logits.clone())).sum(-1)
        assert torch.equal(nucleus_sizes(logits.softmax(-1), p), kept)


def test_confidence_calibration_by_hand_and_equal_to_classifier_metrics():
    # 4 predictions in 2 bins: (0.2, 0.4] holds 0.3 (wrong) and 0.35 (right); (0.8, 1] holds 0.9 and 0.95 (right)
    # bin 1: acc 0.5, conf 0.325 → gap +0.175; bin 2: acc 1, conf 0.925 → gap +0.075; weights 1/2 each
    conf = torch.tensor([0.3, 0.35, 0.9, 0.95])
    correct = torch.tensor([0.0, 1.0, 1.0, 1.0])
    out = confidence_calibration(conf, correct, n_bins=5)
    assert out["ece"] == pytest.approx(0.5 * 0.175 + 0.5 * 0.075)
    assert out["sece"] == pytest.approx(out["ece"])  # both gaps under-confident (positive)
    assert out["bins"]["count"].tolist() == [0, 2, 0, 0, 2]
    # the same as the classifiers' metric on random logits
    gen = torch.Generator().manual_seed(1)
    z, y = torch.randn(300, 7, generator=gen) * 3, torch.randint(0, 7, (300,), generator=gen)
    p = z.softmax(-1)
    ref = calibration_metrics(z, y, 15)
    got = confidence_calibration(p.max(-1).values, (p.argmax(-1) == y).double(), 15)
    assert got["ece"] == pytest.approx(ref["ece"], abs=1e-7) and got["sece"] == pytest.approx(ref["sece"], abs=1e-7)
    with pytest.raises(ValueError, match="shape"):
        confidence_calibration(conf, correct[:3])


def test_token_metrics_equal_classifier_metrics_on_flattened_positions():
    """Every position of every window is one prediction: token_metrics computed batch by batch
    equals calibration_metrics on the flattened (positions × vocabulary) logits."""
    gen = torch.Generator().manual_seed(2)
    vocab, table = 11, torch.randn(11, 11, generator=gen) * 2

    def logits_fn(ids):  # a bigram model: logits of the next token from the current one
        return table[ids]

    data = torch.randint(0, vocab, (7, 9), generator=gen)
    got, bins = token_metrics(logits_fn, data, n_bins=10, top_p=0.9, batch_size=3)
    z, y = table[data[:, :-1]].flatten(0, 1), data[:, 1:].flatten()
    ref = calibration_metrics(z, y, 10)
    for k in ("accuracy", "ece", "sece", "brier", "nll"):
        assert got[k] == pytest.approx(ref[k], abs=1e-9), k
    assert got["perplexity"] == pytest.approx(math.exp(ref["nll"]))
    assert got["nucleus"] == pytest.approx(float(nucleus_sizes(z.softmax(-1), 0.9).double().mean()))
    assert int(bins["count"].sum()) == y.numel()
    with pytest.raises(FloatingPointError):
        token_metrics(lambda ids: torch.full((*ids.shape, vocab), float("nan")), data)


def test_generation_statistics_by_hand():
    assert word_tokens("O'er the hills, 'tis 3 TIMES!") == ["o'er", "the", "hills", "tis", "times"]
    # 6 words → 3 four-grams, (a b a b) repeats once: 1 − 2/3
    assert seq_rep(["a", "b", "a", "b", "a", "b"], 4) == pytest.approx(1 - 2 / 3)
    assert seq_rep(["a", "b"], 4) == 0.0
    seqs = [["a", "b", "a"], ["b", "c"]]
    assert distinct(seqs, 1) == pytest.approx(3 / 5)  # a, b, c of 5 words
    assert distinct(seqs, 2) == pytest.approx(3 / 3)  # (a b), (b a), (b c)
    assert nonword_rate(seqs, {"a", "b"}) == pytest.approx(1 / 5)
    stats = generation_stats(["a b a b a b", "zz"], {"a", "b"})
    assert stats["rep4"] == pytest.approx((1 - 2 / 3 + 0) / 2) and stats["nonword"] == pytest.approx(1 / 7)


# ------------------------------------------------------------------------------ corpora
def test_split_samples_is_seeded_and_holds_out_a_tenth():
    samples = [f"s{i}" for i in range(30)]
    train, test = split_samples(samples, 0.1, seed=3)
    assert len(test) == 3 and set(train) | set(test) == set(samples) and not set(train) & set(test)
    assert split_samples(samples, 0.1, seed=3) == (train, test)
    assert split_samples(samples, 0.1, seed=4) != (train, test)
    with pytest.raises(ConfigError, match="at least 2"):
        split_samples(["only"], 0.1, 0)


def test_synthetic_corpus_roles_differ_and_public_text_is_no_clients():
    c = synthetic_lm(3, seed=0)
    assert len(c.clients) == 3 and all(c.train) and all(c.test)
    own = [{w for t in c.train[k] for w in t.split() if w.startswith(f"r{k}x")} for k in range(3)]
    assert all(own)  # each role uses its favourite words …
    assert not any(w.startswith("r") for t in c.public for w in t.split())  # … which public text never does
    assert synthetic_lm(3, seed=0) == c


def test_an_empty_client_partition_is_a_config_error():
    from fedcal.lm.corpus import LMCorpus

    with pytest.raises(ConfigError, match="client 'b' has an empty"):
        LMCorpus("x", ("a", "b"), (("t",), ()), (("u",), ("v",)), ())


def test_wikitext_articles_are_grouped_by_title_lines():
    lines = ["", " = Alpha = ", " text a1 ", " = = Section = = ", " a2 ", "", " = Beta = ", " b1 "]
    assert articles(lines) == ["= Alpha =\ntext a1\n= = Section = =\na2", "= Beta =\nb1"]


@pytest.mark.skipif(not (SHARED / "shakespeare").exists(), reason="needs ../shared/data/shakespeare")
def test_shakespeare_roles_are_the_largest_and_public_text_holds_none_of_their_speeches():
    c = shakespeare_lm(10, "role", seed=0, data_dir=SHARED)
    assert c.clients[:2] == ("hamlet/Ham", "othello/IAGO")
    sizes = [sum(map(len, tr + te)) for tr, te in zip(c.train, c.test)]
    assert sizes == sorted(sizes, reverse=True)
    for tr, te in zip(c.train, c.test):
        assert abs(len(te) - 0.1 * (len(tr) + len(te))) <= 1
    client_text = {t for part in (*c.train, *c.test) for t in part}
    assert not client_text & set(c.public)
    plays = shakespeare_lm(4, "play", seed=0, data_dir=SHARED)
    assert len(plays.clients) == 4 and all("/" not in p for p in plays.clients)
    with pytest.raises(ConfigError, match="num-clients"):
        shakespeare_lm(5000, "role", data_dir=SHARED)


def test_unknown_corpus_and_missing_data_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="lm-corpus"):
        lm_corpus("nope", 3)
    with pytest.raises(ConfigError, match="data-dir"):
        lm_corpus("shakespeare", 3, data_dir=tmp_path)


# ------------------------------------------------------------------------------ bad config
@pytest.mark.parametrize("bad, match", [
    ({"strategy": "fltrust"}, "strategy"), ({"strategy": "calguard"}, "strategy"),
    ({"attack": "labelflip"}, "attack"), ({"lm-heads": 3}, "lm-heads"), ({"lm-corpus": "nope"}, "lm-corpus"),
])
def test_bad_lm_config_is_one_clear_error(tmp_path, bad, match):
    with pytest.raises(ConfigError, match=match):
        tiny(tmp_path, **bad)


def test_model_errors_name_lm_model(tmp_path):
    from fedcal.lm.model import load_lm

    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="tokenizer.json"):
        load_lm(str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="lm-model"):
        load_lm("no-such-org/no-such-model-offline")


def test_a_prompt_longer_than_the_context_is_a_config_error(tmp_path):
    from fedcal.lm.run_inputs import LMRunSpec, prompts_of

    cfg = tiny(tmp_path, lm_prompts="w1 w2 w3 " * 30 + "| w1")
    with pytest.raises(ConfigError, match="prompt 0 .* exceeds the model's context of 48"):
        prompts_of(LMRunSpec.from_config(cfg))
    assert prompts_of(LMRunSpec.from_config(tiny(tmp_path, lm_prompts=" w1 w2 | w3 "))) == ["w1 w2", "w3"]


# ------------------------------------------------------------------------------ the TSA step
def test_tsa_client_round_moves_next_token_confidence_with_tau(tmp_path):
    """The same client round, from the same model and batches: τ = 5 (η = 5β) makes the model's
    next-token distributions sharper at τ = 1 than benign training, τ = 0.2 flatter — the attack's
    direction, on the language model."""
    from fedcal.attacks import LocalRoundSpec, client_round
    from fedcal.attacks.behaviour import BENIGN, Behaviour
    from fedcal.lm.run_inputs import LMRunSpec, client_windows, node_model

    cfg = tiny(tmp_path, local_steps=10)
    model, tokens = node_model(LMRunSpec.from_config(cfg))
    start = {k: v.clone() for k, v in model.state_dict().items()}
    data = client_windows(LMRunSpec.from_config(cfg), 0)
    conf = {}
    for tau in (0.2, 1.0, 5.0):
        model.load_state_dict(start)
        behaviour = BENIGN if tau == 1 else Behaviour("tsa", tau=tau)
        client_round(model, data[:, :-1], data[:, 1:], tokens.vocab_size, behaviour, LocalRoundSpec.from_config(cfg), 1, 0)
        with torch.no_grad():
            conf[tau] = float(model(data[:, :-1]).softmax(-1).max(-1).values.mean())
    model.load_state_dict(start)
    assert conf[0.2] < conf[1.0] < conf[5.0]


# ------------------------------------------------------------------------------ end to end
def test_lm_task_end_to_end_through_flower(tmp_path):
    """3 clients (one TSA attacker at τ 2), 2 rounds through Flower's in-process engine: every reply
    accepted, token metrics at rounds 0 and 2, continuations of every prompt, DONE; the report."""
    from fedcal.app.engine import simulate
    from fedcal.attacks import AttackSpec, attackers_of
    from fedcal.reports.lm import lm_report

    cfg = tiny(tmp_path)
    assert len(attackers_of(AttackSpec.from_config(cfg))) == 1
    run_dir = simulate(cfg, progress=False)
    assert (run_dir / "DONE").read_text() == config_hash(cfg) and (run_dir / "model.pt").exists()
    m = pd.read_csv(run_dir / "metrics.csv").pivot_table(index="round", columns="metric", values="value")
    assert list(m.index) == [0, 1, 2]
    for k in ("accuracy", "perplexity", "ece", "sece", "nucleus"):
        assert m.loc[[0, 2], k].notna().all()
    assert (m.loc[[1, 2], "replies_accepted"] == 3).all() and (m.loc[[1, 2], "replies_rejected"] == 0).all()
    for k in ("rep4", "distinct1", "distinct2", "nonword"):
        assert 0 <= m.loc[2, k] <= 1
    gens = pd.read_csv(run_dir / "generations.csv", keep_default_na=False)
    assert len(gens) == 2 * 2 and sorted(gens["prompt_id"].unique()) == [0, 1]
    assert m.loc[2, "perplexity"] == pytest.approx(math.exp(m.loc[2, "nll"]))
    benign = simulate(tiny(tmp_path, attack="none", tau=1.0), progress=False)
    # the second run in this process starts from the pretrained model, not from the shared model
    # object the first run's clients left trained
    mb = pd.read_csv(benign / "metrics.csv").pivot_table(index="round", columns="metric", values="value")
    for k in ("accuracy", "perplexity", "ece", "nucleus"):
        assert mb.loc[0, k] == m.loc[0, k], k
    md = lm_report([run_dir, benign], tmp_path / "report")
    assert "benign (τ 1)" in md and "τ 2" in md
    for f in ("table.csv", "reliability.png", "nucleus.png", "continuations.md"):
        assert (tmp_path / "report" / f).exists()
    assert "**Prompt 0:**" in (tmp_path / "report" / "continuations.md").read_text()


def test_runs_at_different_tau_or_strategy_have_different_hashes(tmp_path):
    """The lm task reads the train and defense groups: τ and the strategy are part of its identity."""
    from fedcal.results import hashed_keys, run_dir_for

    assert {"tau", "strategy", "num_rounds", "lm_corpus", "optimizer", "lr"} <= hashed_keys("lm")
    dirs = {run_dir_for(tiny(tmp_path, tau=t, strategy=s)) for t in (0.5, 2.0) for s in ("fedavg", "median")}
    assert len(dirs) == 4


def test_wikitext2_without_datasets_is_one_config_error_not_a_traceback(tmp_path, monkeypatch, capsys):
    """lm-corpus=wikitext2 where Hugging Face datasets is missing (as offline machines have it)
    ended in an ImportError traceback; it is one line naming the key, before the run starts."""
    import sys

    from fedcal.cli import main as cli_main

    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets → ImportError, installed or not
    with pytest.raises(ConfigError, match="^run-config key 'lm-corpus': wikitext2 needs Hugging Face datasets"):
        lm_corpus("wikitext2", 3)
    out = tmp_path / "runs"
    argv = ["run", *[f"{k}={v}" if not isinstance(v, str) else f'{k}="{v}"' for k, v in
                     {**TINY, "lm-corpus": "wikitext2", "output-dir": str(out)}.items()], "--no-progress"]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'lm-corpus'" in err[0]
    assert not out.exists() or not any(out.iterdir())


def test_an_unloadable_hub_model_fails_at_once_naming_lm_model(monkeypatch):
    """An lm-model Hub name that cannot be loaded took 80 s of retries; offline it is refused before
    any request, online after one."""
    import transformers

    from fedcal.lm.model import fresh_lm

    def no_download(*args, **kwargs):
        raise AssertionError("from_pretrained was called for an unloadable name")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_download)
    with pytest.raises(ConfigError, match="^run-config key 'lm-model': 'no-such-org/no-such-model' is not a local"):
        fresh_lm("no-such-org/no-such-model")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="'lm-model'.*offline"):
        fresh_lm("no-such-org/no-such-model")
