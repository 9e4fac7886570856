"""The training losses: label-smoothed cross-entropy (§5.4), summed over real target tokens,
and guided alignment's KL divergence of one cross-attention head (Garg et al. 2019).

Plain torch, so that benchmarks and notebooks use the loss the trainer uses without Lightning.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer_mt.model import Transformer
from transformer_mt.model.vocab import PAD_ID

# The (B*T, V) logits are turned into fp32 probabilities in this many slices of rows: the loss
# never holds all of them at once (base at 25k target tokens and a 37k vocabulary: 3.7 GB in
# fp32). A fixed count, not a fixed size: torch.compile then keeps B*T symbolic (one graph).
LOSS_CHUNKS = 8


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Per-token label-smoothed loss and NLL of (N, V) logits, chunk by chunk.

    Forward keeps one log-sum-exp per row (N,), not the (N, V) fp32 log-probabilities that
    ``log_softmax`` would keep for backward; backward recomputes each chunk's softmax in fp32
    and writes the gradient in the logits' dtype:
    d loss / d x = softmax(x) - (1 - ε) onehot(target) - ε / V, d nll / d x = softmax(x) - onehot.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
        nll, smooth = [], []
        for x, y in zip(logits.tensor_split(LOSS_CHUNKS), target.tensor_split(LOSS_CHUNKS)):
            lprobs = x.float().log_softmax(dim=-1)  # one slice in fp32 at a time
            nll.append(-lprobs.gather(-1, y.unsqueeze(-1)).squeeze(-1))
            smooth.append(-lprobs.mean(dim=-1))  # cross-entropy with the uniform distribution
        nll, smooth = torch.cat(nll), torch.cat(smooth)
        # log-sum-exp = x_target - log p_target: all that backward needs besides the logits
        lse = logits.gather(-1, target.unsqueeze(-1)).squeeze(-1).float() + nll
        ctx.save_for_backward(logits, target, lse)
        ctx.epsilon = epsilon
        return (1.0 - epsilon) * nll + epsilon * smooth, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        logits, target, lse = ctx.saved_tensors
        eps, vocab = ctx.epsilon, logits.shape[-1]
        both = (grad_loss + grad_nll).unsqueeze(-1)  # (N, 1): what multiplies the softmax
        hot = ((1.0 - eps) * grad_loss + grad_nll).unsqueeze(-1)  # on the reference
        flat = (grad_loss * (eps / vocab)).unsqueeze(-1)  # spread over the vocabulary
        grad = torch.empty_like(logits)
        parts = (grad, logits, target, lse, both, hot, flat)
        for out, x, y, z, b, h, f in zip(*(p.tensor_split(LOSS_CHUNKS) for p in parts)):
            g = x.float() - z.unsqueeze(-1)  # a new fp32 slice, worked on in place
            g.exp_().mul_(b).sub_(f)  # softmax(x), weighted, minus the ε/V share
            out.copy_(g.scatter_add_(-1, y.unsqueeze(-1), -h))  # minus the reference's share
        return grad, None, None


def per_token_loss(
    logits: Tensor, target: Tensor, epsilon: float, sliced: bool | None = None
) -> tuple[Tensor, Tensor]:
    """(B, T) label-smoothed loss and NLL, in fp32, padding included; ``sliced``: through
    ``_SmoothedCrossEntropy`` (None: when the logits are not fp32)."""
    if sliced is None:
        sliced = logits.dtype != torch.float32
    if sliced:
        B, T, V = logits.shape
        loss, nll = _SmoothedCrossEntropy.apply(
            logits.reshape(B * T, V), target.reshape(-1), epsilon
        )
        return loss.view(B, T), nll.view(B, T)
    lprobs = logits.float().log_softmax(dim=-1)  # (B, T, V)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.mean(dim=-1)  # cross-entropy with the uniform distribution
    return (1.0 - epsilon) * nll + epsilon * smooth, nll


def label_smoothed_nll(
    logits: Tensor, target: Tensor, epsilon: float, per_sentence: bool = False
) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed loss and summed NLL over non-pad targets.

    The smoothed target puts 1 - ε on the reference and spreads ε uniformly over the
    vocabulary (Szegedy et al. 2016, as in the paper); padding positions count for nothing.
    Computed in fp32. Logits in bf16 or fp16 (mixed precision) go through
    ``_SmoothedCrossEntropy``, in ``LOSS_CHUNKS`` slices of rows: it keeps the half-precision
    logits and one number per token for backward, where ``log_softmax`` would keep the whole
    fp32 log-probabilities, twice their size. fp32 logits take ``log_softmax`` in one pass: the
    slices would keep the fp32 logits, as many bytes, and training's numerics stay as they were.

    Args:
        logits: (B, T, V); target: (B, T).

    Returns:
        (loss, nll), both scalars summed over the real target tokens; ``per_sentence``: both
        (B,), each sentence's sums (validation sums them over the rows of a whole split).
    """
    real = target != PAD_ID  # (B, T)
    # Masked sums, not boolean indexing: no data-dependent shape (torch.compile keeps one graph)
    loss, nll = per_token_loss(logits, target, epsilon)
    loss, nll = loss * real, nll * real
    if per_sentence:
        return loss.sum(dim=1), nll.sum(dim=1)
    return loss.sum(), nll.sum()


def translation_loss(
    model: Transformer,
    src: Tensor,
    tgt_in: Tensor,
    tgt_out: Tensor,
    epsilon: float,
    per_sentence: bool = False,
) -> tuple[Tensor, Tensor]:
    """``label_smoothed_nll`` of the model's teacher-forced logits: the training step's forward
    pass in one function, which ``trainer.compile=true`` compiles as one graph."""
    return label_smoothed_nll(model(src, tgt_in), tgt_out, epsilon, per_sentence)


def guided_translation_loss(
    model: Transformer,
    src: Tensor,
    tgt_in: Tensor,
    tgt_out: Tensor,
    epsilon: float,
    layer: int,
    head: int,
    full_context: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """``translation_loss`` that also returns the guided head's (B, T, S) weights
    (``Transformer.forward_with_head``, 0-based ``layer``/``head``); ``alignment_loss`` is applied
    to them outside, where the batch's variable number of links does not change the graph."""
    logits, weights = model.forward_with_head(src, tgt_in, layer, head, full_context)
    loss, nll = label_smoothed_nll(logits, tgt_out, epsilon)
    return loss, nll, weights


def alignment_loss(
    weights: Tensor, index: Tensor, weight: Tensor, n_rows: int, shift: bool = False
) -> Tensor:
    """KL(target || head) per supervised target row, averaged over those rows.

    Args:
        weights: (B, T, S) one head's attention (rows sum to 1).
        index, weight, n_rows: from ``transformer_mt.data.supervision.supervision``.
        shift: supervise, for target piece t, the row where it is the decoder's input
            (row t + 1: ``tgt_in`` is BOS and the pieces) instead of the row that predicts it.

    Zero exactly when the head puts on every supervised row the target distribution; the
    gradient is that of Garg et al.'s cross-entropy (the two differ by the target's entropy).
    """
    if n_rows == 0:
        return weights.sum() * 0.0  # keeps the graph (DDP) without a host read
    rows = index[:, 1] + 1 if shift else index[:, 1]
    picked = weights[index[:, 0], rows, index[:, 2]].float()  # (N,)
    tiny = torch.finfo(torch.float32).tiny
    kl = weight * (weight.log() - picked.clamp_min(tiny).log())
    return kl.sum() / n_rows
