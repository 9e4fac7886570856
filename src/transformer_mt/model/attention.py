"""Scaled dot-product and multi-head attention (§3.2, Eq. 1, Figure 2).

Legend: B batch, H heads, Tq query length, Tk key length, D d_model, Dh head dim (d_k = d_v).
Masks are bool with True = may attend (see ``masks.py``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_mt.model.cache import LayerCache
from transformer_mt.model.masks import causal_mask


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Attention(Q, K, V) = softmax(QKᵀ / √d_k) V, the reference math that also returns weights.

    Args:
        q: (..., Tq, Dh) queries.
        k: (..., Tk, Dh) keys.
        v: (..., Tk, Dv) values.
        mask: bool, broadcastable to (..., Tq, Tk); True = may attend.
        dropout_p: dropout on the attention weights (applied to the output path only, so
            the returned weights are the softmax itself).

    Returns:
        output (..., Tq, Dv) and weights (..., Tq, Tk), whose rows sum to 1.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., Tq, Tk)
    if mask is not None:
        # finfo.min, not -inf or -1e9: safe in fp16/bf16 and never NaN.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)  # (..., Tq, Tk)
    dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    return dropped @ v, weights  # (..., Tq, Dv), (..., Tq, Tk)


def _one_query_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """One query per row (a decoding step) by two batched matmuls: (R, H, 1, Dh) -> (R, H, 1, Dv).

    On CPUs this beats the fused kernel (3.7 against 6.6 ms for 400 rows x 8 heads x 25 keys,
    2 threads). ``k``/``v`` (R', H, Tk, Dh) may hold fewer rows than there are queries: then
    each cached row serves R / R' consecutive query rows (the beams of one sentence sharing its
    cross-attention K/V, as compiled beam search keeps them), whose queries attend as one
    (R / R')-query block, so the keys are read once per sentence instead of once per beam.
    ``mask`` is then broadcastable to (R', H, 1, Tk).
    """
    R, H, _, d = q.shape
    group = R // k.size(0)
    if group * k.size(0) != R:
        raise ValueError(f"{R} query rows cannot share a cache of {k.size(0)} rows evenly")
    if group > 1:  # (R' x G, H, 1, d) -> (R', H, G, d): a sentence's beams as G queries
        q = q.view(k.size(0), group, H, d).transpose(1, 2)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (d**-0.5)  # (R', H, G, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, -torch.inf)
    y = torch.matmul(scores.softmax(dim=-1), v)  # (R', H, G, Dv)
    if group > 1:
        y = y.transpose(1, 2).reshape(R, H, 1, v.size(-1))
    return y


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (§3.2.2), as self- or cross-attention.

    W^Q, W^K and W^V are stacked in one (3D, D) matrix, so self-attention projects with a
    single matmul; cross-attention applies the Q rows to the decoder state and the K/V rows
    to the encoder output. The forward pass uses PyTorch's fused SDPA kernel unless the
    weights are asked for; then it runs the reference function above. A test pins the two.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        cross: bool = False,
        bias: bool = True,
        d_k: int | None = None,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads  # d_v
        # d_k, the query/key width of a head: d_model / h in the paper except Table 3 row (B).
        self.key_dim = d_k or self.head_dim
        self.qk_width = n_heads * self.key_dim
        self.dropout, self.cross = dropout, cross
        self.qkv = nn.Linear(d_model, 2 * self.qk_width + d_model, bias=bias)  # W^Q; W^K; W^V
        self.out = nn.Linear(d_model, d_model, bias=bias)  # W^O

    def _split_heads(self, x: Tensor) -> Tensor:
        B, T, width = x.shape
        return x.view(B, T, self.n_heads, width // self.n_heads).transpose(1, 2)  # (B, H, T, d)

    def _project(self, x: Tensor, start: int, stop: int | None) -> Tensor:
        """``x`` through rows ``start:stop`` of the stacked W^Q; W^K; W^V (cross-attention)."""
        if not isinstance(self.qkv, nn.Linear):  # int8 for decoding: it holds its row blocks
            return self.qkv.rows(start, stop)(x)  # (``decoding.quantize.Int8RowBlocks``)
        bias = self.qkv.bias
        weight, bias = self.qkv.weight[start:stop], None if bias is None else bias[start:stop]
        return F.linear(x, weight, bias)

    def project_memory(self, memory: Tensor) -> LayerCache:
        """K and V of the encoder output for cross-attention, computed once per source batch.

        Args:
            memory: (B, S, D) encoder output.
        """
        k, v = self._project(memory, self.qk_width, None).split(
            [self.qk_width, self.d_model], dim=-1
        )
        return LayerCache.of(self._split_heads(k), self._split_heads(v))  # (B, H, S, d_k | d_v)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        memory: Tensor | None = None,
        cache: LayerCache | None = None,
        need_weights: bool = False,
        causal: bool = False,
        head: int | None = None,
    ) -> tuple[Tensor, LayerCache, Tensor | None]:
        """Attend from ``x`` to itself (self-attention) or to the encoder output (cross).

        Args:
            x: (B, Tq, D) the queries' input.
            mask: bool, broadcastable to (B, H, Tq, Tk); True = may attend.
            memory: (B, S, D) encoder output; cross-attention only, unneeded once cached.
            cache: self-attention: K/V of earlier positions, extended by this call's
                (incremental decoding); cross-attention: ``project_memory(memory)``.
            need_weights: also return the per-head weights.
            causal: query t sees keys <= t only (instead of ``mask``): the fused kernel then
                skips the masked half rather than reading a (T, T) mask.
            head: return this head's weights only (0-based), as (B, 1, Tq, Tk), while the
                output still comes from the fused kernel: what guided alignment trains
                (one extra (Tq, Tk) product per sentence, not the slow path for all heads).

        Returns:
            output (B, Tq, D); the K/V to pass as ``cache`` next step; weights
            (B, H, Tq, Tk), (B, 1, Tq, Tk) with ``head``, or None.
        """
        # 1) Project from D to H heads of Dh.
        if self.cross:
            q = self._split_heads(self._project(x, 0, self.qk_width))  # (B, H, Tq, d_k)
            kv = cache if cache is not None else self.project_memory(memory)
        else:
            q, k, v = (
                self._split_heads(t)
                for t in self.qkv(x).split([self.qk_width, self.qk_width, self.d_model], dim=-1)
            )
            # Incremental decoding: the new position joins the cached ones (B, H, Tk, Dh).
            kv = cache.append(k, v) if cache is not None else LayerCache.of(k, v)
        # 2) Scaled dot-product attention on all heads in parallel.
        p = self.dropout if self.training else 0.0
        if causal and mask is not None:
            raise ValueError("pass either a mask or causal=True, not both")
        if need_weights:
            if causal:
                mask = causal_mask(q.size(2), q.device)
            y, weights = scaled_dot_product_attention(q, kv.keys, kv.values, mask, p)
        elif q.size(2) == 1 and p == 0.0 and not causal and head is None:
            # a decoding step (one query per row): two batched matmuls beat the fused kernel on
            # CPUs from about 10 keys on
            y, weights = _one_query_attention(q, kv.keys, kv.values, mask), None
        else:
            if kv.keys.size(0) != q.size(0):
                raise ValueError(
                    f"{q.size(0)} query rows against a cache of {kv.keys.size(0)} rows: a cache "
                    "shared by groups of rows serves one-query decoding steps only"
                )
            y = F.scaled_dot_product_attention(
                q, kv.keys, kv.values, attn_mask=mask, dropout_p=p, is_causal=causal
            )
            weights = None
            if head is not None:
                one = slice(head, head + 1)
                head_mask = causal_mask(q.size(2), q.device) if causal else mask
                if head_mask is not None and head_mask.dim() == 4 and head_mask.size(1) > 1:
                    head_mask = head_mask[:, one]
                _, weights = scaled_dot_product_attention(
                    q[:, one], kv.keys[:, one], kv.values[:, one], head_mask
                )  # (B, 1, Tq, Tk)
        # 3) "Concat" the heads and apply W^O.
        B, _, Tq, _ = y.shape
        y = y.transpose(1, 2).reshape(B, Tq, self.d_model)  # (B, Tq, D)
        return self.out(y), kv, weights
