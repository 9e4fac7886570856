"""The whole model: shapes, causality, padding invariance, tying, parameter counts."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from transformer_mt import Transformer, TransformerConfig


def _model(cfg: TransformerConfig) -> Transformer:
    return Transformer(cfg).eval()


def test_forward_shape(tiny_cfg: TransformerConfig) -> None:
    model = _model(tiny_cfg)
    logits = model(torch.randint(4, 24, (3, 7)), torch.randint(4, 24, (3, 5)))
    assert logits.shape == (3, 5, 24)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_is_causal(tiny_cfg: TransformerConfig, norm_first: bool) -> None:
    model = _model(replace(tiny_cfg, norm_first=norm_first))
    src = torch.randint(4, 24, (2, 6))
    tgt = torch.randint(4, 24, (2, 8))
    t = 4
    changed = tgt.clone()
    changed[:, t + 1 :] = torch.randint(4, 24, (2, 8 - t - 1))
    a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1])  # positions <= t see nothing later
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])  # and later positions do change


def test_padding_changes_no_real_output(tiny_cfg: TransformerConfig) -> None:
    model = _model(tiny_cfg)
    src = torch.randint(4, 24, (1, 5))
    tgt = torch.randint(4, 24, (1, 4))
    alone = model(src, tgt)
    # Batch it with a longer pair, so both sides get right padding (id 0).
    padded_src = torch.cat(
        [torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], 1), torch.randint(4, 24, (1, 8))]
    )
    padded_tgt = torch.cat(
        [torch.cat([tgt, torch.zeros(1, 2, dtype=torch.long)], 1), torch.randint(4, 24, (1, 6))]
    )
    batched = model(padded_src, padded_tgt)
    torch.testing.assert_close(batched[:1, :4], alone, atol=1e-5, rtol=1e-5)


def test_padded_source_keys_get_zero_cross_attention(tiny_cfg: TransformerConfig) -> None:
    model = _model(tiny_cfg)
    src = torch.tensor([[5, 6, 7, 0, 0]])
    _, maps = model.attention_maps(src, torch.tensor([[2, 8, 9]]))
    weights = maps.cross
    assert len(weights) == tiny_cfg.n_layers
    for w in weights:  # (B, H, T, S)
        assert w[..., 3:].abs().max() == 0.0
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))


def test_three_way_tying_shares_one_tensor(tiny_cfg: TransformerConfig) -> None:
    model = Transformer(tiny_cfg)
    enc = model.encoder.embed.tokens.weight
    assert enc is model.decoder.embed.tokens.weight is model.generator.weight
    with torch.no_grad():
        enc[5, 0] = 123.0
    assert model.generator.weight[5, 0] == 123.0
    untied = Transformer(replace(tiny_cfg, tie_embeddings=False))
    assert untied.encoder.embed.tokens.weight is not untied.decoder.embed.tokens.weight
    assert untied.generator.weight is not untied.decoder.embed.tokens.weight


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        (dict(), 63_082_496),  # base
        (dict(d_model=1024, d_ff=4096, n_heads=16, dropout=0.3), 214_245_376),  # big
    ],
)
def test_parameter_counts_of_paper_presets(preset: dict, expected: int) -> None:
    cfg = TransformerConfig(vocab_size=37_000, **preset)
    model = _meta_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == expected


def _meta_model(cfg: TransformerConfig) -> Transformer:
    with torch.device("meta"):  # counts only: no memory, no init time
        return Transformer(cfg)


def test_pre_ln_adds_the_final_layer_norms(tiny_cfg: TransformerConfig) -> None:
    post = sum(p.numel() for p in Transformer(tiny_cfg).parameters())
    pre = sum(p.numel() for p in Transformer(replace(tiny_cfg, norm_first=True)).parameters())
    assert pre - post == 2 * 2 * tiny_cfg.d_model  # one LayerNorm (gain + bias) per stack


def test_learned_positions_are_parameters(tiny_cfg: TransformerConfig) -> None:
    sinusoidal = sum(p.numel() for p in Transformer(tiny_cfg).parameters())
    learned = sum(
        p.numel() for p in Transformer(replace(tiny_cfg, positional="learned")).parameters()
    )
    assert learned - sinusoidal == 2 * tiny_cfg.max_positions * tiny_cfg.d_model


def test_embeddings_are_scaled_by_sqrt_d_model(tiny_cfg: TransformerConfig) -> None:
    model = _model(tiny_cfg)
    ids = torch.tensor([[7]])
    raw = model.encoder.embed.tokens.weight[7]
    torch.testing.assert_close(model.encoder.embed.tokens(ids)[0, 0], raw * tiny_cfg.d_model**0.5)


def test_too_long_input_is_a_clear_error(tiny_cfg: TransformerConfig) -> None:
    model = _model(tiny_cfg)
    with pytest.raises(ValueError, match="exceeds the model's max_positions=64"):
        model(torch.randint(4, 24, (1, 65)), torch.randint(4, 24, (1, 3)))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("n_heads", 3, "divisible by model.n_heads"),
        ("dropout", 1.5, "model.dropout must be in"),
        ("positional", "rotary", "model.positional must be"),
    ],
)
def test_bad_model_config_is_a_clear_error(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**{field: value})


def test_attention_capture_leaves_the_output_unchanged_and_shapes_every_map(
    tiny_cfg: TransformerConfig,
) -> None:
    model = Transformer(tiny_cfg).eval()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])  # the second source is padded
    tgt_in = torch.tensor([[2, 10, 11], [2, 12, 0]])
    logits, maps = model.attention_maps(src, tgt_in)
    plain = model(src, tgt_in)
    torch.testing.assert_close(logits[0], plain[0])  # capture changes nothing ...
    torch.testing.assert_close(logits[1, :2], plain[1, :2])  # ... at any real target position
    L, H = tiny_cfg.n_layers, tiny_cfg.n_heads
    assert maps.stacked("encoder").shape == (L, 2, H, 4, 4)
    assert maps.stacked("decoder").shape == (L, 2, H, 3, 3)
    assert maps.stacked("cross").shape == (L, 2, H, 3, 4)
    for kind in ("encoder", "decoder", "cross"):
        rows = maps.stacked(kind)[:, 0]  # the unpadded pair: every row is a distribution
        torch.testing.assert_close(rows.sum(-1), torch.ones(rows.shape[:-1]))
    decoder = maps.stacked("decoder")
    assert decoder.triu(diagonal=1).abs().max() == 0.0  # no position sees a later one
    assert maps.stacked("cross")[:, 1, :, :, 3].abs().max() == 0.0  # padded source key
    assert maps.stacked("encoder")[:, 1, :, :, 3].abs().max() == 0.0
    with pytest.raises(ValueError, match="unknown attention 'self'"):
        maps.stacked("self")


def test_capture_is_off_by_default(tiny_cfg: TransformerConfig, monkeypatch) -> None:
    """Training and decoding never take the weight-materialising path unless asked."""
    from transformer_mt.decoding import beam_search, greedy_decode
    from transformer_mt.model import attention

    def refuse(*args, **kwargs):
        raise AssertionError("attention weights were computed without being asked for")

    monkeypatch.setattr(attention, "scaled_dot_product_attention", refuse)
    model = Transformer(tiny_cfg)
    src, tgt_in = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 10, 11]])
    model(src, tgt_in).sum().backward()
    model.eval()
    greedy_decode(model, src, max_len_b=5)
    greedy_decode(model, src, max_len_b=5, use_cache=False)
    beam_search(model, src, beam_size=2, max_len_b=5)
    with pytest.raises(AssertionError, match="without being asked"):
        model.attention_maps(src, tgt_in)


@pytest.mark.parametrize("layer,head", [(0, 1), (1, 0)])
def test_one_cross_attention_head_is_returned_exactly_as_the_slow_path_sees_it(
    tiny_cfg, layer, head
) -> None:
    model = Transformer(tiny_cfg).eval()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])  # the second sentence padded
    tgt_in = torch.tensor([[2, 10, 11, 12], [2, 13, 0, 0]])
    logits, weights = model.forward_with_head(src, tgt_in, layer, head)
    reference_logits, maps = model.attention_maps(src, tgt_in)
    torch.testing.assert_close(logits, model(src, tgt_in))
    real = tgt_in != 0  # pad rows are garbage the loss ignores (causal mask only on this path)
    torch.testing.assert_close(weights[real], maps.cross[layer][:, head][real])  # (rows, S)
    assert weights[1, :, 3].abs().max() == 0  # no weight on the pad key
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4))
    assert reference_logits.shape == logits.shape
    # and it is differentiable: guided alignment trains through it
    weights[0, 1, 0].backward()
    assert model.decoder.layers[layer].cross_attn.qkv.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("layer,head", [(0, 1), (1, 0)])
def test_a_full_context_head_sees_later_target_words_and_matches_the_unmasked_slow_path(
    tiny_cfg, layer, head
) -> None:
    model = Transformer(tiny_cfg).eval()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    tgt_in = torch.tensor([[2, 10, 11, 12], [2, 13, 0, 0]])
    logits, weights = model.forward_with_head(src, tgt_in, layer, head, full_context=True)
    torch.testing.assert_close(logits, model(src, tgt_in))  # the prediction stays causal
    _, full = model.attention_maps(src, tgt_in, full_context=True)
    real = tgt_in != 0
    torch.testing.assert_close(weights[real], full.cross[layer][:, head][real])
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4))
    assert weights[1, :, 3].abs().max() == 0  # no weight on the pad key
    # every row now depends on the last target word; with the causal mask only the last row does
    changed = tgt_in.clone()
    changed[0, 3] = 20
    _, other = model.forward_with_head(src, changed, layer, head, full_context=True)
    assert (other[0, :3] - weights[0, :3]).abs().amax() > 1e-4
    _, causal = model.forward_with_head(src, tgt_in, layer, head)
    _, causal_other = model.forward_with_head(src, changed, layer, head)
    torch.testing.assert_close(causal_other[0, :3], causal[0, :3])
    # padding stays invisible: a pad key in the target changes nothing for the real rows
    _, padded = model.forward_with_head(
        torch.cat([src, torch.zeros(2, 1, dtype=torch.long)], 1),
        torch.cat([tgt_in, torch.zeros(2, 1, dtype=torch.long)], 1),
        layer,
        head,
        full_context=True,
    )
    torch.testing.assert_close(padded[:, :4, :4][real], weights[real])
    # and it trains the layers below and at ``layer``, through the second pass
    model.zero_grad()
    weights[0, 1, 0].backward()
    assert model.decoder.layers[layer].cross_attn.qkv.weight.grad.abs().sum() > 0


def test_forward_with_head_takes_resolved_indices_only(tiny_cfg) -> None:
    """Negative or 1-based numbers are ``HeadReading``'s to resolve; the model refuses them."""
    model = Transformer(tiny_cfg).eval()
    src = torch.tensor([[5, 6, 3]])
    with pytest.raises(IndexError, match="0-based"):
        model.forward_with_head(src, src, -1, 0)
    with pytest.raises(IndexError, match="0-based"):
        model.forward_with_head(src, src, 0, tiny_cfg.n_heads)
