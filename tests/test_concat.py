"""data.concat: joined training examples carry their parts' pieces and moved links."""

from __future__ import annotations

import numpy as np
import pytest
from datasets import Dataset

from transformer_mt.config import ConcatConfig
from transformer_mt.data.batching import TokenRows
from transformer_mt.data.concat import (
    join_pairs,
    join_rows,
    length_histogram,
    plan_joins,
    source_word_lengths,
)
from transformer_mt.data.tokenize import TOKENIZED_WITH_LINKS
from transformer_mt.errors import UserError
from transformer_mt.model.vocab import BOS_ID, EOS_ID

# Three hand-made pairs (piece ids, EOS last) with piece links [s, t, ...].
PAIRS = [
    {"src_ids": [10, 11, EOS_ID], "tgt_ids": [20, 21, 22, EOS_ID], "links": [0, 0, 1, 2]},
    {"src_ids": [12, EOS_ID], "tgt_ids": [23, EOS_ID], "links": [0, 0]},
    {"src_ids": [13, 14, 15, EOS_ID], "tgt_ids": [24, 25, EOS_ID], "links": [2, 0, 0, 1, 1, 1]},
]


def split(pairs=PAIRS) -> Dataset:
    rows = {
        "index": [7 * n for n in range(len(pairs))],
        "src_ids": [p["src_ids"] for p in pairs],
        "src_len": [len(p["src_ids"]) for p in pairs],
        "tgt_ids": [p["tgt_ids"] for p in pairs],
        "tgt_len": [len(p["tgt_ids"]) for p in pairs],
        "links": [p["links"] for p in pairs],
    }
    return Dataset.from_dict(rows, features=TOKENIZED_WITH_LINKS)


def pieces(ids: list[int], link_pairs: np.ndarray) -> set[tuple[int, int]]:
    return {(int(s), int(t)) for s, t in link_pairs.reshape(-1, 2)}


def test_joined_pairs_are_separated_by_bos_and_carry_offset_links():
    built = join_rows(TokenRows(split()), [np.array([0, 2]), np.array([1, 0, 1])])
    assert built["src_len"].tolist() == [7, 7]
    assert built["src_ids"][:7].tolist() == [10, 11, BOS_ID, 13, 14, 15, EOS_ID]
    assert built["tgt_ids"][:7].tolist() == [20, 21, 22, BOS_ID, 24, 25, EOS_ID]
    assert built["links_len"].tolist() == [4 + 6, 2 + 4 + 2]
    first = built["links"][:10].reshape(-1, 2).tolist()
    # pair 0 as it was; pair 2 moved by 3 source and 4 target pieces (the separator counts)
    assert first == [[0, 0], [1, 2], [5, 4], [3, 5], [4, 5]]
    second = built["links"][10:].reshape(-1, 2).tolist()
    # pair 1 at 0, pair 0 after 2/2 pieces, pair 1 again after 2+3 / 2+4
    assert second == [[0, 0], [2, 2], [3, 4], [5, 6]]
    assert built["src_ids"][7:].tolist() == [12, BOS_ID, 10, 11, BOS_ID, 12, EOS_ID]


def test_links_point_at_the_same_pieces_and_never_at_a_separator():
    plan = [np.array([0, 2, 1]), np.array([1, 0])]
    built = join_rows(TokenRows(split()), plan)
    src, tgt = built["src_ids"].tolist(), built["tgt_ids"].tolist()
    assert src == [10, 11, BOS_ID, 13, 14, 15, BOS_ID, 12, EOS_ID, 12, BOS_ID, 10, 11, EOS_ID]
    assert tgt == [20, 21, 22, BOS_ID, 24, 25, BOS_ID, 23, EOS_ID, 23, BOS_ID, 20, 21, 22, EOS_ID]
    originals = [(PAIRS[0], 0, 0), (PAIRS[2], 3, 4), (PAIRS[1], 7, 7)]
    expected = set()
    for pair, s_off, t_off in originals:
        for s, t in np.array(pair["links"]).reshape(-1, 2):
            expected.add((pair["src_ids"][s], pair["tgt_ids"][t]))
            assert src[s + s_off] == pair["src_ids"][s] and tgt[t + t_off] == pair["tgt_ids"][t]
    first = built["links"][: built["links_len"][0]].reshape(-1, 2)  # positions in example 0
    assert {(src[s], tgt[t]) for s, t in first} == expected
    for s, t in first:
        assert src[s] not in (BOS_ID, EOS_ID) and tgt[t] not in (BOS_ID, EOS_ID)
    # the parts themselves are untouched (the mark is written into a copy)
    rows = TokenRows(split())
    join_rows(rows, plan)
    assert rows.__getitems__(np.array([0])).src.tolist() == PAIRS[0]["src_ids"]


def test_plan_respects_max_len_and_draws_two_to_max_parts():
    src = np.array([3, 4, 30, 5] * 50)
    tgt = np.array([4, 3, 2, 30] * 50)
    cfg = ConcatConfig(share=2.0, max_parts=4)
    plan = plan_joins(src, tgt, cfg, max_len=40, seed=1)
    assert len(plan) > 300  # most of the 400 draws keep at least two parts
    sizes = {len(p) for p in plan}
    assert sizes == {2, 3, 4}
    for rows in plan:
        assert src[rows].sum() <= 41 and tgt[rows].sum() <= 41
    assert plan_joins(src, tgt, cfg, max_len=40, seed=1)[0].tolist() == plan[0].tolist()


def test_join_pairs_appends_numbered_rows_and_leaves_the_pairs_alone():
    train = split(PAIRS * 10)
    joined = join_pairs(train, ConcatConfig(share=0.5, max_parts=3), max_len=64, seed=3)
    assert len(joined) == 30 + 15
    assert joined[:30]["src_ids"] == train["src_ids"]
    assert min(joined[30:]["index"]) > max(train["index"])
    # one EOS last, a separator between every two parts
    for row in joined[30:]["src_ids"]:
        assert row.count(EOS_ID) == 1 and row[-1] == EOS_ID and row.count(BOS_ID) >= 1
    assert joined.features == train.features
    # the joined rows batch and pad like any other
    cols = TokenRows(joined).__getitems__(np.arange(28, 34))
    assert cols.links is not None and len(cols.src_lens) == 6


def test_length_histogram_of_a_built_split_contains_the_joined_lengths():
    starts = np.zeros(64, dtype=bool)
    starts[10:] = True  # every real piece begins a word
    long_pair = {"src_ids": list(range(10, 18)) + [EOS_ID], "tgt_ids": [20, EOS_ID], "links": []}
    train = split([long_pair] * 20)  # 8 words each
    before = length_histogram(source_word_lengths(train, starts))
    assert before == {"1-10": 1.0, "11-20": 0.0, "21-30": 0.0, "31-50": 0.0, ">50": 0.0}
    cfg = ConcatConfig(share=1.0, max_parts=4)
    joined = join_pairs(train, cfg, max_len=64, seed=0)
    lengths = source_word_lengths(joined, starts)
    assert set(lengths[:20]) == {8} and set(lengths[20:]) <= {16, 24, 32}
    after = length_histogram(lengths)
    assert after["1-10"] == pytest.approx(0.5)
    assert after["11-20"] + after["21-30"] + after["31-50"] == pytest.approx(0.5)
    assert after["31-50"] > 0 and after[">50"] == 0.0  # 4 parts of 8 words: 32 at most


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"share": -0.1}, "data.concat.share must be 0 or more"),
        ({"max_parts": 1}, "data.concat.max_parts must be 2 or more"),
    ],
)
def test_bad_concat_settings_are_named(kwargs, message):
    with pytest.raises(UserError, match=message):
        ConcatConfig(**kwargs)


def test_demo_training_split_gains_joined_examples_whose_links_are_their_parts_word_links(
    tmp_path,
) -> None:
    from transformer_mt.align.links import read_pharaoh
    from transformer_mt.align.pieces import piece_words, word_starts
    from transformer_mt.config import DataConfig
    from transformer_mt.data.batching import collate_columns
    from transformer_mt.datamodule import TranslationDataModule

    cfg = DataConfig(
        name="demo_es_en",
        train_size=300,
        valid_size=20,
        test_size=20,
        vocab_size=300,
        cache_dir=str(tmp_path),
        alignments="builtin",
        concat=ConcatConfig(share=0.5, max_parts=3),
    )
    data = TranslationDataModule(cfg, seed=5)
    data.setup("fit")
    train, text = data.splits["train"], data.text["train"]
    pairs = train.select(range(300))
    plan = plan_joins(*TokenRows(pairs).lengths(), cfg.concat, cfg.max_len, seed=5)
    assert len(train) == 300 + len(plan)  # the joined rows follow the pairs, in plan order
    starts = word_starts(data.tokenizer.sp)
    batch = collate_columns(TokenRows(train).__getitems__(list(range(300, 310))))
    for b, parts in enumerate(plan[:10]):
        expected, src_offset, tgt_offset, words = set(), 0, 0, []
        for row in pairs.select(parts)["index"]:
            pair = text[int(row)]
            for i, j in read_pharaoh(pair["alignment"])[0]:
                expected.add((i + src_offset, j + tgt_offset))
            src_offset += len(pair["src"].split())
            tgt_offset += len(pair["tgt"].split())
            words += pair["src"].split()
        src = batch.src[b][batch.src[b] != 0].tolist()
        assert data.tokenizer.decode([src])[0].split() == words  # the parts, in order
        links = batch.align_index[batch.align_index[:, 0] == b]
        tgt = batch.tgt_out[b][batch.tgt_out[b] != 0].tolist()
        src_words, tgt_words = piece_words(src, starts), piece_words(tgt, starts)
        got = {(int(src_words[s]), int(tgt_words[t])) for _, t, s in links.tolist()}
        assert got == expected
    assert set(data.source_lengths) == {"training pairs", "training pairs + joined examples"}
    assert data.source_lengths["training pairs + joined examples"].max() > max(
        data.source_lengths["training pairs"]
    )


def test_a_saved_runs_concat_block_reads_back_typed_and_checked():
    """A run's config.yaml comes back as plain dicts (``run_data_config``): typed, and checked."""
    from transformer_mt.config import DataConfig

    data = DataConfig(name="x", cache_dir="c", concat={"share": 0.1, "max_parts": 3})
    assert data.concat == ConcatConfig(share=0.1, max_parts=3)
    with pytest.raises(UserError, match="data.concat.max_parts must be 2 or more"):
        DataConfig(name="x", cache_dir="c", concat={"share": 0.1, "max_parts": 1})
