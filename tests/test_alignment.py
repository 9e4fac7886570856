"""Alignment metrics on hand-made links, Pharaoh I/O, the attention diagnostics, and the real gold sets."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_mt.align.extract import hard_alignment
from transformer_mt.align.gold import read_gold
from transformer_mt.align.links import (
    alignment_error_rate,
    corpus_scores,
    drop_outside,
    format_pharaoh,
    precision_recall,
    read_pharaoh,
    symmetrize,
)
from transformer_mt.align.reading import HeadReading
from transformer_mt.analysis import (
    coverage,
    row_entropy,
    score_layers,
    with_temperature,
)

from .conftest import SHARED, needs_shared

GOLD = SHARED / "word_alignment_gold_enfr_roen"
DEEN = SHARED / "word_alignment_gold_deen_bicici"


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
    with pytest.raises(ValueError, match="at least one sure gold link"):
        alignment_error_rate({(0, 0)}, set())  # AER over no gold would read as a score


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
    )  # worked example 3 (temperature)
    assert row_entropy(torch.full((2, 5), 0.2)).tolist() == pytest.approx([math.log(5)] * 2)
    assert row_entropy(torch.tensor([0.0, 1.0, 0.0])).item() == pytest.approx(0.0, abs=1e-6)


def test_coverage_is_column_sums() -> None:
    weights = torch.tensor([[0.9, 0.1, 0.0], [0.5, 0.5, 0.0]])
    assert coverage(weights).tolist() == pytest.approx(
        [1.4, 0.6, 0.0]
    )  # source word 2: nobody attends


@needs_shared(GOLD)
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


def test_grow_diag_keeps_the_mutual_argmaxes_and_grows_next_to_them() -> None:
    weights = torch.tensor(
        [[0.8, 0.1, 0.1], [0.6, 0.3, 0.1], [0.1, 0.2, 0.7]]
    )  # target word 1 points at source 0, which prefers target 0
    assert hard_alignment(weights, "argmax") == {(0, 0), (0, 1), (2, 2)}
    # columns: source 0 -> target 0, source 1 -> target 1 (0.3), source 2 -> target 2. The
    # mutual argmaxes (0,0) (2,2) grow to their neighbours (0,1) (target 1 unaligned) and (1,1)
    # (source 1 unaligned); at tau 0.35 source 1's column max (0.3) is dropped, (1,1) with it
    assert hard_alignment(weights, "grow-diag", 0.0) == {(0, 0), (0, 1), (1, 1), (2, 2)}
    assert hard_alignment(weights, "grow-diag", 0.35) == {(0, 0), (0, 1), (2, 2)}
    with pytest.raises(ValueError, match="unknown alignment method 'max'"):
        hard_alignment(weights, "max")


def test_symmetrize_grow_diag_final_and_by_hand() -> None:
    forward = {(0, 0), (1, 1), (2, 1)}
    backward = {(0, 0), (1, 1), (3, 3)}
    assert symmetrize(forward, backward, "intersect") == {(0, 0), (1, 1)}
    assert symmetrize(forward, backward, "union") == forward | backward
    # (2, 1) is next to (1, 1) and source word 2 is unaligned: grown. (3, 3) touches no link,
    # but both its words are unaligned: added by final-and.
    assert symmetrize(forward, backward) == {(0, 0), (1, 1), (2, 1), (3, 3)}
    # A union link whose two words are already aligned is not added.
    assert symmetrize({(0, 0), (1, 1)}, {(0, 0), (1, 1), (0, 1)}) == {(0, 0), (1, 1)}


def test_temperature_reproduces_the_worked_example() -> None:
    weights = torch.tensor([1.0, 0.5, -1.0]).softmax(-1)  # worked example 3 (temperature)
    hot, cold = with_temperature(weights, 10.0), with_temperature(weights, 0.1)
    assert hot.tolist() == pytest.approx([0.361, 0.343, 0.296], abs=1e-3)
    assert row_entropy(hot).item() == pytest.approx(1.095, abs=1e-3)
    assert cold.tolist() == pytest.approx([0.993, 0.007, 0.000], abs=1e-3)
    assert row_entropy(cold).item() == pytest.approx(0.04, abs=5e-3)
    torch.testing.assert_close(with_temperature(weights, 1.0), weights)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        with_temperature(weights, 0.0)


def test_read_gold_naacl_pharaoh_and_reverse(tmp_path) -> None:
    naacl = tmp_path / "g.naacl"
    naacl.write_text("1 1 2 S\n1 2 1 P\n3 1 1\n")
    gold = read_gold(naacl, one_indexed=True)
    assert gold == [({(0, 1)}, {(0, 1), (1, 0)}), (set(), set()), ({(0, 0)}, {(0, 0)})]
    pharaoh = tmp_path / "g.wa"
    pharaoh.write_text("0-1 2p3\n\n")
    assert read_gold(pharaoh, reverse=True) == [({(1, 0)}, {(1, 0), (3, 2)}), (set(), set())]
    pharaoh.write_text("0-1\n0:1\n")
    with pytest.raises(ValueError, match=r"g.wa:2: '0:1' is not a link"):
        read_gold(pharaoh)


@needs_shared(DEEN)
def test_the_two_deen_gold_files_agree() -> None:
    """de-en.ref.wa (NAACL, 1-based sentences) and de-en.wa (Pharaoh) hold the same links."""
    naacl = read_gold(DEEN / "de-en.ref.wa")
    pharaoh = read_gold(DEEN / "de-en.wa")
    assert len(naacl) == len(pharaoh) == 100 and naacl == pharaoh
    assert sum(len(s) for s, _ in naacl) == 1233


def _fixed_attention() -> list[torch.Tensor]:
    """Two pairs of hand-made word attention (L=2, H=1, W_tgt + 1, W_src + 1), EOS last."""
    diag = torch.tensor([[0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.1, 0.1, 0.8]])
    cross = torch.tensor([[0.05, 0.9, 0.05], [0.9, 0.05, 0.05], [0.1, 0.1, 0.8]])
    uniform = torch.full((3, 3), 1 / 3)
    return [torch.stack([uniform, diag])[:, None], torch.stack([uniform, cross])[:, None]]


def test_score_layers_against_hand_made_gold() -> None:
    gold = [({(0, 0), (1, 1)}, {(0, 0), (1, 1)}), ({(1, 0), (0, 1)}, {(1, 0), (0, 1)})]
    first, second = score_layers(_fixed_attention(), gold)
    assert second.aer == 0.0 and second.links == [{(0, 0), (1, 1)}, {(1, 0), (0, 1)}]
    assert first.aer == pytest.approx(0.5)  # uniform rows: argmax is word 0 for every target word
    assert first.entropy == pytest.approx(math.log(3)) and first.uniform == pytest.approx(
        math.log(3)
    )
    assert second.entropy < first.entropy and second.entropy_by_tau[0.5] < second.entropy
    # Shifted rows: target word j read from row j + 1, so the diagonal turns into an off-by-one.
    shifted = score_layers(_fixed_attention(), gold, HeadReading(1, None, "shift"))[1]
    assert shifted.links[0] == {(1, 0), (0, 1)} and shifted.aer == pytest.approx(0.75)
    assert first.uncovered == 0.0 and second.uncovered == 0.0
    with pytest.raises(ValueError, match="1 gold lines for 2 sentence pairs"):
        score_layers(_fixed_attention(), gold[:1])


@needs_shared(GOLD)
def test_the_romanian_english_gold_reads_as_documented() -> None:
    gold = read_gold(GOLD / "roen.gold.talp", one_indexed=True)
    ro = (GOLD / "roen.ro").read_text().splitlines()
    en = (GOLD / "roen.en").read_text().splitlines()
    assert len(gold) == len(ro) == len(en) == 248
    assert sum(len(s) for s, _ in gold) == 6198 and all(s == p for s, p in gold)  # sure only
    assert all(
        0 <= i < len(r.split()) and 0 <= j < len(e.split())
        for (s, _), r, e in zip(gold, ro, en)
        for i, j in s
    )


def test_gold_links_outside_a_sentence_are_dropped_and_reported() -> None:
    gold = [({(0, 0), (5, 1)}, {(0, 0), (5, 1), (1, 1)}), ({(0, 0)}, {(0, 0)})]
    cleaned, dropped = drop_outside(gold, ["a b", "c"], ["x y", "z"])
    assert cleaned == [({(0, 0)}, {(0, 0), (1, 1)}), ({(0, 0)}, {(0, 0)})]
    assert dropped == {1: {(5, 1)}}
    with pytest.raises(ValueError, match="2 sentences of gold for 1 sentence pairs"):
        drop_outside(gold, ["a b"], ["x y"])
    assert corpus_scores([{(0, 0), (1, 1)}, {(0, 0)}], cleaned) == (0.0, 1.0, 1.0)


GRACA = SHARED / "word_alignment_gold_esen_graca"
XLWA = SHARED / "word_alignment_gold_esen_xlwa"


@needs_shared(GRACA)
def test_the_graca_spanish_english_gold_reads_as_documented() -> None:
    from transformer_mt.align.gold import read_tagged_sentences

    en = read_tagged_sentences(GRACA / "orig" / "test.en")
    es = read_tagged_sentences(GRACA / "orig" / "test.es")
    gold = read_gold(GRACA / "orig" / "alignment", one_indexed=True)  # snum en es S|P
    assert (len(en), len(es), len(gold)) == (100, 100, 100)
    assert sum(len(s.split()) for s in en) == 1072 and sum(len(s.split()) for s in es) == 1106
    sure = sum(len(s) for s, _ in gold)
    possible_only = sum(len(p - s) for s, p in gold)
    assert (sure, possible_only) == (835, 560)  # the folder's README
    assert en == (GRACA / "en.txt").read_text(encoding="utf-8").splitlines()
    # ES->EN: Spanish words first, as the derived Pharaoh file read with reverse=True
    spanish_first = read_gold(GRACA / "orig" / "alignment", one_indexed=True, reverse=True)
    assert spanish_first == read_gold(GRACA / "gold.pharaoh", reverse=True)
    for (_, p), e, x in zip(spanish_first, en, es, strict=True):
        assert all(0 <= i < len(x.split()) and 0 <= j < len(e.split()) for i, j in p)


@needs_shared(XLWA)
@pytest.mark.parametrize(
    ("split", "links", "en_words", "es_words"),
    [("dev", 1961, 1849, 2005), ("test", 4722, 4369, 4829)],
)
def test_the_xlwa_spanish_english_gold_reads_as_documented(
    split, links, en_words, es_words
) -> None:
    from transformer_mt.align.gold import read_xlwa

    en, es, gold = read_xlwa(XLWA / "orig" / f"{split}.tsv")
    assert sum(len(s) for s, _ in gold) == links and all(s == p for s, p in gold)  # all sure
    assert (
        sum(len(s.split()) for s in en) == en_words and sum(len(s.split()) for s in es) == es_words
    )
    assert es == (XLWA / f"es.{split}.txt").read_text(encoding="utf-8").splitlines()
    _, _, reversed_gold = read_xlwa(XLWA / "orig" / f"{split}.tsv", reverse=True)
    assert reversed_gold == read_gold(XLWA / f"gold.{split}.pharaoh", reverse=True)


@needs_shared(GRACA)
def test_a_gold_set_turned_round_is_the_set_read_for_the_other_direction() -> None:
    """An EN->ES run is scored on ``GoldSet.reversed()`` of the ES->EN set (alignment_aer.py)."""
    from types import SimpleNamespace

    from transformer_mt.align.gold import load_gold_set

    spec = SimpleNamespace(format="graca", path=str(GRACA / "orig"))
    es_en = load_gold_set("graca", spec, "es", "en")
    en_es = load_gold_set("graca", spec, "en", "es")
    assert es_en.sources[0] != en_es.sources[0]
    turned = es_en.reversed()
    assert (turned.sources, turned.targets, turned.gold) == (
        en_es.sources,
        en_es.targets,
        en_es.gold,
    )
    assert turned.reversed().gold == es_en.gold
    # AER does not depend on the direction the links are written in
    links = [{(j, i) for i, j in s} for s, _ in en_es.gold[:50]] + [set()] * 50
    assert corpus_scores(links, es_en.gold) == corpus_scores(
        [{(j, i) for i, j in ls} for ls in links], en_es.gold
    )


def test_short_gold_pairs_joined_carry_their_links_moved_by_the_words_before() -> None:
    """``GoldSet.joined``: long pairs made of short ones, for telling length from content."""
    from transformer_mt.align.gold import GoldSet
    from transformer_mt.errors import UserError

    gold = GoldSet(
        "hand",
        ["el gato", "uno dos tres cuatro", "la casa azul", "sí"],
        ["the cat", "one two three four", "the blue house", "yes"],
        [
            ({(0, 0), (1, 1)}, {(0, 0), (1, 1)}),
            ({(0, 0)}, {(0, 0), (3, 3)}),
            ({(0, 0), (1, 2), (2, 1)}, {(0, 0), (1, 2), (2, 1)}),
            ({(0, 0)}, {(0, 0)}),
        ],
    )
    # at most 3 source words: pairs 0, 2 and 3; two at a time: (0, 2), and 3 is left over
    pairs = gold.joined(2, max_words=3)
    assert pairs.name == "hand <=3 words x2"
    assert pairs.sources == ["el gato la casa azul"]
    assert pairs.targets == ["the cat the blue house"]
    sure = {(0, 0), (1, 1), (2, 2), (3, 4), (4, 3)}
    assert pairs.gold == [(sure, sure)]
    # the short pairs alone; possible links move with the sure ones
    alone = gold.joined(1, max_words=4)
    assert alone.sources == gold.sources and alone.gold == gold.gold
    three = gold.joined(3, max_words=4)
    assert three.targets == ["the cat one two three four the blue house"]
    assert three.gold[0][1] == {(0, 0), (1, 1), (2, 2), (5, 5), (6, 6), (7, 8), (8, 7)}
    assert three.gold[0][0] == {(0, 0), (1, 1), (2, 2), (6, 6), (7, 8), (8, 7)}
    with pytest.raises(UserError, match="parts >= 1"):
        gold.joined(0)
    # picked: the pairs at the rows asked, in that order, each with its own links
    two = gold.picked([3, 0], "two")
    assert (two.name, two.sources, two.targets) == ("two", ["sí", "el gato"], ["yes", "the cat"])
    assert two.gold == [gold.gold[3], gold.gold[0]] and gold.picked([]).gold == []


def test_gold_readers_name_the_bad_line(tmp_path) -> None:
    from transformer_mt.align.gold import read_tagged_sentences, read_xlwa
    from transformer_mt.errors import UserError

    (tmp_path / "a.tsv").write_text("the cat\tel gato\t0-0 1-1\nthe dog\tel perro\n")
    with pytest.raises(UserError, match=r"a.tsv:2: expected English<TAB>sentence<TAB>links"):
        read_xlwa(tmp_path / "a.tsv")
    (tmp_path / "b.en").write_text("<s snum=1> a b </s>\nno markup\n")
    with pytest.raises(UserError, match=r"b.en:2: expected '<s snum=N> words </s>'"):
        read_tagged_sentences(tmp_path / "b.en")


def test_every_head_is_scored_alone_and_the_mean_last() -> None:
    from transformer_mt.analysis import score_heads

    # Layer 2 gets a second head that aligns the wrong way round: alone it scores AER 1,
    # the right head 0, and their mean sits between (its argmax follows the stronger row).
    pairs = _fixed_attention()
    wrong = [torch.flip(p[1, 0, :-1, :-1], dims=[-1]) for p in pairs]
    attention = []
    for p, w in zip(pairs, wrong):
        second = p[:, :1].clone()
        second[1, 0, :-1, :-1] = w
        attention.append(torch.cat([p, second], dim=1))  # (L=2, H=2, 3, 3)
    gold = [({(0, 0), (1, 1)}, {(0, 0), (1, 1)}), ({(1, 0), (0, 1)}, {(1, 0), (0, 1)})]
    grid = score_heads(attention, gold)
    assert [[s.reading.name for s in row] for row in grid] == [
        ["1:1", "1:2", "1"],
        ["2:1", "2:2", "2"],
    ]
    assert grid[1][0].aer == 0.0 and grid[1][1].aer == 1.0
    assert grid[1][2].aer == score_layers(attention, gold)[1].aer
    first_head = score_layers(attention, gold, HeadReading(1, 1))[0]
    assert grid[0][0].aer == first_head.aer == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the gold file is empty"),
        (b"\n \n", "the gold file is empty"),
        (b"0-0 1\xe9-1\n", "not UTF-8 text"),
        (b"0p0 1p1\n", "no sure link in 1 sentence"),
    ],
)
def test_a_gold_set_that_cannot_score_is_refused(tmp_path, content, message) -> None:
    """An empty, non-UTF-8 or sure-less gold set is a UserError naming the file, never AER 0."""
    from types import SimpleNamespace

    from transformer_mt.align.gold import load_gold_set
    from transformer_mt.errors import UserError

    (tmp_path / "s").write_text("el gato\n", encoding="utf-8")
    (tmp_path / "t").write_text("the cat\n", encoding="utf-8")
    (tmp_path / "g.wa").write_bytes(content)
    spec = SimpleNamespace(
        format="pharaoh",
        path=str(tmp_path / "g.wa"),
        src=str(tmp_path / "s"),
        tgt=str(tmp_path / "t"),
        one_indexed=False,
        reverse=False,
    )
    with pytest.raises(UserError, match=message) as err:
        load_gold_set("mine", spec, "es", "en")
    assert "g.wa" in str(err.value)


def test_aer_by_source_length_buckets_hand_computed() -> None:
    from transformer_mt.align.links import scores_by_length

    sources = [3, 15, 40, 12, 60]  # words per source sentence
    gold = [
        ({(0, 0)}, {(0, 0)}),
        ({(1, 1)}, {(1, 1)}),
        ({(2, 2)}, {(2, 2)}),
        (set(), {(0, 1)}),  # possible links only: counted in its bucket's sentences, no sure link
        ({(5, 5)}, {(5, 5)}),
    ]
    links = [{(0, 0)}, {(0, 0)}, {(2, 2), (3, 3)}, set(), {(5, 5)}]
    buckets = scores_by_length(links, gold, sources)
    assert list(buckets) == ["1-10", "11-20", "31-50", ">50"]  # no sentence of 21-30 words
    assert buckets["1-10"] == (0.0, 1.0, 1.0, 1)
    assert buckets["11-20"] == (1.0, 0.0, 0.0, 2)  # sentences 2 and 4
    aer, precision, recall, n = buckets["31-50"]
    assert (aer, precision, recall, n) == (pytest.approx(1 / 3), 0.5, 1.0, 1)  # 1 - 2/3
    assert buckets[">50"] == (0.0, 1.0, 1.0, 1)

    from transformer_mt.align.gold import GoldSet
    from transformer_mt.analysis.pipeline import format_by_length

    words = [" ".join("w" * n) for n in sources]
    pairs = GoldSet("five", words, words, gold)
    assert format_by_length(links, pairs) == (
        "1-10: 0.000 (1)  11-20: 1.000 (2)  31-50: 0.333 (1)  >50: 0.000 (1)"
    )
    perfect = [{(0, 0)}, {(1, 1)}, {(2, 2)}, set(), {(5, 5)}]  # every sure link, nothing else
    assert format_by_length(links, pairs, minus=perfect) == (
        "1-10: +0.000 (1)  11-20: +1.000 (2)  31-50: +0.333 (1)  >50: +0.000 (1)"
    )
    assert format_by_length(perfect, pairs, minus=links) == (
        "1-10: +0.000 (1)  11-20: -1.000 (2)  31-50: -0.333 (1)  >50: +0.000 (1)"
    )
