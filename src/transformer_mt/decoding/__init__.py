"""Search algorithms, model-agnostic: they use only ``encode``, ``start_decoding`` and ``decode_step``.

``decode_batch`` picks greedy search (beam size 1) or beam search from a ``DecodeConfig``;
validation, ``scripts/evaluate.py`` and ``scripts/translate.py`` all go through it.
"""

from __future__ import annotations

from torch import Tensor

from transformer_mt.decoding.beam import Hypothesis, beam_search, length_penalty
from transformer_mt.decoding.config import DecodeConfig
from transformer_mt.decoding.greedy import greedy_decode
from transformer_mt.decoding.quantize import quantize_for_decoding
from transformer_mt.decoding.text import Translation, translate
from transformer_mt.model import Transformer

__all__ = [
    "DecodeConfig",
    "Hypothesis",
    "Translation",
    "beam_search",
    "decode_batch",
    "greedy_decode",
    "length_penalty",
    "quantize_for_decoding",
    "translate",
]


def decode_batch(model: Transformer, src: Tensor, cfg: DecodeConfig) -> list[list[int]]:
    """The best translation (token ids, no BOS/EOS) of every sentence in ``src`` (B, S)."""
    if cfg.beam_size == 1:
        return greedy_decode(model, src, cfg.max_len_a, cfg.max_len_b, compile=cfg.compile)
    hyps = beam_search(
        model,
        src,
        cfg.beam_size,
        cfg.length_penalty,
        cfg.max_len_a,
        cfg.max_len_b,
        length_norm=cfg.length_norm,
        compile=cfg.compile,
    )
    return [h[0].tokens for h in hyps]
