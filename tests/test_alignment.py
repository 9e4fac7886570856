"""Alignment metrics on hand-made links, Pharaoh I/O, the attention diagnostics, and the real gold sets."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_mt.alignment import (
    alignment_error_rate,
    coverage,
    format_pharaoh,
    hard_alignment,
    precision_recall,
    read_pharaoh,
    row_entropy,
)

from .conftest import ROOT

GOLD = ROOT.parent / "shared" / "data" / "word_alignment_gold_enfr_roen"


def test_aer_all_correct_all_wrong_and_possible_links() -> None:
    sure = {(0, 0), (1, 2), (2, 1)}
    assert alignment_error_rate(sure, sure) == 0.0
    assert alignment_error_rate({(0, 1), (2, 2)}, sure) == 1.0
    # A possible link counts once (in |A∩P|), a sure link twice: 1 - (1 + 2) / (2 + 3) = 0.4.
    predicted, possible = {(0, 0), (3, 3)}, {(3, 3)}
    assert alignment_error_rate(predicted, sure, possible) == pytest.approx(0.4)
    assert alignment_error_rate(predicted, sure) == pytest.approx(
        1 - 2 / 5
    )  # sure only: (3, 3) is wrong
    assert alignment_error_rate(set(), set()) == 0.0


def test_precision_and_recall() -> None:
    sure, possible = {(0, 0), (1, 1)}, {(2, 2)}
    assert precision_recall({(0, 0), (2, 2), (5, 5)}, sure, possible) == pytest.approx(
        (2 / 3, 1 / 2)
    )


def test_pharaoh_round_trip_and_one_indexed_gold() -> None:
    sure, possible = read_pharaoh("0-0 2-1 1p3")
    assert sure == {(0, 0), (2, 1)} and possible == {(0, 0), (2, 1), (1, 3)}
    assert read_pharaoh(format_pharaoh(sure))[0] == sure
    assert read_pharaoh("1-1 3p2", one_indexed=True) == ({(0, 0)}, {(0, 0), (2, 1)})
    with pytest.raises(ValueError, match=r"'1x2' is not a link"):
        read_pharaoh("0-0 1x2")


def test_hard_alignment_takes_each_rows_argmax() -> None:
    weights = torch.tensor([[0.1, 0.8, 0.1], [0.7, 0.2, 0.1]])  # (target words, source words)
    assert hard_alignment(weights) == {(1, 0), (0, 1)}


def test_entropy_matches_the_worked_example_and_uniform() -> None:
    scores = torch.tensor([1.0, 0.5, -1.0])
    assert row_entropy(scores.softmax(-1)).item() == pytest.approx(
        0.884, abs=1e-3
    )  # PAPER.md example 3
    assert row_entropy(torch.full((2, 5), 0.2)).tolist() == pytest.approx([math.log(5)] * 2)
    assert row_entropy(torch.tensor([0.0, 1.0, 0.0])).item() == pytest.approx(0.0, abs=1e-6)


def test_coverage_is_column_sums() -> None:
    weights = torch.tensor([[0.9, 0.1, 0.0], [0.5, 0.5, 0.0]])
    assert coverage(weights).tolist() == pytest.approx(
        [1.4, 0.6, 0.0]
    )  # source word 2: nobody attends


@pytest.mark.skipif(not GOLD.is_dir(), reason=f"{GOLD} is absent (the shared gold alignments)")
def test_the_hansards_gold_set_reads_as_documented() -> None:
    lines = (GOLD / "enfr.gold.talp").read_text().splitlines()
    en = (GOLD / "enfr.en").read_text().splitlines()
    fr = (GOLD / "enfr.fr").read_text().splitlines()
    sure = possible = 0
    for line, e, f in zip(lines, en, fr, strict=True):
        s, p = read_pharaoh(line, one_indexed=True)
        assert all(0 <= i < len(e.split()) and 0 <= j < len(f.split()) for i, j in p)
        sure, possible = sure + len(s), possible + len(p - s)
    assert (len(lines), sure, possible) == (447, 4038, 13400)  # the folder's README
