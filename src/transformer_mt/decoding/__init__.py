"""Search algorithms; they use only ``encode``, ``start_decoding`` and ``decode_step`` of the model."""

from transformer_mt.decoding.greedy import greedy_decode

__all__ = ["greedy_decode"]
