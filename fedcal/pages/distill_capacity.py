"""What the offline RFD-LoRA setting can learn at all: the capacity study behind docs/distill.md.

For one corpus of ``task=distill`` (the same data a run derives from its config: training
subsample, anchor set, private rest, test subsample) and the config's backbone (``dst-backbone``:
all-MiniLM-L6-v2 by default, ``dst-backbone=`` for the small offline encoder), trained centrally on
the whole private rest (one client holding everything: the best any federated method can do with
this model):

* the majority class's share of the test set (a constant predictor's accuracy);
* TF-IDF (word 1–2-grams) + logistic regression: a reference that learns a weight per word;
* linear probes (logistic regression) on frozen features: the backbone's last layer mean-pooled
  over the tokens, its first token (``[CLS]`` / ``<s>``), and the mean of random Gaussian token
  vectors of the backbone's width (no pretraining at all);
* the peft LoRA client of fedcal (rank 8, trainable head, AdamW at ``dst-client-lr``) with LoRA on
  the attention query/value, and on ``dst-lora-targets`` when that differs (the small encoder's
  runs add the word-embedding table), on the top ``dst-lora-layers`` layers when set (over the
  cached lower layers, as the runs do);
* full fine-tuning of the same classifier (every weight, AdamW at ``--full-lr``) for
  ``--full-epochs`` epochs, or, with 0, only timed over ``--full-steps`` steps and reported as the
  measured cost of an epoch;
* the LoRA client trained only on the anchor set with its true labels: an upper bound for a
  student that learns only through the anchors (RFD-LoRA's server).

The trained rows report the best test accuracy over their epochs (every epoch's in the note).

Usage (from the repository root; writes <out>/<corpus>.md and .csv)::

    python -m fedcal.pages distill_capacity --corpus sentiment --out docs/results/distill-capacity-minilm \
        data-dir=../shared/data dst-train-size=3000 dst-test-size=500 dst-lora-layers=2
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch


def _accuracy(pred, labels) -> float:
    return float(np.mean(np.asarray(pred) == np.asarray(labels)))


def _pooled(model, batch, batch_size: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """(mean over the real tokens, first token) of the classifier's last hidden layer; a
    top-layers model (``dst-lora-layers``) runs its layers on the batch's cached features."""
    from fedcal.distill.run_data import inputs_of
    from fedcal.text.pretrained import encoder_of

    enc = encoder_of(model)
    x, mask = inputs_of(batch), batch["attention_mask"]
    key = "inputs_embeds" if x.is_floating_point() else "input_ids"
    means, firsts = [], []
    with torch.no_grad():
        for i in range(0, len(mask), batch_size):
            m = mask[i:i + batch_size]
            width = int(m.sum(1).max())
            h = enc(**{key: x[i:i + batch_size, :width]}, attention_mask=m[:, :width]).last_hidden_state
            w = m[:, :width].unsqueeze(-1).float()
            means.append((h * w).sum(1) / w.sum(1))
            firsts.append(h[:, 0])
    return torch.cat(means).numpy(), torch.cat(firsts).numpy()


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


def _curve(model, cfg, batch, labels, test_batch, test_labels, epochs: int, lr: float) -> list[float]:
    """Test accuracy of ``model`` (its trainable part) after each of ``epochs`` epochs."""
    from fedcal.distill.clients import local_train
    from fedcal.distill.run_data import inputs_of
    from fedcal.distill.student import predict

    y = torch.as_tensor(labels, dtype=torch.long)
    accs = []
    for e in range(epochs):
        local_train(model, inputs_of(batch), batch["attention_mask"], y, epochs=1, batch_size=cfg.batch_size,
                    lr=lr, weight_decay=cfg.dst_weight_decay, warmup_frac=cfg.dst_warmup if e == 0 else 0.0,
                    generator=torch.Generator().manual_seed(cfg.seed * 100 + e))
        accs.append(_accuracy(predict(model, inputs_of(test_batch), test_batch["attention_mask"]).numpy(),
                              test_labels))
        print(f"  epoch {e + 1}: {100 * accs[-1]:.1f} %", flush=True)
    return accs


def _lora_curve(base, cfg, batch, labels, test_batch, test_labels, targets, epochs: int) -> list[float]:
    """Test accuracy of a rank-8 LoRA client after each of ``epochs`` epochs."""
    from fedcal.distill.clients import lora_model

    model = lora_model(base, 8, alpha=cfg.dst_alpha, target_modules=targets, allowed_ranks=None, seed=1)
    return _curve(model, cfg, batch, labels, test_batch, test_labels, epochs, cfg.dst_client_lr)


def _arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fedcal.pages distill_capacity", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True, help="dst-corpus (sentiment, genre, synthetic, ...)")
    p.add_argument("--out", required=True, help="folder for <corpus>.md / <corpus>.csv")
    p.add_argument("--epochs", type=int, default=3, help="epochs of the central LoRA clients (best epoch reported)")
    p.add_argument("--anchor-epochs", type=int, default=8, help="epochs of the anchors-only client")
    p.add_argument("--full-epochs", type=int, default=0, help="epochs of full fine-tuning (0: time it only)")
    p.add_argument("--full-steps", type=int, default=3, help="steps timed when --full-epochs is 0")
    p.add_argument("--full-lr", type=float, default=5e-5, help="full fine-tuning's AdamW learning rate")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("overrides", nargs="*", help="run-config key=value (as for fedcal run)")
    return p


def _full_finetuning(data, cfg, args, train, test, n_private: int, add) -> None:
    """Full fine-tuning's row: the whole classifier on token ids, every weight trainable, trained for
    ``--full-epochs`` or, with 0, timed over ``--full-steps`` steps."""
    from fedcal.distill.run_data import base_classifier

    (priv_batch, y_priv), (test_batch, y_test) = train, test
    whole = copy.deepcopy(base_classifier(data.backbone, data.num_classes, "cpu", 0)).train()
    for q in whole.parameters():
        q.requires_grad_(True)
    ids_batch = {"input_ids": priv_batch["input_ids"], "attention_mask": priv_batch["attention_mask"]}
    ids_test = {"input_ids": test_batch["input_ids"], "attention_mask": test_batch["attention_mask"]}
    if args.full_epochs:
        accs = _curve(whole, cfg, ids_batch, y_priv, ids_test, y_test, args.full_epochs, args.full_lr)
        add("full fine-tuning (every weight) + head, all private data", max(accs),
            "per epoch: " + ", ".join(f"{100 * a:.1f}" for a in accs))
    else:
        from fedcal.distill.clients import local_train

        n = args.full_steps * cfg.batch_size
        t0 = time.perf_counter()
        local_train(whole, ids_batch["input_ids"][:n], ids_batch["attention_mask"][:n],
                    torch.as_tensor(y_priv[:n], dtype=torch.long), batch_size=cfg.batch_size, lr=args.full_lr)
        per_step = (time.perf_counter() - t0) / args.full_steps
        per_epoch = per_step * -(-n_private // cfg.batch_size) / 60
        add("full fine-tuning (every weight) + head, all private data", None,
            f"not run: {per_step:.1f} s per step of {cfg.batch_size} texts ({args.threads} thread(s)), "
            f"{per_epoch:.0f} min per epoch")


def main(argv=None) -> int:
    from fedcal.config import RunConfig, parse_override
    from fedcal.distill.run_data import DistillRunSpec, _encode_batch, base_classifier, distill_data
    from fedcal.reports.markdown import markdown_table
    from fedcal.text import backbone_tokenizer

    args = _arguments().parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = RunConfig.from_flower(dict(parse_override(o) for o in args.overrides), task="distill",
                                dst_corpus=args.corpus)
    t_start = time.perf_counter()
    data = distill_data(DistillRunSpec.from_config(cfg))
    private = np.setdiff1d(np.arange(len(data.train_labels)), data.anchors)
    tok = backbone_tokenizer(data.backbone)
    priv_texts = [data.train_texts[i] for i in private]
    spec = DistillRunSpec.from_config(cfg)
    priv_batch, anchor_batch = _encode_batch(spec, data.backbone, data.num_classes, tok, priv_texts), data.anchor_batch
    y_priv, y_anchor = data.train_labels[private], data.train_labels[data.anchors]
    test_batch, y_test = data.test_batch, data.test_labels
    base = base_classifier(data.backbone, data.num_classes, "cpu", cfg.dst_lora_layers)
    where = f", top {cfg.dst_lora_layers} layers" if cfg.dst_lora_layers else ""
    rows = []

    def add(what, acc, note=""):
        rows.append({"model": what, "test accuracy (%)": None if acc is None else round(100 * acc, 2), "note": note})
        print(f"{what}: {'–' if acc is None else f'{100 * acc:.2f} %'} {note}", flush=True)

    add("constant (majority class)", float(np.bincount(y_test).max() / len(y_test)))
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = TfidfVectorizer(ngram_range=(1, 2))
    x_priv = vec.fit_transform(priv_texts)
    bow = LogisticRegression(C=10.0, max_iter=3000).fit(x_priv, y_priv)
    test_texts = [str(t) for t in _test_texts(cfg, data)]
    add("TF-IDF 1-2-grams + logistic regression", _accuracy(bow.predict(vec.transform(test_texts)), y_test),
        "a weight per word and bigram")
    (mean_priv, first_priv), (mean_test, first_test) = _pooled(base, priv_batch), _pooled(base, test_batch)
    add("probe: frozen backbone, mean-pooled last layer", _probe(mean_priv, y_priv, mean_test, y_test))
    add("probe: frozen backbone, first token of the last layer", _probe(first_priv, y_priv, first_test, y_test),
        "[CLS] / <s>")
    width, vocab = base.config.hidden_size, base.config.vocab_size
    add(f"probe: mean of random {width}-d token vectors",
        _probe(_random_bag(priv_batch, vocab, width), y_priv, _random_bag(test_batch, vocab, width), y_test),
        "no pretraining at all")
    for targets in dict.fromkeys((("query", "value"), cfg.lora_targets)):
        accs = _lora_curve(base, cfg, priv_batch, y_priv, test_batch, y_test, targets, args.epochs)
        add(f"LoRA r=8 on {'+'.join(targets)}{where} + head, all private data", max(accs),
            "per epoch: " + ", ".join(f"{100 * a:.1f}" for a in accs))
    _full_finetuning(data, cfg, args, (priv_batch, y_priv), (test_batch, y_test), len(private), add)
    accs = _lora_curve(base, cfg, anchor_batch, y_anchor, test_batch, y_test, cfg.lora_targets, args.anchor_epochs)
    add(f"LoRA r=8 on {'+'.join(cfg.lora_targets)}{where} + head, the {len(data.anchors)} anchors with true labels",
        max(accs), "per epoch: " + ", ".join(f"{100 * a:.1f}" for a in accs))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(rows)
    table.to_csv(out / f"{args.corpus}.csv", index=False)
    name = cfg.dst_backbone or Path(data.backbone).name
    head = (f"**{args.corpus}**: {len(private)} private training texts, {len(data.anchors)} anchors, "
            f"{len(y_test)} test texts; backbone `{name}` (hidden {width}); at most {cfg.dst_max_length} tokens; "
            f"{time.perf_counter() - t_start:.0f} s on {args.threads} torch thread(s).\n\n")
    shown = table.assign(**{"test accuracy (%)": [("not run" if v is None or v != v else f"{v:.2f}")
                                                   for v in table["test accuracy (%)"]]})
    (out / f"{args.corpus}.md").write_text(head + markdown_table(shown))
    return 0


def _test_texts(cfg, data):
    """The test texts in the run's order (the setup keeps only their encodings)."""
    from fedcal.distill.run_data import DistillRunSpec, text_task

    task = text_task(DistillRunSpec.from_config(cfg))
    assert len(task.test_texts) == len(data.test_labels)
    return task.test_texts


if __name__ == "__main__":
    sys.exit(main())
