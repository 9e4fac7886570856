"""Reading links from one soft matrix: argmax and grow-diag on hand-made matrices, and tuning."""

from __future__ import annotations

import json

import pytest
import torch

from transformer_mt.align.extract import (
    EXTRACTIONS,
    TUNING_GRIDS,
    Extraction,
    anchored_path,
    diagonal_prior,
    hard_alignment,
    merge_directions,
    spelled_alike,
    teacher_rows,
    tune,
)
from transformer_mt.align.links import symmetrize
from transformer_mt.errors import UserError

# Rows: target words 0..3; columns: source words 0..3. Target 1 is spread over sources 1 and 2
# (a one-to-many link); target 3 attends nowhere in particular (an unaligned word).
W = torch.tensor(
    [
        [0.90, 0.05, 0.03, 0.02],
        [0.02, 0.48, 0.46, 0.04],
        [0.05, 0.10, 0.05, 0.80],
        [0.30, 0.25, 0.25, 0.20],
    ]
)


def test_argmax_gives_every_target_word_exactly_one_link():
    assert hard_alignment(W, "argmax") == {(0, 0), (1, 1), (3, 2), (0, 3)}


def test_grow_diag_grows_the_intersection_to_neighbouring_union_links():
    # rows: (0,0) (1,1) (3,2) (0,3); columns: (0,0) (1,1) (2,1) (3,2). Intersection
    # (0,0) (1,1) (3,2); (2,1) neighbours (1,1) and source 2 is unaligned: grown. (0,3): final-and
    # needs both words unaligned, target 3 is, source 0 is not: left out.
    assert hard_alignment(W, "grow-diag", 0.0) == {(0, 0), (1, 1), (2, 1), (3, 2)}
    assert hard_alignment(W, "grow-diag", 0.0) == symmetrize(
        hard_alignment(W, "argmax"), {(0, 0), (1, 1), (2, 1), (3, 2)}
    )
    # tau 0.5 drops the weak argmaxes: (1,1) 0.48 and (2,1) 0.46 in both directions
    assert hard_alignment(W, "grow-diag", 0.5) == {(0, 0), (3, 2)}


def test_every_method_on_an_empty_matrix_gives_no_link():
    for method in EXTRACTIONS:
        assert hard_alignment(torch.zeros(0, 3), method) == set()


def test_bad_methods_and_taus_are_named():
    with pytest.raises(ValueError, match="unknown alignment method 'max'"):
        hard_alignment(W, "max")
    with pytest.raises(ValueError, match="argmax takes no tau"):
        hard_alignment(W, "argmax", 0.2)
    with pytest.raises(UserError, match="argmax takes no tau"):
        Extraction("argmax", 0.3)
    with pytest.raises(UserError, match="choose one of argmax, grow-diag .threshold and inter"):
        Extraction("threshold")
    with pytest.raises(UserError, match="attention weights are 0..1"):
        Extraction("grow-diag", 2.0)
    assert Extraction("grow-diag").tau == 0.0 and Extraction("grow-diag").name == "grow-diag 0"


def test_a_command_line_changes_what_it_names_and_keeps_the_rest():
    tuned = Extraction("grow-diag", 0.15, 4.0, 30, 30, 0.9, source="tuned on dev")
    assert tuned.overridden() is tuned
    assert tuned.overridden("argmax") == Extraction("argmax", None, 4.0, 30, 30, 0.9)
    assert tuned.overridden(tau=0.3) == Extraction("grow-diag", 0.3, 4.0, 30, 30, 0.9)
    assert tuned.overridden(diagonal=0) == Extraction("grow-diag", 0.15, 0.0, 30, 30, 0.9)
    assert tuned.overridden(alike=False) == Extraction("grow-diag", 0.15, 4.0, 30, 30, 0.0)
    assert tuned.overridden(tau=0.3).source == "given"
    # a tau alone means grow-diag; grow-diag over argmax starts from the default tau
    assert Extraction().overridden(tau=0.2) == Extraction("grow-diag", 0.2)
    assert Extraction().overridden("grow-diag") == Extraction("grow-diag", 0.0)
    assert tuned.name == "grow-diag 0.15, diagonal 4 (narrows past 30, anchored past 30), alike 0.9"


@pytest.mark.parametrize(
    "extraction",
    [
        Extraction(),
        Extraction("grow-diag"),
        Extraction("grow-diag", 0.25, 8.0, 30, 20, 0.7),
        Extraction("argmax", None, 2.0, 0, 50, 0.5),
    ],
)
def test_an_extraction_round_trips_through_its_one_serialised_form(extraction):
    saved = json.loads(json.dumps(extraction.to_dict()))
    assert Extraction.from_dict(saved, "a test") == extraction
    assert set(saved) == {"method", "tau", "diagonal", "narrows_past", "anchored_past", "alike"}


def test_a_bad_stored_extraction_is_named():
    with pytest.raises(
        UserError, match=r"reading.json: unknown reading parameter\(s\) \['width'\]"
    ):
        Extraction.from_dict({"method": "argmax", "width": 3}, "reading.json")
    with pytest.raises(UserError, match="alike 1.01: .* 1 or more would force their links"):
        Extraction(alike=1.01)
    with pytest.raises(UserError, match="narrows_past -1: a number of source words"):
        Extraction(narrows_past=-1)


def test_tuning_picks_the_dev_sets_best_tau_from_the_dev_gold_alone():
    # the dev gold wants target 1's two links and nothing for target 3: grow-diag keeps (2, 1)
    # up to tau 0.46 and target 3's weak argmax (0, 3) is never grown (final-and)
    sure = {(0, 0), (1, 1), (2, 1), (3, 2)}
    best, trials = tune([W], [(sure, sure)], grids={"tau": (0.0, 0.47, 0.6, 0.85)})
    assert best == Extraction("grow-diag", 0.0)
    # AER = 1 - 2|A & S| / (|A| + |S|): 0.47 loses (2,1) (0.46); 0.6 loses (1,1) (0.48) too;
    # 0.85 keeps (0,0) alone
    expected = [0.0, 1 - 6 / 7, 1 - 4 / 6, 1 - 2 / 5]
    assert [(t.parameter, t.value, t.round) for t in trials] == [
        ("tau", v, 1) for v in (0.0, 0.47, 0.6, 0.85)
    ]
    assert [t.aer for t in trials] == pytest.approx(expected)


def test_tune_reads_nothing_but_what_it_is_given(monkeypatch):
    """Every choice is a function of the dev matrices and dev gold: no file is opened."""

    def no_files(*args, **kwargs):
        raise AssertionError("tune opened a file")

    monkeypatch.setattr("builtins.open", no_files)
    sure = {(0, 0), (1, 1), (3, 2)}
    best, trials = tune([W], [(sure, sure)])
    assert best.tau in TUNING_GRIDS["tau"]
    # every parameter but alike (no words given) was tried over its whole grid
    tried = {t.parameter for t in trials}
    assert tried == set(TUNING_GRIDS) - {"alike"} and best.alike == 0.0


def test_two_directions_merge_cell_by_cell_by_their_geometric_mean():
    forward = torch.tensor([[0.6, 0.4], [0.6, 0.4]])  # both target words on source word 0
    backward = torch.tensor([[0.9, 0.2], [0.1, 0.8]])  # columns: each source word's attention
    product = merge_directions(forward, backward)
    expected = torch.tensor([[0.54, 0.08], [0.06, 0.32]]).sqrt()
    assert torch.allclose(product, expected)
    # the reverse direction's opinion moves target word 1 to source word 1
    assert hard_alignment(forward) == {(0, 0), (0, 1)}
    assert hard_alignment(product) == {(0, 0), (1, 1)}
    with pytest.raises(ValueError, match=r"forward matrix \(2, 2\) and turned-round reverse"):
        merge_directions(forward, backward[:, :1])


def test_teacher_rows_read_back_give_the_teachers_links_where_each_method_can():
    links = {(0, 0), (1, 1), (2, 1), (3, 2)}  # target 1 one-to-many, target 3 unaligned
    rows = teacher_rows(links, n_tgt=4, n_src=4)
    assert rows.sum(dim=-1).tolist() == [1.0, 1.0, 1.0, 0.0]
    assert hard_alignment(rows, "grow-diag", 0.5) == {(0, 0), (1, 1), (2, 1), (3, 2)}
    assert hard_alignment(rows, "argmax") == {(0, 0), (1, 1), (3, 2), (0, 3)}  # one per row


SPANISH = "Juan vive en Madrid, desde 2003 y a Juan".split()
ENGLISH = "Juan has lived in madrid since 2003 and to Juan .".split()


def test_words_spelled_alike_by_hand():
    # lowercased, outer punctuation stripped ("Madrid," = "madrid"); "a" is too short to say
    # anything, "2003" is a number; a word twice on a side is linked to each of the other's
    expected = {(0, 0), (0, 9), (8, 0), (8, 9), (3, 4), (5, 6)}
    assert spelled_alike(SPANISH, ENGLISH) == expected
    assert spelled_alike(["."], ["."]) == set() and spelled_alike(["7"], ["7"]) == {(0, 0)}


def test_a_word_spelled_alike_is_raised_but_never_outranks_its_rows_best():
    # target "Madrid" (row 1) attends to "vive" (source 1) more than to "Madrid" (source 2):
    # the raise to 0.9 x 0.8 leaves row 1's argmax where it was (no forced link) but makes
    # (2, 1) the best of its column, where grow-diag finds it instead of (2, 0)
    weights = torch.tensor([[0.6, 0.1, 0.3], [0.1, 0.8, 0.1]])
    pair = (["Juan", "vive", "Madrid"], ["lives", "Madrid"])
    alike = Extraction("argmax", alike=0.9)
    assert alike.links(weights, pair) == Extraction().links(weights) == {(0, 0), (1, 1)}
    assert Extraction("grow-diag").links(weights) == {(0, 0), (1, 1), (2, 0)}
    assert Extraction("grow-diag", alike=0.9).links(weights, pair) == {(0, 0), (1, 1), (2, 1)}
    assert alike.name == "argmax, alike 0.9"
    with pytest.raises(ValueError, match="argmax, alike 0.9: the pair's words are needed"):
        alike.links(weights)
    # tuned with the dev pairs' words, tune tries each strength and keeps the best
    gold = [({(0, 0), (1, 1), (2, 1)},) * 2]
    best, trials = tune([weights], gold, [pair], grids={"tau": (0.0,), "alike": (0.0, 0.5, 0.9)})
    # 0.5 x 0.8 = 0.4 beats the column's 0.3 as well: on the tie the weaker raise is kept
    assert best == Extraction("grow-diag", 0.0, alike=0.5)
    assert [(t.value, round(t.aer, 3)) for t in trials if t.parameter == "alike"][:3] == [
        (0.0, round(1 - 4 / 6, 3)),
        (0.5, 0.0),
        (0.9, 0.0),
    ]
    # without the pairs' words, words alike are not read
    assert tune([weights], gold, grids={"tau": (0.0,), "alike": (0.0, 0.9)})[0].alike == 0.0


def test_the_diagonal_prior_by_hand():
    # 2 target words over 4 source words: row j expects source (j + 0.5) * 2, i.e. 1 and 3;
    # cell (j, i) is weighed by exp(-|i + 0.5 - expected| / width)
    weights = torch.tensor([[0.1, 0.2, 0.3, 0.2], [0.4, 0.1, 0.1, 0.3]])
    prior = torch.tensor([[0.5, 0.5, 1.5, 2.5], [2.5, 1.5, 0.5, 0.5]]).div(-2.0).exp()
    weighed = weights * prior
    expected = weighed * (weights.sum(-1, keepdim=True) / weighed.sum(-1, keepdim=True))
    assert torch.allclose(diagonal_prior(weights, 2.0), expected)
    assert torch.allclose(diagonal_prior(weights, 2.0).sum(-1), weights.sum(-1))  # mass kept
    assert diagonal_prior(weights, 0.0) is weights
    # a far source word that edges out a near one loses to it under the prior: row 0's 0.3
    # at distance 1.5 (0.142) to 0.2 at 0.5 (0.156), row 1's 0.4 at 2.5 to 0.3 at 0.5
    assert hard_alignment(weights, "argmax") == {(2, 0), (0, 1)}
    assert Extraction("argmax", None, 2.0).links(weights) == {(1, 0), (3, 1)}
    with pytest.raises(UserError, match="diagonal prior width -1: a width in words"):
        Extraction("argmax", None, -1)


def test_the_prior_narrows_past_its_length_in_proportion():
    torch.manual_seed(0)
    for n, width in ((30, 8.0), (60, 4.0), (90, 8.0 / 3)):  # width 8, narrowing past 30
        # a square matrix whose every diagonal cell wins its row and column: its anchors lie on
        # the straight diagonal, so only the width tells a long source from a short one
        weights = torch.rand(n, n) * 0.5 + torch.eye(n)
        expected = torch.arange(n) + 0.5  # (W_tgt,) one source word a row
        prior = torch.exp(-(expected[:, None] - torch.arange(n) - 0.5).abs() / width)
        weighed = weights * prior
        weighed = weighed * weights.sum(-1, keepdim=True) / weighed.sum(-1, keepdim=True)
        assert torch.allclose(diagonal_prior(weights, 8.0, 30), weighed, atol=1e-6)
        if n > 30:  # never narrowed unless told
            assert not torch.allclose(diagonal_prior(weights, 8.0), weighed, atol=1e-6)


def test_the_anchored_path_by_hand():
    """Cells that win their row and their column are anchors; one that breaks the rise of
    the longest chain is left out; the path runs straight between them, corner to corner."""
    weights = torch.full((10, 40), 0.01)  # a flat row's largest is source 0: (0, 0) anchors
    for j, i in ((2, 20), (3, 22), (6, 30), (4, 10)):  # (4, 10) goes back: not in the chain
        weights[j, i] = 0.9
    # knots (0, 0), then (j + 0.5, i + 0.5) for (0, 0), (2, 20), (3, 22), (6, 30), then (10, 40)
    expected = [0.5, 10.5, 20.5, 22.5, 22.5 + 8 / 3, 22.5 + 16 / 3, 30.5]
    expected += [30.5 + 9.5 * k / 3.5 for k in (1, 2, 3)]  # rows 7-9, towards the corner
    assert torch.allclose(anchored_path(weights), torch.tensor(expected))


def test_past_its_length_the_prior_follows_the_anchors():
    """A 40-word source whose first 10 words have no counterpart (target j is source j + 10):
    the straight diagonal, row j at (j + 0.5)·4/3, runs through the wrong words. Three rows
    torn between their word (0.5) and a word near the straight diagonal (0.55) follow their
    word under the prior, which centres on the path through the other rows' links."""
    weights = torch.full((30, 40), 0.01)
    truth = {(j + 10, j) for j in range(30)}
    torn = {2: 3, 4: 6, 6: 8}  # row: the source word near the straight diagonal
    for j in range(30):
        weights[j, j + 10] = 0.5 if j in torn else 0.9
    for j, i in torn.items():
        weights[j, i] = 0.55
    wrong = {(i, j) for j, i in torn.items()}
    right = {(j + 10, j) for j in torn}
    assert hard_alignment(weights, "argmax") == truth - right | wrong
    # the near words win their rows and columns too, but go back: the chain leaves them out
    assert torch.allclose(anchored_path(weights), torch.arange(30) + 10.5)
    assert Extraction("argmax", None, 8.0, 30, 30).links(weights) == truth
    # centred on the straight diagonal instead (anchored_past 0, or a source up to 30 words),
    # at the width 8·30/40, the torn rows go wrong
    straight = (torch.arange(30) + 0.5) * 4 / 3
    prior = torch.exp(-(straight[:, None] - torch.arange(40) - 0.5).abs() / 6.0)
    assert hard_alignment(weights * prior, "argmax") == truth - right | wrong
    assert Extraction("argmax", None, 8.0, 30, 0).links(weights) == truth - right | wrong


def test_a_joined_long_pair_keeps_its_links_inside_its_parts_under_the_prior():
    """Two copies of a 6-word pair end to end, the head torn between the two copies of each
    word (as a head trained on short pairs is on a long input, 0.55 against 0.45 for the
    wrong one): argmax sends half the words to the other copy, the prior none."""
    part = torch.eye(6)
    weights = torch.zeros(12, 12)
    weights[:6, 6:], weights[6:, :6] = 0.55 * part, 0.55 * part  # the wrong copy
    weights[:6, :6], weights[6:, 6:] = 0.45 * part, 0.45 * part  # the right one
    right = {(i, i) for i in range(12)}
    assert hard_alignment(weights, "argmax") & right == set()
    assert Extraction("argmax", None, 4.0).links(weights) == right
    # tune finds the prior on the dev gold; given a width, it keeps it
    grids = {"tau": (0.0,), "diagonal": (0.0, 4.0)}
    best, trials = tune([weights], [(right, right)], grids=grids)
    assert best == Extraction("grow-diag", 0.0, 4.0)
    assert [(t.value, t.aer) for t in trials if t.parameter == "diagonal"][:2] == [
        (0.0, 1.0),
        (4.0, 0.0),
    ]
    best, trials = tune([weights], [(right, right)], fixed={"diagonal": 0.0}, grids=grids)
    assert best.diagonal == 0.0 and {t.parameter for t in trials} == {"tau"}


def test_align_config_names_a_bad_extraction():
    from transformer_mt.align.reading import HeadReading
    from transformer_mt.config import AlignConfig

    cfg = AlignConfig(guided=True, extract="grow-diag", tau=0.2)
    assert HeadReading.from_config(cfg, 2, 2).extraction == Extraction("grow-diag", 0.2)
    cfg = AlignConfig(guided=True, extract="argmax", diagonal=4, narrows_past=30, alike=0.5)
    expected = Extraction("argmax", None, 4, 30, 0, 0.5)
    assert HeadReading.from_config(cfg, 2, 2).extraction == expected
    with pytest.raises(UserError, match="align.extract=argmax and its .*: diagonal prior width -2"):
        AlignConfig(diagonal=-2)
    with pytest.raises(UserError, match="align.extract=soft and its parameters: alignment method"):
        AlignConfig(extract="soft")
    with pytest.raises(UserError, match="align.extract=argmax .* takes no tau"):
        AlignConfig(tau=0.2)
