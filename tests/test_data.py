"""The demo corpus, the tokenizer and batching."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_mt.data import demo_corpus
from transformer_mt.data.batching import TokenBatchSampler
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.model.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

from .batches import collate

SIZES = {"train": 3000, "valid": 200, "test": 200}


@pytest.fixture(scope="module")
def corpus() -> dict[str, list[demo_corpus.Pair]]:
    return demo_corpus.generate(7, SIZES)


@pytest.fixture(scope="module")
def tokenizer(corpus, tmp_path_factory) -> Tokenizer:
    sents = [s for p in corpus["train"] for s in (p.src, p.tgt)]
    return Tokenizer.train(sents, 400, tmp_path_factory.mktemp("spm"))


def test_demo_corpus_is_deterministic_and_splits_are_disjoint(corpus) -> None:
    assert demo_corpus.generate(7, SIZES) == corpus
    assert demo_corpus.generate(8, SIZES) != corpus
    srcs = {name: {p.src for p in pairs} for name, pairs in corpus.items()}
    assert {name: len(s) for name, s in srcs.items()} == SIZES  # no duplicates within a split
    assert (
        not srcs["train"] & srcs["test"]
        and not srcs["train"] & srcs["valid"]
        and not srcs["valid"] & srcs["test"]
    )
    assert demo_corpus.EXAMPLE[0] not in srcs["train"] | srcs["valid"] | srcs["test"]


def test_demo_corpus_has_the_phenomena(corpus) -> None:
    pairs = corpus["train"]
    lengths = [len(p.src.split()) for p in pairs]
    assert min(lengths) == 3 and 18 <= max(lengths) <= 20
    es = " ".join(p.src for p in pairs).split()
    assert {"del", "al", "negro", "negras", "duerme", "duermen"} <= set(es)
    assert 300 <= len(set(es) | {w for p in pairs for w in p.tgt.split()}) <= 700
    assert any(" an " in f" {p.tgt} " for p in pairs)


def test_demo_alignments_are_valid_and_cross_for_adjectives() -> None:
    rng = demo_corpus.random.Random(0)
    grammar = demo_corpus.Grammar(rng)
    for _ in range(300):
        p = grammar.sentence()
        assert all(0 <= i < len(p.es) and 0 <= j < len(p.en) for i, j in p.links)
        assert {i for i, _ in p.links} == set(range(len(p.es)))  # every Spanish word is aligned
    pair = (
        demo_corpus.Phrase()
        .add(["el"], ["the"])
        .add(["gato", "negro"], ["black", "cat"], [(0, 1), (1, 0)])
    )
    assert pair.links == [(0, 0), (1, 2), (2, 1)]


def test_tokenizer_round_trip_and_special_ids(tokenizer, corpus) -> None:
    assert (
        tokenizer.sp.pad_id(),
        tokenizer.sp.unk_id(),
        tokenizer.sp.bos_id(),
        tokenizer.sp.eos_id(),
    ) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
    texts = [p.tgt for p in corpus["test"][:50]] + [p.src for p in corpus["test"][:50]]
    ids = tokenizer.encode(texts)
    assert all(min(seq) > EOS_ID for seq in ids)
    assert tokenizer.decode([seq + [EOS_ID, PAD_ID] for seq in ids]) == texts


def test_tokenizer_cache_reuses_and_retrains(corpus, tmp_path: Path) -> None:
    sents = [p.src for p in corpus["train"]]
    a = Tokenizer.train(sents, 300, tmp_path)
    b = Tokenizer.train(sents, 300, tmp_path)
    c = Tokenizer.train(sents, 320, tmp_path)
    d = Tokenizer.train(sents[:-1], 300, tmp_path)
    assert a.path == b.path and len({a.path, c.path, d.path}) == 3


def _lengths(n: int, seed: int = 0) -> tuple[list[int], list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, 40, (n,), generator=g).tolist(), torch.randint(
        2, 40, (n,), generator=g
    ).tolist()


def test_batches_respect_the_token_budget_and_cover_every_pair() -> None:
    src, tgt = _lengths(1000)
    sampler = TokenBatchSampler(src, tgt, max_tokens=300, seed=1)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    for b in batches:
        longest = max(max(src[i], tgt[i] + 1) for i in b)
        assert longest * len(b) <= 300
    assert len(sampler) == len(batches)


def test_batches_are_deterministic_per_epoch_and_bucketed() -> None:
    src, tgt = _lengths(1000)
    a, b = TokenBatchSampler(src, tgt, 300, seed=1), TokenBatchSampler(src, tgt, 300, seed=1)
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first
    key = [max(s, t + 1) for s, t in zip(src, tgt)]  # the padded length of a pair
    spread = [max(key[i] for i in batch) - min(key[i] for i in batch) for batch in first]
    # 1000 pairs over ~38 lengths: batches are (nearly) one length each; unsorted ones would span ~30.
    assert sum(spread) / len(spread) < 1 and max(spread) < 8


@pytest.mark.parametrize("shuffle", [True, False], ids=["train", "eval"])
def test_ranks_split_the_epochs_batches_between_them(shuffle: bool) -> None:
    """Each batch of the one-process plan goes to exactly one rank; the ranks are evened out
    with repeats of the first batches, and only those: a rank that overlapped another, missed
    a batch or took every batch would fail."""
    src, tgt = _lengths(999)
    plan = list(TokenBatchSampler(src, tgt, 300, shuffle=shuffle, seed=3))
    ranks = [
        list(TokenBatchSampler(src, tgt, 300, shuffle=shuffle, seed=3, num_replicas=3, rank=r))
        for r in range(3)
    ]
    repeats = -len(plan) % 3
    assert repeats > 0  # the padding path is taken
    assert [len(r) for r in ranks] == [(len(plan) + repeats) // 3] * 3
    assert sorted(b for r in ranks for b in r) == sorted(plan + plan[:repeats])
    assert sorted(i for b in plan for i in b) == list(range(999))


def _resumed_pair(skip: int) -> tuple[TokenBatchSampler, TokenBatchSampler]:
    src, tgt = _lengths(400)
    straight, resumed = (
        TokenBatchSampler(src, tgt, 300, seed=2, num_replicas=2, rank=1) for _ in range(2)
    )
    resumed.resume_at(0, skip)
    return straight, resumed


def test_a_resumed_epoch_skips_its_trained_batches_in_every_pass_until_the_next() -> None:
    """A DataLoader with workers calls iter() on its batch sampler twice as it builds its
    iterator, and keeps the second: the skip must hold for both."""
    straight, resumed = _resumed_pair(skip=3)
    full = list(straight)
    assert list(resumed) == list(resumed) == full[3:]
    resumed.set_epoch(1)
    straight.set_epoch(1)
    assert list(resumed) == list(straight)  # the next epoch whole


@pytest.mark.slow  # worker processes
def test_a_resumed_epoch_through_a_dataloader_with_workers() -> None:
    """The data presets of the paper (num_workers: 2) resume where they stopped."""
    straight, resumed = _resumed_pair(skip=3)
    loader = torch.utils.data.DataLoader(
        list(range(400)),
        batch_sampler=resumed,
        num_workers=2,
        persistent_workers=True,
        collate_fn=list,
    )
    assert list(loader) == list(straight)[3:]


def test_a_pair_over_the_budget_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="do not fit in data.max_tokens=20"):
        TokenBatchSampler([5, 30], [5, 5], max_tokens=20)


def test_collate_shifts_the_target() -> None:
    batch = collate(
        [
            {"src_ids": [5, 6, EOS_ID], "tgt_ids": [7, 8, 9, EOS_ID], "index": 0},
            {"src_ids": [5, EOS_ID], "tgt_ids": [7, EOS_ID], "index": 1},
        ]
    )
    assert batch.src.tolist() == [[5, 6, EOS_ID], [5, EOS_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 7, 8, 9], [BOS_ID, 7, PAD_ID, PAD_ID]]
    assert batch.tgt_out.tolist() == [[7, 8, 9, EOS_ID], [7, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.n_tgt_tokens == 6


def test_sentencepiece_sample_is_bounded_seeded_and_uniformish() -> None:
    from transformer_mt.data.tokenizer import _reservoir

    items = [f"s{i}" for i in range(10_000)]
    a, b, c = (
        _reservoir(iter(items), 500, seed=1),
        _reservoir(iter(items), 500, seed=1),
        _reservoir(iter(items), 500, 2),
    )
    assert len(a) == 500 and a == b != c
    assert a == sorted(a, key=lambda s: int(s[1:]))  # kept in corpus order
    assert (
        3_000 < sum(int(s[1:]) for s in a) / 500 < 7_000
    )  # drawn from the whole corpus, not its head
    assert _reservoir(iter(items[:10]), 500, seed=1) == items[:10]


def test_lightning_reaches_set_epoch_through_the_loader() -> None:
    from lightning.fabric.utilities.data import _set_sampler_epoch
    from torch.utils.data import DataLoader

    src, tgt = _lengths(500)
    sampler = TokenBatchSampler(src, tgt, 300, seed=1)
    loader = DataLoader(list(range(500)), batch_sampler=sampler, collate_fn=lambda rows: rows)
    first = [list(b) for b in loader]
    _set_sampler_epoch(loader, 1)  # what Lightning's fit loop does at the start of every epoch
    assert sampler.epoch == 1 and [list(b) for b in loader] != first


def _reference_batches(lens: np.ndarray, order: np.ndarray, max_tokens: int) -> list[list[int]]:
    """The packing rule one sentence at a time: grow while longest x size fits the budget."""
    batches, start = [], 0
    while start < len(order):
        end, longest = start, 0
        while end < len(order) and max(longest, lens[order[end]]) * (end - start + 1) <= max_tokens:
            longest = max(longest, lens[order[end]])
            end += 1
        batches.append(order[start:end].tolist())
        start = end
    return batches


@pytest.mark.parametrize("max_tokens", [60, 400, 4096])
def test_vectorised_packing_equals_the_sentence_by_sentence_rule(max_tokens: int) -> None:
    rng = np.random.default_rng(max_tokens)
    src, tgt = rng.integers(1, 50, 3000), rng.integers(1, 50, 3000)
    sampler = TokenBatchSampler(src, tgt, max_tokens, shuffle=False)
    order = np.argsort(sampler.lens, kind="stable")
    assert sampler._make_batches() == _reference_batches(sampler.lens, order, max_tokens)


@pytest.mark.slow  # 4.5M lengths; a timing
def test_an_epoch_plan_for_wmt14_en_de_size_takes_seconds() -> None:
    import time

    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 120, 4_500_000), rng.integers(1, 120, 4_500_000)
    start = time.perf_counter()
    batches = TokenBatchSampler(src, tgt, 25_000, seed=1)._batches()
    assert time.perf_counter() - start < 5.0  # was ~13 s one sentence at a time
    assert sum(len(b) for b in batches) == 4_500_000


def _reference_batch(rows: list[dict]) -> dict[str, list[list[int]]]:
    """Padding and the target shift written out one sentence at a time."""
    width = lambda seqs: max(map(len, seqs))  # noqa: E731
    src, tgt = [r["src_ids"] for r in rows], [r["tgt_ids"] for r in rows]
    return {
        "src": [s + [PAD_ID] * (width(src) - len(s)) for s in src],
        "tgt_in": [[BOS_ID] + t[:-1] + [PAD_ID] * (width(tgt) - len(t)) for t in tgt],
        "tgt_out": [t + [PAD_ID] * (width(tgt) - len(t)) for t in tgt],
        "index": [r["index"] for r in rows],
    }


@pytest.fixture(scope="module")
def token_split():
    """A tokenized split as training reads it: several Arrow chunks in two shards, rows filtered."""
    from datasets import Dataset, concatenate_datasets

    from transformer_mt.data.tokenize import TOKENIZED

    rng = np.random.default_rng(3)

    def shard(first: int, n: int) -> Dataset:
        rows = {
            "src_ids": [
                rng.integers(4, 900, rng.integers(1, 30)).tolist() + [EOS_ID] for _ in range(n)
            ],
            "tgt_ids": [
                rng.integers(4, 900, rng.integers(1, 30)).tolist() + [EOS_ID] for _ in range(n)
            ],
            "index": list(range(first, first + n)),
        }
        rows.update(
            {f"{side}_len": [len(r) for r in rows[f"{side}_ids"]] for side in ("src", "tgt")}
        )
        # map writes record batches of writer_batch_size rows (many chunks, as on disk), in the
        # tokenized cache's own types
        return Dataset.from_dict(rows).map(
            lambda b: b, batched=True, writer_batch_size=37, features=TOKENIZED
        )

    both = concatenate_datasets([shard(0, 400), shard(400, 300)])
    return both.filter(lambda r: r["index"] % 7 != 3)  # an indices mapping over the stored rows


def test_batches_read_from_arrow_equal_the_rows_padded_one_by_one(token_split) -> None:
    from transformer_mt.data.batching import TokenRows, collate_columns

    assert (
        token_split.data.table.column("src_ids").num_chunks > 10
        and token_split._indices is not None
    )
    rows = TokenRows(token_split)
    rng = np.random.default_rng(0)
    for _ in range(20):
        picked = rng.choice(len(token_split), size=rng.integers(1, 60), replace=False).tolist()
        batch = collate_columns(rows.__getitems__(picked))
        expected = _reference_batch([token_split[i] for i in picked])
        got = {name: getattr(batch, name).tolist() for name in expected}
        assert got == expected
        assert batch.n_tgt_tokens == sum(len(token_split[i]["tgt_ids"]) for i in picked)
        assert batch.first_rows == tuple(expected["index"][:5])


def test_token_rows_reach_a_worker_as_file_paths_and_read_the_same(token_split) -> None:
    import pickle

    from transformer_mt.data.batching import TokenRows

    rows = TokenRows(token_split)
    before = rows.__getitems__([5, 590, 17])
    copy = pickle.loads(pickle.dumps(rows))  # what starting a DataLoader worker does
    assert copy._opened is None  # the numpy views are not shipped; the worker opens its own
    after = copy.__getitems__([5, 590, 17])
    for name in ("src", "src_lens", "tgt", "tgt_lens", "index"):
        np.testing.assert_array_equal(getattr(after, name), getattr(before, name))


def test_collate_matches_the_sentence_by_sentence_rule() -> None:
    rng = np.random.default_rng(1)
    seqs = [rng.integers(4, 50, rng.integers(1, 12)).tolist() for _ in range(40)]
    rows = [
        {"src_ids": s + [EOS_ID], "tgt_ids": s[::-1] + [EOS_ID], "index": i}
        for i, s in enumerate(seqs)
    ]
    batch = collate(rows)
    assert {
        k: getattr(batch, k).tolist() for k in ("src", "tgt_in", "tgt_out", "index")
    } == _reference_batch(rows)


def test_a_batch_pins_all_its_tensors(monkeypatch) -> None:
    from torch.utils.data._utils.pin_memory import pin_memory

    pinned = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t, *a: pinned.append(t.shape) or t)
    batch = collate([{"src_ids": [5, EOS_ID], "tgt_ids": [6, 7, EOS_ID], "index": 0}])
    out = pin_memory(batch)  # what the DataLoader's pinning thread does with each batch
    assert type(out) is type(batch) and len(pinned) == 4  # src, tgt_in, tgt_out, index


def test_token_rows_read_the_lengths_of_the_split_not_of_the_stored_rows(token_split) -> None:
    from transformer_mt.data.batching import TokenRows

    src, tgt = TokenRows(token_split).lengths()
    assert src.tolist() == [len(r) for r in token_split["src_ids"]]
    assert tgt.tolist() == [len(r) for r in token_split["tgt_ids"]]


def test_loader_workers_start_from_a_fork_server_not_forked_from_training() -> None:
    """A worker forked from the training process can inherit a lock another thread held (a
    two-process run hung so): workers come from a fork server, and none without workers."""
    from transformer_mt.data.workers import worker_context

    assert worker_context(0) is None
    assert worker_context(2).get_start_method() == "forkserver"


@pytest.mark.slow
def test_a_loader_worker_starts_without_lightning() -> None:
    """A worker only reads and pads rows: its fork server imports the batching module and
    ``datasets``, not Lightning (nor Transformers, which torchmetrics imports with it), which
    took seconds at every rank's start. Its modules, asked from a worker, in a fresh process:
    a process has one fork server, and the suite's own (tests/scripts.py) preloads Lightning."""
    import json
    import subprocess
    import sys

    ask = (
        "import json\n"
        "from transformer_mt.data.workers import worker_context\n"
        "with worker_context(1).Pool(1) as pool:\n"
        "    print(json.dumps(pool.apply(eval, ('list(__import__(\"sys\").modules)',))))\n"
    )
    done = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert {"datasets", "transformer_mt.data.batching"} <= loaded
    assert not {"lightning", "transformers", "transformer_mt.datamodule"} & loaded
