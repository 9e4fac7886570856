"""Attention against PyTorch's SDPA, nn.MultiheadAttention and hand-worked numbers (textbook examples)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_mt.model.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_mt.model.masks import causal_mask, padding_mask


def _entropy(p: torch.Tensor) -> float:
    return float(-(p * p.clamp_min(1e-30).log()).sum())


@pytest.mark.parametrize("masked", [False, True])
def test_reference_matches_torch_sdpa(masked: bool) -> None:
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    mask = padding_mask(torch.tensor([[1] * 7, [1] * 4 + [0] * 3]), 0) if masked else None
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5))
    if masked:
        assert weights[1, :, :, 4:].abs().max() == 0.0  # padded keys get exactly zero weight


def test_worked_example_1_three_tokens() -> None:
    k = v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    q = torch.tensor([[2.0, 1.0], [-0.5, 2.0], [0.0, 0.0]])
    out, w = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(w[0], torch.tensor([0.284, 0.140, 0.576]), atol=1e-3, rtol=0)
    torch.testing.assert_close(out[0], torch.tensor([0.860, 0.716]), atol=1e-3, rtol=0)
    torch.testing.assert_close(w[1], torch.tensor([0.091, 0.534, 0.375]), atol=1e-3, rtol=0)
    torch.testing.assert_close(out[1], torch.tensor([0.466, 0.909]), atol=1e-3, rtol=0)
    torch.testing.assert_close(w[2], torch.full((3,), 1 / 3))


def test_worked_example_2_unscaled_scalar_values() -> None:
    # The reference text does not divide by √d_k here: multiply q by √2 to undo our scaling.
    k = torch.tensor([[1.0, 0.0], [0.5, 0.5], [-1.0, 0.5]])
    v = torch.tensor([[10.0], [20.0], [30.0]])
    q = torch.tensor([[1.0, 0.0]]) * math.sqrt(2)
    out, w = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(w[0], torch.tensor([0.574, 0.348, 0.078]), atol=1e-3, rtol=0)
    assert out.item() == pytest.approx(15.04, abs=0.01)


def test_worked_example_3_temperature_entropy() -> None:
    scores = torch.tensor([1.0, 0.5, -1.0])
    assert _entropy(scores.softmax(-1)) == pytest.approx(0.884, abs=1e-3)
    hot = (scores / 10).softmax(-1)
    torch.testing.assert_close(hot, torch.tensor([0.361, 0.343, 0.296]), atol=1e-3, rtol=0)
    assert _entropy(hot) == pytest.approx(1.095, abs=1e-3)
    cold = (scores / 0.1).softmax(-1)
    torch.testing.assert_close(cold, torch.tensor([0.993, 0.007, 0.000]), atol=1e-3, rtol=0)
    assert _entropy(cold) == pytest.approx(0.04, abs=0.005)


def test_worked_example_4_scaling_keeps_unit_variance() -> None:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(20000, 512, generator=g), torch.randn(20000, 512, generator=g)
    dots = (q * k).sum(-1)
    assert dots.std().item() == pytest.approx(math.sqrt(512), rel=0.03)  # ≈ 22.6
    assert (dots / math.sqrt(512)).std().item() == pytest.approx(1.0, rel=0.03)


def test_worked_example_5_el_gato_negro() -> None:
    q_gato = torch.tensor([[2.0, 1.0]])
    k = torch.tensor([[2.0, 0.0], [1.9, 1.0], [1.0, 1.0], [0.0, 2.0], [0.9, 2.0]])
    v = torch.tensor([[0.0, 0.0], [1.0, 1.0], [0.0, 0.5], [0.0, 0.0], [0.5, -0.5]])
    out, w = scaled_dot_product_attention(q_gato, k, v)
    torch.testing.assert_close(
        w[0], torch.tensor([0.229, 0.403, 0.113, 0.056, 0.199]), atol=2e-3, rtol=0
    )
    torch.testing.assert_close(out[0], torch.tensor([0.50, 0.36]), atol=0.01, rtol=0)


@pytest.mark.parametrize("d_k", [None, 2], ids=["d_k=d_model/h", "d_k=2 (Table 3 B)"])
@pytest.mark.parametrize("cross", [False, True])
def test_module_fast_and_explicit_paths_agree(cross: bool, d_k: int | None) -> None:
    mha = MultiHeadAttention(16, 4, cross=cross, d_k=d_k).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    if cross:
        mask, kwargs = (
            padding_mask(torch.tensor([[1] * 7, [1] * 3 + [0] * 4]), 0),
            {"memory": memory},
        )
    else:
        mask, kwargs = causal_mask(5), {}
    fast, _, none = mha(x, mask, **kwargs)
    slow, _, weights = mha(x, mask, need_weights=True, **kwargs)
    assert none is None and weights.shape == (2, 4, 5, 7 if cross else 5)
    torch.testing.assert_close(fast, slow)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 5))


def test_module_matches_nn_multihead_attention_with_copied_weights() -> None:
    ours = MultiHeadAttention(16, 4).eval()
    ref = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.qkv.weight)
        ref.in_proj_bias.copy_(ours.qkv.bias)
        ref.out_proj.weight.copy_(ours.out.weight)
        ref.out_proj.bias.copy_(ours.out.bias)
    x = torch.randn(2, 6, 16)
    tokens = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    out, _, weights = ours(x, padding_mask(tokens, 0), need_weights=True)
    # nn.MultiheadAttention's key_padding_mask is True = *ignore*: the opposite convention.
    ref_out, ref_w = ref(x, x, x, key_padding_mask=tokens == 0, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_w)


def test_attention_dropout_acts_in_training_only() -> None:
    mha = MultiHeadAttention(16, 2, dropout=0.5)
    x = torch.randn(1, 8, 16)
    mha.train()
    a, b = mha(x)[0], mha(x)[0]
    assert not torch.allclose(a, b)
    mha.eval()
    torch.testing.assert_close(mha(x)[0], mha(x)[0])


def test_bad_head_count_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        MultiHeadAttention(10, 3)


def test_narrow_keys_follow_the_formula_with_their_own_scale() -> None:
    """Table 3 row (B): d_k = 2 < d_v = 4; scores are scaled by 1/√d_k, not 1/√d_v."""
    mha = MultiHeadAttention(8, 2, d_k=2).eval()
    assert mha.qkv.weight.shape == (2 * 2 * 2 + 8, 8)
    x = torch.randn(1, 3, 8)
    q, k, v = (mha.qkv(x)[0]).split([4, 4, 8], dim=-1)
    heads = []
    for h in range(2):
        qh, kh, vh = q[:, 2 * h : 2 * h + 2], k[:, 2 * h : 2 * h + 2], v[:, 4 * h : 4 * h + 4]
        heads.append(((qh @ kh.T) / math.sqrt(2)).softmax(-1) @ vh)
    expected = mha.out(torch.cat(heads, dim=-1))
    torch.testing.assert_close(mha(x)[0][0], expected)


def test_a_cache_shared_by_groups_of_rows_attends_like_one_copy_per_row() -> None:
    """One-query steps against K/V held once per sentence (compiled beam search) give what
    K/V copied to each beam give; an uneven grouping is refused."""
    from transformer_mt.model.attention import _one_query_attention

    torch.manual_seed(0)
    sentences, beams, H, S, d = 3, 4, 2, 7, 8
    q = torch.randn(sentences * beams, H, 1, d)
    k, v = torch.randn(sentences, H, S, d), torch.randn(sentences, H, S, d)
    mask = torch.rand(sentences, 1, 1, S) > 0.3
    mask[:, ..., 0] = True
    shared = _one_query_attention(q, k, v, mask)
    copied = _one_query_attention(q, *(t.repeat_interleave(beams, 0) for t in (k, v, mask)))
    torch.testing.assert_close(shared, copied)
    reference = F.scaled_dot_product_attention(
        q, k.repeat_interleave(beams, 0), v.repeat_interleave(beams, 0),
        attn_mask=mask.repeat_interleave(beams, 0),
    )  # fmt: skip
    torch.testing.assert_close(shared, reference, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="cannot share a cache of 5 rows evenly"):
        _one_query_attention(q, k.new_zeros(5, H, S, d), v.new_zeros(5, H, S, d), None)
