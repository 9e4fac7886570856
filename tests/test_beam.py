"""Beam search: against greedy, against exhaustive search, and its bookkeeping."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.decoding import beam_search, greedy_decode, length_penalty
from transformer_mt.decoding.state import DecoderState
from transformer_mt.model.vocab import BOS_ID, EOS_ID, PAD_ID


@pytest.fixture
def model(tiny_cfg: TransformerConfig) -> Transformer:
    torch.manual_seed(3)
    return Transformer(replace(tiny_cfg, vocab_size=7)).eval()  # 3 real tokens: 4, 5, 6


SRC = torch.tensor([[4, 5, 6, EOS_ID], [6, EOS_ID, PAD_ID, PAD_ID], [5, 5, EOS_ID, PAD_ID]])


def sequence_logprob(model: Transformer, src: torch.Tensor, tokens: list[int]) -> float:
    """Teacher-forced log p(tokens + EOS | src) under the model (the search does not renormalise)."""
    with torch.no_grad():
        memory, mask = model.encode(src[None])
        logits = model.decode(torch.tensor([[BOS_ID] + tokens]), memory, mask)[0]  # (T, V)
    logprobs = logits.log_softmax(-1)
    return float(sum(logprobs[t, y] for t, y in enumerate(tokens + [EOS_ID])))


def test_length_penalty_formula() -> None:
    assert length_penalty(1, 0.6) == pytest.approx(1.0)
    assert length_penalty(11, 0.6) == pytest.approx((16 / 6) ** 0.6)
    assert length_penalty(11, 0.0) == 1.0


def test_cached_and_uncached_states_agree(model: Transformer) -> None:
    cached, uncached = DecoderState(model, SRC), DecoderState(model, SRC, use_cache=False)
    prefix = torch.full((3, 1), BOS_ID)
    for token in (4, 6, 5, 5):
        torch.testing.assert_close(cached.step(prefix), uncached.step(prefix), atol=1e-5, rtol=1e-5)
        prefix = torch.cat([prefix, torch.full((3, 1), token)], dim=1)


def test_the_first_step_runs_one_row_per_sentence(model: Transformer, monkeypatch) -> None:
    """Every beam starts from the same BOS: the first step scores one row per sentence (as
    CTranslate2 does), the later ones K rows per sentence."""
    rows, step = [], model.decode_step

    def counting(tokens: torch.Tensor, cache) -> torch.Tensor:
        rows.append(tokens.size(0))
        return step(tokens, cache)

    monkeypatch.setattr(model, "decode_step", counting)
    found = beam_search(model, SRC, beam_size=4, n_best=4, max_len_a=0.0, max_len_b=3, min_len=3)
    assert rows == [3, 12, 12, 12]  # 3 sentences; 3 tokens, then EOS
    # the first step's top 2K candidates seed K distinct beams: no duplicate hypothesis
    for hyps in found:
        assert len(hyps) == 4 and len({tuple(h.tokens) for h in hyps}) == 4


def test_beams_share_their_sentence_cross_attention(model: Transformer, monkeypatch) -> None:
    """The eager cache holds the cross-attention K/V once per live sentence, never per beam,
    as sentences leave the batch; the search finds what the uncached one (a copy per row) does."""
    seen, step = [], model.decode_step

    def counting(tokens: torch.Tensor, cache) -> torch.Tensor:
        cross = cache.cross_attn[0].keys
        seen.append((tokens.size(0), cross.size(0), cache.memory_mask.size(0)))
        return step(tokens, cache)

    monkeypatch.setattr(model, "decode_step", counting)
    # limits of |x| tokens: 4, 2 and 3 (min_len keeps every sentence going to its limit)
    options = dict(beam_size=4, n_best=4, max_len_a=1.0, max_len_b=0, min_len=4)
    found = beam_search(model, SRC, **options)
    assert seen == [(3, 3, 3), (12, 3, 3), (12, 3, 3), (8, 2, 2), (4, 1, 1)]
    monkeypatch.setattr(model, "decode_step", step)
    uncached = beam_search(model, SRC, use_cache=False, **options)
    assert [[h.tokens for h in hyps] for hyps in found] == [
        [h.tokens for h in hyps] for hyps in uncached
    ]
    for ours, theirs in zip(found, uncached):
        assert [h.logprob for h in ours] == pytest.approx([h.logprob for h in theirs], rel=1e-5)


def test_beam_one_equals_greedy(model: Transformer) -> None:
    hyps = beam_search(model, SRC, beam_size=1, max_len_b=6)
    assert [h[0].tokens for h in hyps] == greedy_decode(model, SRC, max_len_b=6)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_wide_beam_finds_the_exhaustive_optimum(model: Transformer, alpha: float) -> None:
    limit = 3  # outputs of 0..3 tokens from {4, 5, 6}, then EOS: 40 candidates per sentence
    found = beam_search(model, SRC, beam_size=64, alpha=alpha, max_len_a=0.0, max_len_b=limit)
    for src, hyps in zip(SRC, found):
        src = src[src != PAD_ID]
        scored = []
        for n in range(limit + 1):
            for tokens in itertools.product([4, 5, 6], repeat=n):
                logprob = sequence_logprob(model, src, list(tokens))
                scored.append((logprob / length_penalty(n + 1, alpha), list(tokens)))
        best_score, best_tokens = max(scored)
        assert hyps[0].tokens == best_tokens
        assert hyps[0].score == pytest.approx(best_score, abs=1e-4)


def reference_beam_search(
    model: Transformer, src: torch.Tensor, K: int, alpha: float, limit: int
) -> list[tuple[list[int], float, float]]:
    """The search written plainly, for one sentence, no cache, no batching: each step re-decodes
    every beam's whole prefix, ranks all K x V continuations, keeps the best 2K, finishes the
    EOS ones among the best K (at most K in all) and lets the best K others live on; it stops
    once K have finished or at the length limit (where only EOS may follow).

    Returns (tokens, log-probability, score) of the finished hypotheses, best first."""
    with torch.no_grad():
        memory, mask = model.encode(src[None])
        beams, finished = [([], 0.0)], []
        for step in range(limit + 1):
            candidates = []
            for tokens, logprob in beams:
                logits = model.decode(torch.tensor([[BOS_ID] + tokens]), memory, mask)[0, -1]
                for token, lp in enumerate(logits.log_softmax(-1).tolist()):
                    if token in (PAD_ID, BOS_ID) or (token != EOS_ID and step >= limit):
                        continue
                    candidates.append((logprob + lp, tokens, token))
            best = sorted(candidates, key=lambda c: -c[0])[: 2 * K]
            for logprob, tokens, token in best[:K]:
                if token == EOS_ID and len(finished) < K:
                    score = logprob / length_penalty(len(tokens) + 1, alpha)
                    finished.append((tokens, logprob, score))
            if len(finished) >= K or step >= limit:
                break
            beams = [(tokens + [token], lp) for lp, tokens, token in best if token != EOS_ID][:K]
    return sorted(finished, key=lambda h: -h[2])


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_a_pruning_beam_finds_what_a_plain_beam_search_finds(
    tiny_cfg: TransformerConfig, alpha: float
) -> None:
    """Beam 4 over 9 emittable tokens (8 and EOS): 36 continuations a step, of which 8 are
    kept, up to 6 tokens (9^6 outputs): the batched, cached search prunes as the plain one
    does, hypothesis for hypothesis, score for score."""
    torch.manual_seed(7)
    model = Transformer(replace(tiny_cfg, vocab_size=12)).eval()
    src = torch.tensor(
        [[4, 5, 6, 7, EOS_ID], [8, 9, EOS_ID, PAD_ID, PAD_ID], [11, 10, 4, EOS_ID, PAD_ID]]
    )
    found = beam_search(model, src, beam_size=4, alpha=alpha, max_len_a=0.0, max_len_b=6, n_best=4)
    lengths = set()
    for row, hyps in zip(src, found):
        expected = reference_beam_search(model, row[row != PAD_ID], 4, alpha, limit=6)
        assert [h.tokens for h in hyps] == [tokens for tokens, _, _ in expected]
        assert [h.logprob for h in hyps] == pytest.approx([lp for _, lp, _ in expected], abs=1e-4)
        assert [h.score for h in hyps] == pytest.approx([s for _, _, s in expected], abs=1e-4)
        lengths |= {len(h.tokens) for h in hyps}
    assert len(lengths) > 1  # hypotheses that ended early, and ones that ran to the limit


def test_hypotheses_are_scored_as_finished_never_extended(model: Transformer) -> None:
    found = beam_search(model, SRC, beam_size=4, alpha=0.6, max_len_b=5, n_best=4)
    for src, hyps in zip(SRC, found):
        src = src[src != PAD_ID]
        assert len(hyps) == 4
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            # The stored log-probability is exactly that of tokens + one EOS: nothing was appended later.
            assert EOS_ID not in h.tokens and PAD_ID not in h.tokens
            assert h.logprob == pytest.approx(sequence_logprob(model, src, h.tokens), abs=1e-4)
            assert h.score == pytest.approx(h.logprob / length_penalty(len(h.tokens) + 1, 0.6))
            assert len(h.tokens) <= len(src) + 5


def test_padding_in_the_batch_changes_no_result(model: Transformer) -> None:
    batched = beam_search(model, SRC, beam_size=3, n_best=3, max_len_b=6)
    for src, hyps in zip(SRC, batched):
        alone = beam_search(model, src[src != PAD_ID][None], beam_size=3, n_best=3, max_len_b=6)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in hyps]
        assert [h.score for h in alone] == pytest.approx([h.score for h in hyps], abs=1e-5)


@pytest.mark.parametrize("use_cache", [True, False])
def test_forced_lengths_are_exact(model: Transformer, use_cache: bool) -> None:
    hyps = beam_search(
        model, SRC, beam_size=2, max_len_a=0.0, max_len_b=5, min_len=5, use_cache=use_cache
    )
    assert all(len(h[0].tokens) == 5 for h in hyps)
    assert all(
        len(g) == 5 for g in greedy_decode(model, SRC, 0.0, 5, min_len=5, use_cache=use_cache)
    )


def test_cached_and_uncached_beam_search_agree(model: Transformer) -> None:
    a = beam_search(model, SRC, beam_size=3, n_best=2, max_len_b=5)
    b = beam_search(model, SRC, beam_size=3, n_best=2, max_len_b=5, use_cache=False)
    assert [[h.tokens for h in hs] for hs in a] == [[h.tokens for h in hs] for hs in b]


def test_narrow_keys_decode_with_the_cache_as_without(tiny_cfg: TransformerConfig) -> None:
    """Table 3 row B: d_k = 4 below d_v = d_model / h = 8. The cache keeps keys and values at
    their own widths when beams are reordered and sentences leave the batch."""
    torch.manual_seed(5)
    model = Transformer(replace(tiny_cfg, vocab_size=7, d_k=4)).eval()
    for search in (
        lambda **kw: [[h.tokens for h in hs] for hs in beam_search(model, SRC, 3, n_best=2, **kw)],
        lambda **kw: greedy_decode(model, SRC, **kw),
    ):
        assert search(max_len_b=5) == search(max_len_b=5, use_cache=False)


def test_n_best_over_beam_is_a_clear_error(model: Transformer) -> None:
    with pytest.raises(ValueError, match="n_best=5 must be between 1 and the beam size 4"):
        beam_search(model, SRC, beam_size=4, n_best=5)


def test_length_normalisations_by_hand() -> None:
    from transformer_mt.decoding import length_penalty

    assert length_penalty(7, 0.6) == pytest.approx((12 / 6) ** 0.6)  # GNMT: ((5 + |Y|) / 6)^α
    assert length_penalty(7, 0.6, "power") == pytest.approx(7**0.6)  # CTranslate2: |Y|^α
    assert length_penalty(7, 0.0, "power") == 1.0
    with pytest.raises(ValueError, match="unknown length normalisation 'linear'"):
        length_penalty(7, 0.6, "linear")


def test_self_attention_caches_are_sized_once(model: Transformer, monkeypatch) -> None:
    """The eager cache is made for BOS + the length limit before the first step and never grows
    (growing copies the keys into fresh pages); outputs are the uncached search's."""
    capacities, step = [], model.decode_step

    def spying(tokens: torch.Tensor, cache) -> torch.Tensor:
        capacities.append({c.k.size(2) for c in cache.self_attn})
        return step(tokens, cache)

    monkeypatch.setattr(model, "decode_step", spying)
    options = dict(beam_size=3, max_len_a=0.0, max_len_b=20, min_len=20)  # 20 tokens, then EOS
    found = beam_search(model, SRC, **options)
    assert capacities == [{21}] * 21
    monkeypatch.setattr(model, "decode_step", step)
    uncached = beam_search(model, SRC, use_cache=False, **options)
    assert [h[0].tokens for h in found] == [h[0].tokens for h in uncached]
