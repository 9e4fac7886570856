"""Attention analysis, in one place: capture, pieces -> words, hard alignments, scores, statistics.

- ``capture``: every attention map of one pair, teacher-forced on a given target or on the
  model's own translation; folding SentencePiece pieces into words.
- ``alignment``: hard alignments (argmax, shift, intersection), symmetrisation, Pharaoh and
  gold-file I/O, AER / precision / recall, per-layer scoring of a corpus.
- ``stats``: row entropy, source coverage, softmax temperature.
- ``heatmaps``: the figures of one pair written to disk (drawing itself is ``viz``'s job).
"""

from transformer_mt.analysis.alignment import (
    LayerScores,
    alignment_error_rate,
    corpus_attention,
    corpus_scores,
    drop_outside,
    format_pharaoh,
    hard_alignment,
    parse_head,
    precision_recall,
    read_gold,
    read_pharaoh,
    read_tagged_sentences,
    read_xlwa,
    score_heads,
    score_layers,
    symmetrize,
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
    "alignment_error_rate",
    "capture",
    "corpus_attention",
    "corpus_scores",
    "coverage",
    "drop_outside",
    "format_pharaoh",
    "hard_alignment",
    "pair_attention",
    "precision_recall",
    "read_gold",
    "read_pharaoh",
    "row_entropy",
    "parse_head",
    "read_tagged_sentences",
    "read_xlwa",
    "score_heads",
    "score_layers",
    "symmetrize",
    "to_words",
    "with_temperature",
    "word_groups",
    "words_of",
]
