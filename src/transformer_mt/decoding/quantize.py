"""Dynamic int8 quantization of a trained model for decoding on CPUs (``decode.quantize=int8``)."""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from transformer_mt.model import Transformer


def quantize_for_decoding(model: Transformer, quantize: str | None) -> Transformer:
    """``model`` itself (None), or a copy whose every ``nn.Linear`` computes in int8 ("int8"):
    ``torch.ao.quantization.quantize_dynamic`` (weights quantized per tensor once, activations
    at every call); embeddings, LayerNorms and attention itself stay fp32. CPU only."""
    if quantize is None:
        return model
    if quantize != "int8":
        raise ValueError(f"quantize={quantize!r}: use int8 or None")
    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        return torch.ao.quantization.quantize_dynamic(
            copy.deepcopy(model).cpu().eval(), {nn.Linear}, dtype=torch.qint8
        )
