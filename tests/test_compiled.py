"""Compiled decoding (issue #28, ``decode.compile=true``): eager's tokens from a compiled step over
a fixed-capacity cache, and a whole test set compiled a bounded number of times."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.decoding import DecodeConfig, beam_search, greedy_decode, translate
from transformer_mt.decoding.compiled import CompiledDecoderState, compile_count, row_slots
from transformer_mt.decoding.onednn import onednn_linears
from transformer_mt.errors import UserError
from transformer_mt.model.vocab import EOS_ID, PAD_ID


def _sources(vocab: int, lengths: list[int], seed: int = 0) -> torch.Tensor:
    """EOS-terminated random sources of ``lengths``, right-padded."""
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths)), PAD_ID)
    for row, n in enumerate(lengths):
        src[row, : n - 1] = torch.randint(4, vocab, (n - 1,), generator=g)
        src[row, n - 1] = EOS_ID
    return src


@pytest.fixture
def traced_only(monkeypatch) -> None:
    """Dynamo traces and counts graphs, no Inductor code generation: for the tests of shapes,
    counts and cache logic (a cold Inductor compile costs seconds a graph). The tests of
    Inductor's output (tiny and base models) compile for real."""
    monkeypatch.setenv("TRANSFORMER_MT_COMPILE_BACKEND", "eager")


@pytest.fixture(scope="module")
def tiny() -> Transformer:
    """One layer: compiling costs by the operation, and a cold Inductor cache (CI) pays it all."""
    torch.manual_seed(0)
    cfg = TransformerConfig(name="test", n_layers=1, d_model=32, d_ff=64, n_heads=4, vocab_size=40)
    return Transformer(cfg).eval()


def test_row_slots_keep_the_batch_until_half_is_done_then_power_of_two_buckets() -> None:
    assert row_slots(400, 400) == 400  # no padding on the first steps
    assert row_slots(201, 400) == 400
    assert row_slots(200, 400) == 256
    assert [row_slots(n, 64) for n in (32, 17, 5, 1)] == [32, 32, 8, 8]
    assert row_slots(2, 6) == 6  # never more rows than now


def test_buffer_pool_reuses_the_smallest_block_that_fits_within_twice_the_largest_search() -> None:
    from transformer_mt.decoding.compiled import BufferPool

    pool, like = BufferPool(), torch.empty(0)
    first = [pool.take((4, 2, 8, 3), like), pool.take((2, 2, 8, 3), like)]  # 192 + 96 floats
    assert all((b == 0).all() for b in first)  # fresh blocks are zeros
    first[0].fill_(1.0)
    pool.keep(first)

    def block(buffer: torch.Tensor) -> int:
        return buffer.untyped_storage().data_ptr()

    # another shape of no more elements: the smallest block that fits, its stale numbers kept
    small = pool.take((1, 4, 8, 3), like)
    assert block(small) == block(first[1])
    large = pool.take((3, 2, 8, 3), like)
    assert block(large) == block(first[0]) and (large == 1.0).all()
    fresh = pool.take((4, 2, 8, 3), like)  # nothing left that fits: a new block
    assert block(fresh) not in {block(b) for b in first}
    pool.keep([small, large, fresh])  # 480 floats: the largest search so far
    pool.keep([torch.zeros(400)])  # 880 floats held, within 2 x 480
    pool.keep([torch.zeros(100)])  # 980 > 960: the oldest block goes
    assert [b.numel() for b in pool.blocks] == [192, 192, 400, 100]
    # a running search hands back a spare it has outgrown: held, the largest search unchanged
    pool.give([torch.zeros(2, 5, 10)])  # its block, flat; 984 > 960: the oldest goes again
    assert [b.numel() for b in pool.blocks] == [192, 400, 100, 100] and pool.largest == 480 * 4


@pytest.mark.slow  # inductor compiles (tens of seconds with a cold cache)
def test_compiled_greedy_and_beam_give_eager_tokens(tiny: Transformer) -> None:
    # Sources of different lengths end at different steps (length limit |x| + 2), so rows leave
    # the batch mid-search: the compiled state's shrinking and dummy rows are exercised.
    src = _sources(40, [3, 9, 5, 12, 4, 7, 2])
    kwargs = dict(max_len_a=1.0, max_len_b=2)
    assert greedy_decode(tiny, src, compile=True, **kwargs) == greedy_decode(tiny, src, **kwargs)
    # beam 2: 7 sentences (14 rows), then 4 (8 rows) once half of them have finished
    eager = beam_search(tiny, src, beam_size=2, n_best=2, **kwargs)
    compiled = beam_search(tiny, src, beam_size=2, n_best=2, compile=True, **kwargs)
    assert [[h.tokens for h in hs] for hs in compiled] == [[h.tokens for h in hs] for hs in eager]
    for hs_c, hs_e in zip(compiled, eager):
        for c, e in zip(hs_c, hs_e):
            assert c.score == pytest.approx(e.score, abs=1e-4)


@pytest.mark.slow  # inductor compiles (tens of seconds with a cold cache)
def test_compiled_int8_decoding_gives_eager_int8_tokens(tiny: Transformer) -> None:
    """The int8 layers (``decode.quantize=int8``) are opaque custom ops of plain tensors: the
    compiled step traces through them in one graph and multiplies the same numbers."""
    from transformer_mt.decoding import quantize_for_decoding

    int8 = quantize_for_decoding(tiny, "int8")
    src = _sources(40, [3, 9, 5, 12, 4, 7, 2])
    kwargs = dict(max_len_a=1.0, max_len_b=2)
    before = compile_count(int8)
    assert greedy_decode(int8, src, compile=True, **kwargs) == greedy_decode(int8, src, **kwargs)
    eager = beam_search(int8, src, beam_size=2, **kwargs)
    compiled = beam_search(int8, src, beam_size=2, compile=True, **kwargs)
    assert [h[0].tokens for h in compiled] == [h[0].tokens for h in eager]
    assert compile_count(int8) - before <= 4  # greedy's and the beams' shapes, no break


@pytest.mark.slow  # inductor compiles (tens of seconds with a cold cache)
def test_compiled_step_matches_the_eager_cache_position_by_position(tiny: Transformer) -> None:
    """Log-probabilities of each step, not just argmaxes: the fixed-capacity cache with masked
    positions and padded source computes what the growing cache does."""
    from transformer_mt.decoding.state import DecoderState

    src = _sources(40, [5, 11, 3])
    eager, compiled = DecoderState(tiny, src), CompiledDecoderState(tiny, src, max_tokens=20)
    # rounded up to 32 keys and 16 source positions (masked), 3 rows to 8 (dummies)
    assert compiled.capacity == 32 and compiled.mask.shape == (8, 1, 1, 16)
    prefix = torch.full((3, 1), 2)
    with torch.inference_mode():
        for _ in range(20):  # self-attention reads 16 keys, then (from the 17th step) all 32
            a, b = eager.step(prefix), compiled.step(prefix)
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
            prefix = torch.cat([prefix, a.argmax(-1, keepdim=True)], dim=1)
        with pytest.raises(RuntimeError, match="beyond the cache"):
            for _ in range(32 - 20 + 1):  # the capacity, not the search, sets the bound here
                compiled.step(prefix)


def test_onednn_route_computes_linear() -> None:
    x, layer = torch.randn(5, 3, 16), torch.nn.Linear(16, 7)
    with torch.no_grad(), onednn_linears(torch.device("cpu")):
        routed = layer(x)
    torch.testing.assert_close(routed, torch.nn.functional.linear(x, layer.weight, layer.bias))


@pytest.mark.slow  # inductor compiles (tens of seconds with a cold cache)
def test_a_random_base_model_decodes_the_same_compiled() -> None:
    torch.manual_seed(1)
    model = Transformer(TransformerConfig(name="base", vocab_size=1000)).eval()
    # greedy on 2 sentences and beam 4 on 1 both run as the smallest bucket (8 rows, 32 keys,
    # 16 source positions); the cross-attention K/V are held per sentence (8 for greedy, 2 for
    # the beams), so each search builds exactly one graph of the 6-layer model
    src = _sources(1000, [6, 10])
    kwargs = dict(max_len_a=0.0, max_len_b=8)
    assert greedy_decode(model, src, compile=True, **kwargs) == greedy_decode(model, src, **kwargs)
    eager = beam_search(model, src[1:], beam_size=4, n_best=4, **kwargs)
    compiled = beam_search(model, src[1:], beam_size=4, n_best=4, compile=True, **kwargs)
    assert [[h.tokens for h in hs] for hs in compiled] == [[h.tokens for h in hs] for hs in eager]
    assert compile_count(model) == 2


@pytest.mark.slow  # inductor compiles (tens of seconds with a cold cache)
def test_demo_test_set_decodes_the_same_with_a_bounded_number_of_graphs(
    demo_run, traced_only
) -> None:
    from transformer_mt.checkpoint import load_model, run_data_config
    from transformer_mt.data.sources import demo_files

    model, tokenizer, _ = load_model(demo_run)
    with open(demo_files(run_data_config(demo_run))["test"], encoding="utf-8") as f:
        rows = [json.loads(line)["src"] for line in f]
    sources = rows[::4][:24]  # lengths across the test set, two batches (the suite's time)
    # outputs of at most |x| + 10 tokens (the demo's are short), so most batches share a capacity
    for cfg in (
        DecodeConfig(max_len_b=10, batch_size=12),
        DecodeConfig(4, max_len_b=10, batch_size=12),
    ):
        eager = translate(model, tokenizer, sources, cfg)
        before = compile_count(model)
        compiled = translate(model, tokenizer, sources, replace(cfg, compile=True))
        assert [r[0].tokens for r in compiled] == [r[0].tokens for r in eager]
        graphs = compile_count(model) - before
        # 2 length-sorted batches of 12 sentences: a handful of (sentences, capacity, window)
        # shapes (at most 2 capacities x 4 sentence buckets, 12 -> 8 -> 4 -> 2 for the beams,
        # x 2 self-attention windows, 16 and 32 keys), not one graph per batch (2) x step (up
        # to 30); a second pass compiles nothing
        assert 1 <= graphs <= 16, graphs
        # the second pass runs on the pooled buffers of the first (stale keys and values in the
        # unwritten positions): the same tokens, and no new graph
        again = translate(model, tokenizer, sources, replace(cfg, compile=True))
        assert [r[0].tokens for r in again] == [r[0].tokens for r in eager]
        assert compile_count(model) - before == graphs


def test_compile_is_refused_for_ct2_and_without_the_cache(tiny: Transformer) -> None:
    with pytest.raises(UserError, match="decode.compile=true is for decode.engine=torch"):
        DecodeConfig(engine="ct2", compile=True)
    with pytest.raises(ValueError, match="needs use_cache=True"):
        greedy_decode(tiny, _sources(40, [4]), use_cache=False, compile=True)


@pytest.mark.slow  # inductor compiles (tens of seconds with a cold cache)
def test_importing_the_package_leaves_inductor_unloaded() -> None:
    """Inductor is imported when a first graph is compiled, not with the package: loading it
    cost every script ~2 s of start-up (a bad-input error included)."""
    import subprocess
    import sys

    probe = (
        "import sys, transformer_mt.decoding, transformer_mt.align; "
        "print('torch._inductor.compile_fx' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
