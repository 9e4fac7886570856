"""Incremental decoding with the cache against full recomputation, and greedy search."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from transformer_mt import Transformer, TransformerConfig
from transformer_mt.decoding import greedy_decode
from transformer_mt.model.vocab import BOS_ID, EOS_ID, PAD_ID


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_steps_equal_full_recomputation(
    tiny_cfg: TransformerConfig, norm_first: bool
) -> None:
    model = Transformer(replace(tiny_cfg, norm_first=norm_first)).eval()
    src = torch.tensor([[5, 6, 7, 8, EOS_ID], [9, 10, EOS_ID, PAD_ID, PAD_ID]])
    tgt_in = torch.cat([torch.full((2, 1), BOS_ID), torch.randint(4, 24, (2, 6))], dim=1)  # (2, 7)
    memory, mask = model.encode(src)
    full = model.decode(tgt_in, memory, mask).log_softmax(-1)  # (2, 7, V)
    cache = model.start_decoding(memory, mask)
    for t in range(tgt_in.size(1)):
        step = model.decode_step(tgt_in[:, t : t + 1], cache)
        # Not bitwise: one query row and T rows take different matmul/SDPA kernels (differences
        # at rounding level); the decoded tokens are compared exactly below and in test_beam.py.
        torch.testing.assert_close(step, full[:, t], atol=1e-5, rtol=1e-5)
    assert cache.offset == 7 and cache.self_attn[0].keys.shape == (2, 2, 7, 8)


def test_cache_reorder_selects_rows(tiny_cfg: TransformerConfig) -> None:
    model = Transformer(tiny_cfg).eval()
    src = torch.randint(4, 24, (3, 5))
    memory, mask = model.encode(src)
    cache = model.start_decoding(memory, mask)
    model.decode_step(torch.full((3, 1), BOS_ID), cache)
    picked = cache.reorder(torch.tensor([2, 0]))
    torch.testing.assert_close(picked.self_attn[1].values, cache.self_attn[1].values[[2, 0]])
    torch.testing.assert_close(picked.cross_attn[0].keys, cache.cross_attn[0].keys[[2, 0]])
    assert picked.memory_mask.shape == (2, 1, 1, 5) and picked.offset == 1


def _uncached_greedy(model: Transformer, src: torch.Tensor, max_len: int) -> list[int]:
    memory, mask = model.encode(src[None])
    ys = [BOS_ID]
    for _ in range(max_len):
        logits = model.decode(torch.tensor([ys]), memory, mask)[0, -1]
        logits[[PAD_ID, BOS_ID]] = -torch.inf
        ys.append(int(logits.argmax()))
        if ys[-1] == EOS_ID:
            return ys[1:-1]
    return ys[1:]


def test_batched_greedy_equals_one_by_one_uncached(tiny_cfg: TransformerConfig) -> None:
    model = Transformer(replace(tiny_cfg, vocab_size=8)).eval()  # small vocabulary: EOS comes early
    srcs = [
        torch.tensor([5, 6, 7, EOS_ID]),
        torch.tensor([4, EOS_ID]),
        torch.tensor([7, 7, 6, 5, 4, EOS_ID]),
    ]
    batch = torch.nn.utils.rnn.pad_sequence(srcs, batch_first=True, padding_value=PAD_ID)
    hyps = greedy_decode(model, batch, max_len_a=1.0, max_len_b=5)
    for src, hyp in zip(srcs, hyps):
        assert hyp == _uncached_greedy(model, src, max_len=len(src) + 5)
        assert EOS_ID not in hyp and len(hyp) <= len(src) + 5


def test_int8_quantization_for_decoding_covers_every_linear_layer(tiny_cfg) -> None:
    from torch import nn

    from transformer_mt.decoding import quantize_for_decoding
    from transformer_mt.decoding.quantize import Int8Linear, Int8RowBlocks

    model = Transformer(tiny_cfg).eval()
    assert quantize_for_decoding(model, None) is model
    quantized = quantize_for_decoding(model, "int8")
    assert not any(type(m) is nn.Linear for m in quantized.modules())
    kinds = {name: type(m) for name, m in quantized.named_modules()}
    assert kinds["decoder.layers.0.self_attn.qkv"] is Int8Linear
    assert kinds["generator"] is Int8Linear
    # cross-attention's stacked projection: a query block and a key/value block, each as
    # close to its fp32 rows as a layer of its own
    blocks = quantized.decoder.layers[0].cross_attn.qkv
    fp32 = model.decoder.layers[0].cross_attn.qkv
    assert type(blocks) is Int8RowBlocks
    x = torch.randn(4, tiny_cfg.d_model)
    width = model.decoder.layers[0].cross_attn.qk_width
    for start, stop in ((0, width), (width, None)):
        reference = (x @ fp32.weight[start:stop].T + fp32.bias[start:stop]).detach()
        error = (blocks.rows(start, stop)(x) - reference).abs().max() / reference.abs().max()
        assert error < 0.03, (start, error)
    assert type(model.generator) is nn.Linear  # the original is left alone
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    assert len(greedy_decode(quantized, src, max_len_b=4)) == 2
    with pytest.raises(ValueError, match="quantize='int4': use int8 or None"):
        quantize_for_decoding(model, "int4")


def test_int8_linear_is_close_to_fp32_and_compiles_without_a_graph_break() -> None:
    from torch import nn

    from transformer_mt.decoding.quantize import _PACKED, Int8Linear

    torch.manual_seed(0)
    layer = nn.Linear(64, 48)
    x = torch.randn(3, 5, 64)
    int8 = Int8Linear(layer)
    # per-row weight scales, per-call input scale: one int8 step of rounding on each side
    reference = layer(x).detach()
    error = (int8(x) - reference).abs().max() / reference.abs().max()
    assert 0 < error < 0.03, error  # rounded, so not exact, but close
    assert (int8.weight.abs() <= 127).all() and int8.weight.dtype == torch.int8
    twin = copy.deepcopy(int8)  # packs its own weight: the packing is keyed by the weight
    torch.testing.assert_close(twin(x), int8(x))
    assert _PACKED[twin.weight] is not _PACKED[int8.weight]
    explained = torch._dynamo.explain(int8)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
