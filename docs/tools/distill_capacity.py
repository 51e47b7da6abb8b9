"""What the offline RFD-LoRA setting can learn at all: the capacity study behind docs/distill.md.

For one corpus of ``task=distill`` (the same data a run derives from its config: training
subsample, anchor set, private rest, test subsample), trained centrally on the whole private rest
(one client holding everything: the best any federated method can do with this model):

* the majority class's share of the test set (a constant predictor's accuracy);
* TF-IDF (word 1–2-grams) + logistic regression: a reference that learns a weight per word;
* linear probes (logistic regression) on frozen features: the small backbone's mean-pooled last
  layer, and the mean of random Gaussian token vectors of the backbone's width;
* the peft LoRA client of fedcal (rank 8, trainable head, AdamW at ``dst-client-lr``) with LoRA on
  the attention query/value only, and with the word-embedding table added (the default);
* the same client trained only on the anchor set with its true labels: an upper bound for a
  student that learns only through the anchors (RFD-LoRA's server).

Usage (from the repository root; writes <out>/<corpus>.md and .csv)::

    python docs/tools/distill_capacity.py --corpus sentiment --out docs/results/distill-capacity \\
        data-dir=../shared/data dst-train-size=0 dst-test-size=500
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch


def _accuracy(pred, labels) -> float:
    return float(np.mean(np.asarray(pred) == np.asarray(labels)))


def _mean_pooled(model, batch, batch_size: int = 256) -> np.ndarray:
    """Mean of the last hidden layer over the real (unmasked) tokens."""
    out = []
    with torch.no_grad():
        for i in range(0, len(batch["input_ids"]), batch_size):
            ids, mask = batch["input_ids"][i:i + batch_size], batch["attention_mask"][i:i + batch_size]
            h = model.roberta(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).float()
            out.append((h * m).sum(1) / m.sum(1))
    return torch.cat(out).numpy()


def _random_bag(batch, vocab: int, width: int, seed: int = 0) -> np.ndarray:
    table = torch.randn(vocab, width, generator=torch.Generator().manual_seed(seed))
    m = batch["attention_mask"].unsqueeze(-1).float()
    return ((table[batch["input_ids"]] * m).sum(1) / m.sum(1)).numpy()


def _probe(x_train, y_train, x_test, y_test) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000)).fit(x_train, y_train)
    return _accuracy(clf.predict(x_test), y_test)


def _lora_curve(base, cfg, batch, labels, test_batch, test_labels, targets, epochs: int) -> list[float]:
    """Test accuracy of a rank-8 LoRA client after each of ``epochs`` epochs."""
    from fedcal.distill.clients import lora_model, local_train
    from fedcal.distill.student import predict

    model = lora_model(base, 8, alpha=cfg.dst_alpha, target_modules=targets, allowed_ranks=None, seed=1)
    y = torch.as_tensor(labels, dtype=torch.long)
    accs = []
    for e in range(epochs):
        local_train(model, batch["input_ids"], batch["attention_mask"], y, epochs=1, batch_size=cfg.batch_size,
                    lr=cfg.dst_client_lr, weight_decay=cfg.dst_weight_decay, warmup_frac=cfg.dst_warmup if e == 0 else 0.0,
                    generator=torch.Generator().manual_seed(cfg.seed * 100 + e))
        accs.append(_accuracy(predict(model, test_batch["input_ids"], test_batch["attention_mask"]).numpy(),
                              test_labels))
    return accs


def main(argv=None) -> int:
    from fedcal.config import RunConfig, parse_override
    from fedcal.distill.setup import base_classifier, distill_data
    from fedcal.reports.markdown import markdown_table
    from fedcal.text import backbone_tokenizer, encode

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True, help="dst-corpus (sentiment, genre, synthetic, ...)")
    p.add_argument("--out", required=True, help="folder for <corpus>.md / <corpus>.csv")
    p.add_argument("--epochs", type=int, default=3, help="epochs of the central LoRA clients (best epoch reported)")
    p.add_argument("--anchor-epochs", type=int, default=8, help="epochs of the anchors-only client")
    p.add_argument("overrides", nargs="*", help="run-config key=value (as for fedcal run)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    cfg = RunConfig.from_flower(dict(parse_override(o) for o in args.overrides), task="distill",
                                dst_corpus=args.corpus)
    data = distill_data(cfg)
    private = np.setdiff1d(np.arange(len(data.train_labels)), data.anchors)
    tok = backbone_tokenizer(data.backbone)
    enc = lambda idx: encode(tok, [data.train_texts[i] for i in idx], max_length=cfg.dst_max_length)  # noqa: E731
    priv_batch, anchor_batch = enc(private), data.anchor_batch
    y_priv, y_anchor = data.train_labels[private], data.train_labels[data.anchors]
    test_batch, y_test = data.test_batch, data.test_labels
    base = base_classifier(data.backbone, data.num_classes, "cpu")
    rows = []

    def add(what, acc, note=""):
        rows.append({"model": what, "test accuracy (%)": round(100 * acc, 2), "note": note})
        print(f"{what}: {100 * acc:.2f} % {note}", flush=True)

    add("constant (majority class)", float(np.bincount(y_test).max() / len(y_test)))
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(ngram_range=(1, 2))
    x_priv = vec.fit_transform([data.train_texts[i] for i in private])
    bow = LogisticRegression(C=10.0, max_iter=3000).fit(x_priv, y_priv)
    test_texts = [str(t) for t in _test_texts(cfg, data)]
    add("TF-IDF 1-2-grams + logistic regression", _accuracy(bow.predict(vec.transform(test_texts)), y_test),
        "a weight per word and bigram")
    add("probe: frozen backbone, mean-pooled last layer",
        _probe(_mean_pooled(base, priv_batch), y_priv, _mean_pooled(base, test_batch), y_test))
    width, vocab = base.config.hidden_size, base.config.vocab_size
    add(f"probe: mean of random {width}-d token vectors",
        _probe(_random_bag(priv_batch, vocab, width), y_priv, _random_bag(test_batch, vocab, width), y_test),
        "no pretraining at all")
    for targets in (("query", "value"), ("query", "value", "word_embeddings")):
        accs = _lora_curve(base, cfg, priv_batch, y_priv, test_batch, y_test, targets, args.epochs)
        add(f"LoRA r=8 on {'+'.join(targets)} + head, all private data", max(accs),
            "per epoch: " + ", ".join(f"{100 * a:.1f}" for a in accs))
    accs = _lora_curve(base, cfg, anchor_batch, y_anchor, test_batch, y_test, cfg.lora_targets, args.anchor_epochs)
    add(f"LoRA r=8 on {'+'.join(cfg.lora_targets)} + head, the {len(data.anchors)} anchors with true labels",
        max(accs), "per epoch: " + ", ".join(f"{100 * a:.1f}" for a in accs))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(rows)
    table.to_csv(out / f"{args.corpus}.csv", index=False)
    head = (f"**{args.corpus}**: {len(private)} private training texts, {len(data.anchors)} anchors, "
            f"{len(y_test)} test texts; backbone `{Path(data.backbone).name}` (hidden {width}).\n\n")
    (out / f"{args.corpus}.md").write_text(head + markdown_table(table, formats={"test accuracy (%)": "{:.2f}"}))
    return 0


def _test_texts(cfg, data):
    """The test texts in the run's order (the setup keeps only their encodings)."""
    from fedcal.distill.setup import text_task

    task = text_task(cfg)
    assert len(task.test_texts) == len(data.test_labels)
    return task.test_texts


if __name__ == "__main__":
    sys.exit(main())
