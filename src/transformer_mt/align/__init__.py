"""Word alignment as one layer: links and their scores, gold sets, the eflomal aligner, and
``HeadReading``, the one name for "which cross-attention head, read how".

- ``links``: Pharaoh I/O, symmetrization, AER / precision / recall (pure set algebra);
- ``gold``: the gold-set readers and ``GoldSet``;
- ``pieces``: SentencePiece pieces <-> words, word links -> piece links;
- ``eflomal``: the statistical aligner that supervises guided alignment, cached;
- ``reading``: ``HeadReading`` and ``parse_head``, the parser of every ``--head``;
- ``extract``: hard links from one soft matrix (argmax, grow-diag at a tuned tau) and
  the choice of a method's parameter on a development set.

It depends on the model's special ids only: ``data`` attaches its links to batches,
``analysis`` captures attention and scores it with these functions.
"""

from transformer_mt.align.extract import EXTRACTIONS, Extraction, hard_alignment
from transformer_mt.align.gold import GoldSet, load_gold_set, read_gold, read_xlwa
from transformer_mt.align.links import (
    Gold,
    Links,
    alignment_error_rate,
    corpus_scores,
    format_pharaoh,
    precision_recall,
    read_pharaoh,
    symmetrize,
)
from transformer_mt.align.reading import MODES, HeadReading, parse_head

__all__ = [
    "EXTRACTIONS",
    "Extraction",
    "MODES",
    "Gold",
    "GoldSet",
    "HeadReading",
    "Links",
    "alignment_error_rate",
    "corpus_scores",
    "format_pharaoh",
    "hard_alignment",
    "load_gold_set",
    "parse_head",
    "precision_recall",
    "read_gold",
    "read_pharaoh",
    "read_xlwa",
    "symmetrize",
]
