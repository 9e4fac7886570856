"""The Transformer itself: no Lightning, Hydra or datasets in here."""

from transformer_mt.model.cache import DecoderCache, LayerCache
from transformer_mt.model.transformer import AttentionMaps, Transformer

__all__ = ["AttentionMaps", "DecoderCache", "LayerCache", "Transformer"]
