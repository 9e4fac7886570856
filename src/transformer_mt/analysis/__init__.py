"""Attention analysis: capture, pieces -> words, hard alignments and their scores, statistics.

- ``capture``: every attention map of one pair, teacher-forced on a given target or on the
  model's own translation; folding SentencePiece pieces into words.
- ``alignment``: hard alignments read from a ``HeadReading``, per-layer and per-head scoring
  of a corpus against gold (the set algebra and the gold sets are ``transformer_mt.align``'s).
- ``report``: ``scripts/align.py``'s inputs, readings and tables.
- ``stats``: row entropy, source coverage, softmax temperature.
"""

from transformer_mt.analysis.alignment import (
    LayerScores,
    corpus_attention,
    gold_aer,
    score_heads,
    score_layers,
    score_reading,
    translation_links,
)
from transformer_mt.analysis.capture import (
    PairAttention,
    capture,
    pair_attention,
    to_words,
    word_groups,
    words_of,
)
from transformer_mt.analysis.stats import coverage, row_entropy, with_temperature

__all__ = [
    "LayerScores",
    "PairAttention",
    "capture",
    "corpus_attention",
    "coverage",
    "gold_aer",
    "score_reading",
    "pair_attention",
    "row_entropy",
    "score_heads",
    "score_layers",
    "to_words",
    "translation_links",
    "with_temperature",
    "word_groups",
    "words_of",
]
