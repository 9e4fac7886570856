import torch

from transformer_mt.model.masks import causal_mask, decoder_self_mask, padding_mask


def test_padding_mask_marks_real_tokens_true() -> None:
    tokens = torch.tensor([[5, 6, 0], [7, 0, 0]])
    mask = padding_mask(tokens, pad_id=0)
    assert mask.shape == (2, 1, 1, 3) and mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]


def test_causal_mask_is_lower_triangular() -> None:
    mask = causal_mask(3)
    assert mask.shape == (1, 1, 3, 3)
    assert mask[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def test_decoder_mask_is_padding_and_causal_and_never_empty() -> None:
    tokens = torch.tensor([[2, 5, 0, 0], [2, 5, 6, 7]])
    mask = decoder_self_mask(tokens, pad_id=0)
    assert mask.shape == (2, 1, 4, 4)
    assert torch.equal(mask, padding_mask(tokens, 0) & causal_mask(4))
    assert mask.any(dim=-1).all()  # every query row keeps at least one key: no NaN in softmax
