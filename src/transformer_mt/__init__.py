"""transformer-mt: Vaswani et al. (2017) machine translation, with its attention made visible."""

from transformer_mt.decoding import translate
from transformer_mt.model import Transformer
from transformer_mt.model.config import TransformerConfig

__all__ = ["Transformer", "TransformerConfig", "translate"]
