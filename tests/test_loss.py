"""The label-smoothed loss computed in slices (``_SmoothedCrossEntropy``, for half-precision
logits) against the plain formula over the whole fp32 log-probabilities: the same values and
gradients, less memory."""

from __future__ import annotations

import pytest
import torch

from transformer_mt import loss as losses
from transformer_mt.loss import label_smoothed_nll, per_token_loss
from transformer_mt.model.vocab import PAD_ID


def plain(logits, target, epsilon, per_sentence=False):
    """The loss as it was written before slices: every fp32 log-probability at once."""
    lprobs = logits.float().log_softmax(dim=-1)
    real = target != PAD_ID
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1) * real
    loss = (1 - epsilon) * nll + epsilon * (-lprobs.mean(dim=-1) * real)
    if per_sentence:
        return loss.sum(dim=1), nll.sum(dim=1)
    return loss.sum(), nll.sum()


def sliced(logits, target, epsilon, per_sentence=False):
    """``label_smoothed_nll``'s sums, through the slices whatever the dtype."""
    loss, nll = per_token_loss(logits, target, epsilon, sliced=True)
    real = target != PAD_ID
    loss, nll = loss * real, nll * real
    if per_sentence:
        return loss.sum(dim=1), nll.sum(dim=1)
    return loss.sum(), nll.sum()


def _batch(dtype, B=3, T=37, V=501, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (4 * torch.randn(B, T, V, generator=g)).to(dtype).requires_grad_()
    target = torch.randint(4, V, (B, T), generator=g)
    target[0, 20:] = PAD_ID  # a padded row: it counts for nothing
    return logits, target


@pytest.mark.parametrize("per_sentence", [False, True])
@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_values_and_gradients_equal_the_plain_loss_in_fp32(epsilon, per_sentence) -> None:
    logits, target = _batch(torch.float32)
    ours = sliced(logits, target, epsilon, per_sentence)
    theirs = plain(logits, target, epsilon, per_sentence)
    # fp32 logits take the plain formula itself: training's numerics as they were
    for a, b in zip(label_smoothed_nll(logits, target, epsilon, per_sentence), theirs):
        assert torch.equal(a, b)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)
    # both outputs carry gradients: a weighted sum reaches loss and NLL alike
    weights = torch.rand_like(ours[0]), torch.rand_like(ours[1])
    ours_grad = torch.autograd.grad(sum((w * o).sum() for w, o in zip(weights, ours)), logits)[0]
    plain_grad = torch.autograd.grad(sum((w * t).sum() for w, t in zip(weights, theirs)), logits)[0]
    torch.testing.assert_close(ours_grad, plain_grad)
    assert ours_grad[0, 20:].abs().max() == 0  # padding gets no gradient


def test_bf16_logits_give_fp32_values_and_bf16_gradients_as_the_plain_loss() -> None:
    logits, target = _batch(torch.bfloat16)
    (loss, nll), (loss_p, nll_p) = (
        label_smoothed_nll(logits, target, 0.1),
        plain(logits, target, 0.1),
    )
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, loss_p)
    torch.testing.assert_close(nll, nll_p)
    ours = torch.autograd.grad(loss, logits)[0]
    theirs = torch.autograd.grad(loss_p, logits)[0]
    assert ours.dtype == torch.bfloat16
    torch.testing.assert_close(ours, theirs)  # bf16 tolerance: the same rounding of fp32 values


def test_a_vocabulary_row_count_not_divisible_by_the_slices_is_covered(monkeypatch) -> None:
    """Slices of unequal size, and more slices than rows, lose no row."""
    for chunks in (5, 200):
        monkeypatch.setattr(losses, "LOSS_CHUNKS", chunks)
        logits, target = _batch(torch.float32, B=2, T=11, V=23, seed=chunks)
        ours = sliced(logits, target, 0.1, per_sentence=True)
        torch.testing.assert_close(ours, plain(logits, target, 0.1, per_sentence=True))
        grad = torch.autograd.grad(ours[0].sum(), logits)[0]
        want = torch.autograd.grad(plain(logits, target, 0.1)[0], logits)[0]
        torch.testing.assert_close(grad, want)


def _held_for_backward(fn, logits, target) -> int:
    """Bytes of the tensors autograd keeps for backward (the logits themselves included)."""
    held = {}

    def pack(t):
        held[t.data_ptr()] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(logits, target, 0.1)
    return sum(held.values())


def test_bf16_logits_keep_half_the_memory_of_the_fp32_log_probabilities() -> None:
    """Under bf16-mixed the plain loss keeps (B*T, V) fp32 log-probabilities for backward; the
    sliced one keeps the bf16 logits and one fp32 number per token."""
    logits, target = _batch(torch.bfloat16, B=4, T=64, V=4000)
    full = logits.numel()
    assert _held_for_backward(plain, logits, target) >= 4 * full
    tokens = 4 * 64  # a few numbers per token: the targets, a log-sum-exp, the padding mask
    assert _held_for_backward(label_smoothed_nll, logits, target) <= 2 * full + 32 * tokens
