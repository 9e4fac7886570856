"""The one policy for text longer than a model's positions, used by every entry point.

A side of ``n`` pieces takes ``n + 1`` positions (EOS after a source, BOS before the decoder's
input), so a model with ``max_positions`` reads at most ``max_positions - 1`` pieces of a side.
Training drops longer pairs (``data.max_len``); everywhere else (validation, test,
``evaluate.py``, ``translate.py``, the explorer, alignment scoring) a longer side is read as its
first ``max_positions - 1`` pieces, and one warning counts such lines and names the first.
Scores still cover every line: BLEU compares each hypothesis with its whole reference, and an
alignment's links past the cut count as missed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from transformer_mt.errors import UserError

log = logging.getLogger(__name__)
_SAID: set[str] = set()  # the warnings given in this process


def fit_positions(
    sequences: Sequence[Sequence[int]],
    max_positions: int,
    what: str = "source",
    first_line: int = 1,
    error: bool = False,
) -> list[list[int]]:
    """``sequences`` (piece ids, no EOS or BOS), each cut to the ``max_positions - 1`` pieces
    a model reads.

    Args:
        what: the lines' name in the warning ("source", "test reference", ...).
        first_line: the number of the first sequence in the warning (1: line numbers).
        error: raise a ``UserError`` naming the first long line instead of cutting.
    """
    keep = max_positions - 1
    long_lines = [n for n, ids in enumerate(sequences, first_line) if len(ids) > keep]
    if not long_lines:
        return [list(ids) for ids in sequences]
    first = long_lines[0]
    length = len(sequences[first - first_line])
    said = (
        f"{len(long_lines)} {what}(s) of {len(sequences)} longer than the model reads "
        f"(max_positions={max_positions}: {keep} pieces, EOS aside); the first is line {first} "
        f"({length} pieces)"
    )
    if error:
        raise UserError(f"{said}: shorten or split it")
    if said not in _SAID:  # a command that reads the same lines again (align.py's modes) warns once
        _SAID.add(said)
        log.warning("%s: their first %d pieces are read", said, keep)
    return [list(ids[:keep]) for ids in sequences]
