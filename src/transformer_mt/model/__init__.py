"""The Transformer itself: no Lightning, Hydra or datasets in here."""

from transformer_mt.model.cache import DecoderCache, LayerCache
from transformer_mt.model.transformer import Transformer

__all__ = ["DecoderCache", "LayerCache", "Transformer"]
